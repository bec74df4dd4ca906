/**
 * The embedded default never serves one data directory from two processes: a second `serve` or
 * `migrate` on it exits non-zero naming the holder; a holder killed with SIGKILL leaves it usable;
 * and a taken port fails before the data directory is even created.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { BIN, cleanEnv, freePort, ROOT, runCli } from "./support.js";

// PGlite starts and migrates in process: slow on a busy machine.
vi.setConfig({ testTimeout: 240_000, hookTimeout: 240_000 });

interface Serving {
  child: ChildProcess;
  output: () => string;
  port: number;
}

/** `aip-registry serve` on `dataDir`; resolves once it listens (or throws with its output). */
async function serve(dataDir: string, port: number): Promise<Serving> {
  const child = spawn(process.execPath, [BIN, "serve", "--port", String(port)], {
    cwd: ROOT,
    env: cleanEnv({ DATA_DIR: dataDir, ACCESS_LOG: "false", LEASE_MAINTENANCE_INTERVAL_MS: "0" }),
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout?.on("data", (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const deadline = Date.now() + 200_000;
  while (!output.includes("listening on") && child.exitCode === null && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  if (!output.includes("listening on")) throw new Error(`serve did not start:\n${output}`);
  return { child, output: () => output, port };
}

async function stop(serving: Serving | undefined, signal: NodeJS.Signals = "SIGTERM"): Promise<number | null> {
  if (!serving || serving.child.exitCode !== null || serving.child.signalCode !== null) return serving?.child.exitCode ?? null;
  const exited = once(serving.child, "exit");
  serving.child.kill(signal);
  return ((await exited) as [number | null])[0];
}

const inUse = (dir: string, pid: number | undefined, port: number) =>
  new RegExp(`error: DATA_DIR=${dir} is in use by PID ${pid} \\(aip-registry serve at http://127\\.0\\.0\\.1:${port}, since [^)]+\\): stop it first`);

describe("one process per data directory", () => {
  let dataDir: string;
  let first: Serving | undefined;
  let second: Serving | undefined;
  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), "aip-datadir-"));
  });
  afterAll(async () => {
    await stop(first);
    await stop(second);
    await rm(dataDir, { recursive: true, force: true });
  });

  it("refuses a second server and a migrate while one serves, naming the holder", async () => {
    first = await serve(dataDir, await freePort());
    const port = await freePort();
    const [again, migrate] = await Promise.all([
      runCli(["serve", "--port", String(port)], { env: cleanEnv({ DATA_DIR: dataDir }) }),
      runCli(["migrate"], { env: cleanEnv({ DATA_DIR: dataDir }) }),
    ]);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(inUse(dataDir, first.child.pid, first.port));
    expect(again.stdout).not.toContain("listening on");
    expect(migrate.code).toBe(1);
    expect(migrate.stderr).toMatch(inUse(dataDir, first.child.pid, first.port));
    expect(migrate.stderr).not.toContain("applying");
    // The refused server never listened on its port.
    await expect(fetch(`http://127.0.0.1:${port}/healthz`)).rejects.toThrow();
    expect((await fetch(`http://127.0.0.1:${first.port}/readyz`)).status).toBe(200);
  });

  it("is usable again after its holder is killed with SIGKILL, and the new holder has it", async () => {
    expect(await stop(first, "SIGKILL")).toBe(null);
    second = await serve(dataDir, await freePort());
    expect((await fetch(`http://127.0.0.1:${second.port}/readyz`)).status).toBe(200);
    const migrate = await runCli(["migrate"], { env: cleanEnv({ DATA_DIR: dataDir }) });
    expect(migrate.code).toBe(1);
    expect(migrate.stderr).toMatch(inUse(dataDir, second.child.pid, second.port));

    // A clean stop frees it as well.
    expect(await stop(second)).toBe(0);
    const after = await runCli(["migrate"], { env: cleanEnv({ DATA_DIR: dataDir }) });
    expect(after.code, after.stderr).toBe(0);
    expect(after.stdout).toMatch(/^schema version \d+: up to date$/m);
  });
});

it("fails on a taken port before it opens (or even creates) the data directory", async () => {
  const parent = await mkdtemp(join(tmpdir(), "aip-port-"));
  const dataDir = join(parent, "data");
  const taken = createServer();
  await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve));
  const { port } = taken.address() as { port: number };
  try {
    const result = await runCli(["serve", "--port", String(port)], { env: cleanEnv({ DATA_DIR: dataDir }) });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`error: cannot listen on 127.0.0.1:${port}: the port is in use`);
    expect(result.stderr + result.stdout).not.toContain("applying migration");
    expect(existsSync(dataDir)).toBe(false);
  } finally {
    taken.close();
    await rm(parent, { recursive: true, force: true });
  }
});
