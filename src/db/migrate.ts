/**
 * The migration runner (Node only; a Worker never migrates): expand and install, or finalize.
 *
 * Builds serve one database side by side (docs/upgrades.md). Each build's SQL functions are a set
 * installed in a schema of its own (`aip_fn_<checksum>`, src/db/sql-files.ts) and called only by
 * that build's servers, so installing a new set never changes what a running server calls.
 * Tables are shared, so table migrations come in two kinds:
 *
 * - `migrate` applies the pending **expand** migrations (additive: the previous release's
 *   functions keep working on the result) and installs this build's set beside the others. It
 *   never removes anything a running build uses, so it is what `MIGRATE_ON_START` runs.
 * - `migrate --finalize` **contracts**: it drops the function sets of older builds that no server
 *   uses any more (none seen within `seenWithinMs`, none connected), refusing and naming them
 *   otherwise, then applies the pending contract migrations those builds needed to be gone.
 *
 * Each run is one transaction under a database-scoped advisory lock, with explicit lock and
 * statement timeouts: two runners started at once serialize, and a failure leaves the database
 * exactly as it was. Applied migrations are checksum-verified forever after. The tables are
 * recorded per set (tables_digest) after the migrations that made them: a later hand-made change of
 * a table, column or index cannot be repaired by a migration that already ran, so it is reported
 * (MigrationReport.tablesIntact, aip_schema_status), not hidden.
 *
 * Databases migrated by 0.1.0 (before function sets) hold that build's functions in `public` and
 * its bookkeeping in aip_schema_migrations, aip_schema_functions and aip_schema_tables, which its
 * servers verify: they are kept exactly as 0.1.0 reads them (the legacy set, named `public`) until
 * a finalize finds no 0.1.0 server left and drops them.
 */
import { createHash } from "node:crypto";
import { RELEASE } from "./schema-version.js";
import { databaseFailure } from "./sqlstate.js";
import { loadFunctionSet, loadMigrations, schemaVersionOf, type FunctionSet, type Migration } from "./sql-files.js";

/** A single database session that can run multi-statement SQL (migrations need one session). */
export interface MigrationSession {
  exec(sql: string): Promise<void>;
  query<R extends Record<string, unknown> = Record<string, unknown>>(text: string, params?: readonly unknown[]): Promise<R[]>;
}

export interface MigrateOptions {
  log?: (line: string) => void;
  migrations?: Migration[];
  functions?: FunctionSet;
  /** Recorded with the set (which release installed it): this build's by default. */
  release?: string;
  /** Contract: drop the sets of older builds no longer in use, then apply pending contract migrations. */
  finalize?: boolean;
  /** With `finalize`: a set whose servers were seen this recently is in use (default 15 minutes). */
  seenWithinMs?: number;
  /** With `finalize`: drop older sets even while they are in use (they are named in the log). */
  force?: boolean;
  /**
   * The group roles' names on a database's first migration: `<rolePrefix>_aip_data` and
   * `<rolePrefix>_aip_control` instead of the database's name (registryRoleNames). Recorded then;
   * a later run naming another prefix is refused.
   */
  rolePrefix?: string;
}

type FunctionSetReport = {
  name: string;
  release: string;
  /** Its servers' latest report (null: never seen). */
  last_seen: string | null;
  /** Sessions connected now under its application_name (Node servers). */
  sessions: number;
};

export interface MigrationReport {
  /** Expand migrations applied by this run. */
  applied: string[];
  /** Contract migrations applied by this run (finalize only). */
  contracted: string[];
  /** Contract migrations known to this build and not applied yet: `migrate --finalize` applies them. */
  pendingContract: string[];
  /** This build's function set (its schema). */
  functionSet: string;
  /** Whether this run installed (or repaired) this build's set. */
  functionsInstalled: boolean;
  /** The other sets installed beside this build's, after this run. */
  otherSets: FunctionSetReport[];
  /** Sets dropped by this run (finalize only). */
  droppedSets: string[];
  /** The database's schema version (its newest expand migration) after this run. */
  schemaVersion: number;
  functionsChecksum: string;
  /** False when the tables, columns or indexes differ from what the migrations made (changed by hand). */
  tablesIntact: boolean;
  /** This database's own group roles (login roles of its servers must be members). */
  roles: { data: string; control: string };
}

