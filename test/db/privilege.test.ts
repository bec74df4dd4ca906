/**
 * Least privilege, beyond the exact EXECUTE sets pinned in roles.test.ts: each runtime role is
 * refused by PostgreSQL itself when it calls ANY registry function outside its grant (every helper
 * and the other plane's entry points, enumerated from the catalog, so a new helper is covered the
 * day it is written); it holds no privilege of any kind on any registry table, column or
 * sequence; it can neither create, alter, replace nor drop registry objects, nor lock, copy or
 * index their tables; it is no superuser, belongs to no powerful predefined role, cannot become
 * another role, cannot signal other sessions, cannot read their statements; and the one thing
 * PostgreSQL lets every role do here (temporary objects) cannot shadow a registry table inside
 * the SECURITY DEFINER entry points. Definer functions and grants match one to one, and no
 * registry function builds SQL dynamically.
 */
import pg from "pg";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { useTestDatabase } from "../support/database.js";
import { publishSimpleFleet } from "../../fixtures/records.js";
import { registryState } from "../support/registry-state.js";
import { withSetOnPath } from "../support/server.js";
import { FUNCTION_SET } from "../../src/db/schema-version.js";

const ROLES = inject("pgServer").roles!;
const LOGINS = { data: "aip_tests_data", control: "aip_tests_control" } as const;
type Plane = keyof typeof ROLES;

const db = useTestDatabase();
const clients = {} as Record<Plane, pg.Client>;

beforeAll(async () => {
  await publishSimpleFleet(db.registry, { prefix: "pv", tenants: ["tenant-pv"] });
  await db.registry.resolveRoute("act_pv_1", "tenant-pv", "cap:pv.search");
  clients.data = new pg.Client({ connectionString: withSetOnPath(db.dataUrl) });
  clients.control = new pg.Client({ connectionString: withSetOnPath(db.controlUrl) });
  await Promise.all(Object.values(clients).map((c) => c.connect()));
});
afterAll(async () => {
  await Promise.all(Object.values(clients).map((c) => c.end().catch(() => {})));
});

/** The SQLSTATE the statement fails with ('' when it succeeds), run in a transaction that is rolled back. */
async function sqlstate(client: pg.Client, text: string, params: unknown[] = []): Promise<string> {
  await client.query("BEGIN");
  try {
    await client.query(text, params);
    return "";
  } catch (error) {
    return String((error as { code?: string }).code);
  } finally {
    await client.query("ROLLBACK");
  }
}

interface RegistryFunction {
  signature: string;
  name: string;
  args: string[];
  definer: boolean;
  source: string;
}

async function registryFunctions(): Promise<RegistryFunction[]> {
  const { rows } = await db.owner.query<RegistryFunction>(
    `SELECT replace(p.oid::regprocedure::text, ' ', '') AS signature, p.proname AS name, p.prosecdef AS definer, p.prosrc AS source,
            ARRAY(SELECT format_type(t.oid, NULL) FROM unnest(p.proargtypes) WITH ORDINALITY a(oid, n) JOIN pg_type t ON t.oid = a.oid ORDER BY a.n) AS args
     FROM pg_proc p WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'aip\\_%' ORDER BY 1`,
  );
  return rows;
}

async function executable(role: string): Promise<Set<string>> {
  const { rows } = await db.owner.query<{ f: string }>(
    `SELECT replace(p.oid::regprocedure::text, ' ', '') AS f FROM pg_proc p
     WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'aip\\_%' AND has_function_privilege($1, p.oid, 'EXECUTE')`,
    [role],
  );
  return new Set(rows.map((r) => r.f));
}

async function registryRelations(): Promise<{ name: string; kind: string }[]> {
  const { rows } = await db.owner.query<{ name: string; kind: string }>(
    `SELECT c.relname AS name, c.relkind::text AS kind
     FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace AND c.relname LIKE 'aip\\_%' AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
     ORDER BY 1`,
  );
  return rows;
}

