/**
 * Stopping the server the way process managers do: a real SIGTERM or SIGINT sent to `npm start`
 * (which runs `node dist/entry/node.js` itself, with no shell or tsx in between) or to the node process,
 * and to the other documented ways of starting it: `npx --no-install aip-registry serve` (npm, a
 * shell, then node) and `npm run cli -- serve`.
 * The listener stops accepting at once, a request in flight is answered, lease maintenance and the
 * database close, the data directory is released, and the process exits 0; a request that is not
 * done by SHUTDOWN_DRAIN_MS is cut and the process still stops.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { existsSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { connect, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, expect, it, vi } from "vitest";
import { cleanEnv, freePort, ROOT, runCli } from "./support.js";

// PGlite starts and migrates in process: slow on a busy machine.
vi.setConfig({ testTimeout: 240_000, hookTimeout: 60_000 });

interface Started {
  npm: ChildProcess;
  /** The node process that serves (from its "listening on ..., PID n" line). */
  pid: number;
  port: number;
  dataDir: string;
  output: () => string;
  exited: Promise<number | null>;
}

const started: Started[] = [];
afterEach(async () => {
  for (const s of started.splice(0)) {
    if (s.npm.exitCode === null && s.npm.signalCode === null) process.kill(-(s.npm.pid as number), "SIGKILL");
    if (alive(s.pid)) process.kill(s.pid, "SIGKILL");
    await rm(s.dataDir, { recursive: true, force: true });
  }
});

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** `npm start` in the checkout, in its own process group (as a terminal would run it). */
function npmStart(env: Record<string, string> = {}): Promise<Started> {
  return launch("npm", ["start"], env);
}

/** A command that starts the server (npm start, npx ... serve, npm run cli -- serve), in its own process group. */
async function launch(command: string, args: string[], env: Record<string, string> = {}): Promise<Started> {
  const dataDir = await mkdtemp(join(tmpdir(), "aip-shutdown-"));
  const port = await freePort();
  const npm = spawn(command, args, {
    cwd: ROOT,
    env: cleanEnv({ DATA_DIR: dataDir, PORT: String(port), ACCESS_LOG: "false", ...env }),
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
  });
  let output = "";
  npm.stdout?.on("data", (chunk: Buffer) => (output += chunk.toString()));
  npm.stderr?.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const exited = once(npm, "exit").then(([code]) => code as number | null);
  const deadline = Date.now() + 200_000;
  while (!/TENANT_TOKEN=\S+/.test(output) && npm.exitCode === null && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  const pid = Number(/listening on \S+ \([^)]*\), PID (\d+)/.exec(output)?.[1]);
  if (!pid || !/TENANT_TOKEN=\S+/.test(output)) throw new Error(`${command} ${args.join(" ")} did not come up:\n${output}`);
  const s: Started = { npm, pid, port, dataDir, output: () => output, exited };
  started.push(s);
  return s;
}

/** The parent of `pid`, where /proc says (Linux); undefined elsewhere. */
function parentOf(pid: number): number | undefined {
  const stat = `/proc/${pid}/stat`;
  if (!existsSync(stat)) return undefined;
  // pid (comm) state ppid ...: comm may hold spaces, so split after its closing parenthesis.
  return Number(
    readFileSync(stat, "utf8")
      .slice(readFileSync(stat, "utf8").lastIndexOf(")") + 2)
      .split(" ")[1],
  );
}

/** The command name of `pid` (Linux), or undefined. */
function commandOf(pid: number): string | undefined {
  const comm = `/proc/${pid}/comm`;
  return existsSync(comm) ? readFileSync(comm, "utf8").trim() : undefined;
}

/** Whether something accepts connections on the port. */
async function listening(port: number): Promise<boolean> {
  const socket = connect(port, "127.0.0.1");
  try {
    await once(socket, "connect");
    return true;
  } catch {
    return false;
  } finally {
    socket.destroy();
  }
}

/** A PUT whose body is only half sent: in flight at the server until `finish()` sends the rest. */
async function halfSentRequest(port: number, token: string): Promise<{ socket: Socket; finish(): void; response: Promise<string> }> {
  const body = JSON.stringify({ capability_id: "cap:shutdown.test", topology: { region: "eu-west" } });
  const half = Math.floor(body.length / 2);
  const socket = connect(port, "127.0.0.1");
  await once(socket, "connect");
  let received = "";
  socket.on("data", (chunk: Buffer) => (received += chunk.toString()));
  const response = new Promise<string>((resolve) => socket.once("close", () => resolve(received)));
  socket.write(
    `PUT /v1/routes/act_shutdown_1 HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nAuthorization: Bearer ${token}\r\n` +
      `Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, half)}`,
  );
  return { socket, finish: () => socket.write(body.slice(half)), response };
}

