/**
 * The data-directory lock: exclusive across processes whichever helper holds it (flock(1) or
 * perl, both flock(2)), reclaimable the moment its holder dies, and explicit about its holder.
 */
import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { DataDirLocked, LOCK_FILE, lockDataDir, type LockHelper } from "../../src/node/data-dir-lock.js";

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "aip-lock-"));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const pairs: [LockHelper, LockHelper][] = [
  ["flock", "flock"],
  ["perl", "perl"],
  ["flock", "perl"],
  ["perl", "flock"],
];

describe.each(pairs)("held through %s, contended through %s", (first, second) => {
  it("refuses a second holder, naming the first, until the first releases", async () => {
    const lock = await lockDataDir(dir, { command: "aip-registry serve", url: "http://127.0.0.1:1" }, { helpers: [first] });
    const refused = await lockDataDir(dir, { command: "aip-registry migrate" }, { helpers: [second] }).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(DataDirLocked);
    expect((refused as Error).message).toBe(
      `DATA_DIR=${dir} is in use by PID ${process.pid} (aip-registry serve at http://127.0.0.1:1, since ${(refused as DataDirLocked).holder?.since}): ` +
        "stop it first, or set DATA_DIR to another directory (or DATABASE_URL for PostgreSQL)",
    );
    await lock.release();
    const next = await lockDataDir(dir, { command: "aip-registry migrate" }, { helpers: [second] });
    expect(JSON.parse(await readFile(join(dir, LOCK_FILE), "utf8"))).toMatchObject({ pid: process.pid, command: "aip-registry migrate" });
    await next.release();
  });
});

it("is free again as soon as a holder process is killed with SIGKILL", async () => {
  // A separate Node process takes the lock and reports; then it is killed without any cleanup.
  const script = `
    const { lockDataDir } = await import(${JSON.stringify(new URL("../../src/node/data-dir-lock.ts", import.meta.url).pathname)});
    await lockDataDir(process.argv[1], { command: "holder" });
    console.log("held");
    setInterval(() => {}, 1000);
  `;
  const holder = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script, dir], { stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  holder.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()));
  while (!out.includes("held")) {
    if (holder.exitCode !== null) throw new Error("holder exited");
    await new Promise((r) => setTimeout(r, 50));
  }
  const refused = await lockDataDir(dir, { command: "test" }).catch((error: unknown) => error);
  expect(refused).toBeInstanceOf(DataDirLocked);
  expect((refused as DataDirLocked).holder).toMatchObject({ pid: holder.pid, command: "holder" });

  holder.kill("SIGKILL");
  await once(holder, "exit");
  const lock = await lockDataDir(dir, { command: "test" });
  expect(lock.dir).toBe(dir);
  await lock.release();
});

it("reports a helper that is not installed", async () => {
  const previous = process.env.PATH;
  process.env.PATH = dir; // neither flock nor perl in it
  try {
    await expect(lockDataDir(dir, { command: "test" })).rejects.toThrow(
      `cannot lock DATA_DIR=${dir}: neither \`flock\` (util-linux) nor \`perl\` is installed`,
    );
  } finally {
    process.env.PATH = previous;
  }
});
