/**
 * The migration runner: idempotent, safe when two run at once, checksum-verified, all or nothing,
 * self-healing when someone edits an installed function of this build's set by hand, and telling
 * when someone changes a table, a column or an index by hand. (Function sets side by side, finalize
 * and contract migrations: test/db/function-sets.test.ts.)
 */
import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterAll, describe, expect, it, inject } from "vitest";
import { MigrationError, migrate, type MigrationReport } from "../../src/db/migrate.js";
import type { Migration } from "../../src/db/sql-files.js";
import { withPgSession } from "../../src/db/pg.js";
import { verifySchema } from "../../src/registry/schema-check.js";
import { loadFunctionSet, loadMigrations } from "../../src/db/sql-files.js";
import { useTestDatabase } from "../support/database.js";
import { connectorType } from "../../fixtures/records.js";
import { databaseUrl } from "../support/server.js";

const db = useTestDatabase();
const emptyDatabases: string[] = [];

afterAll(async () => {
  const server = inject("pgServer");
  const admin = new pg.Client({ connectionString: server.adminUrl });
  await admin.connect();
  for (const name of emptyDatabases) await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => {});
  await admin.end();
});

/** A database with nothing in it (named so that the global teardown would drop it too). */
async function emptyDatabase(): Promise<string> {
  const server = inject("pgServer");
  const name = `aip_t_${server.runId}_empty_${randomBytes(4).toString("hex")}`;
  const admin = new pg.Client({ connectionString: server.adminUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name} TEMPLATE template0`);
  await admin.end();
  emptyDatabases.push(name);
  return databaseUrl(server, name);
}

const run = (url: string, options: Parameters<typeof migrate>[1] = {}) => withPgSession(url, (session) => migrate(session, options));

async function schemaStatus() {
  const { rows } = await db.owner.query("SELECT aip_schema_status(null, null, null) AS s");
  return rows[0].s as { schema_version: number; functions_intact: boolean; functions_checksum: string; tables_intact: boolean | null };
}

async function migrationRows(url: string) {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query("SELECT version, name, checksum, kind FROM aip_schema_applied ORDER BY version")).rows;
  } finally {
    await client.end();
  }
}

const expand = (version: number, name: string, sql: string): Migration => ({ version, name, sql, checksum: name.padEnd(64, "0"), kind: "expand" });

describe("migrate", () => {
  it("is a no-op when run again on a migrated database", async () => {
    // Brings this database up to the files on disk first (they may have changed since the
    // template was migrated); from then on, running again must change nothing.
    await run(db.ownerUrl);
    const before = await migrationRows(db.ownerUrl);
    for (let i = 0; i < 2; i++) {
      const report = await run(db.ownerUrl);
      expect(report).toMatchObject({ applied: [], functionsInstalled: false });
    }
    expect(await migrationRows(db.ownerUrl)).toEqual(before);
    expect((await schemaStatus()).functions_intact).toBe(true);
  });

  it("applies everything exactly once when two runners start at once on a fresh database", async () => {
    const url = await emptyDatabase();
    const migrations = await loadMigrations();
    const reports = await Promise.all([run(url), run(url)]);
    const appliers = reports.filter((r: MigrationReport) => r.applied.length > 0);
    expect(appliers).toHaveLength(1);
    expect(appliers[0]!.applied).toEqual(migrations.map((m) => m.name));
    expect(reports.filter((r) => r.functionsInstalled)).toHaveLength(1);
    expect((await migrationRows(url)).map((r) => r.version)).toEqual(migrations.map((m) => m.version));
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      const { rows } = await client.query("SELECT aip_schema_status(null, null, null) AS s");
      expect(rows[0].s).toMatchObject({
        schema_version: migrations.at(-1)!.version,
        functions_intact: true,
        catalog_revision: 0,
        function_sets: [{ this: true }],
      });
    } finally {
      await client.end();
    }
  });

  it("refuses a database whose applied migration no longer matches its file", async () => {
    const migrations = await loadMigrations();
    const edited = migrations.map((m, i) => (i === 0 ? { ...m, sql: `${m.sql}\n-- edited`, checksum: "0".repeat(64) } : m));
    await expect(run(db.ownerUrl, { migrations: edited })).rejects.toThrow(MigrationError);
    await expect(run(db.ownerUrl, { migrations: edited })).rejects.toThrow(/checksum/);

    await db.owner.query("UPDATE aip_schema_applied SET checksum = 'tampered' WHERE version = 1");
    try {
      await expect(run(db.ownerUrl)).rejects.toThrow(/migration 1 .*checksum/);
    } finally {
      await db.owner.query("UPDATE aip_schema_applied SET checksum = $1 WHERE version = 1", [migrations[0]!.checksum]);
    }
  });

  it("installs an older build's set on a database migrated by newer code (a rollback), and refuses one that has diverged", async () => {
    const migrations = await loadMigrations();
    const lines: string[] = [];
    expect(await run(db.ownerUrl, { migrations: migrations.slice(0, -1), log: (line) => lines.push(line) })).toMatchObject({ applied: [] });
    expect(lines.join("\n")).toMatch(/newer than this build/);
    const diverged = [...migrations.slice(0, -1), expand(migrations.length + 5, "9999_elsewhere", "SELECT 1")];
    await expect(run(db.ownerUrl, { migrations: diverged })).rejects.toThrow(/diverged/);
  });

  it("steps back and tries again while running work holds a table its DDL needs, instead of queueing every request behind it", async () => {
    const migrations = await loadMigrations();
    const next = expand(migrations.length + 1, "9999_wait_for_reader", "ALTER TABLE aip_connector_types ADD COLUMN waited text");
    const reader = await db.owner.connect();
    await reader.query("BEGIN; LOCK TABLE aip_connector_types IN ACCESS SHARE MODE");
    const lines: string[] = [];
    const running = run(db.ownerUrl, { migrations: [...migrations, next], log: (line) => lines.push(line) });
    try {
      // The first attempt's lock wait (3 s) runs out while the reader holds on: nothing is changed.
      await expect.poll(() => lines.join("\n"), { timeout: 15_000 }).toMatch(/held by running work: nothing was changed; trying again/);
      expect((await db.owner.query("SELECT count(*)::int AS n FROM aip_schema_applied WHERE version = $1", [next.version])).rows[0].n).toBe(0);
    } finally {
      await reader.query("COMMIT");
      reader.release();
    }
    expect(await running).toMatchObject({ applied: ["9999_wait_for_reader"] });
    // Leave the database as the other tests expect it.
    await db.owner.query("ALTER TABLE aip_connector_types DROP COLUMN waited");
    await db.owner.query("DELETE FROM aip_schema_applied WHERE version = $1", [next.version]);
    await db.owner.query("UPDATE aip_schema_sets SET tables_digest = NULL");
    expect(await run(db.ownerUrl)).toMatchObject({ tablesIntact: true });
  });

  it("leaves the database exactly as it was when a migration fails", async () => {
    const migrations = await loadMigrations();
    const failing = expand(migrations.length + 1, "9999_failing", "CREATE TABLE aip_half_done (x int); SELECT 1 / 0;");
    await expect(run(db.ownerUrl, { migrations: [...migrations, failing] })).rejects.toThrow(/division by zero/);
    const { rows } = await db.owner.query("SELECT to_regclass('aip_half_done') AS t, (SELECT max(version) FROM aip_schema_applied) AS v");
    expect(rows[0]).toEqual({ t: null, v: migrations.length });
  });

  it("keeps the installed functions when a function file fails to install", async () => {
    const functions = await loadFunctionSet();
    const broken = {
      ...functions,
      checksum: "e".repeat(64),
      name: "aip_fn_eeeeeeeeeeee",
      files: [...functions.files, { name: "99_broken.sql", sql: "CREATE FUNCTION aip_broken( RETURNS" }],
    };
    await expect(run(db.ownerUrl, { functions: broken })).rejects.toThrow(/functions\/99_broken\.sql/);
    expect(await schemaStatus()).toMatchObject({ functions_intact: true, functions_checksum: functions.checksum });
    const { rows } = await db.owner.query("SELECT to_regnamespace('aip_fn_eeeeeeeeeeee') AS s, (SELECT count(*)::int FROM aip_schema_sets) AS sets");
    expect(rows[0]).toEqual({ s: null, sets: 1 });
    expect((await db.registry.publish([connectorType("ctype_migrate_after_broken")])).changed).toBe(1);
  });
});

describe("hand-edited functions", () => {
  async function expectDriftRepaired(edit: string) {
    await db.owner.query(edit);
    expect((await schemaStatus()).functions_intact).toBe(false);
    expect(await verifySchema(db.registry)).toMatchObject({ ok: false, reason: expect.stringMatching(/were modified after installation: run migrate/) });
    const report = await run(db.ownerUrl);
    expect(report).toMatchObject({ applied: [], functionsInstalled: true });
    expect((await schemaStatus()).functions_intact).toBe(true);
  }

  it("are detected and reinstalled when a body changes", async () => {
    await expectDriftRepaired("CREATE OR REPLACE FUNCTION aip_sha256(p_text text) RETURNS text LANGUAGE sql IMMUTABLE STRICT AS $$ SELECT 'sha256:' $$");
    const { rows } = await db.owner.query("SELECT aip_sha256('') AS d");
    expect(rows[0].d).toBe("sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  });

  it("are detected and dropped when a stray registry function is added", async () => {
    await expectDriftRepaired("CREATE FUNCTION aip_backdoor() RETURNS int LANGUAGE sql SECURITY DEFINER AS 'SELECT 1'");
    const { rows } = await db.owner.query("SELECT to_regprocedure('aip_backdoor()') AS f");
    expect(rows[0].f).toBeNull();
  });

  it("are detected and repaired when a helper is granted to a runtime role", async () => {
    const role = inject("pgServer").roles!.data;
    await expectDriftRepaired(`GRANT EXECUTE ON FUNCTION aip_pub_apply(jsonb) TO ${role}`);
    const { rows } = await db.owner.query(`SELECT has_function_privilege('${role}', 'aip_pub_apply(jsonb)', 'EXECUTE') AS granted`);
    expect(rows[0].granted).toBe(false);
  });

  it("are detected when a function loses SECURITY DEFINER or its settings", async () => {
    await expectDriftRepaired("ALTER FUNCTION aip_publish(jsonb, boolean) SECURITY INVOKER");
    await expectDriftRepaired("ALTER FUNCTION aip_publish(jsonb, boolean) RESET lock_timeout");
  });
});

describe("hand-made table changes", () => {
  async function expectDriftReported(edit: string, undo: string) {
    expect((await schemaStatus()).tables_intact).toBe(true);
    await db.owner.query(edit);
    expect((await schemaStatus()).tables_intact).toBe(false);
    // Still served (no migration can repair it), but said so, and a migration does not absorb it.
    expect(await verifySchema(db.registry)).toMatchObject({ ok: true, tables_intact: false });
    const lines: string[] = [];
    expect(await run(db.ownerUrl, { log: (line) => lines.push(line) })).toMatchObject({ applied: [], tablesIntact: false });
    expect(lines.join("\n")).toMatch(/tables, columns or indexes differ from what the migrations made/);
    expect((await schemaStatus()).tables_intact).toBe(false);
    await db.owner.query(undo);
    expect((await schemaStatus()).tables_intact).toBe(true);
    expect(await run(db.ownerUrl)).toMatchObject({ tablesIntact: true });
  }

  it("are recorded by the migrator and intact on a migrated database", async () => {
    const { rows } = await db.owner.query("SELECT tables_digest AS digest FROM aip_schema_sets WHERE name = current_schema()");
    expect(rows[0].digest).toMatch(/^[0-9a-f]{64}$/);
    expect((await schemaStatus()).tables_intact).toBe(true);
  });

  it("are detected when an index is added or dropped", async () => {
    await expectDriftReported("CREATE INDEX aip_hand_made_idx ON aip_route_assignments (tenant_id)", "DROP INDEX aip_hand_made_idx");
    await expectDriftReported(
      "DROP INDEX aip_connector_replicas_peer_idx",
      "CREATE INDEX aip_connector_replicas_peer_idx ON aip_connector_replicas USING btree (peer_principal_id)",
    );
  });

  it("are detected when a column, a default, a constraint or a grant changes", async () => {
    await expectDriftReported("ALTER TABLE aip_connector_types ADD COLUMN note text", "ALTER TABLE aip_connector_types DROP COLUMN note");
    await expectDriftReported(
      "ALTER TABLE aip_connector_replicas ALTER COLUMN status SET DEFAULT 'ready'",
      "ALTER TABLE aip_connector_replicas ALTER COLUMN status SET DEFAULT 'offline'",
    );
    await expectDriftReported(
      "ALTER TABLE aip_admission_counters DROP CONSTRAINT aip_admission_counters_active",
      "ALTER TABLE aip_admission_counters ADD CONSTRAINT aip_admission_counters_active CHECK (active >= 0)",
    );
    const role = inject("pgServer").roles!.data;
    await expectDriftReported(`GRANT SELECT ON aip_route_assignments TO ${role}`, `REVOKE SELECT ON aip_route_assignments FROM ${role}`);
  });

  it("are recorded again when a migration runs", async () => {
    await db.owner.query("UPDATE aip_schema_sets SET tables_digest = 'stale'");
    expect((await schemaStatus()).tables_intact).toBe(false);
    const migrations = await loadMigrations();
    const next = expand(migrations.length + 1, "9999_add_note", "ALTER TABLE aip_connector_types ADD COLUMN note text");
    expect(await run(db.ownerUrl, { migrations: [...migrations, next] })).toMatchObject({ applied: ["9999_add_note"], tablesIntact: true });
    expect((await schemaStatus()).tables_intact).toBe(true);
    // Leave the database as the other tests expect it.
    await db.owner.query("ALTER TABLE aip_connector_types DROP COLUMN note");
    await db.owner.query("DELETE FROM aip_schema_applied WHERE version = $1", [next.version]);
    await db.owner.query("UPDATE aip_schema_sets SET tables_digest = NULL");
    expect(await run(db.ownerUrl)).toMatchObject({ applied: [], tablesIntact: true });
  });
});
