/**
 * `migrate` (SQL: the control database, or the embedded PGlite under the data directory) and
 * `serve` (the Node server, exactly as `npm start` runs it).
 */
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { MigrationError, migrate as runMigrations, type MigrationReport } from "../db/migrate.js";
import { redactUrl, withPgSession } from "../db/pg.js";
import { CLI_CONNECT_TIMEOUT_MS } from "../limits.js";
import { openPglite, pgliteSession } from "../db/pglite.js";
import { startServer } from "../entry/node.js";
import { pgliteOpenFailure } from "../node/data-dir-check.js";
import { lockDataDir } from "../node/data-dir-lock.js";
import { serveUntilSignal } from "../node/signals.js";
import { EXIT, dataDir, str, type CommandContext } from "./context.js";
import { isConnectionFailure, RegistryUnreachable } from "./errors.js";

export async function migrate(ctx: CommandContext): Promise<number> {
  const { io } = ctx;
  const url = str(ctx.values, "database-url") ?? ctx.env.CONTROL_DATABASE_URL ?? ctx.env.DATABASE_URL;
  let report: MigrationReport;
  if (url) {
    io.err(`migrating ${redactUrl(url)}`);
    try {
      report = await withPgSession(url, (session) => runMigrations(session, { log: io.err }), { connectionTimeoutMs: CLI_CONNECT_TIMEOUT_MS });
    } catch (error) {
      if ((error as { code?: unknown }).code === "42501") {
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
        report = await runMigrations(pgliteSession(db), { log: io.err });
      } finally {
        await db.close();
      }
    } finally {
      await lock.release();
    }
  }
  if (ctx.values.json === true) {
    io.out(JSON.stringify(report));
  } else if (report.applied.length === 0 && !report.functionsInstalled) {
    io.out(`schema version ${report.schemaVersion}: up to date`);
  } else {
    const applied = report.applied.length ? `applied ${report.applied.join(", ")}` : "no migration to apply";
    io.out(`schema version ${report.schemaVersion}: ${applied}; functions ${report.functionsInstalled ? "installed" : "unchanged"}`);
  }
  return EXIT.ok;
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
