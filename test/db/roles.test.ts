/**
 * Roles are enforced by PostgreSQL itself: the runtime roles execute exactly the functions
 * granted to them in functions/90_grants.sql and touch no table directly; PUBLIC executes nothing.
 */
import pg from "pg";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { pgExecutor } from "../../src/db/pg.js";
import { PROBLEM_SQLSTATE } from "../../src/registry/errors.js";
import { Registry } from "../../src/registry/registry.js";
import { useTestDatabase } from "../support/database.js";
import { connectorType, publishSimpleFleet } from "../../fixtures/records.js";
import { createTestApi } from "../support/http.js";
import { registryState } from "../support/registry-state.js";
import { refusal } from "../support/assertions.js";
import { withSetOnPath } from "../support/server.js";
import { FUNCTION_SET } from "../../src/db/schema-version.js";

const db = useTestDatabase();
let data: pg.Client;
let control: pg.Client;

const CONTROL_FUNCTIONS = [
  "aip_admin_bindings(text,text,integer)",
  "aip_admin_catalog_page(text,boolean,jsonb)",
  "aip_admin_get(text,text)",
  "aip_admin_routes_page(timestampwithtimezone,timestampwithtimezone,text,integer)",
  "aip_check_invariants()",
  "aip_operator_replica_lifecycle(text,text,jsonb,boolean)",
  "aip_publish(jsonb,boolean)",
  "aip_record_route_export(timestampwithtimezone,timestampwithtimezone)",
  "aip_route_retention_policy(integer,boolean)",
  "aip_schema_status(text,text,text)",
];
const DATA_FUNCTIONS = [
  "aip_catalog_changes(text,jsonb,bigint)",
  "aip_catalog_get(text,text,bigint)",
  "aip_catalog_page(text,jsonb,bigint)",
  "aip_catalog_revisions_now(text[])",
  "aip_check_invariants()",
  "aip_expire_leases(integer)",
  "aip_fleet_regions(integer)",
  "aip_fleet_status()",
  "aip_get_route(text,text)",
  "aip_host_replica_lifecycle(text,text,jsonb,text,boolean)",
  "aip_registry_read(text,text,text,text)",
  "aip_remove_settled_routes(integer,boolean,integer)",
  "aip_resolve_route(text,text,text,jsonb)",
  "aip_route_retention_policy(integer,boolean)",
  "aip_schema_status(text,text,text)",
  "aip_settle_route(text,text,jsonb,text)",
  "aip_trim_catalog_changes(bigint,bigint,integer)",
];

beforeAll(async () => {
  await publishSimpleFleet(db.registry);
  data = new pg.Client({ connectionString: withSetOnPath(db.dataUrl) });
  control = new pg.Client({ connectionString: withSetOnPath(db.controlUrl) });
  await Promise.all([data.connect(), control.connect()]);
});
afterAll(async () => {
  await Promise.all([data?.end(), control?.end()]);
});

/** The SQLSTATE the statement fails with ('' when it succeeds). */
/** The SQLSTATE a statement fails with, or for a registry problem its code ("problem:forbidden"). */
async function sqlstate(client: pg.Client, text: string, params: unknown[] = []): Promise<string> {
  try {
    await client.query(text, params);
    return "";
  } catch (error) {
    const { code, detail } = error as { code?: string; detail?: string };
    return code === PROBLEM_SQLSTATE ? `problem:${(JSON.parse(String(detail)) as { code: string }).code}` : String(code);
  }
}

/** Every registry relation with one of its columns (for an UPDATE that would otherwise be valid). */
async function registryTables(): Promise<{ table: string; column: string }[]> {
  const { rows } = await db.owner.query<{ table: string; column: string }>(
    `SELECT c.relname AS table, a.attname AS column FROM pg_class c
     JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = 1
     WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'v', 'm', 'p') AND c.relname LIKE 'aip\\_%' ORDER BY 1`,
  );
  return rows;
}

async function executable(role: string): Promise<string[]> {
  const { rows } = await db.owner.query<{ f: string }>(
    `SELECT replace(p.oid::regprocedure::text, ' ', '') AS f FROM pg_proc p
     WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'aip\\_%' AND has_function_privilege($1, p.oid, 'EXECUTE')
     ORDER BY 1`,
    [role],
  );
  return rows.map((r) => r.f);
}