export class MigrationError extends Error {}

/** "AIP_CREG": the reference implementation's migration lock key. */
const MIGRATION_LOCK_KEY = "4704379655846774087";

/** The legacy (0.1.0) set: its functions live in `public`, its servers name themselves "aip-registry". */
const LEGACY_SET = "public";
const LEGACY_APPLICATION_NAME = "aip-registry";
const LEGACY_ROLES = ["aip_registry_data", "aip_registry_control"];

/** What a Node server of a set calls its sessions (pg_stat_activity.application_name). */
export const applicationNameOf = (set: string) => (set === LEGACY_SET ? LEGACY_APPLICATION_NAME : `aip-registry/${set}`);

const DEFAULT_SEEN_WITHIN_MS = 15 * 60_000;

/** A database name used as it is in its roles' names, and a role prefix. */
const ROLE_PREFIX = /^[a-z_][a-z0-9_]{0,39}$/;

/**
 * The migrator's own tables (aip_schema_*, which no table digest covers). Created when missing,
 * never changed in place: a later release that needs more adds tables of its own.
 */
const BOOKKEEPING_SQL = `
CREATE TABLE IF NOT EXISTS aip_schema_applied (
  version integer PRIMARY KEY,
  name text NOT NULL,
  checksum text NOT NULL,
  kind text NOT NULL CHECK (kind IN ('expand', 'contract')),
  supports_from integer,
  applied_at timestamptz(3) NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS aip_schema_sets (
  name text PRIMARY KEY,
  checksum text NOT NULL,
  installed_digest text NOT NULL,
  tables_digest text,
  schema_version integer NOT NULL,
  release text NOT NULL,
  legacy boolean NOT NULL DEFAULT false,
  installed_at timestamptz(3) NOT NULL DEFAULT clock_timestamp());
CREATE TABLE IF NOT EXISTS aip_schema_sightings (
  set_name text NOT NULL,
  instance_id text NOT NULL,
  runtime text NOT NULL,
  release text NOT NULL,
  first_seen timestamptz(3) NOT NULL,
  last_seen timestamptz(3) NOT NULL,
  PRIMARY KEY (set_name, instance_id));
CREATE TABLE IF NOT EXISTS aip_schema_roles (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  data_role text NOT NULL,
  control_role text NOT NULL);
CREATE TABLE IF NOT EXISTS aip_schema_retired (
  name text NOT NULL,
  release text NOT NULL,
  retired_at timestamptz(3) NOT NULL DEFAULT now());
REVOKE ALL ON aip_schema_applied, aip_schema_sets, aip_schema_sightings, aip_schema_roles, aip_schema_retired FROM PUBLIC;
`;

const sha256 = (text: string) => createHash("sha256").update(text, "utf8").digest("hex");
const ident = (name: string) => `"${name.replaceAll('"', '""')}"`;

/**
 * This database's group roles: `<database>_aip_data` and `<database>_aip_control` (a digest
 * stands in for a name that is not a plain lower-case identifier). Roles are cluster-wide: names of
 * their own keep one registry's login roles from executing anything in another's database on the
 * same server. They never collide with 0.1.0's shared `aip_registry_data`/`_control`.
 */
export function registryRoleNames(database: string): { data: string; control: string } {
  const base = ROLE_PREFIX.test(database)
    ? database
    : `${database
        .toLowerCase()
        .replace(/[^a-z0-9_]+/g, "_")
        .slice(0, 30)}_${sha256(database).slice(0, 8)}`;
  return { data: `${base}_aip_data`, control: `${base}_aip_control` };
}

/**
 * How long a migration's DDL may wait for a table lock before the run steps back and tries again:
 * a statement waiting for an exclusive lock makes every later request on that table queue behind
 * it, so the wait must stay short (the entry points give up after their own 2 s lock_timeout).
 */
const DDL_LOCK_TIMEOUT = "3s";
/** Attempts after a lock wait ran out, spaced 250 ms doubling to 4 s (about a minute in all). */
const LOCK_RETRIES = 18;

