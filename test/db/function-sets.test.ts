/**
 * Builds serve one database side by side (docs/upgrades.md): each build's functions are a set in a
 * schema of its own, installed beside the others by `migrate`; `migrate --finalize` drops the sets
 * of older builds once no server of theirs is running, then applies the contract migrations that
 * waited for them. Two builds here are this one (FUNCTION_SET) and a copy whose functions differ
 * by one comment (another set, as any edit of a function makes).
 */
import type pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import { MigrationError, migrate, type MigrateOptions } from "../../src/db/migrate.js";
import { createPgPool, pgExecutor, withPgSession } from "../../src/db/pg.js";
import { FUNCTION_SET } from "../../src/db/schema-version.js";
import { functionSetOf, loadFunctionSet, loadMigrations, type FunctionSet, type Migration } from "../../src/db/sql-files.js";
import { Registry, type ServerIdentity } from "../../src/registry/registry.js";
import { SET_NOT_INSTALLED, verifySchema } from "../../src/registry/schema-check.js";
import { publishSimpleFleet } from "../../fixtures/records.js";
import { createTestDatabase, type TestDatabase } from "../support/database.js";
import { expectRefusal } from "../support/assertions.js";

const opened: { pools: pg.Pool[]; dbs: TestDatabase[] } = { pools: [], dbs: [] };
afterEach(async () => {
  await Promise.all(opened.pools.splice(0).map((p) => p.end()));
  await Promise.all(opened.dbs.splice(0).map((d) => d.close()));
});

/** A database of its own (finalize looks at every session connected to it). */
async function database(): Promise<TestDatabase> {
  const db = await createTestDatabase();
  opened.dbs.push(db);
  return db;
}

/** Another build: this build's functions with one comment added (any edit makes another set). */
async function otherBuild(tag: string): Promise<FunctionSet> {
  const set = await loadFunctionSet();
  return functionSetOf(set.files.map((f) => (f.name === "50_routing.sql" ? { ...f, sql: `${f.sql}\n-- build ${tag}\n` } : f)));
}

const run = (db: TestDatabase, options: MigrateOptions = {}) => withPgSession(db.ownerUrl, (session) => migrate(session, options));

/**
 * A server of `set`'s build: runtime-role pools named as a Node server of that build names them
 * (application_name aip-registry/<set>), reporting itself as `server`.
 */
function serverOf(db: TestDatabase, set: string, server?: ServerIdentity): Registry {
  const data = createPgPool(db.dataUrl, { max: 2, applicationName: `aip-registry/${set}` });
  const control = createPgPool(db.controlUrl, { max: 1, applicationName: `aip-registry/${set}` });
  opened.pools.push(data, control);
  return new Registry({ data: pgExecutor(data), control: pgExecutor(control), functionSet: set, ...(server ? { server } : {}) });
}

