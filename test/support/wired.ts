/**
 * Registries whose every statement crosses the local Neon proxy's plain TCP path, which counts and
 * logs it: for tests that assert how many statements maintenance sends. Call in a test file's top
 * level, after useTestDatabase(): the proxy starts before the file's tests and stops after them,
 * with every pool the file hands to `track`.
 */
import type pg from "pg";
import { afterAll, beforeAll } from "vitest";
import { startNeonProxy, type NeonProxy } from "../../dev/neon-proxy.js";
import { createPgPool, pgExecutor } from "../../src/db/pg.js";
import { Registry } from "../../src/registry/registry.js";
import type { TestDatabase } from "./database.js";

export interface Wired {
  /** The proxy (its `stats` count what crossed it). */
  readonly proxy: NeonProxy;
  /** A registry of the data role over the proxy. */
  registry(): Registry;
  /** Closes `pool` with the others after the file's tests. */
  track(pool: pg.Pool): pg.Pool;
}

export function useWiredRegistries(db: TestDatabase): Wired {
  let proxy: NeonProxy | undefined;
  const pools: pg.Pool[] = [];
  beforeAll(async () => {
    const server = new URL(db.server.adminUrl);
    proxy = await startNeonProxy({ pgHost: server.hostname, pgPort: Number(server.port || 5432), tcp: true });
  });
  afterAll(async () => {
    await Promise.all(pools.map((p) => p.end()));
    await proxy?.close();
  });
  const wired: Wired = {
    get proxy() {
      if (!proxy) throw new Error("the proxy runs only in the file's hooks and tests (useWiredRegistries)");
      return proxy;
    },
    registry() {
      const url = new URL(db.dataUrl);
      url.hostname = "127.0.0.1";
      url.port = String(wired.proxy.tcpPort);
      return new Registry({ data: pgExecutor(wired.track(createPgPool(url.toString(), { max: 2 }))) });
    },
    track(pool) {
      pools.push(pool);
      return pool;
    },
  };
  return wired;
}