describe("function grants", () => {
  it("let the control role execute exactly publication, administrative reads, operator lifecycle, route export, invariants and schema status", async () => {
    expect(await executable(inject("pgServer").roles!.control)).toEqual(CONTROL_FUNCTIONS);
    expect(await executable("aip_tests_control")).toEqual(CONTROL_FUNCTIONS);
  });

  it("let the data role execute exactly the data-plane functions", async () => {
    expect(await executable(inject("pgServer").roles!.data)).toEqual(DATA_FUNCTIONS);
    expect(await executable("aip_tests_data")).toEqual(DATA_FUNCTIONS);
  });

  it("let PUBLIC (a fresh role) execute no registry function at all", async () => {
    const role = `aip_fresh_${Date.now().toString(36)}`;
    await db.owner.query(`CREATE ROLE ${role} NOLOGIN`);
    try {
      expect(await executable(role)).toEqual([]);
      const { rows } = await db.owner.query(
        `SELECT p.oid::regprocedure::text AS f FROM pg_proc p
         WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'aip\\_%'
           AND (p.proacl IS NULL OR EXISTS (SELECT 1 FROM aclexplode(p.proacl) a WHERE a.grantee = 0))`,
      );
      expect(rows).toEqual([]);
    } finally {
      await db.owner.query(`DROP ROLE ${role}`);
    }
  });

  it("pin search_path on every SECURITY DEFINER function, and grant only such entry points", async () => {
    const { rows } = await db.owner.query<{ f: string; definer: boolean; config: string[] | null }>(
      `SELECT replace(p.oid::regprocedure::text, ' ', '') AS f, p.prosecdef AS definer, p.proconfig AS config FROM pg_proc p
       WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'aip\\_%'`,
    );
    for (const row of rows.filter((r) => r.definer)) {
      expect(row.config ?? [], row.f).toContainEqual(`search_path=${FUNCTION_SET}, public, pg_temp`);
    }
    const definers = rows.filter((r) => r.definer).map((r) => r.f);
    for (const granted of new Set([...CONTROL_FUNCTIONS, ...DATA_FUNCTIONS])) expect(definers).toContain(granted);
  });
});

describe("the data role", () => {
  it("cannot publish: PostgreSQL itself refuses (42501)", async () => {
    expect(await sqlstate(data, "SELECT aip_publish($1::jsonb, false)", [JSON.stringify([connectorType("ctype_roles_data")])])).toBe("42501");
    expect(await sqlstate(data, "SELECT aip_publish($1::jsonb, true)", [JSON.stringify([connectorType("ctype_roles_data")])])).toBe("42501");
  });

  it("cannot call the publication helpers or the administrative readers", async () => {
    for (const call of [
      "SELECT aip_pub_put_connector_type('{}'::jsonb)",
      "SELECT aip_pub_apply('{}'::jsonb)",
      "SELECT aip_admin_get('connector_type', 'ctype_t')",
      "SELECT aip_admin_bindings('tenant-a', NULL, NULL)",
      "SELECT aip_admin_catalog_page(NULL, true, '{}'::jsonb)",
      "SELECT aip_admin_routes_page(now(), NULL, NULL, 10)",
      "SELECT aip_record_route_export(NULL, now() - interval '2 days')",
      "SELECT aip_canonical_json('{}'::jsonb)",
      "SELECT aip_fail('conflict', 'x')",
      "SELECT aip_catalog_revision_exclusive()",
    ]) {
      expect(await sqlstate(data, call), call).toBe("42501");
    }
  });

  it("cannot move a replica without naming its host principal: operator authority is the control role's", async () => {
    const before = await registryState(db.owner);
    const offline = JSON.stringify({ request_id: "msg_roles_offline", previous_sequence: 1 });
    // The operator entry point is not granted to the data role at all.
    expect(await sqlstate(data, "SELECT aip_operator_replica_lifecycle('crepl_t_tenant-a', 'offline', $1::jsonb)", [offline])).toBe("42501");
    // The host entry point refuses a missing or empty principal (no NULL-means-operator back door)...
    for (const principal of [null, "", "  "]) {
      expect(await sqlstate(data, "SELECT aip_host_replica_lifecycle('crepl_t_tenant-a', 'offline', $1::jsonb, $2)", [offline, principal])).toBe(
        "problem:forbidden",
      );
    }
    // ...and another host's principal finds nothing.
    expect(await sqlstate(data, "SELECT aip_host_replica_lifecycle('crepl_t_tenant-a', 'offline', $1::jsonb, 'service:someone-else')", [offline])).toBe(
      "problem:not-found",
    );
    expect(await registryState(db.owner)).toEqual(before);
    // The replica's own principal may, and so may the control role as operator.
    const heartbeat = JSON.stringify({ request_id: "msg_roles_heartbeat", previous_sequence: 1 });
    await data.query("SELECT aip_host_replica_lifecycle('crepl_t_tenant-a', 'heartbeat', $1::jsonb, 'service:crepl_t_tenant-a')", [heartbeat]);
    const beat = JSON.stringify({ request_id: "msg_roles_beat", previous_sequence: 2 });
    await control.query("SELECT aip_operator_replica_lifecycle('crepl_t_tenant-a', 'heartbeat', $1::jsonb)", [beat]);
  });

  it("is mapped to forbidden by the registry client, and changes nothing", async () => {
    const before = await registryState(db.owner);
    const dataAsControl = new Registry({ data: pgExecutor(db.dataPool), control: pgExecutor(db.dataPool) });
    const error = await refusal(dataAsControl.publish([connectorType("ctype_roles_data")]));
    expect(error).toMatchObject({ code: "forbidden", status: 403, extensions: { sqlstate: "42501" } });
    expect(await registryState(db.owner)).toEqual(before);
  });

  it("cannot read or write any registry table directly", async () => {
    const tables = await registryTables();
    expect(tables.length).toBeGreaterThan(10);
    for (const { table, column } of tables) {
      expect(await sqlstate(data, `SELECT 1 FROM ${table} LIMIT 1`), table).toBe("42501");
      expect(await sqlstate(data, `INSERT INTO ${table} DEFAULT VALUES`), table).toBe("42501");
      expect(await sqlstate(data, `UPDATE ${table} SET ${column} = ${column}`), table).toBe("42501");
      expect(await sqlstate(data, `DELETE FROM ${table}`), table).toBe("42501");
      expect(await sqlstate(data, `TRUNCATE ${table}`), table).toBe("42501");
    }
  });
});