/** Stops every server serverOf started: their sessions end. */
const stopServers = () => Promise.all(opened.pools.splice(0).map((p) => p.end()));

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("function sets side by side", () => {
  it("installs a new build's set beside the running one, which keeps serving, intact and ready", async () => {
    const db = await database();
    const b = await otherBuild("b");
    expect(b.name).not.toBe(FUNCTION_SET);
    const before = await db.owner.query("SELECT aip_installed_functions_digest() AS d");

    const report = await run(db, { functions: b });
    expect(report).toMatchObject({ applied: [], functionSet: b.name, functionsInstalled: true, droppedSets: [] });
    expect(report.otherSets.map((s) => s.name)).toEqual([FUNCTION_SET]);

    // The running build's set is exactly as it was, and its server stays ready.
    expect((await db.owner.query("SELECT aip_installed_functions_digest() AS d")).rows).toEqual(before.rows);
    const verdict = await verifySchema(db.registry);
    expect(verdict).toMatchObject({ ok: true, function_set: FUNCTION_SET });
    expect(verdict.function_sets?.map((s) => [s.name, s.this])).toEqual([
      [FUNCTION_SET, true],
      [b.name, false],
    ]);

    // Both builds serve the same tables: a route made through one is the route the other returns.
    const newer = serverOf(db, b.name);
    expect(await newer.schemaStatus()).toMatchObject({ function_set: b.name, functions_checksum: b.checksum, functions_intact: true });
    const fleet = await publishSimpleFleet(newer, { prefix: "sets" });
    const made = await db.registry.resolveRoute("act_sets_1", "tenant-a", fleet.capabilities[0]!);
    expect(made.outcome).toBe("created");
    const again = await newer.resolveRoute("act_sets_1", "tenant-a", fleet.capabilities[0]!);
    expect(again).toMatchObject({ outcome: "existing", assignment: { replica_id: made.assignment.replica_id, fence_token: made.assignment.fence_token } });
    expect(await newer.settleRoute("act_sets_1", "tenant-a", made.assignment, "completed")).toMatchObject({ released: true });

    // Running migrate again with either build changes nothing.
    expect(await run(db, { functions: b })).toMatchObject({ applied: [], functionsInstalled: false });
    expect(await run(db)).toMatchObject({ applied: [], functionsInstalled: false });
  });

  it("grants a set only to this database's runtime roles, and nothing to PUBLIC", async () => {
    const db = await database();
    const { rows } = await db.owner.query(
      `SELECT r.data_role, r.control_role,
              has_schema_privilege(r.data_role, $1, 'USAGE') AS data_usage,
              has_function_privilege(r.data_role, $1 || '.aip_resolve_route(text,text,text,jsonb)', 'EXECUTE') AS data_resolve,
              has_function_privilege(r.data_role, $1 || '.aip_publish(jsonb,boolean)', 'EXECUTE') AS data_publish,
              has_function_privilege(r.control_role, $1 || '.aip_publish(jsonb,boolean)', 'EXECUTE') AS control_publish,
              (SELECT count(*)::int FROM pg_proc p WHERE p.pronamespace = $1::regnamespace
                 AND has_function_privilege('public', p.oid, 'EXECUTE')) AS public_functions
       FROM aip_schema_roles r`,
      [FUNCTION_SET],
    );
    expect(rows[0]).toMatchObject({ data_usage: true, data_resolve: true, data_publish: false, control_publish: true, public_functions: 0 });
  });
});