describe.each(Object.keys(ROLES) as Plane[])("the %s role", (plane) => {
  const role = ROLES[plane];
  const login = LOGINS[plane];

  it("is refused (42501) by PostgreSQL for every registry function outside its grant, helpers included", async () => {
    const granted = await executable(role);
    const functions = await registryFunctions();
    const refused = functions.filter((f) => !granted.has(f.signature));
    expect(refused.length).toBeGreaterThan(30);
    expect(refused.map((f) => f.name)).toEqual(
      expect.arrayContaining(["aip_fail", "aip_step_counter", "aip_canonical_json", "aip_catalog_revision_exclusive"]),
    );
    const before = await registryState(db.owner);
    for (const f of refused) {
      // Volatile arguments: the planner may neither fold the call (a STRICT function of a NULL
      // constant is never called, and never checked) nor inline it.
      const call = `SELECT ${f.name}(${f.args.map((t) => `(CASE WHEN random() >= 0 THEN NULL END)::${t}`).join(", ")})`;
      expect(await sqlstate(clients[plane], call), `${login}: ${call}`).toBe("42501");
    }
    expect(await registryState(db.owner)).toEqual(before);
  });

  it("holds no privilege of any kind on any registry table, column or sequence", async () => {
    const relations = await registryRelations();
    expect(relations.filter((r) => r.kind === "r").length).toBeGreaterThan(10);
    for (const who of [role, login]) {
      const { rows } = await db.owner.query<{ relation: string; privilege: string }>(
        `SELECT c.relname AS relation, p.privilege
         FROM pg_class c CROSS JOIN unnest(ARRAY['SELECT','INSERT','UPDATE','DELETE','TRUNCATE','REFERENCES','TRIGGER']) p(privilege)
         WHERE c.relnamespace = 'public'::regnamespace AND c.relname LIKE 'aip\\_%' AND c.relkind IN ('r','p','v','m','f')
           AND has_table_privilege($1, c.oid, p.privilege)
         UNION ALL
         SELECT c.relname || '.' || a.attname, p.privilege
         FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
         CROSS JOIN unnest(ARRAY['SELECT','INSERT','UPDATE','REFERENCES']) p(privilege)
         WHERE c.relnamespace = 'public'::regnamespace AND c.relname LIKE 'aip\\_%' AND c.relkind IN ('r','p')
           AND has_column_privilege($1, c.oid, a.attnum, p.privilege)
         UNION ALL
         SELECT c.relname, p.privilege
         FROM pg_class c CROSS JOIN unnest(ARRAY['USAGE','SELECT','UPDATE']) p(privilege)
         WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'S' AND has_sequence_privilege($1, c.oid, p.privilege)`,
        [who],
      );
      expect(rows, who).toEqual([]);
    }
  });

  it("can neither create, replace, alter nor drop registry objects, nor lock, copy, index or trigger on its tables", async () => {
    const client = clients[plane];
    const statements = [
      "CREATE FUNCTION aip_evil() RETURNS int LANGUAGE sql AS 'SELECT 1'",
      "CREATE FUNCTION evil() RETURNS int LANGUAGE sql AS 'SELECT 1'",
      "CREATE OR REPLACE FUNCTION aip_fail(p_code text, p_message text, p_detail jsonb DEFAULT '{}'::jsonb) RETURNS void LANGUAGE sql AS 'SELECT'",
      "CREATE OR REPLACE FUNCTION aip_get_route(p_action_id text, p_tenant_id text) RETURNS json LANGUAGE sql AS 'SELECT NULL::json'",
      "CREATE VIEW aip_all_routes AS SELECT 1 AS x",
      "CREATE TYPE aip_evil_type AS (x int)",
      "CREATE SCHEMA aip_evil",
      "ALTER FUNCTION aip_resolve_route(text, text, text, jsonb) SECURITY INVOKER",
      "ALTER FUNCTION aip_fail(text, text, jsonb) OWNER TO CURRENT_USER",
      "ALTER FUNCTION aip_settle_route(text, text, jsonb, text) RESET search_path",
      "DROP FUNCTION aip_fail(text, text, jsonb)",
      "COMMENT ON FUNCTION aip_fail(text, text, jsonb) IS 'x'",
      "ALTER TABLE aip_route_assignments ADD COLUMN evil text",
      "ALTER TABLE aip_route_assignments OWNER TO CURRENT_USER",
      "ALTER TABLE aip_route_assignments DISABLE TRIGGER ALL",
      "ALTER TABLE aip_admission_counters DROP CONSTRAINT IF EXISTS aip_admission_counters_pkey",
      "DROP TABLE aip_connector_types CASCADE",
      "CREATE INDEX aip_evil_idx ON aip_route_assignments (tenant_id)",
      "CREATE TRIGGER aip_evil AFTER INSERT ON aip_route_assignments FOR EACH ROW EXECUTE FUNCTION aip_fail()",
      "LOCK TABLE aip_catalog_revision IN ACCESS EXCLUSIVE MODE",
      "COPY aip_connector_instances TO STDOUT",
      "COPY aip_connector_types FROM STDIN",
      "SELECT * FROM aip_connector_instances FOR UPDATE",
    ];
    const before = await registryState(db.owner);
    for (const statement of statements) {
      expect(await sqlstate(client, statement), `${login}: ${statement}`).toBe("42501");
    }
    // Granting onward needs a grant option it does not have: PostgreSQL only warns, and nothing changes.
    const granted = await executable(ROLES[plane === "data" ? "control" : "data"]);
    await client
      .query(
        `GRANT EXECUTE ON FUNCTION aip_fail(text, text, jsonb), aip_publish(jsonb, boolean), aip_resolve_route(text, text, text, jsonb) TO ${ROLES[plane === "data" ? "control" : "data"]}`,
      )
      .catch(() => {});
    expect(await executable(ROLES[plane === "data" ? "control" : "data"])).toEqual(granted);
    expect(await registryState(db.owner)).toEqual(before);
    const { rows } = await db.owner.query(
      "SELECT 1 FROM pg_proc WHERE proname IN ('aip_evil', 'evil') UNION ALL SELECT 1 FROM pg_namespace WHERE nspname = 'aip_evil'",
    );
    expect(rows).toEqual([]);
  });

  it("is no superuser, creates no roles or databases, bypasses no row security, and belongs to no powerful role", async () => {
    const { rows } = await db.owner.query<{
      rolname: string;
      rolsuper: boolean;
      rolcreaterole: boolean;
      rolcreatedb: boolean;
      rolreplication: boolean;
      rolbypassrls: boolean;
    }>("SELECT rolname, rolsuper, rolcreaterole, rolcreatedb, rolreplication, rolbypassrls FROM pg_roles WHERE rolname = ANY($1::text[]) ORDER BY 1", [
      [role, login],
    ]);
    expect(rows).toHaveLength(2);
    for (const row of rows)
      expect(row).toEqual({ rolname: row.rolname, rolsuper: false, rolcreaterole: false, rolcreatedb: false, rolreplication: false, rolbypassrls: false });
    const other = ROLES[plane === "data" ? "control" : "data"];
    const { rows: owner } = await db.owner.query<{ owner: string }>("SELECT pg_get_userbyid(proowner) AS owner FROM pg_proc WHERE proname = 'aip_publish'");
    const powerful = [
      other,
      owner[0]!.owner,
      "pg_read_all_data",
      "pg_write_all_data",
      "pg_read_server_files",
      "pg_write_server_files",
      "pg_execute_server_program",
      "pg_signal_backend",
      "pg_monitor",
      "pg_read_all_stats",
      "pg_checkpoint",
      "pg_maintain",
    ];
    const { rows: memberships } = await db.owner.query<{ member_of: string }>(
      `SELECT r.rolname AS member_of FROM pg_roles r WHERE r.rolname = ANY($2::text[]) AND pg_has_role($1, r.oid, 'MEMBER')`,
      [login, powerful],
    );
    expect(memberships, `${login} is a member of`).toEqual([]);
  });

  it("cannot become another role, signal other sessions, or read their statements", async () => {
    const client = clients[plane];
    const other = ROLES[plane === "data" ? "control" : "data"];
    const { rows: owner } = await db.owner.query<{ owner: string }>("SELECT pg_get_userbyid(proowner) AS owner FROM pg_proc WHERE proname = 'aip_publish'");
    for (const target of [other, owner[0]!.owner, LOGINS[plane === "data" ? "control" : "data"]]) {
      expect(await sqlstate(client, `SET ROLE ${target}`), `SET ROLE ${target}`).toBe("42501");
      expect(await sqlstate(client, `SET SESSION AUTHORIZATION ${target}`), `SET SESSION AUTHORIZATION ${target}`).toBe("42501");
    }
    const victim = new pg.Client({ connectionString: withSetOnPath(plane === "data" ? db.controlUrl : db.dataUrl) });
    await victim.connect();
    try {
      const { rows } = await victim.query<{ pid: number }>("SELECT pg_backend_pid() AS pid");
      const pid = rows[0]!.pid;
      await victim.query("SELECT 'a statement with a secret in it: vault://tenants/x' AS probe");
      expect(await sqlstate(client, "SELECT pg_terminate_backend($1)", [pid])).toBe("42501");
      expect(await sqlstate(client, "SELECT pg_cancel_backend($1)", [pid])).toBe("42501");
      const { rows: seen } = await client.query<{ query: string | null }>("SELECT query FROM pg_stat_activity WHERE pid = $1", [pid]);
      for (const row of seen) expect(row.query ?? "").not.toContain("vault://");
      expect((await victim.query("SELECT 1 AS alive")).rows).toEqual([{ alive: 1 }]);
    } finally {
      await victim.end();
    }
  });

  it("creates temporary objects (PostgreSQL's default for every role) that cannot shadow registry tables in the entry points", async () => {
    if (plane === "control") {
      // The control role's entry points read through the same pinned search_path; one check suffices.
      await clients.control.query("CREATE TEMP TABLE aip_connector_types (type_id text, name text)");
      await clients.control.query("INSERT INTO pg_temp.aip_connector_types VALUES ('ctype_pv', 'decoy'), ('ctype_decoy', 'decoy')");
      await clients.control.query(`SET search_path = pg_temp, ${FUNCTION_SET}, public`);
      try {
        expect(await clients.control.query("SELECT aip_admin_get('connector_type', 'ctype_pv') AS r")).toMatchObject({
          rows: [{ r: expect.objectContaining({ id: "ctype_pv", name: "Connector ctype_pv" }) }],
        });
        expect((await clients.control.query("SELECT aip_admin_get('connector_type', 'ctype_decoy') AS r")).rows[0].r).toBeNull();
      } finally {
        await clients.control.query("RESET search_path");
        await clients.control.query("DROP TABLE pg_temp.aip_connector_types");
      }
      return;
    }
    const client = clients.data;
    // A decoy with the real table's name, ahead of it on the session's search_path.
    await client.query("CREATE TEMP TABLE aip_route_assignments (action_id text, tenant_id text, reserved boolean)");
    await client.query("INSERT INTO pg_temp.aip_route_assignments VALUES ('act_pv_1', 'tenant-pv', false), ('act_pv_decoy', 'tenant-pv', true)");
    await client.query(`SET search_path = pg_temp, ${FUNCTION_SET}, public`);
    try {
      const { rows } = await client.query<{ r: Record<string, unknown> | null }>("SELECT aip_get_route('act_pv_1', 'tenant-pv') AS r");
      expect(rows[0]!.r).toMatchObject({
        reserved: true,
        assignment: { action_id: "act_pv_1", tenant_id: "tenant-pv", fence_token: expect.stringMatching(/^route_/) },
      });
      expect((await client.query("SELECT aip_get_route('act_pv_decoy', 'tenant-pv') AS r")).rows[0].r).toBeNull();
    } finally {
      await client.query("RESET search_path");
      await client.query("DROP TABLE IF EXISTS pg_temp.aip_route_assignments");
    }
  });
});