describe("the control role", () => {
  it("cannot call data-plane functions that are not granted to it", async () => {
    for (const call of [
      "SELECT aip_resolve_route('act_roles', 'tenant-a', 'cap:t.search', '{}'::jsonb)",
      "SELECT aip_get_route('act_roles', 'tenant-a')",
      "SELECT aip_settle_route('act_roles', 'tenant-a', '{}'::jsonb, 'completed')",
      "SELECT aip_host_replica_lifecycle('crepl_t_tenant-a', 'offline', '{\"request_id\":\"msg_x\",\"previous_sequence\":1}'::jsonb, 'service:crepl_t_tenant-a')",
      "SELECT aip_expire_leases(10)",
      "SELECT aip_remove_settled_routes(30, false, 10)",
      "SELECT aip_fleet_status()",
      "SELECT aip_catalog_page('tenant-a', '{}'::jsonb)",
      "SELECT aip_catalog_get('tenant-a', 'cap:t.search')",
      "SELECT aip_pub_put_connector_type('{}'::jsonb)",
    ]) {
      expect(await sqlstate(control, call), call).toBe("42501");
    }
  });

  it("cannot read or write any registry table directly", async () => {
    for (const { table, column } of await registryTables()) {
      expect(await sqlstate(control, `SELECT 1 FROM ${table} LIMIT 1`), table).toBe("42501");
      expect(await sqlstate(control, `INSERT INTO ${table} DEFAULT VALUES`), table).toBe("42501");
      expect(await sqlstate(control, `UPDATE ${table} SET ${column} = ${column}`), table).toBe("42501");
      expect(await sqlstate(control, `DELETE FROM ${table}`), table).toBe("42501");
      expect(await sqlstate(control, `TRUNCATE ${table}`), table).toBe("42501");
    }
  });

  it("cannot create objects in the schema the registry functions resolve names in", async () => {
    for (const client of [control, data]) {
      expect(await sqlstate(client, "CREATE FUNCTION aip_fail(text, text) RETURNS void LANGUAGE sql AS 'SELECT'")).toBe("42501");
      expect(await sqlstate(client, "CREATE TABLE aip_shadow (x int)")).toBe("42501");
    }
  });
});