export async function migrate(session: MigrationSession, options: MigrateOptions = {}): Promise<MigrationReport> {
  const log = options.log ?? (() => {});
  for (let attempt = 1; ; attempt++) {
    try {
      return await migrateOnce(session, options, log);
    } catch (error) {
      if (!(error instanceof LockWaitExpired) || attempt > LOCK_RETRIES) throw error instanceof LockWaitExpired ? error.cause : error;
      const pause = Math.min(4000, 250 * 2 ** (attempt - 1));
      log(`a table lock the migration needs is held by running work: nothing was changed; trying again in ${pause} ms`);
      await new Promise((resolve) => setTimeout(resolve, pause));
    }
  }
}

/** A DDL statement's lock wait ran out (after the run held the migration lock): the run is retried. */
class LockWaitExpired extends Error {}

/**
 * Two transactions, each under the migration lock: the table migrations (their exclusive locks
 * are held only as long as the DDL takes), then this build's set (installing functions locks no
 * table) and, with `finalize`, the contract step. Each commits whole or not at all; between them
 * the database serves every installed set, and a run that fails in the second is simply run again.
 */
async function migrateOnce(session: MigrationSession, options: MigrateOptions, log: (line: string) => void): Promise<MigrationReport> {
  const migrations = options.migrations ?? (await loadMigrations());
  const functions = options.functions ?? (await loadFunctionSet());
  const buildVersion = schemaVersionOf(migrations);

  const { applied, roles } = await inMigrationTransaction(session, async () => {
    await session.exec(BOOKKEEPING_SQL);
    const legacy = await adoptLegacyBookkeeping(session);
    const pending = await pendingExpandMigrations(session, migrations, buildVersion, log);
    const roles = await ensureRoles(session, legacy, options.rolePrefix, log);
    const applied = await applyMigrations(session, pending, log);
    if (applied.length > 0) await recordTables(session, null, true, log);
    return { applied, roles };
  });

  return inMigrationTransaction(session, async () => {
    const functionsInstalled = await installFunctionSet(session, functions, buildVersion, options.release ?? RELEASE, log);
    let droppedSets: string[] = [];
    let contracted: string[] = [];
    if (options.finalize) {
      droppedSets = await dropUnusedSets(session, functions.name, buildVersion, options, log);
      contracted = await applyContractMigrations(session, migrations, log);
      if (droppedSets.includes(LEGACY_SET)) await dropLegacy(session, log);
    }
    const tablesIntact = await recordTables(session, functions.name, contracted.length > 0, log);
    const appliedVersions = new Set((await session.query<{ version: number }>("SELECT version FROM aip_schema_applied")).map((r) => r.version));
    const [level] = await session.query<{ version: number | null }>("SELECT max(version) AS version FROM aip_schema_applied WHERE kind = 'expand'");
    const otherSets = await setsInUse(session, functions.name, DEFAULT_SEEN_WITHIN_MS);
    return {
      applied,
      contracted,
      pendingContract: migrations.filter((m) => m.kind === "contract" && !appliedVersions.has(m.version)).map((m) => m.name),
      functionSet: functions.name,
      functionsInstalled,
      otherSets: otherSets.map(({ name, release, last_seen, sessions }) => ({ name, release, last_seen, sessions })),
      droppedSets,
      schemaVersion: level?.version ?? 0,
      functionsChecksum: functions.checksum,
      tablesIntact,
      roles,
    };
  });
}

/** `work` in one transaction under the migration lock, with short lock waits for its DDL. */
async function inMigrationTransaction<T>(session: MigrationSession, work: () => Promise<T>): Promise<T> {
  await session.exec("BEGIN");
  let locked = false;
  try {
    await session.exec("SET LOCAL lock_timeout = '60s'; SET LOCAL statement_timeout = '15min'");
    await session.query(`SELECT pg_advisory_xact_lock(${MIGRATION_LOCK_KEY})`);
    locked = true;
    // Tables live in public whatever the session's default path says ("$user" first).
    await session.exec(`SET LOCAL lock_timeout = '${DDL_LOCK_TIMEOUT}'; SET LOCAL search_path = public, pg_temp`);
    const result = await work();
    await session.exec("COMMIT");
    return result;
  } catch (error) {
    await session.exec("ROLLBACK").catch(() => {});
    // A lock wait that ran out (or a deadlock) is running work's, not the migration's fault: retried.
    if (locked && databaseFailure(error) === "contention") throw new LockWaitExpired("lock wait expired", { cause: error });
    throw error;
  }
}