describe("the registry's functions", () => {
  it("are SECURITY DEFINER exactly when a runtime role may execute them", async () => {
    const granted = new Set([...(await executable(ROLES.data)), ...(await executable(ROLES.control))]);
    const definers = (await registryFunctions()).filter((f) => f.definer).map((f) => f.signature);
    expect(new Set(definers)).toEqual(granted);
  });

  it("never build SQL at run time (no EXECUTE of a string), so no input can become a statement", async () => {
    const dynamic = (await registryFunctions()).filter((f) => /\bEXECUTE\s/i.test(f.source.replace(/--[^\n]*/g, ""))).map((f) => f.signature);
    expect(dynamic).toEqual([]);
  });

  it("and every other registry object are owned by neither runtime role, and no default privilege grants them future tables", async () => {
    const roles = [...Object.values(ROLES), ...Object.values(LOGINS)];
    const { rows } = await db.owner.query(
      `SELECT 'function ' || p.proname AS object FROM pg_proc p WHERE p.proname LIKE 'aip\\_%' AND pg_get_userbyid(p.proowner) = ANY($1::text[])
       UNION ALL SELECT 'relation ' || c.relname FROM pg_class c WHERE c.relname LIKE 'aip\\_%' AND pg_get_userbyid(c.relowner) = ANY($1::text[])
       UNION ALL SELECT 'type ' || t.typname FROM pg_type t WHERE t.typname LIKE 'aip\\_%' AND pg_get_userbyid(t.typowner) = ANY($1::text[])
       UNION ALL SELECT 'schema ' || n.nspname FROM pg_namespace n WHERE pg_get_userbyid(n.nspowner) = ANY($1::text[])
       UNION ALL SELECT 'default privilege ' || d.defaclobjtype::text FROM pg_default_acl d, aclexplode(d.defaclacl) a WHERE pg_get_userbyid(a.grantee) = ANY($1::text[])`,
      [roles],
    );
    expect(rows).toEqual([]);
  });

  it("leave the runtime roles only USAGE on the schema and CONNECT/TEMP on the database", async () => {
    for (const role of [...Object.values(ROLES), ...Object.values(LOGINS)]) {
      const { rows } = await db.owner.query(
        `SELECT has_schema_privilege($1, 'public', 'CREATE') AS schema_create, has_schema_privilege($1, 'public', 'USAGE') AS schema_usage,
                has_database_privilege($1, current_database(), 'CREATE') AS database_create`,
        [role],
      );
      expect(rows[0], role).toEqual({ schema_create: false, schema_usage: true, database_create: false });
    }
  });
});