describe("a data-plane-only registry (no control credentials)", () => {
  const dataOnly = () => new Registry({ data: pgExecutor(db.dataPool) });

  it("answers publication and administrative reads with forbidden, without touching the database", async () => {
    const registry = dataOnly();
    expect(registry.hasControl).toBe(false);
    const before = await registryState(db.owner);
    expect((await refusal(registry.publish([connectorType("ctype_roles_dataonly")]))).code).toBe("forbidden");
    expect((await refusal(registry.publish([connectorType("ctype_roles_dataonly")], { dryRun: true }))).code).toBe("forbidden");
    expect((await refusal(registry.adminGet("connector_type", "ctype_t"))).code).toBe("forbidden");
    expect((await refusal(registry.adminBindings("tenant-a"))).code).toBe("forbidden");
    expect(await registryState(db.owner)).toEqual(before);
  });

  it("answers POST /v1/admin/publications with a 403 problem", async () => {
    const api = createTestApi(dataOnly());
    const response = await api.call("POST", "/v1/admin/publications", {
      token: await api.adminToken(),
      body: { changes: [connectorType("ctype_roles_http")] },
    });
    expect(response.status).toBe(403);
    expect(response.headers.get("content-type")).toMatch(/^application\/problem\+json/);
    expect(await response.json()).toMatchObject({ code: "forbidden", status: 403 });
    expect((await api.call("GET", "/v1/admin/connector-types/ctype_t", { token: await api.adminToken() })).status).toBe(403);
  });

  it("answers every /v1/admin/* operation 403 but the invariant checker, which the data role runs (what `doctor` asks)", async () => {
    const api = createTestApi(dataOnly());
    const token = await api.adminToken();
    // One well-formed request per admin operation; a new operation must be added here, and so decided.
    const requests: Record<string, [string, unknown?]> = {
      "POST /v1/admin/publications": ["/v1/admin/publications", { changes: [connectorType("ctype_roles_every")] }],
      "GET /v1/admin/bindings": ["/v1/admin/bindings?tenant_id=tenant-a"],
      "GET /v1/admin/catalog/capabilities": ["/v1/admin/catalog/capabilities?unbound=true"],
      "GET /v1/admin/invariants": ["/v1/admin/invariants"],
      "GET /v1/admin/:kind/:id": ["/v1/admin/connector-types/ctype_t"],
      "GET /v1/admin/routes": ["/v1/admin/routes?settled_before=2026-01-01T00:00:00Z"],
      "POST /v1/admin/route-exports": ["/v1/admin/route-exports", { settled_before: "2026-01-01T00:00:00Z" }],
    };
    const operations = [...new Set(api.app.routes.filter((r) => r.path.startsWith("/v1/admin/") && r.method !== "ALL").map((r) => `${r.method} ${r.path}`))];
    expect(operations.sort()).toEqual(Object.keys(requests).sort());
    const before = await registryState(db.owner);
    const statuses: Record<string, number> = {};
    for (const [operation, [path, body]] of Object.entries(requests)) {
      statuses[operation] = (await api.call(operation.split(" ")[0] as string, path, { token, ...(body ? { body } : {}) })).status;
    }
    expect(statuses).toEqual({
      "POST /v1/admin/publications": 403,
      "GET /v1/admin/bindings": 403,
      "GET /v1/admin/catalog/capabilities": 403,
      "GET /v1/admin/invariants": 200,
      "GET /v1/admin/:kind/:id": 403,
      "GET /v1/admin/routes": 403,
      "POST /v1/admin/route-exports": 403,
    });
    expect(await registryState(db.owner)).toEqual(before);
  });

  it("is documented as it behaves: the invariant checker is the one admin operation a data-plane deployment serves", async () => {
    const { readFile } = await import("node:fs/promises");
    for (const file of ["README.md", "docs/deploy.md", "src/config.ts", "src/entry/worker.ts", "wrangler.toml"]) {
      const text = await readFile(new URL(`../../${file}`, import.meta.url), "utf8");
      expect(text, file).not.toMatch(/every `?\/v1\/admin\/\*`?/);
      expect(text, file).toContain("/v1/admin/invariants");
    }
  });

  it("still serves the data plane", async () => {
    const registry = dataOnly();
    expect((await registry.resolveRoute("act_roles_dataonly", "tenant-a", "cap:t.search")).outcome).toBe("created");
    expect((await registry.schemaStatus())?.functions_intact).toBe(true);
  });
});