describe("migrate --finalize", () => {
  it("refuses while an older build's servers were seen recently or are connected, naming the set, and drops it once they are gone", async () => {
    const db = await database();
    const b = await otherBuild("finalize");
    await run(db, { functions: b });
    const old = serverOf(db, FUNCTION_SET, { runtime: "node", instance: "old-pod-1" });
    expect(await verifySchema(old)).toMatchObject({ ok: true });

    // Seen a moment ago and connected (its pool holds sessions named for its set).
    await expect(run(db, { functions: b, finalize: true })).rejects.toThrow(MigrationError);
    await expect(run(db, { functions: b, finalize: true })).rejects.toThrow(
      new RegExp(`refusing to finalize: .*${FUNCTION_SET} \\(release [^:]+: \\d+ session\\(s\\) connected, last seen \\d{4}-`),
    );
    // Stopped (no session) but seen within the window: still refused.
    await stopServers();
    await expect(run(db, { functions: b, finalize: true })).rejects.toThrow(/0 session\(s\) connected, last seen/);

    // Not seen within the window (1 ms, a moment later) and not connected: dropped.
    await sleep(20);
    const report = await run(db, { functions: b, finalize: true, seenWithinMs: 1 });
    expect(report).toMatchObject({ functionSet: b.name, droppedSets: [FUNCTION_SET], otherSets: [] });

    // A server of the dropped set is not ready and says why; its calls are storage refusals.
    const gone = serverOf(db, FUNCTION_SET);
    expect(await verifySchema(gone)).toMatchObject({ ok: false, reason: SET_NOT_INSTALLED });
    await expectRefusal(gone.fleetStatus(), "storage");
    // The newer build serves on.
    expect(await serverOf(db, b.name).schemaStatus()).toMatchObject({ functions_intact: true, function_sets: [{ name: b.name, this: true }] });
  });

  it("drops a set in use only when forced, and never a newer build's set", async () => {
    const db = await database();
    const b = await otherBuild("forced");
    await run(db, { functions: b });
    // This build is the older one: finalizing with it leaves the newer set alone.
    expect(await run(db, { finalize: true })).toMatchObject({ droppedSets: [], otherSets: [{ name: b.name }] });
    // The newer build's finalize refuses while a server of the older set is connected, unless forced.
    expect(await verifySchema(serverOf(db, FUNCTION_SET))).toMatchObject({ ok: true });
    await expect(run(db, { functions: b, finalize: true })).rejects.toThrow(/refusing to finalize/);
    const lines: string[] = [];
    expect(await run(db, { functions: b, finalize: true, force: true, log: (l) => lines.push(l) })).toMatchObject({ droppedSets: [FUNCTION_SET] });
    expect(lines.join("\n")).toMatch(new RegExp(`forced: dropping ${FUNCTION_SET}`));
  });

  it("applies a contract migration only at finalize, once no set of a build below its supports-from is left", async () => {
    const db = await database();
    const migrations = await loadMigrations();
    const n = migrations.at(-1)!.version;
    const added: Migration = {
      version: n + 1,
      name: "9990_add_scratch",
      sql: "ALTER TABLE aip_connector_types ADD COLUMN scratch text",
      checksum: "a".repeat(64),
      kind: "expand",
    };
    const removed: Migration = {
      version: n + 2,
      name: "9991_drop_scratch",
      sql: `-- aip:contract supports-from=${n + 1}\nALTER TABLE aip_connector_types DROP COLUMN scratch`,
      checksum: "b".repeat(64),
      kind: "contract",
      supportsFrom: n + 1,
    };
    const b = await otherBuild("contract");
    const newer = [...migrations, added, removed];

    // migrate (what MIGRATE_ON_START runs) expands only; the older build stays ready.
    const expanded = await run(db, { functions: b, migrations: newer });
    expect(expanded).toMatchObject({ applied: ["9990_add_scratch"], contracted: [], pendingContract: ["9991_drop_scratch"], schemaVersion: n + 1 });
    expect(await verifySchema(db.registry)).toMatchObject({ ok: true, schema_version: n + 1 });

    // finalize with the older build still connected: refused, nothing contracted.
    expect(await verifySchema(serverOf(db, FUNCTION_SET))).toMatchObject({ ok: true });
    await expect(run(db, { functions: b, migrations: newer, finalize: true })).rejects.toThrow(/refusing to finalize/);
    const column = async () =>
      (
        await db.owner.query(
          "SELECT count(*)::int AS n FROM pg_attribute WHERE attrelid = 'aip_connector_types'::regclass AND attname = 'scratch' AND NOT attisdropped",
        )
      ).rows[0].n;
    expect(await column()).toBe(1);

    // Forced (as an operator would once the old pods are gone): the set goes, then the contract runs.
    const finalized = await run(db, { functions: b, migrations: newer, finalize: true, force: true });
    expect(finalized).toMatchObject({ droppedSets: [FUNCTION_SET], contracted: ["9991_drop_scratch"], pendingContract: [] });
    expect(await column()).toBe(0);

    // The older build can no longer be installed on it, and says why.
    await expect(run(db)).rejects.toThrow(new RegExp(`finalized for builds of schema version ${n + 1} and later; this build is at ${n}`));
  });
});

describe("sightings", () => {
  it("are kept one per server instance, refreshed at most every 30 s, and a new instance clears those gone a week", async () => {
    const db = await database();
    const server = (instance: string) => serverOf(db, FUNCTION_SET, { runtime: "worker", instance });
    const rows = async () =>
      (await db.owner.query("SELECT instance_id, last_seen::text FROM aip_schema_sightings WHERE set_name = $1 ORDER BY instance_id", [FUNCTION_SET])).rows;
    await server("isolate/a").schemaStatus();
    const first = await rows();
    await server("isolate/a").schemaStatus();
    expect(await rows()).toEqual(first);
    await db.owner.query("UPDATE aip_schema_sightings SET last_seen = now() - interval '8 days' WHERE instance_id = 'isolate/a'");
    await server("isolate/b").schemaStatus();
    expect((await rows()).map((r) => r.instance_id)).toEqual(["isolate/b"]);
  });
});
