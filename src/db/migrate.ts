/**
 * The migration runner (Node only; a Worker never migrates).
 *
 * One transaction, under a database-scoped advisory lock, with explicit lock and statement
 * timeouts: two runners started at once serialize, and a failure leaves the database exactly as
 * it was. Numbered migrations (drizzle/) apply once each and are checksum-verified forever after;
 * the function set (functions/) is a repeatable step, reinstalled whole whenever its checksum
 * changes, any migration ran, or the installed functions no longer match what was recorded. The
 * tables are recorded too (aip_installed_tables_digest) after the migrations that made them: a
 * later hand-made change of a table, column or index cannot be repaired by a migration that
 * already ran, so it is reported (MigrationReport.tablesIntact, aip_schema_status), not hidden.
 */
import { loadFunctionSet, loadMigrations, type FunctionSet, type Migration } from "./sql-files.js";

/** A single database session that can run multi-statement SQL (migrations need one session). */
export interface MigrationSession {
  exec(sql: string): Promise<void>;
  query<R extends Record<string, unknown> = Record<string, unknown>>(text: string, params?: readonly unknown[]): Promise<R[]>;
}

export interface MigrationReport {
  applied: string[];
  functionsInstalled: boolean;
  schemaVersion: number;
  functionsChecksum: string;
  /** False when the tables, columns or indexes differ from what the migrations made (changed by hand). */
  tablesIntact: boolean;
}

/** "AIP_CREG": the reference implementation's migration lock key. */
const MIGRATION_LOCK_KEY = "4704379655846774087";

const BOOKKEEPING_SQL = `
CREATE TABLE IF NOT EXISTS aip_schema_migrations (
  version integer PRIMARY KEY,
  name text NOT NULL,
  checksum text NOT NULL,
  applied_at timestamptz(3) NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS aip_schema_functions (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  checksum text NOT NULL,
  installed_digest text NOT NULL,
  installed_at timestamptz(3) NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS aip_schema_tables (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  digest text NOT NULL,
  recorded_at timestamptz(3) NOT NULL DEFAULT now());
REVOKE ALL ON aip_schema_migrations, aip_schema_functions, aip_schema_tables FROM PUBLIC;
`;

/** Drops every installed registry function (the function set is reinstalled whole). */
export const DROP_FUNCTIONS_SQL = `
DO $$
DECLARE f regprocedure;
BEGIN
  FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
           WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'aip\\_%' LOOP
    EXECUTE format('DROP FUNCTION %s', f);
  END LOOP;
END
$$;
`;

export class MigrationError extends Error {}

export async function migrate(
  session: MigrationSession,
  options: { log?: (line: string) => void; migrations?: Migration[]; functions?: FunctionSet } = {},
): Promise<MigrationReport> {
  const log = options.log ?? (() => {});
  const migrations = options.migrations ?? (await loadMigrations());
  const functions = options.functions ?? (await loadFunctionSet());
  const applied: string[] = [];
  let functionsInstalled = false;
  let tablesIntact = true;

  await session.exec("BEGIN");
  try {
    await session.exec("SET LOCAL lock_timeout = '60s'; SET LOCAL statement_timeout = '15min'");
    await session.query(`SELECT pg_advisory_xact_lock(${MIGRATION_LOCK_KEY})`);
    await session.exec(BOOKKEEPING_SQL);

    const recorded = await session.query<{ version: number; name: string; checksum: string }>(
      "SELECT version, name, checksum FROM aip_schema_migrations ORDER BY version",
    );
    const known = new Map(migrations.map((m) => [m.version, m]));
    for (const row of recorded) {
      const migration = known.get(row.version);
      if (!migration) {
        throw new MigrationError(`database has migration ${row.version} (${row.name}) that this code does not know: it is newer than this code`);
      }
      if (migration.checksum !== row.checksum) {
        throw new MigrationError(`migration ${row.version} (${row.name}) changed after it was applied (checksum mismatch)`);
      }
    }
    const done = new Set(recorded.map((row) => row.version));
    for (const migration of migrations) {
      if (done.has(migration.version)) continue;
      log(`applying migration ${migration.version} ${migration.name}`);
      await session.exec(migration.sql);
      await session.query("INSERT INTO aip_schema_migrations (version, name, checksum) VALUES ($1, $2, $3)", [
        migration.version,
        migration.name,
        migration.checksum,
      ]);
      applied.push(migration.name);
    }

    const [installed] = await session.query<{ checksum: string; installed_digest: string; has_digest: boolean }>(
      `SELECT checksum, installed_digest, to_regprocedure('aip_installed_functions_digest()') IS NOT NULL AS has_digest
       FROM aip_schema_functions WHERE singleton`,
    );
    let intact = false;
    if (installed?.has_digest) {
      const [row] = await session.query<{ digest: string }>("SELECT aip_installed_functions_digest() AS digest");
      intact = row?.digest === installed.installed_digest;
    }
    if (applied.length > 0 || !installed || installed.checksum !== functions.checksum || !intact) {
      log(`installing functions (${functions.files.length} files)`);
      await session.exec(DROP_FUNCTIONS_SQL);
      for (const file of functions.files) {
        try {
          await session.exec(file.sql);
        } catch (error) {
          throw new MigrationError(`functions/${file.name}: ${(error as Error).message}`);
        }
      }
      await session.query(
        `INSERT INTO aip_schema_functions (singleton, checksum, installed_digest, installed_at)
         VALUES (true, $1, aip_installed_functions_digest(), now())
         ON CONFLICT (singleton) DO UPDATE SET checksum = EXCLUDED.checksum,
           installed_digest = EXCLUDED.installed_digest, installed_at = EXCLUDED.installed_at`,
        [functions.checksum],
      );
      functionsInstalled = true;
    }

    // The tables as the migrations made them: recorded when a migration ran (or by the first
    // runner of a build that records them), compared otherwise.
    const [tables] = await session.query<{ recorded: string | null; digest: string }>(
      "SELECT (SELECT digest FROM aip_schema_tables WHERE singleton) AS recorded, aip_installed_tables_digest() AS digest",
    );
    if (applied.length > 0 || !tables?.recorded) {
      await session.query(
        `INSERT INTO aip_schema_tables (singleton, digest, recorded_at) VALUES (true, $1, now())
         ON CONFLICT (singleton) DO UPDATE SET digest = EXCLUDED.digest, recorded_at = EXCLUDED.recorded_at`,
        [tables?.digest],
      );
    } else if (tables.recorded !== tables.digest) {
      tablesIntact = false;
      log("the registry's tables, columns or indexes differ from what the migrations made: changed by hand? (migrate cannot undo that)");
    }
    await session.exec("COMMIT");
  } catch (error) {
    await session.exec("ROLLBACK").catch(() => {});
    throw error;
  }
  return {
    applied,
    functionsInstalled,
    schemaVersion: migrations.at(-1)?.version ?? 0,
    functionsChecksum: functions.checksum,
    tablesIntact,
  };
}
