/**
 * A data directory the server or `migrate` cannot use is refused before anything touches it, with
 * a message that names DATA_DIR, says what is wrong and what to do, and a non-zero exit.
 *
 * Permission bits do not stop root, so each case is set up so that the account running it hits
 * it for real:
 * - not a directory, a lock file that is not a file: the same for everyone;
 * - read-only, cannot be created: as an ordinary user, mode bits (chmod a-w); as root, a
 *   read-only bind mount in a private mount namespace (`unshare --mount`), which stops root too;
 * - wrong owner: as an ordinary user, a directory of root's it cannot write; as root, the child
 *   runs as an unprivileged account on a directory of root's.
 * A case whose setting this machine cannot provide (no mount namespaces, a checkout other accounts
 * cannot read) is skipped with the reason; CI runs the suite as root and as an ordinary user.
 */
import { execFileSync, spawn, spawnSync, type SpawnOptions } from "node:child_process";
import { existsSync, readFileSync, statSync } from "node:fs";
import { chmod, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { BIN, type CliResult, cleanEnv, freePort, ROOT, runCli } from "./support.js";

vi.setConfig({ testTimeout: 180_000, hookTimeout: 180_000 });

const isRoot = process.getuid?.() === 0;
let work: string;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "aip-datadir-errors-"));
  // Other accounts (the unprivileged child when root) need to reach the directories inside.
  await chmod(work, 0o755);
});
afterAll(async () => {
  await chmod(work, 0o755).catch(() => {});
  execFileSync("chmod", ["-R", "u+w", work]);
  await rm(work, { recursive: true, force: true });
});

