/**
 * One process at a time on an embedded data directory (PGlite under DATA_DIR/pglite).
 *
 * PGlite runs PostgreSQL inside this process and does not lock its files: two processes on one
 * directory each serve a diverging copy, and after a restart one process's writes are gone. So a
 * process that opens the directory (the server, `aip-registry migrate`) first takes an exclusive
 * lock on `DATA_DIR/registry.lock` and keeps it for its whole life.
 *
 * Why this mechanism: the lock must be an operating-system lock, released by the kernel whatever
 * way the holder ends (a PID file or a lock directory survives `kill -9` and then needs a
 * staleness guess; a liveness socket in the directory has to be unlinked to be reclaimed, and
 * two processes reclaiming at once can both win). Node has no flock(2) in core, and the npm
 * packages that provide it build native code. So a tiny helper process holds flock(2) for us:
 * util-linux's or busybox's `flock` (Linux), else `perl`'s built-in flock (macOS, and every
 * Debian or Ubuntu image, where perl-base is essential). Both are flock(2) on the same file, so
 * they exclude each other. The helper is started in its own process group (a terminal's Ctrl-C
 * must not release the lock while we are still closing the database) and holds the lock until
 * its stdin reaches end of file, which the kernel delivers when this process exits for any
 * reason, `kill -9` included: a dead holder never leaves the directory locked.
 *
 * The lock file also says who holds it (PID, command, URL), for the message the next process
 * prints. That text is information only; the flock is the lock.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { checkDataDir, DataDirError } from "./data-dir-check.js";

export const LOCK_FILE = "registry.lock";

/** Who holds a data directory: written into the lock file by the holder. */
export interface LockHolder {
  pid: number;
  /** What the holder is doing, e.g. `aip-registry serve` or `aip-registry migrate`. */
  command: string;
  /** The URL a server holder listens on. */
  url?: string;
  since?: string;
}

/** The directory is held by another live process: exit non-zero with this message. */
export class DataDirLocked extends Error {
  override name = "DataDirLocked";
  constructor(
    readonly dir: string,
    readonly holder: LockHolder | null,
  ) {
    const who = holder
      ? `PID ${holder.pid} (${holder.command}${holder.url ? ` at ${holder.url}` : ""}${holder.since ? `, since ${holder.since}` : ""})`
      : "another process";
    super(`DATA_DIR=${dir} is in use by ${who}: stop it first, or set DATA_DIR to another directory (or DATABASE_URL for PostgreSQL)`);
  }
}

export interface DataDirLock {
  readonly dir: string;
  /** Releases the lock (idempotent). */
  release(): Promise<void>;
}

/** The helpers, in order of preference; each prints `locked` once it holds the lock. */
export const LOCK_HELPERS = {
  // -n: fail at once (exit 1) when held; the command keeps the locked descriptor open until
  // stdin ends.
  flock: (path: string) => ["flock", ["-n", "-x", path, "sh", "-c", "echo locked; exec cat >/dev/null"]] as const,
  perl: (path: string) =>
    [
      "perl",
      [
        "-e",
        `use Fcntl qw(:DEFAULT :flock);
         sysopen(my $f, $ARGV[0], O_RDWR|O_CREAT, 0600) or do { print STDERR "cannot open $ARGV[0]: $!\\n"; exit 2 };
         flock($f, LOCK_EX|LOCK_NB) or exit($!{EWOULDBLOCK} ? 1 : 3);
         $| = 1; print "locked\\n";
         1 while sysread(STDIN, my $b, 4096);`,
        path,
      ],
    ] as const,
};
export type LockHelper = keyof typeof LOCK_HELPERS;

type Attempt = { outcome: "locked"; child: ChildProcess } | { outcome: "held" } | { outcome: "missing" } | { outcome: "failed"; reason: string };