/**
 * A database migrated by 0.1.0: its applied migrations move into aip_schema_applied (the legacy
 * table stays as 0.1.0's servers read it), and its functions in `public` become the legacy set.
 * Returns whether the legacy set is installed.
 */
async function adoptLegacyBookkeeping(session: MigrationSession): Promise<boolean> {
  const [found] = await session.query<{ migrations: boolean; functions: boolean }>(
    "SELECT to_regclass('aip_schema_migrations') IS NOT NULL AS migrations, to_regclass('aip_schema_functions') IS NOT NULL AS functions",
  );
  if (found?.migrations) {
    await session.query(
      `INSERT INTO aip_schema_applied (version, name, checksum, kind, applied_at)
       SELECT version, name, checksum, 'expand', applied_at FROM aip_schema_migrations ON CONFLICT (version) DO NOTHING`,
    );
  }
  if (!found?.functions) return false;
  const [row] = await session.query<{ checksum: string; installed_digest: string; version: number }>(
    `SELECT f.checksum, f.installed_digest, (SELECT max(version) FROM aip_schema_migrations) AS version
     FROM aip_schema_functions f
     WHERE f.singleton AND to_regprocedure('public.aip_installed_functions_digest()') IS NOT NULL`,
  );
  if (!row) return false;
  await session.query(
    `INSERT INTO aip_schema_sets (name, checksum, installed_digest, schema_version, release, legacy, installed_at)
     VALUES ($1, $2, $3, $4, '0.1.0', true, '-infinity') ON CONFLICT (name) DO NOTHING`,
    [LEGACY_SET, row.checksum, row.installed_digest, row.version],
  );
  return true;
}

/** The expand migrations this build has and the database lacks; refuses what cannot be served. */
async function pendingExpandMigrations(
  session: MigrationSession,
  migrations: Migration[],
  buildVersion: number,
  log: (line: string) => void,
): Promise<Migration[]> {
  const recorded = await session.query<{ version: number; name: string; checksum: string; supports_from: number | null }>(
    "SELECT version, name, checksum, supports_from FROM aip_schema_applied ORDER BY version",
  );
  const known = new Map(migrations.map((m) => [m.version, m]));
  const unknown = recorded.filter((row) => !known.has(row.version));
  for (const row of recorded) {
    const migration = known.get(row.version);
    if (migration && migration.checksum !== row.checksum) {
      throw new MigrationError(`migration ${row.version} (${row.name}) changed after it was applied (checksum mismatch)`);
    }
  }
  const floor = Math.max(0, ...recorded.map((row) => row.supports_from ?? 0));
  if (floor > buildVersion) {
    throw new MigrationError(
      `the database was finalized for builds of schema version ${floor} and later; this build is at ${buildVersion} and cannot serve it: deploy a newer build`,
    );
  }
  const done = new Set(recorded.map((row) => row.version));
  const pending = migrations.filter((m) => m.kind === "expand" && !done.has(m.version));
  if (pending.length > 0 && unknown.length > 0) {
    throw new MigrationError(
      `the database has migration ${unknown[0]!.version} (${unknown[0]!.name}) that this code does not know, and this code has ${pending[0]!.name} that the database lacks: the two have diverged`,
    );
  }
  if (unknown.length > 0)
    log(`the database is newer than this build (migration ${unknown.at(-1)!.name}): installing this build's functions beside the newer ones`);
  return pending;
}

async function applyMigrations(session: MigrationSession, pending: Migration[], log: (line: string) => void): Promise<string[]> {
  const applied: string[] = [];
  for (const migration of pending) {
    log(`applying migration ${migration.version} ${migration.name}`);
    await session.exec(migration.sql);
    await session.query("INSERT INTO aip_schema_applied (version, name, checksum, kind) VALUES ($1, $2, $3, 'expand')", [
      migration.version,
      migration.name,
      migration.checksum,
    ]);
    applied.push(migration.name);
  }
  return applied;
}

