/**
 * The previous release (releases.json: 0.1.0, before function sets) keeps serving while this
 * build migrates its database, checked at the SQL level with the previous release's own code
 * (its migrator, registry client and schema check, from git history): its functions stay in
 * `public` exactly as it installed them, its bookkeeping stays what its readiness check reads, its
 * login roles keep CONNECT; a restart of one of its servers (MIGRATE_ON_START) changes nothing;
 * finalize refuses while one is connected and removes all of it once none is.
 * (The same with real servers under load: test/upgrade/rolling.test.ts.)
 */
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { MigrationError, migrate } from "../../src/db/migrate.js";
import { createPgPool, pgExecutor, withPgSession } from "../../src/db/pg.js";
import { FUNCTION_SET } from "../../src/db/schema-version.js";
import { Registry } from "../../src/registry/registry.js";
import { verifySchema } from "../../src/registry/schema-check.js";
import { publishSimpleFleet } from "../../fixtures/records.js";
import { loginRoleSql } from "../../fixtures/login-roles.js";
import { databaseUrl } from "../support/server.js";
import { previousRelease, type Build } from "../support/releases.js";

const server = inject("pgServer");
const release = previousRelease();
const available = !("unavailable" in release);
if (!available) console.warn(`previous-release upgrade tests skipped: ${release.unavailable}`);
const previous = release as Build;

const suffix = randomBytes(3).toString("hex");
const database = `aip_t_${server.runId}_legacy_${suffix}`;
const logins = { oldData: `aip_legacy_data_${suffix}`, oldControl: `aip_legacy_control_${suffix}`, newData: `aip_new_data_${suffix}` };
const PASSWORD = "aip-legacy-password";
const pools: pg.Pool[] = [];

async function admin<T>(fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: server.adminUrl });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

const ownerUrl = () => databaseUrl(server, database);
/** The owner's URL as an operator of the previous release has it: the default search_path ("$user", public). */
const oldOwnerUrl = () => {
  const url = new URL(ownerUrl());
  url.searchParams.delete("options");
  return url.toString();
};
const loginUrl = (login: string) => {
  const url = new URL(databaseUrl(server, database, "aip_tests_data"));
  url.username = login;
  url.password = PASSWORD;
  return url.toString();
};

/** The previous release's own modules: its migrator, pg adapters, registry client and schema check. */
interface OldCode {
  migrate(session: unknown, options?: unknown): Promise<unknown>;
  withPgSession<T>(url: string, fn: (session: unknown) => Promise<T>): Promise<T>;
  createPgPool(url: string, options?: unknown): pg.Pool;
  pgExecutor(pool: pg.Pool): unknown;
  Registry: new (executors: unknown) => Registry;
  verifySchema(registry: Registry): Promise<{ ok: boolean; reason?: string; schema_version: number | null }>;
}
let old: OldCode;
/** A server of the previous release: its Registry over its own pools (application_name aip-registry). */
let oldServer: Registry;

beforeAll(async () => {
  if (!available) return;
  const load = (path: string) => import(/* @vite-ignore */ join(previous.dir, path));
  const [m, p, r, c] = await Promise.all([
    load("src/db/migrate.ts"),
    load("src/db/pg.ts"),
    load("src/registry/registry.ts"),
    load("src/registry/schema-check.ts"),
  ]);
  old = {
    migrate: m.migrate,
    withPgSession: p.withPgSession,
    createPgPool: p.createPgPool,
    pgExecutor: p.pgExecutor,
    Registry: r.Registry,
    verifySchema: c.verifySchema,
  };
  await admin((client) => client.query(`CREATE DATABASE ${database}`));
  await old.withPgSession(oldOwnerUrl(), (session) => old.migrate(session));
  // Its login roles, as its guide made them: members of the shared group roles.
  await admin(async (client) => {
    await client.query(`CREATE ROLE ${logins.oldData} LOGIN PASSWORD '${PASSWORD}' IN ROLE aip_registry_data`);
    await client.query(`CREATE ROLE ${logins.oldControl} LOGIN PASSWORD '${PASSWORD}' IN ROLE aip_registry_control`);
  });
  const data = old.createPgPool(loginUrl(logins.oldData), { max: 2 });
  const control = old.createPgPool(loginUrl(logins.oldControl), { max: 1 });
  pools.push(data, control);
  oldServer = new old.Registry({ data: old.pgExecutor(data), control: old.pgExecutor(control) });
});

afterAll(async () => {
  await Promise.all(pools.map((pool) => pool.end().catch(() => {})));
  if (!available) return;
  await admin(async (client) => {
    await client.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
    for (const login of Object.values(logins)) await client.query(`DROP ROLE IF EXISTS ${login}`);
    await client.query(`DROP ROLE IF EXISTS ${database}_aip_data`);
    await client.query(`DROP ROLE IF EXISTS ${database}_aip_control`);
  });
});