const waitFor = async (what: () => boolean, ms: number) => {
  const deadline = Date.now() + ms;
  while (!what() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  return what();
};

it("SIGTERM to npm start: no new connections, the request in flight answered, exit 0, data directory released", async () => {
  const s = await npmStart();
  // npm runs node itself: no shell or tsx process stands between them to swallow the signal.
  const parent = parentOf(s.pid);
  if (parent !== undefined) expect(parent).toBe(s.npm.pid);
  const token = /(?:^|\s)TENANT_TOKEN=(\S+)/.exec(s.output())?.[1] as string;
  const inFlight = await halfSentRequest(s.port, token);
  await new Promise((r) => setTimeout(r, 300));

  process.kill(s.npm.pid as number, "SIGTERM");
  expect(await waitFor(() => s.output().includes('"msg":"stopping"'), 10_000), s.output()).toBe(true);
  expect(s.output()).toMatch(/"msg":"stopping".*"signal":"SIGTERM","in_flight":1,"drain_ms":8000/);
  // The listener is closed: a new connection is refused while the request in flight is served.
  await expect(fetch(`http://127.0.0.1:${s.port}/healthz`)).rejects.toThrow();
  expect(alive(s.pid)).toBe(true);

  inFlight.finish();
  const answer = await inFlight.response;
  // Answered (no binding for this capability: 404), and told not to reuse the connection.
  expect(answer).toMatch(/^HTTP\/1\.1 404 /);
  expect(answer.toLowerCase()).toContain("connection: close");
  expect(answer).toContain('"code":"binding-unavailable"');

  expect(await s.exited).toBe(0);
  expect(alive(s.pid)).toBe(false);
  expect(s.output()).toMatch(/"msg":"stopped","signal":"SIGTERM","drained_ms":\d+,"cut":0/);
  // The data directory is free again, and its database was closed cleanly.
  const migrate = await runCli(["migrate"], { env: cleanEnv({ DATA_DIR: s.dataDir }) });
  expect(migrate.code, migrate.stderr).toBe(0);
  expect(migrate.stdout).toMatch(/up to date/);
});

it("Ctrl-C (SIGINT to the whole process group, so node hears it from the terminal and from npm): one graceful stop, exit 0", async () => {
  const s = await npmStart();
  process.kill(-(s.npm.pid as number), "SIGINT");
  expect(await s.exited).toBe(0);
  expect(alive(s.pid)).toBe(false);
  expect(s.output()).toMatch(/"msg":"stopped","signal":"SIGINT"/);
  expect(s.output()).not.toContain("exiting now");
});

it("cuts a request still unfinished at SHUTDOWN_DRAIN_MS and stops anyway (SIGTERM to node itself)", async () => {
  const s = await npmStart({ SHUTDOWN_DRAIN_MS: "1000" });
  const token = /(?:^|\s)TENANT_TOKEN=(\S+)/.exec(s.output())?.[1] as string;
  const stuck = await halfSentRequest(s.port, token);
  await new Promise((r) => setTimeout(r, 300));
  const signalled = Date.now();
  process.kill(s.pid, "SIGTERM");
  // Never finished: its connection is closed at the deadline without an answer.
  expect(await stuck.response).toBe("");
  expect(await s.exited).toBe(0);
  const took = Date.now() - signalled;
  expect(took).toBeGreaterThanOrEqual(1000);
  // 1 s of drain, up to 2 s for the database, and a busy machine's slack.
  expect(took).toBeLessThan(10_000);
  expect(s.output()).toMatch(/"msg":"requests still in flight at the drain deadline were cut","cut":1,"drain_ms":1000/);
});

// npm forwards SIGTERM and SIGINT to its child only. For `npx aip-registry serve` that child is
// `sh -c 'aip-registry' serve`, and node is the shell's child: where /bin/sh is dash, SIGTERM kills
// the shell and used to leave node running, orphaned and holding its port.
it("SIGTERM to `npx --no-install aip-registry serve` (npm, then a shell, then node) stops the server within 10 s", async () => {
  const s = await launch("npx", ["--no-install", "aip-registry", "serve"]);
  const shell = parentOf(s.pid);
  // Where /proc tells: the process tree this test is about (a shell may be missing where /bin/sh execs).
  if (shell !== undefined && shell !== s.npm.pid) {
    expect(commandOf(shell)).toMatch(/^(sh|dash|bash|ash)$/);
    expect(parentOf(shell)).toBe(s.npm.pid);
  }
  const signalled = Date.now();
  process.kill(s.npm.pid as number, "SIGTERM");
  expect(await waitFor(() => !alive(s.pid), 10_000), s.output()).toBe(true);
  expect(Date.now() - signalled).toBeLessThan(10_000);
  expect(await listening(s.port)).toBe(false);
  // Gracefully: drained, the database closed, the data directory released.
  expect(s.output()).toMatch(/"msg":"stopped",("signal":"SIGTERM"|"reason":"[^"]*npm[^"]*"),"drained_ms":\d+,"cut":0/);
  const migrate = await runCli(["migrate"], { env: cleanEnv({ DATA_DIR: s.dataDir }) });
  expect(migrate.code, migrate.stderr).toBe(0);
});

it.each(["SIGTERM", "SIGINT"] as const)("%s to `npm run cli -- serve` (to npm alone) stops the server gracefully within 10 s", async (signal) => {
  const s = await launch("npm", ["run", "cli", "--", "serve"]);
  // `exec` in the script: npm runs node itself, and forwards the signal to it.
  const parent = parentOf(s.pid);
  if (parent !== undefined) expect(parent).toBe(s.npm.pid);
  const signalled = Date.now();
  process.kill(s.npm.pid as number, signal);
  expect(await waitFor(() => !alive(s.pid), 10_000), s.output()).toBe(true);
  expect(Date.now() - signalled).toBeLessThan(10_000);
  expect(await listening(s.port)).toBe(false);
  expect(s.output()).toMatch(new RegExp(`"msg":"stopped","signal":"${signal}","drained_ms":\\d+,"cut":0`));
  await s.exited;
});
