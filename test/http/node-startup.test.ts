/**
 * How the Node server starts against real PostgreSQL, with the real login roles of the data and
 * control group roles: the runtime roles of docs/deploy.md start on a migrated database and say
 * what to do on an unmigrated one; REGISTRY_MODE=data-plane verifies, never migrates and holds no
 * control pool; every server states its route retention configuration, which only tightens the
 * database's policy; no signing secret is made up for a real database; an unmigrated database is
 * "schema not installed: run migrate" everywhere (start-up, /readyz, doctor).
 */
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, inject, it, vi } from "vitest";
import { createApp } from "../../src/app.js";
import { createPgPool, pgExecutor } from "../../src/db/pg.js";
import { createAuthenticator } from "../../src/http/auth.js";
import { mintToken } from "../../src/http/tokens.js";
import { startServer, type RunningServer } from "../../src/entry/node.js";
import { Registry } from "../../src/registry/registry.js";
import { cleanEnv, freePort, runCli } from "../cli/support.js";
import { useTestDatabase } from "../support/database.js";
import { TEST_SECRET } from "../support/http.js";
import { databaseUrl } from "../support/server.js";
import { SET_NOT_INSTALLED } from "../../src/registry/schema-check.js";

vi.setConfig({ testTimeout: 120_000, hookTimeout: 120_000 });

const server = inject("pgServer");
const empty = `aip_t_${server.runId}_empty_${randomBytes(4).toString("hex")}`;
const db = useTestDatabase();
let dataDir: string;
const running: RunningServer[] = [];

async function admin<T>(fn: (client: pg.Client) => Promise<T>, url = server.adminUrl): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

const base = { PORT: "0", LEASE_MAINTENANCE_INTERVAL_MS: "0", ACCESS_LOG: "false" };
async function start(env: Record<string, string>, log: (line: string) => void = () => {}): Promise<RunningServer> {
  const started = await startServer({ ...base, ...env }, log);
  running.push(started);
  return started;
}

const migrated = async (url: string) =>
  admin(async (c) => (await c.query("SELECT to_regclass('aip_schema_migrations') IS NOT NULL AS ok")).rows[0].ok as boolean, url);

beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), "aip-startup-"));
  await admin((c) => c.query(`CREATE DATABASE ${empty}`));
});
afterAll(async () => {
  for (const r of running) await r.close();
  await admin((c) => c.query(`DROP DATABASE IF EXISTS ${empty} WITH (FORCE)`));
  await rm(dataDir, { recursive: true, force: true });
});

describe("the runtime roles of docs/deploy.md (REGISTRY_MODE=all)", () => {
  it("start on a migrated database without migrating, and publish through the control role", async () => {
    const node = await start({ DATABASE_URL: db.dataUrl, CONTROL_DATABASE_URL: db.controlUrl, AUTH_HS256_SECRET: TEST_SECRET });
    const token = await mintToken(TEST_SECRET, { subject: "ops", scopes: ["registry:admin"] });
    const response = await fetch(`${node.url}/v1/admin/publications`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ changes: [{ op: "put_connector_type", id: "ctype_startup", name: "Startup", owner: "org:ops", enabled: true }] }),
    });
    expect(response.status, await response.clone().text()).toBe(200);
    expect(await response.json()).toMatchObject({ catalog_revision: 1 });
  });

  it("say what to do on an unmigrated database instead of failing with permission denied", async () => {
    const error = await start({
      DATABASE_URL: databaseUrl(server, empty, "aip_tests_data"),
      CONTROL_DATABASE_URL: databaseUrl(server, empty, "aip_tests_control"),
      AUTH_HS256_SECRET: TEST_SECRET,
    }).catch((e: unknown) => e as Error);
    expect(error).toBeInstanceOf(Error);
    expect((error as Error).message).toMatch(
      /^schema not installed: run migrate .*; aip_tests_control may not install it \(permission denied for schema public\)\. /,
    );
    expect((error as Error).message).toContain("run `npx --no-install aip-registry migrate` with the database owner's URL first (docs/deploy.md, step 2)");
    expect(await migrated(databaseUrl(server, empty))).toBe(false);
  });
});

