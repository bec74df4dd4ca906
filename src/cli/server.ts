/**
 * `migrate` (SQL: the control database, or the embedded PGlite under the data directory) and
 * `serve` (the Node server, exactly as `npm start` runs it).
 */
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { MigrationError, migrate as runMigrations, type MigrateOptions, type MigrationReport } from "../db/migrate.js";
import { redactUrl, withPgSession } from "../db/pg.js";
import { databaseFailure } from "../db/sqlstate.js";
import { CLI_CONNECT_TIMEOUT_MS } from "../limits.js";
import { openPglite, pgliteSession } from "../db/pglite.js";
import { startServer } from "../entry/node.js";
import { pgliteOpenFailure } from "../node/data-dir-check.js";
import { lockDataDir } from "../node/data-dir-lock.js";
import { serveUntilSignal } from "../node/signals.js";
import { EXIT, UsageError, dataDir, durationMs, str, type CommandContext } from "./context.js";
import { isConnectionFailure, RegistryUnreachable } from "./errors.js";

export async function migrate(ctx: CommandContext): Promise<number> {
  const { io } = ctx;
  const url = str(ctx.values, "database-url") ?? ctx.env.CONTROL_DATABASE_URL ?? ctx.env.DATABASE_URL;
  const options = migrateOptions(ctx);
  let report: MigrationReport;
  if (url) {
    io.err(`migrating ${redactUrl(url)}`);
    try {
      report = await withPgSession(url, (session) => runMigrations(session, options), { connectionTimeoutMs: CLI_CONNECT_TIMEOUT_MS });
    } catch (error) {
      if (databaseFailure(error) === "permission") {
        const role = new URL(url).username || "this role";
        throw new MigrationError(
          `${role} may not install the schema (${(error as Error).message}): migrations run as the database owner; pass the owner's URL with --database-url (docs/deploy.md)`,
        );
      }
      throw isConnectionFailure(error) ? new RegistryUnreachable(redactUrl(url), error, "the database", CLI_CONNECT_TIMEOUT_MS) : error;
    }
  } else {
    const dir = join(dataDir(ctx), "pglite");
    // Fails, naming the holder, while a server (or another migrate) has the directory open.
    const lock = await lockDataDir(dataDir(ctx), { command: "aip-registry migrate" });
    try {
      io.err(`migrating the embedded PGlite database at ${dir}`);
      await mkdir(dir, { recursive: true });
      const db = await openPglite(dir).catch((error: unknown) => {
        throw pgliteOpenFailure(dataDir(ctx), error);
      });
      try {
        report = await runMigrations(pgliteSession(db), options);
      } finally {
        await db.close();
      }
    } finally {
      await lock.release();
    }
  }
  if (ctx.values.json === true) io.out(JSON.stringify(report));
  else io.out(describeMigration(report));
  return EXIT.ok;
}

function migrateOptions(ctx: CommandContext): MigrateOptions {
  const finalize = ctx.values.finalize === true;
  const seenWithin = str(ctx.values, "seen-within");
  if (!finalize && (seenWithin !== undefined || ctx.values.force === true)) throw new UsageError("--seen-within and --force go with --finalize");
  const seenWithinMs = seenWithin === undefined ? undefined : durationMs(seenWithin);
  if (seenWithin !== undefined && seenWithinMs === undefined) throw new UsageError(`--seen-within must be a duration (90s, 15m, 2h, 1d), not "${seenWithin}"`);
  const rolePrefix = str(ctx.values, "role-prefix");
  return {
    log: ctx.io.err,
    ...(rolePrefix !== undefined ? { rolePrefix } : {}),
    ...(finalize ? { finalize, force: ctx.values.force === true } : {}),
    ...(seenWithinMs !== undefined ? { seenWithinMs } : {}),
  };
}

/** What a run did, in a few lines: the schema, this build's set, the other sets, what finalize removed. */
function describeMigration(report: MigrationReport): string {
  const lines: string[] = [];
  if (report.applied.length === 0 && !report.functionsInstalled && report.contracted.length === 0 && report.droppedSets.length === 0) {
    lines.push(`schema version ${report.schemaVersion}: up to date`);
  } else {
    const applied = report.applied.length ? `applied ${report.applied.join(", ")}` : "no migration to apply";
    lines.push(`schema version ${report.schemaVersion}: ${applied}; functions ${report.functionsInstalled ? "installed" : "unchanged"}`);
  }
  lines.push(`function set ${report.functionSet} (this build); roles ${report.roles.data}, ${report.roles.control}`);
  for (const set of report.droppedSets) lines.push(`dropped function set ${set}`);
  for (const name of report.contracted) lines.push(`contracted: ${name}`);
  for (const set of report.otherSets) {
    lines.push(
      `also installed: function set ${set.name} (release ${set.release}; ${set.sessions} session(s) connected, last seen ${set.last_seen ?? "never"})`,
    );
  }
  if (report.pendingContract.length > 0) lines.push(`waiting for migrate --finalize: ${report.pendingContract.join(", ")}`);
  return lines.join("\n");
}

export async function serve(ctx: CommandContext): Promise<number> {
  const env = { ...ctx.env };
  const overrides = { port: "PORT", host: "HOST", "data-dir": "DATA_DIR", "database-url": "DATABASE_URL" } as const;
  for (const [option, variable] of Object.entries(overrides)) {
    const value = str(ctx.values, option);
    if (value !== undefined) env[variable] = value;
  }
  // Until SIGTERM or SIGINT (or, under npm, the exit of the process that started it), then the
  // graceful stop (src/node/signals.ts): exit 0 once drained.
  return serveUntilSignal(() => startServer(env, ctx.io.out), ctx.env);
}
