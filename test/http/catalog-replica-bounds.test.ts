/**
 * Catalog reads on a read replica are bounded and never go backwards (src/registry/catalog-replica.ts),
 * against a real streaming hot standby: a private primary from the machine's PostgreSQL server
 * binaries and a standby made by its `pg_basebackup -R`, both on ports of their own (the shared
 * test server is never reconfigured for replication).
 *
 * - Replay paused, then a version's qualification revoked and a binding disabled on the primary:
 *   no answer requested later than the staleness bound plus the lag bound after the publication
 *   lists the revoked content, validates an old ETag or serves the revoked definition; and once
 *   the process has served (or read from the primary) the new revision, it never answers an older
 *   one, even from a replica whose lag is within its bound.
 * - Lag above the bound: the primary answers; /readyz stays 200 and says `lagging`.
 * - A stopped standby: every catalog request is still answered (200, from the primary), /readyz
 *   stays 200 and says `unreachable`, and the replica is used again after its backoff once it is
 *   back.
 *
 * It needs the machine's PostgreSQL server binaries (/usr/lib/postgresql/<major>/bin, with
 * pg_basebackup); without them it says why and skips, and REQUIRE_MACHINE_POSTGRES=1 (CI run 1,
 * .ci/run) makes that a failure.
 */
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MemoryCatalogCache } from "../../src/catalog/cache.js";
import { CatalogReplica } from "../../src/registry/catalog-replica.js";
import type { SqlExecutor } from "../../src/db/executor.js";
import { createPgPool, pgExecutor } from "../../src/db/pg.js";
import { Registry } from "../../src/registry/registry.js";
import { binding, connectorType, instance, version } from "../../fixtures/records.js";
import { createTestApi } from "../support/http.js";
import { machinePostgres, startPrivateServer, type PrivateServer, type Standby } from "../support/private-server.js";
import { catalogGet, catalogPage } from "../../fixtures/catalog-reads.js";

const machine = machinePostgres();
const SKIP_REASON = "no PostgreSQL server binaries with pg_basebackup under /usr/lib/postgresql/<major>/bin (install postgresql, e.g. postgresql-15)";
if (!machine) console.warn(`catalog-replica-bounds: skipped: ${SKIP_REASON}`);

it.runIf(!machine && process.env.REQUIRE_MACHINE_POSTGRES === "1")("needs the machine's PostgreSQL server binaries (REQUIRE_MACHINE_POSTGRES=1)", () => {
  throw new Error(`REQUIRE_MACHINE_POSTGRES=1: ${SKIP_REASON}`);
});

const TENANT = "tenant-bounds";
const KEPT = ["cap:bounds.a0", "cap:bounds.a1"];
const REVOKED = ["cap:bounds.b0", "cap:bounds.b1"];
const MAX_LAG_MS = 1_000;
const STALENESS_MS = 2_000;

let primary: PrivateServer;
let standby: Standby;
const pools: pg.Pool[] = [];
let control: Registry;
/** Statements the replica received through the registries under test. */
const sent = { standby: 0 };

const pool = (url: string, options: { connectionTimeoutMs?: number } = {}) => {
  const p = createPgPool(url, { max: 4, ...options });
  pools.push(p);
  return p;
};

function counting(executor: SqlExecutor): SqlExecutor {
  return {
    query: (text, params) => {
      sent.standby++;
      return executor.query(text, params);
    },
  };
}

