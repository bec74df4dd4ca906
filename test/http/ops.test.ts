/**
 * Liveness and readiness. /readyz is ready only when the database answers, runs the schema
 * version and function set this build expects, and those functions were not edited by hand; it
 * reports the schema version and the catalog revision either way it can, and whether the tables
 * are still as the migrations made them.
 */
import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterAll, describe, expect, inject, it } from "vitest";
import { createPgPool, pgExecutor } from "../../src/db/pg.js";
import { FUNCTION_SET, FUNCTIONS_CHECKSUM, RELEASE, SCHEMA_VERSION } from "../../src/db/schema-version.js";
import { Registry } from "../../src/registry/registry.js";
import { useTestDatabase } from "../support/database.js";
import { connectorType } from "../../fixtures/records.js";
import { createTestApi } from "../support/http.js";
import { databaseUrl } from "../support/server.js";

const db = useTestDatabase();
const pools: pg.Pool[] = [];
let emptyDatabase: string | undefined;

afterAll(async () => {
  await Promise.all(pools.map((pool) => pool.end()));
  if (emptyDatabase) {
    const admin = new pg.Client({ connectionString: inject("pgServer").adminUrl });
    await admin.connect();
    await admin.query(`DROP DATABASE IF EXISTS ${emptyDatabase} WITH (FORCE)`).catch(() => {});
    await admin.end();
  }
});

function apiOn(url: string) {
  const pool = createPgPool(url, { max: 1, connectionTimeoutMs: 2000 });
  pools.push(pool);
  return createTestApi(new Registry({ data: pgExecutor(pool) }));
}

async function readyz(api: ReturnType<typeof createTestApi>) {
  const response = await api.app.request("/readyz");
  const text = await response.text();
  expect(response.headers.get("content-type")).toMatch(/^application\/json/);
  expect(text).not.toMatch(/\bat .+:\d+:\d+|node_modules|\.ts:\d+/);
  return { status: response.status, body: JSON.parse(text) as Record<string, unknown> };
}

describe("operations endpoints", () => {
  it("/healthz answers without a token or a database", async () => {
    const response = await apiOn("postgres://nobody@127.0.0.1:1/none").app.request("/healthz");
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ status: "ok" });
  });

  it("/readyz is ready on a migrated database and reports schema version and catalog revision, without a token", async () => {
    const api = createTestApi(db.registry);
    const first = await readyz(api);
    expect(first).toEqual({
      status: 200,
      body: {
        status: "ready",
        release: RELEASE,
        function_set: FUNCTION_SET,
        schema_version: SCHEMA_VERSION,
        required_version: SCHEMA_VERSION,
        functions_checksum: FUNCTIONS_CHECKSUM,
        catalog_revision: 0,
        statement_timeout: "10s",
        tables_intact: true,
        function_sets: [{ name: FUNCTION_SET, release: RELEASE, installed_at: expect.stringMatching(/^\d{4}-/), last_seen: null, this: true }],
        session: { role: "aip_tests_data", superuser: false, owner: false, runtime_role: true, other_registry_roles: [] },
        connect_public: false,
      },
    });
    await db.registry.publish([connectorType("ctype_ops")]);
    expect((await readyz(api)).body.catalog_revision).toBe(1);
  });

  it("/readyz is 503 on a database without the registry schema", async () => {
    const server = inject("pgServer");
    emptyDatabase = `aip_t_${server.runId}_noschema_${randomBytes(4).toString("hex")}`;
    const admin = new pg.Client({ connectionString: server.adminUrl });
    await admin.connect();
    await admin.query(`CREATE DATABASE ${emptyDatabase}`);
    await admin.end();
    const { status, body } = await readyz(apiOn(databaseUrl(server, emptyDatabase)));
    expect(status).toBe(503);
    expect(body).toMatchObject({ status: "not_ready", reason: expect.any(String), schema_version: null, catalog_revision: null });
  });

  it("/readyz is 503 when the database cannot be reached", async () => {
    const { status, body } = await readyz(apiOn("postgres://nobody@127.0.0.1:1/none"));
    expect(status).toBe(503);
    expect(body).toMatchObject({ status: "not_ready", reason: expect.any(String) });
  });

  it("/readyz is 503 while an installed function differs from what the migration recorded", async () => {
    const api = createTestApi(db.registry);
    const { rows } = await db.owner.query("SELECT pg_get_functiondef('aip_sha256(text)'::regprocedure) AS def");
    const original = rows[0].def as string;
    await db.owner.query("CREATE OR REPLACE FUNCTION aip_sha256(p_text text) RETURNS text LANGUAGE sql IMMUTABLE STRICT AS $$ SELECT 'sha256:' $$");
    try {
      const { status, body } = await readyz(api);
      expect(status).toBe(503);
      expect(body).toMatchObject({ status: "not_ready", reason: expect.stringMatching(/modified/), schema_version: SCHEMA_VERSION, catalog_revision: 1 });
    } finally {
      await db.owner.query(original);
    }
    expect((await readyz(api)).status).toBe(200);
  });

  it("/readyz stays ready but says so when a table was changed by hand (no migration can undo it)", async () => {
    const api = createTestApi(db.registry);
    await db.owner.query("ALTER TABLE aip_connector_types ADD COLUMN hand_made text");
    try {
      expect(await readyz(api)).toMatchObject({ status: 200, body: { status: "ready", tables_intact: false } });
    } finally {
      await db.owner.query("ALTER TABLE aip_connector_types DROP COLUMN hand_made");
    }
    expect(await readyz(api)).toMatchObject({ status: 200, body: { tables_intact: true } });
  });
});