/**
 * This database's group roles, made on its first migration by this mechanism and recorded. Only
 * they (and the owner) may connect: CONNECT is revoked from PUBLIC. While 0.1.0's set is installed,
 * its shared roles keep CONNECT too, so its servers keep serving until finalize.
 */
async function ensureRoles(
  session: MigrationSession,
  legacy: boolean,
  prefix: string | undefined,
  log: (line: string) => void,
): Promise<{ data: string; control: string }> {
  if (prefix !== undefined && !ROLE_PREFIX.test(prefix))
    throw new MigrationError(`the role prefix must be a lower-case identifier of at most 40 characters, not "${prefix}"`);
  let [row] = await session.query<{ data_role: string; control_role: string }>("SELECT data_role, control_role FROM aip_schema_roles WHERE singleton");
  if (row && prefix !== undefined && row.data_role !== registryRoleNames(prefix).data) {
    throw new MigrationError(
      `this database's roles are ${row.data_role} and ${row.control_role} (named at its first migration), not those of prefix ${prefix}`,
    );
  }
  if (!row) {
    const [db] = await session.query<{ name: string }>("SELECT current_database() AS name");
    const names = registryRoleNames(prefix ?? db!.name);
    row = { data_role: names.data, control_role: names.control };
    await session.query("INSERT INTO aip_schema_roles (singleton, data_role, control_role) VALUES (true, $1, $2)", [names.data, names.control]);
    log(`this database's roles: ${names.data} (data plane), ${names.control} (control plane); login roles of its servers must be members`);
  }
  for (const role of [row.data_role, row.control_role]) {
    // Roles are cluster-wide: two databases migrating at once may race to make the same one.
    await session.exec(`DO $$ BEGIN
      IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = ${literal(role)}) THEN
        CREATE ROLE ${ident(role)} NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOREPLICATION;
      END IF;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
    END $$`);
  }
  const connect = [row.data_role, row.control_role, ...(legacy ? LEGACY_ROLES : [])];
  await session.exec(`DO $$ BEGIN
    EXECUTE format('REVOKE CONNECT ON DATABASE %I FROM PUBLIC', current_database());
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO ${connect.map((r) => ident(r).replaceAll("'", "''")).join(", ")}', current_database());
  END $$`);
  return { data: row.data_role, control: row.control_role };
}

const literal = (text: string) => `'${text.replaceAll("'", "''")}'`;

/**
 * Installs this build's set in its schema unless it is there and intact. Only this set's schema is
 * touched: every other set stays exactly as its build installed it.
 */
async function installFunctionSet(
  session: MigrationSession,
  functions: FunctionSet,
  buildVersion: number,
  release: string,
  log: (line: string) => void,
): Promise<boolean> {
  const [installed] = await session.query<{ installed_digest: string; present: boolean }>(
    `SELECT s.installed_digest, to_regprocedure($2) IS NOT NULL AS present FROM aip_schema_sets s WHERE s.name = $1`,
    [functions.name, `${functions.name}.aip_installed_functions_digest()`],
  );
  if (installed?.present) {
    const [row] = await session.query<{ digest: string }>(`SELECT ${ident(functions.name)}.aip_installed_functions_digest() AS digest`);
    if (row?.digest === installed.installed_digest) return false;
    log(`function set ${functions.name} was changed after it was installed: reinstalling it`);
  }
  log(`installing function set ${functions.name} (${functions.files.length} files)`);
  await session.exec(`DROP SCHEMA IF EXISTS ${ident(functions.name)} CASCADE; CREATE SCHEMA ${ident(functions.name)}`);
  // Unqualified names in the files resolve to, and are created in, the set's schema; entry points
  // keep that path (SET search_path FROM CURRENT). pg_catalog is searched first implicitly and
  // pg_temp last explicitly, so no temporary object can shadow a table or function.
  await session.exec(`SET LOCAL search_path = ${ident(functions.name)}, public, pg_temp`);
  for (const file of functions.files) {
    try {
      await session.exec(file.sql);
    } catch (error) {
      throw new MigrationError(`functions/${file.name}: ${(error as Error).message}`);
    }
  }
  await session.exec("SET LOCAL search_path = public, pg_temp");
  const set = ident(functions.name);
  await session.query(
    `INSERT INTO aip_schema_sets (name, checksum, installed_digest, schema_version, release, installed_at)
     VALUES ($1, $2, ${set}.aip_installed_functions_digest(), $3, $4, clock_timestamp())
     ON CONFLICT (name) DO UPDATE SET checksum = EXCLUDED.checksum, installed_digest = EXCLUDED.installed_digest,
       schema_version = EXCLUDED.schema_version, release = EXCLUDED.release`,
    [functions.name, functions.checksum, buildVersion, release],
  );
  return true;
}