/** Runs the CLI as `spawn` is told (another uid, a wrapper command), with a bound on its time. */
function runWith(command: string, args: string[], options: SpawnOptions): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { ...options, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout?.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr?.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`${command} ${args.join(" ")} did not finish\n${stdout}\n${stderr}`));
    }, 120_000);
    child.once("error", reject);
    child.once("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** `serve` and `migrate` on `dataDir`, as this account: both must refuse it the same way. */
async function bothRefuse(dataDir: string, run: (args: string[], env: Record<string, string>) => Promise<CliResult> = defaultRun) {
  const env = { DATA_DIR: dataDir, ACCESS_LOG: "false", LEASE_MAINTENANCE_INTERVAL_MS: "0" };
  const [served, migrated] = await Promise.all([run(["serve", "--port", String(await freePort())], env), run(["migrate"], env)]);
  for (const [name, result] of [
    ["serve", served],
    ["migrate", migrated],
  ] as const) {
    expect(result.code, `${name}: ${result.stderr}`).toBe(1);
    expect(result.stdout, name).not.toContain("listening on");
    expect(result.stderr, name).not.toMatch(/PGlite failed|EACCES|EEXIST|EROFS|flock exited/);
  }
  return { served: served.stderr, migrated: migrated.stderr };
}
const defaultRun = (args: string[], env: Record<string, string>) => runCli(args, { env: cleanEnv(env) });

/** Root only: the child in a private mount namespace where `dir` is mounted read-only. */
const mountNamespaces = isRoot && spawnSync("unshare", ["--mount", "true"]).status === 0;
const readOnlyMount = (dir: string) => (args: string[], env: Record<string, string>) =>
  runWith("unshare", ["--mount", "sh", "-c", 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"', dir, process.execPath, BIN, ...args], {
    cwd: ROOT,
    env: cleanEnv(env),
  });

/** Root only: an unprivileged account that can run this checkout's CLI, or why there is none. */
function unprivileged(): { uid: number; gid: number; name: string } | string {
  const entry = readFileSync("/etc/passwd", "utf8")
    .split("\n")
    .map((line) => line.split(":"))
    .find((fields) => fields[0] === "nobody");
  if (!entry) return "no `nobody` account";
  const account = { name: "nobody", uid: Number(entry[2]), gid: Number(entry[3]) };
  const probe = spawnSync(process.execPath, [BIN, "--version"], { uid: account.uid, gid: account.gid, cwd: "/", env: cleanEnv() });
  if (probe.status !== 0)
    return `nobody cannot run this checkout's CLI (${probe.error?.message ?? probe.stderr.toString().trim()}): it lies in a directory other accounts cannot enter`;
  return account;
}
const asUnprivileged = (account: { uid: number; gid: number }) => (args: string[], env: Record<string, string>) =>
  runWith(process.execPath, [BIN, ...args], { cwd: "/", env: cleanEnv({ HOME: "/", ...env }), uid: account.uid, gid: account.gid });

/** A data directory as a server leaves it (the refusals come before anything would open it). */
async function usedDataDir(dir: string): Promise<void> {
  await mkdir(join(dir, "pglite"), { recursive: true });
  await writeFile(join(dir, "pglite", "PG_VERSION"), "17\n");
  await writeFile(join(dir, "registry.lock"), "");
  await writeFile(join(dir, "auth-secret"), "development-secret\n", { mode: 0o600 });
}

// Each case has a directory of its own: side by side.
describe.concurrent("a data directory that cannot be used", () => {
  it("is not a directory", async () => {
    const file = join(work, "a-file");
    await writeFile(file, "not a directory\n");
    const { served, migrated } = await bothRefuse(file);
    for (const stderr of [served, migrated]) expect(stderr).toContain(`error: DATA_DIR=${file} is not a directory (a file is in the way): move the file`);
  });

  it("holds a registry.lock that is not a file", async () => {
    const dir = join(work, "odd-lock");
    await mkdir(join(dir, "registry.lock"), { recursive: true });
    const { served } = await bothRefuse(dir);
    expect(served).toContain(`error: DATA_DIR=${dir}: ${join(dir, "registry.lock")} (the lock file) should be a file: move it out of the way`);
  });

  it("is read-only (an existing one)", async (ctx) => {
    const dir = join(work, "read-only");
    await usedDataDir(dir);
    if (isRoot) {
      if (!mountNamespaces) return ctx.skip("root without mount namespaces (unshare --mount): nothing here makes a directory read-only for root");
      const { served, migrated: again } = await bothRefuse(dir, readOnlyMount(dir));
      for (const stderr of [served, again]) {
        expect(stderr).toContain(`error: DATA_DIR=${dir}: it is on a read-only file system: mount it read-write, or set DATA_DIR to a writable directory`);
      }
    } else {
      execFileSync("chmod", ["-R", "a-w", dir]);
      try {
        const { served, migrated: again } = await bothRefuse(dir);
        for (const stderr of [served, again]) {
          expect(stderr).toContain(`error: DATA_DIR=${dir}: it is read-only (mode 0555): make it writable (chmod -R u+w ${dir})`);
        }
      } finally {
        execFileSync("chmod", ["-R", "u+w", dir]);
      }
    }
  });

  it("does not exist and cannot be created", async (ctx) => {
    const parent = join(work, "locked-parent");
    await mkdir(parent);
    const dir = join(parent, "data");
    if (isRoot) {
      if (!mountNamespaces) return ctx.skip("root without mount namespaces (unshare --mount): nothing here stops root from creating a directory");
      const { served } = await bothRefuse(dir, readOnlyMount(parent));
      expect(served).toContain(`error: DATA_DIR=${dir} does not exist and cannot be created: ${parent} is on a read-only file system.`);
    } else {
      await chmod(parent, 0o555);
      try {
        const { served, migrated } = await bothRefuse(dir);
        for (const stderr of [served, migrated])
          expect(stderr).toMatch(
            new RegExp(`error: DATA_DIR=${dir} does not exist and cannot be created: \\S+ \\(uid \\d+\\) may not create it in ${parent}\\.`),
          );
      } finally {
        await chmod(parent, 0o755);
      }
    }
    expect(existsSync(dir)).toBe(false);
  });

  it("belongs to another user", async (ctx) => {
    if (isRoot) {
      const account = unprivileged();
      if (typeof account === "string") return ctx.skip(`root, and ${account}`);
      // What `sudo npm start` leaves behind: root's directory, mode 0755.
      const dir = join(work, "roots");
      await usedDataDir(dir);
      await chmod(dir, 0o755);
      const { served, migrated: again } = await bothRefuse(dir, asUnprivileged(account));
      for (const stderr of [served, again]) {
        expect(stderr).toContain(
          `error: DATA_DIR=${dir}: it belongs to root (uid 0), and ${account.name} (uid ${account.uid}) may not write it: give it to ${account.name}`,
        );
      }
    } else {
      // A directory of root's that this account cannot write stands in for one `sudo npm start` left.
      const dir = ["/usr/share", "/usr", "/etc", "/"].find(
        (path) => existsSync(path) && statSync(path).uid === 0 && spawnSync("test", ["-w", path]).status !== 0,
      );
      if (!dir) return ctx.skip("no directory of root's that this account cannot write");
      const { served, migrated } = await bothRefuse(dir);
      const me = execFileSync("id", ["-un"]).toString().trim();
      for (const stderr of [served, migrated]) {
        expect(stderr).toContain(
          `error: DATA_DIR=${dir}: it belongs to root (uid 0), and ${me} (uid ${process.getuid?.()}) may not write it: give it to ${me} (sudo chown -R ${me} ${dir})`,
        );
      }
    }
  });
});