describe.runIf(available)(`the previous release's database, migrated by this build`, () => {
  let fleet: Awaited<ReturnType<typeof publishSimpleFleet>>;

  it("serves the previous release before the upgrade", async () => {
    expect(await old.verifySchema(oldServer)).toMatchObject({ ok: true });
    fleet = await publishSimpleFleet(oldServer, { prefix: "legacy" });
    expect((await oldServer.resolveRoute("act_legacy_1", "tenant-a", fleet.capabilities[0]!)).outcome).toBe("created");
  });

  it("keeps serving it, ready, after this build's migrate, beside this build's set", async () => {
    const lines: string[] = [];
    const report = await withPgSession(ownerUrl(), (session) => migrate(session, { log: (line) => lines.push(line) }));
    expect(report).toMatchObject({ functionSet: FUNCTION_SET, functionsInstalled: true, droppedSets: [] });
    expect(report.otherSets).toMatchObject([{ name: "public", release: previous.version }]);

    // Its readiness, by its own check: schema version, function checksum, functions and tables intact.
    expect(await old.verifySchema(oldServer)).toMatchObject({ ok: true });
    // Its functions route and settle on the tables this build migrated, and its new connections are let in.
    const routed = await oldServer.resolveRoute("act_legacy_2", "tenant-a", fleet.capabilities[0]!);
    expect(routed.outcome).toBe("created");
    const fresh = old.createPgPool(loginUrl(logins.oldData), { max: 1 });
    pools.push(fresh);
    expect((await new old.Registry({ data: old.pgExecutor(fresh) }).getRoute("act_legacy_2", "tenant-a"))?.reserved).toBe(true);

    // This build's servers log in with this database's own roles and see the same routes.
    await admin((client) => client.query(loginRoleSql(logins.newData, PASSWORD, "data", report.roles)));
    const data = createPgPool(loginUrl(logins.newData), { max: 2 });
    pools.push(data);
    const current = new Registry({ data: pgExecutor(data) });
    expect(await verifySchema(current)).toMatchObject({
      ok: true,
      function_sets: [
        { name: "public", this: false },
        { name: FUNCTION_SET, this: true },
      ],
    });
    const again = await current.resolveRoute("act_legacy_2", "tenant-a", fleet.capabilities[0]!);
    expect(again).toMatchObject({ outcome: "existing", assignment: { fence_token: routed.assignment.fence_token } });
    expect(await current.settleRoute("act_legacy_2", "tenant-a", routed.assignment, "completed")).toMatchObject({ released: true });
    expect(await oldServer.getRoute("act_legacy_2", "tenant-a")).toMatchObject({ reserved: false, last_settlement: "completed" });
  });

  it("changes nothing when a server of the previous release restarts and runs its own migrate", async () => {
    expect(await old.withPgSession(oldOwnerUrl(), (session) => old.migrate(session))).toMatchObject({
      applied: [],
      functionsInstalled: false,
      tablesIntact: true,
    });
    expect(await old.verifySchema(oldServer)).toMatchObject({ ok: true });
  });

  it("is finalized only once no server of the previous release is connected, which then removes its functions, bookkeeping and CONNECT", async () => {
    const finalize = () => withPgSession(ownerUrl(), (session) => migrate(session, { finalize: true }));
    await expect(finalize()).rejects.toThrow(MigrationError);
    await expect(finalize()).rejects.toThrow(/refusing to finalize: .*public \(release 0\.1\.0: \d+ session\(s\) connected/);
    expect(await old.verifySchema(oldServer)).toMatchObject({ ok: true });

    await Promise.all(pools.splice(0).map((pool) => pool.end()));
    expect(await finalize()).toMatchObject({ droppedSets: ["public"], otherSets: [] });
    const left = await admin(async () => {
      const client = new pg.Client({ connectionString: ownerUrl() });
      await client.connect();
      try {
        return (
          await client.query(
            `SELECT (SELECT count(*)::int FROM pg_proc WHERE pronamespace = 'public'::regnamespace AND proname LIKE 'aip\\_%') AS functions,
                    to_regclass('aip_schema_migrations') IS NULL AND to_regclass('aip_schema_functions') IS NULL AS bookkeeping_gone,
                    has_database_privilege('aip_registry_data', current_database(), 'CONNECT') AS legacy_connect`,
          )
        ).rows[0];
      } finally {
        await client.end();
      }
    });
    expect(left).toEqual({ functions: 0, bookkeeping_gone: true, legacy_connect: false });
    // A server of the previous release can no longer connect; this build's serve on.
    const refused = await new pg.Client({ connectionString: loginUrl(logins.oldData) }).connect().then(
      () => "",
      (error: { code?: string }) => String(error.code),
    );
    expect(refused).toBe("42501");
    const data = createPgPool(loginUrl(logins.newData), { max: 1 });
    pools.push(data);
    expect(await verifySchema(new Registry({ data: pgExecutor(data) }))).toMatchObject({ ok: true, function_sets: [{ name: FUNCTION_SET }] });
  });
});