describe("REGISTRY_MODE=data-plane", () => {
  it("verifies the schema and never migrates, even with the owner's URL", async () => {
    const error = await start({ REGISTRY_MODE: "data-plane", DATABASE_URL: databaseUrl(server, empty), AUTH_HS256_SECRET: TEST_SECRET }).catch(
      (e: unknown) => e as Error,
    );
    expect((error as Error).message).toMatch(
      /^refusing to serve postgres:\/\/.*: schema not installed: run migrate \(`npx --no-install aip-registry migrate` with the database owner's URL\): this build's function set aip_fn_[0-9a-f]{12} \(release [^)]+\) is not in this database/,
    );
    expect(await migrated(databaseUrl(server, empty))).toBe(false);
  });

  it("serves the data plane with the data role alone, holds no control pool and answers publications and admin reads with 403", async () => {
    const node = await start({ REGISTRY_MODE: "data-plane", DATABASE_URL: db.dataUrl, AUTH_HS256_SECRET: TEST_SECRET, METRICS_PUBLIC: "true" });
    const adminToken = await mintToken(TEST_SECRET, { subject: "ops", scopes: ["registry:admin", "fleet:read"] });
    const tenantToken = await mintToken(TEST_SECRET, { subject: "gw", tenantId: "tenant-a", scopes: ["catalog:read"] });
    const publish = await fetch(`${node.url}/v1/admin/publications`, {
      method: "POST",
      headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
      body: JSON.stringify({ changes: [{ op: "put_connector_type", id: "ctype_edge", name: "Edge", owner: "org:ops", enabled: true }] }),
    });
    expect(publish.status).toBe(403);
    expect(await publish.json()).toMatchObject({ code: "forbidden", detail: expect.stringContaining("data plane only") });
    const read = await fetch(`${node.url}/v1/admin/connector-types/ctype_startup`, { headers: { authorization: `Bearer ${adminToken}` } });
    expect(read.status).toBe(403);
    // The one admin operation the data role may run: the invariant checker (what `doctor` asks).
    const invariants = await fetch(`${node.url}/v1/admin/invariants`, { headers: { authorization: `Bearer ${adminToken}` } });
    expect(invariants.status).toBe(200);

    const catalog = await fetch(`${node.url}/v1/catalog/capabilities`, { headers: { authorization: `Bearer ${tenantToken}` } });
    expect(catalog.status).toBe(200);
    expect((await fetch(`${node.url}/v1/fleet/status`, { headers: { authorization: `Bearer ${adminToken}` } })).status).toBe(200);
    expect(await (await fetch(`${node.url}/readyz`)).json()).toMatchObject({ status: "ready" });

    const metrics = await (await fetch(`${node.url}/metrics`)).text();
    expect(metrics).toMatch(/^aip_db_pool_max_connections\{pool="data"\} \d+$/m);
    expect(metrics).not.toContain('pool="control"');
  });

  it("states its route retention configuration before it serves, which can only make the database's policy stricter", async () => {
    const policy = async () => (await db.owner.query("SELECT retention_days, require_export FROM aip_route_retention")).rows[0];
    const edge = { REGISTRY_MODE: "data-plane", DATABASE_URL: db.dataUrl, AUTH_HS256_SECRET: TEST_SECRET };
    await (await start({ ...edge, ROUTE_RETENTION_DAYS: "45", ROUTE_RETENTION_REQUIRE_EXPORT: "true" })).close();
    expect(await policy()).toEqual({ retention_days: 45, require_export: true });
    // A server configured looser starts, and the stricter stored policy stays what applies.
    await (await start({ ...edge, ROUTE_RETENTION_DAYS: "7" })).close();
    expect(await policy()).toEqual({ retention_days: 45, require_export: true });
    await db.owner.query("SELECT aip_set_route_retention_policy(30, false)");
  });

  it("refuses control-plane credentials and the embedded database", async () => {
    await expect(
      start({ REGISTRY_MODE: "data-plane", DATABASE_URL: db.dataUrl, CONTROL_DATABASE_URL: db.controlUrl, AUTH_HS256_SECRET: TEST_SECRET }),
    ).rejects.toThrow("REGISTRY_MODE=data-plane holds no control-plane credentials: unset CONTROL_DATABASE_URL");
    await expect(start({ REGISTRY_MODE: "data-plane", DATA_DIR: dataDir })).rejects.toThrow("REGISTRY_MODE=data-plane needs DATABASE_URL");
  });
});

describe("the signing secret against PostgreSQL", () => {
  it("is never generated unless AUTH_ALLOW_DEVELOPMENT_SECRET is set, and the port is not even bound", async () => {
    const port = await freePort();
    const lines: string[] = [];
    const error = await start({ DATABASE_URL: db.dataUrl, CONTROL_DATABASE_URL: db.controlUrl, DATA_DIR: dataDir, PORT: String(port) }, (line) =>
      lines.push(line),
    ).catch((e: unknown) => e as Error);
    expect((error as Error).message).toMatch(/^no AUTH_HS256_SECRET or AUTH_JWKS_URL: against PostgreSQL the server does not make up a signing secret\. /);
    expect((error as Error).message).toContain("AUTH_ALLOW_DEVELOPMENT_SECRET=true");
    expect(lines.join("\n")).not.toContain("TOKEN=");
    await expect(fetch(`http://127.0.0.1:${port}/healthz`)).rejects.toThrow();

    const allowed = await start(
      { DATABASE_URL: db.dataUrl, CONTROL_DATABASE_URL: db.controlUrl, DATA_DIR: dataDir, AUTH_ALLOW_DEVELOPMENT_SECRET: "true" },
      (line) => lines.push(line),
    );
    const token = /ADMIN_TOKEN=(\S+)/.exec(lines.join("\n"))?.[1];
    expect(token).toBeDefined();
    expect((await fetch(`${allowed.url}/v1/fleet/status`, { headers: { authorization: `Bearer ${token}` } })).status).toBe(200);
  });
});

describe("an unmigrated database", () => {
  it("is 'schema not installed: run migrate' at /readyz", async () => {
    const pool = createPgPool(databaseUrl(server, empty, "aip_tests_data"), { max: 1 });
    try {
      const app = createApp({ registry: new Registry({ data: pgExecutor(pool) }), authenticator: createAuthenticator({ hs256Secret: TEST_SECRET }) });
      const response = await app.request("/readyz");
      expect(response.status).toBe(503);
      expect(await response.json()).toMatchObject({
        status: "not_ready",
        reason: SET_NOT_INSTALLED,
      });
    } finally {
      await pool.end();
    }
  });

  it("fails `doctor` with exit 1 and the step to take, not exit 3 (unavailable, retry)", async () => {
    const result = await runCli(["doctor", "--database-url", databaseUrl(server, empty, "aip_tests_data")], { env: cleanEnv() });
    expect(result.code, result.stderr).toBe(1);
    expect(result.stdout).toMatch(/^FAIL\s+schema: not ready: schema not installed: run migrate/m);
  });
});