type SetUse = FunctionSetReport & {
  legacy: boolean;
  schema_version: number;
  /** Installed before `own` (0.1.0's set always is). */
  older: boolean;
  seen_recently: boolean;
};

/** Every set but `own`, with its latest sighting and the sessions connected under its name now. */
async function setsInUse(session: MigrationSession, own: string, seenWithinMs: number): Promise<SetUse[]> {
  return session.query<SetUse>(
    `SELECT s.name, s.release, s.legacy, s.schema_version,
            coalesce(s.installed_at < (SELECT o.installed_at FROM aip_schema_sets o WHERE o.name = $1), true) AS older,
            to_char(g.last_seen AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS last_seen,
            coalesce(g.last_seen > now() - make_interval(secs => $2::double precision / 1000), false) AS seen_recently,
            (SELECT count(*)::int FROM pg_stat_activity a
             WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
               AND a.application_name = CASE WHEN s.legacy THEN $3 ELSE 'aip-registry/' || s.name END) AS sessions
     FROM aip_schema_sets s
     LEFT JOIN LATERAL (SELECT max(last_seen) AS last_seen FROM aip_schema_sightings WHERE set_name = s.name) g ON true
     WHERE s.name <> $1
     ORDER BY s.installed_at, s.name`,
    [own, seenWithinMs, LEGACY_APPLICATION_NAME],
  );
}

/**
 * Drops the sets installed before this build's that no server uses, and refuses while one does
 * (naming it), unless forced. Sets of newer builds (a higher schema version, or installed after
 * this build's) are never this build's to drop.
 */
async function dropUnusedSets(
  session: MigrationSession,
  own: string,
  buildVersion: number,
  options: MigrateOptions,
  log: (line: string) => void,
): Promise<string[]> {
  const older = (await setsInUse(session, own, options.seenWithinMs ?? DEFAULT_SEEN_WITHIN_MS)).filter(
    (set) => set.schema_version <= buildVersion && set.older,
  );
  const busy = older.filter((set) => set.seen_recently || set.sessions > 0);
  const describe = (set: SetUse) => `${set.name} (release ${set.release}: ${set.sessions} session(s) connected, last seen ${set.last_seen ?? "never"})`;
  if (busy.length > 0 && !options.force) {
    throw new MigrationError(
      `refusing to finalize: servers of older builds are still running: ${busy.map(describe).join("; ")}. Stop them (or wait until none was seen for the window), then run finalize again`,
    );
  }
  for (const set of busy) log(`forced: dropping ${describe(set)}`);
  for (const set of older) {
    log(`dropping function set ${set.name} (release ${set.release})`);
    if (!set.legacy) await session.exec(`DROP SCHEMA ${ident(set.name)} CASCADE`);
    await session.query("DELETE FROM aip_schema_sightings WHERE set_name = $1", [set.name]);
    await session.query("DELETE FROM aip_schema_sets WHERE name = $1", [set.name]);
    // When it went: wire formats only its servers handed out are honoured a while longer (a page
    // walk in flight at finalize), and doctor can tell.
    await session.query("INSERT INTO aip_schema_retired (name, release) VALUES ($1, $2)", [set.name, set.release]);
  }
  return older.map((set) => set.name);
}