function attempt(helper: LockHelper, path: string): Promise<Attempt> {
  const [command, args] = LOCK_HELPERS[helper](path);
  return new Promise((resolvePromise) => {
    const child = spawn(command, [...args], { stdio: ["pipe", "pipe", "pipe"], detached: true });
    let stdout = "";
    let stderr = "";
    const done = (result: Attempt) => {
      child.removeAllListeners("exit");
      child.removeAllListeners("error");
      resolvePromise(result);
    };
    child.once("error", (error: NodeJS.ErrnoException) =>
      done(error.code === "ENOENT" ? { outcome: "missing" } : { outcome: "failed", reason: error.message }),
    );
    child.stderr?.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    child.stdout?.on("data", (chunk: Buffer) => {
      stdout += chunk.toString();
      if (stdout.includes("locked\n")) done({ outcome: "locked", child });
    });
    child.once("exit", (code) => {
      if (code === 1) done({ outcome: "held" });
      else done({ outcome: "failed", reason: `${command} exited with ${code}${stderr.trim() ? `: ${stderr.trim()}` : ""}` });
    });
  });
}

async function readHolder(path: string): Promise<LockHolder | null> {
  try {
    const parsed = JSON.parse(await readFile(path, "utf8")) as LockHolder;
    return typeof parsed.pid === "number" ? parsed : null;
  } catch {
    return null;
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Takes the exclusive lock on `dir` (created if missing) for this process, or throws
 * DataDirLocked naming the live holder. `onLost` runs if the helper dies while we hold the lock
 * (someone killed it): the caller should stop using the directory.
 */
export async function lockDataDir(
  dir: string,
  holder: Omit<LockHolder, "pid" | "since">,
  options: { helpers?: LockHelper[]; onLost?: () => void } = {},
): Promise<DataDirLock> {
  // Created if missing; a directory this process cannot use is refused here, saying why.
  const absolute = await checkDataDir(dir);
  const path = join(absolute, LOCK_FILE);
  const helpers = options.helpers ?? (Object.keys(LOCK_HELPERS) as LockHelper[]);

  // A holder killed a moment ago releases its lock once its helper sees end of file: when the
  // recorded holder is dead, wait for that instead of failing (bounded). A holder that is just
  // taking or releasing the lock has no record for a moment: wait briefly for that too.
  const started = Date.now();
  const deadline = started + 10_000;
  for (;;) {
    let result: Attempt = { outcome: "missing" };
    for (const helper of helpers) {
      result = await attempt(helper, path);
      if (result.outcome !== "missing") break;
    }
    if (result.outcome === "missing") {
      throw new DataDirError(
        `cannot lock DATA_DIR=${absolute}: neither \`flock\` (util-linux) nor \`perl\` is installed; install one of them, or use PostgreSQL (DATABASE_URL)`,
      );
    }
    if (result.outcome === "failed") throw new DataDirError(`cannot lock DATA_DIR=${absolute}: ${result.reason}`);
    if (result.outcome === "held") {
      const current = await readHolder(path);
      const settling = current === null && Date.now() < started + 2000;
      if ((settling || (current && !alive(current.pid))) && Date.now() < deadline) {
        await sleep(100);
        continue;
      }
      throw new DataDirLocked(absolute, current);
    }
    return held(absolute, path, result.child, holder, options.onLost);
  }
}

async function held(dir: string, path: string, child: ChildProcess, holder: Omit<LockHolder, "pid" | "since">, onLost?: () => void): Promise<DataDirLock> {
  let released = false;
  // The helper may die first (killed by someone): that is `onLost`, never an unhandled error.
  child.on("error", () => {});
  child.stdin?.on("error", () => {});
  child.once("exit", () => {
    if (!released) onLost?.();
  });
  // Nothing more is read from the helper; it must not keep this process alive.
  child.stdout?.destroy();
  child.stderr?.destroy();
  child.unref();
  const info: LockHolder = { pid: process.pid, ...holder, since: new Date().toISOString() };
  await writeFile(path, `${JSON.stringify(info)}\n`);
  return {
    dir,
    async release() {
      if (released) return;
      released = true;
      // Cleared while still held, so it can never erase the next holder's record.
      await writeFile(path, "").catch(() => {});
      const exited = new Promise<void>((r) => (child.exitCode !== null || child.signalCode !== null ? r() : child.once("exit", () => r())));
      child.stdin?.end();
      await Promise.race([exited, sleep(2000)]);
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    },
  };
}