const ids = (page: { capabilities: { capability: unknown }[] }) => page.capabilities.map((d) => (d.capability as { id: string }).id);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe.skipIf(!machine)(
  `catalog reads on a real streaming standby${machine ? ` (PostgreSQL ${machine.major}, pg_basebackup -R)` : ` (skipped: ${SKIP_REASON})`}`,
  () => {
    /** A registry whose catalog reads go to the standby, with a replica state of its own. */
    const replicaRegistry = (options: ConstructorParameters<typeof CatalogReplica>[1] = {}) => {
      const catalog = counting(pgExecutor(pool(standby.dataUrl, { connectionTimeoutMs: 1_000 })));
      const catalogReplica = new CatalogReplica(catalog, options);
      return { registry: new Registry({ data: pgExecutor(pool(primary.dataUrl)), catalog, catalogReplica }), replica: catalogReplica };
    };

    beforeAll(async () => {
      primary = await startPrivateServer({ maxConnections: 60, binaries: machine!.root });
      control = new Registry({ data: pgExecutor(pool(primary.dataUrl)), control: pgExecutor(pool(primary.controlUrl)) });
      await control.publish([
        connectorType("ctype_bounds"),
        await version("cver_bounds_a", "ctype_bounds", KEPT),
        await version("cver_bounds_b", "ctype_bounds", REVOKED),
        instance("cinst_bounds_a", "ctype_bounds", "cver_bounds_a", TENANT),
        instance("cinst_bounds_b", "ctype_bounds", "cver_bounds_b", TENANT),
        ...KEPT.map((cap) => binding(TENANT, cap, "cinst_bounds_a")),
        ...REVOKED.map((cap) => binding(TENANT, cap, "cinst_bounds_b")),
      ]);
      standby = await primary.startStandby();
      expect(standby.madeBy).toBe("pg_basebackup");
    }, 180_000);

    afterAll(async () => {
      await Promise.all(pools.map((p) => p.end()));
      await standby?.stop();
      await primary?.stop();
    }, 120_000);

    let policyRevision = 1;

    /** Replay paused, one publication that revokes a version's qualification and disables a binding. */
    async function revokeWhilePaused(): Promise<{ revision: number; at: number }> {
      await standby.pauseReplay();
      // Before the publication commits: the bound is counted from no later than its commit.
      const at = Date.now();
      const published = await control.publish([
        { op: "set_version_qualification", id: "cver_bounds_b", supply_chain_qualified: false, reason: "CVE in the test" },
        binding(TENANT, KEPT[1]!, "cinst_bounds_a", { enabled: false, policy_revision: ++policyRevision }),
      ]);
      return { revision: published.catalog_revision, at };
    }

    /** Everything visible again, replayed by the standby. */
    async function restore(): Promise<void> {
      await control.publish([
        { op: "set_version_qualification", id: "cver_bounds_b", supply_chain_qualified: true },
        binding(TENANT, KEPT[1]!, "cinst_bounds_a", { enabled: true, policy_revision: ++policyRevision }),
      ]);
      await standby.catchUp();
    }

    it("serves the standby while it is current, as the data role, with its lag measured in the same statement", async () => {
      await standby.catchUp();
      const { registry, replica } = replicaRegistry();
      sent.standby = 0;
      const page = await catalogPage(registry, TENANT, {});
      expect(ids(page)).toEqual([...KEPT, ...REVOKED].sort());
      expect(sent.standby).toBe(1);
      expect(replica.status()).toMatchObject({ state: "ok", fallbacks: { lagging: 0, behind_floor: 0, unreachable: 0 } });
      expect(replica.status().lag_ms).toBeLessThanOrEqual(MAX_LAG_MS);
    });

    it("never answers a revision older than one it served, even from a standby within its lag bound", async () => {
      await standby.catchUp();
      // A lag bound the paused standby stays within: only the floor keeps it from going back.
      const { registry, replica } = replicaRegistry({ maxLagMs: 600_000 });
      const before = await catalogPage(registry, TENANT, {});
      try {
        const published = await revokeWhilePaused();
        expect(published.revision).toBeGreaterThan(before.catalog_revision);
        // The paused standby still answers the old revision, within the (huge) bound.
        expect((await catalogPage(registry, TENANT, {})).catalog_revision).toBe(before.catalog_revision);
        // A validator of the new revision: the standby has not replayed it, the primary answers.
        const validated = await registry.catalogPageText(TENANT, {}, published.revision);
        expect(validated).toMatchObject({ catalog_revision: published.revision, not_modified: true });
        expect(replica.floor(TENANT)).toBe(published.revision);
        // From now on the standby's older answer is refused: the primary answers, never back in time.
        for (let n = 0; n < 3; n++) {
          const page = await catalogPage(registry, TENANT, {});
          expect(page.catalog_revision).toBe(published.revision);
          expect(ids(page)).toEqual([KEPT[0]]);
          expect((await catalogGet(registry, TENANT, REVOKED[0]!)).definition).toBeNull();
        }
        expect(replica.status()).toMatchObject({ state: "behind_floor" });
        expect(replica.status().fallbacks.behind_floor).toBe(6);
        expect(replica.status().fallbacks.behind_request).toBe(1);
      } finally {
        await standby.resumeReplay();
      }
      await standby.catchUp();
      const caughtUp = await catalogPage(registry, TENANT, {});
      expect(replica.status().state).toBe("ok");
      expect(ids(caughtUp)).toEqual([KEPT[0]]);
    });

    it("serves no revoked content past the staleness bound plus the lag bound, and turns to the primary when the standby lags", async () => {
      await standby.catchUp();
      const { registry, replica } = replicaRegistry({ maxLagMs: MAX_LAG_MS });
      const api = createTestApi(registry, { catalog: { cache: new MemoryCatalogCache(1024 * 1024), maxStalenessMs: STALENESS_MS } });
      const token = await api.tenantToken(TENANT);
      // Back to everything visible (revision R1), cached and confirmed on the standby.
      await restore();
      const first = await api.call("GET", "/v1/catalog/capabilities", { token });
      const old = (await first.json()) as { catalog_revision: number; capabilities: { capability: unknown }[] };
      expect(ids(old)).toEqual([...KEPT, ...REVOKED].sort());
      const oldEtag = first.headers.get("etag")!;
      expect((await api.call("GET", `/v1/catalog/capabilities/${REVOKED[0]}`, { token })).status).toBe(200);

      const published = await revokeWhilePaused();
      const bound = published.at + STALENESS_MS + MAX_LAG_MS;
      const seen: { requestedAt: number; revision: number; ids: string[]; validated: number; definition: number }[] = [];
      try {
        while (Date.now() < bound + 1_500) {
          const requestedAt = Date.now();
          const page = await api.call("GET", "/v1/catalog/capabilities", { token });
          const body = (await page.json()) as { catalog_revision: number; capabilities: { capability: unknown }[] };
          const validated = await api.call("GET", "/v1/catalog/capabilities", { token, headers: { "if-none-match": oldEtag } });
          const definition = await api.call("GET", `/v1/catalog/capabilities/${REVOKED[0]}`, { token });
          seen.push({ requestedAt, revision: body.catalog_revision, ids: ids(body), validated: validated.status, definition: definition.status });
          await sleep(50);
        }
        // Past the bound: the new revision only, the old validator changed, the definition gone.
        const late = seen.filter((s) => s.requestedAt > bound);
        expect(late.length).toBeGreaterThan(5);
        for (const s of late) {
          expect(s.revision).toBe(published.revision);
          expect(s.ids).toEqual([KEPT[0]]);
          expect(s.validated).toBe(200);
          expect(s.definition).toBe(404);
        }
        // Never backwards: once the new revision was served, no older one follows.
        const firstNew = seen.findIndex((s) => s.revision === published.revision);
        expect(firstNew).toBeGreaterThanOrEqual(0);
        expect(seen.slice(firstNew).every((s) => s.revision === published.revision)).toBe(true);
        // The standby lags (replay paused, WAL received): measured above the bound, reads go to the primary.
        expect(replica.status().fallbacks.lagging).toBeGreaterThan(0);
        const ready = await api.call("GET", "/readyz");
        expect(ready.status).toBe(200);
        const readiness = (await ready.json()) as { status: string; catalog_replica: { state: string; lag_ms: number | null; max_lag_ms: number } };
        expect(readiness.status).toBe("ready");
        expect(readiness.catalog_replica).toMatchObject({ state: "lagging", max_lag_ms: MAX_LAG_MS });
        expect(readiness.catalog_replica.lag_ms === null || readiness.catalog_replica.lag_ms > MAX_LAG_MS).toBe(true);
        const newest = seen.filter((s) => s.revision < published.revision).at(-1);
        console.log(
          `replica bound: last old answer requested ${newest ? newest.requestedAt - published.at : "-"} ms after the publication ` +
            `(bound ${STALENESS_MS + MAX_LAG_MS} ms), ${seen.length} rounds, fallbacks ${JSON.stringify(replica.status().fallbacks)}`,
        );
      } finally {
        await standby.resumeReplay();
      }
      await standby.catchUp();
      await api.call("GET", "/readyz");
      expect(replica.status().state).toBe("ok");
    }, 60_000);

    it("at staleness 0, serves the previous revision for at most the lag bound after the publication", async () => {
      const { registry, replica } = replicaRegistry({ maxLagMs: MAX_LAG_MS });
      const api = createTestApi(registry);
      const token = await api.tenantToken(TENANT);
      await restore();
      expect((await api.call("GET", "/v1/catalog/capabilities", { token })).status).toBe(200);
      const published = await revokeWhilePaused();
      const seen: { requestedAt: number; revision: number; ids: string[] }[] = [];
      try {
        while (Date.now() < published.at + MAX_LAG_MS + 1_000) {
          const requestedAt = Date.now();
          const body = (await (await api.call("GET", "/v1/catalog/capabilities", { token })).json()) as {
            catalog_revision: number;
            capabilities: { capability: unknown }[];
          };
          seen.push({ requestedAt, revision: body.catalog_revision, ids: ids(body) });
          await sleep(25);
        }
      } finally {
        await standby.resumeReplay();
      }
      const late = seen.filter((s) => s.requestedAt > published.at + MAX_LAG_MS);
      expect(late.length).toBeGreaterThan(5);
      for (const s of late) expect(s).toMatchObject({ revision: published.revision, ids: [KEPT[0]] });
      const firstNew = seen.findIndex((s) => s.revision === published.revision);
      expect(seen.slice(firstNew).every((s) => s.revision === published.revision)).toBe(true);
      const lastOld = seen.filter((s) => s.revision < published.revision).at(-1);
      console.log(
        `replica lag bound at staleness 0: last old answer requested ${lastOld ? lastOld.requestedAt - published.at : "-"} ms after the publication ` +
          `(bound ${MAX_LAG_MS} ms), ${seen.length} requests, fallbacks ${JSON.stringify(replica.status().fallbacks)}`,
      );
    }, 60_000);

    it("answers every catalog request from the primary while the standby is stopped, stays ready, and returns to the standby after its backoff", async () => {
      await standby.catchUp();
      const { registry, replica } = replicaRegistry({ retryBaseMs: 50, retryMaxMs: 200 });
      const api = createTestApi(registry);
      const token = await api.tenantToken(TENANT);
      const warm = await api.call("GET", "/v1/catalog/capabilities", { token });
      expect(warm.status).toBe(200);
      const etag = warm.headers.get("etag")!;
      await standby.stop();
      try {
        for (let n = 0; n < 5; n++) {
          expect((await api.call("GET", "/v1/catalog/capabilities", { token })).status).toBe(200);
          expect((await api.call("GET", "/v1/catalog/capabilities", { token, headers: { "if-none-match": etag } })).status).toBe(304);
          expect((await api.call("GET", `/v1/catalog/capabilities/${KEPT[0]}`, { token })).status).toBe(200);
        }
        expect(replica.status().fallbacks.unreachable).toBe(15);
        const ready = await api.call("GET", "/readyz");
        expect(ready.status).toBe(200);
        const readiness = (await ready.json()) as { status: string; catalog_replica: { state: string; error?: string } };
        expect(readiness).toMatchObject({ status: "ready", catalog_replica: { state: "unreachable" } });
        expect(readiness.catalog_replica.error).toBeTruthy();
      } finally {
        await standby.start();
      }
      // Back: within the capped backoff the standby answers again.
      await standby.catchUp();
      const deadline = Date.now() + 10_000;
      while (replica.status().state !== "ok" && Date.now() < deadline) {
        expect((await api.call("GET", "/v1/catalog/capabilities", { token })).status).toBe(200);
        await sleep(50);
      }
      expect(replica.status().state).toBe("ok");
      sent.standby = 0;
      expect((await api.call("GET", "/v1/catalog/capabilities", { token })).status).toBe(200);
      expect(sent.standby).toBe(1);
    }, 60_000);
  },
);