/** 0.1.0's functions in `public`, its bookkeeping, and the CONNECT its shared roles kept. */
async function dropLegacy(session: MigrationSession, log: (line: string) => void): Promise<void> {
  log("dropping 0.1.0's functions from public, its bookkeeping, and CONNECT of its shared roles");
  await session.exec(`
    DO $$
    DECLARE f regprocedure;
    BEGIN
      FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
               WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'aip\\_%' LOOP
        EXECUTE format('DROP FUNCTION %s', f);
      END LOOP;
      IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'aip_registry_data') THEN
        EXECUTE format('REVOKE CONNECT ON DATABASE %I FROM aip_registry_data, aip_registry_control', current_database());
      END IF;
    END
    $$;
    DROP TABLE IF EXISTS aip_schema_migrations, aip_schema_functions, aip_schema_tables;`);
}

/**
 * The pending contract migrations every remaining set supports (supports-from at or below the
 * lowest schema version among them); the others wait for a later finalize.
 */
async function applyContractMigrations(session: MigrationSession, migrations: Migration[], log: (line: string) => void): Promise<string[]> {
  const done = new Set((await session.query<{ version: number }>("SELECT version FROM aip_schema_applied")).map((r) => r.version));
  const [lowest] = await session.query<{ version: number }>("SELECT min(schema_version) AS version FROM aip_schema_sets");
  const contracted: string[] = [];
  for (const migration of migrations) {
    if (migration.kind !== "contract" || done.has(migration.version)) continue;
    if ((migration.supportsFrom ?? Number.POSITIVE_INFINITY) > (lowest?.version ?? 0)) {
      log(`contract migration ${migration.name} waits: a set of a build below schema version ${migration.supportsFrom} is still installed`);
      continue;
    }
    log(`applying contract migration ${migration.version} ${migration.name}`);
    await session.exec(migration.sql);
    await session.query("INSERT INTO aip_schema_applied (version, name, checksum, kind, supports_from) VALUES ($1, $2, $3, 'contract', $4)", [
      migration.version,
      migration.name,
      migration.checksum,
      migration.supportsFrom,
    ]);
    contracted.push(migration.name);
  }
  return contracted;
}

/**
 * The tables as the migrations made them, recorded per set (each set digests with its own
 * function): when a migration ran, for every set (and 0.1.0's own record, which its servers
 * read); otherwise only for a set that has no record yet, and only when another set vouches that
 * the tables are intact. Returns whether the tables match this build's record.
 */
async function recordTables(session: MigrationSession, own: string | null, migrated: boolean, log: (line: string) => void): Promise<boolean> {
  const sets = await session.query<{ name: string; legacy: boolean; tables_digest: string | null }>(
    "SELECT name, legacy, tables_digest FROM aip_schema_sets ORDER BY installed_at",
  );
  const current = async (set: { name: string; legacy: boolean }) =>
    (await session.query<{ digest: string }>(`SELECT ${set.legacy ? "public" : ident(set.name)}.aip_installed_tables_digest() AS digest`))[0]!.digest;
  if (migrated) {
    for (const set of sets) {
      const digest = await current(set);
      if (set.legacy) await session.query("UPDATE aip_schema_tables SET digest = $1, recorded_at = now() WHERE singleton", [digest]);
      else await session.query("UPDATE aip_schema_sets SET tables_digest = $2 WHERE name = $1", [set.name, digest]);
    }
    return true;
  }
  const mine = sets.find((set) => set.name === own)!;
  if (mine.tables_digest !== null) {
    const intact = mine.tables_digest === (await current(mine));
    if (!intact) log("the registry's tables, columns or indexes differ from what the migrations made: changed by hand? (migrate cannot undo that)");
    return intact;
  }
  let vouched = !sets.some((set) => !set.legacy && set.name !== own);
  for (const set of sets) {
    if (set.name === own || set.legacy || set.tables_digest === null) continue;
    if (set.tables_digest === (await current(set))) vouched = true;
  }
  if (!vouched) {
    log("the registry's tables differ from what the migrations made (changed by hand?): this build's set records no tables digest");
    return false;
  }
  await session.query("UPDATE aip_schema_sets SET tables_digest = $2 WHERE name = $1", [own, await current(mine)]);
  return true;
}
