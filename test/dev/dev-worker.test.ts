/**
 * `npm run dev` (scripts/dev-worker.ts): it refuses a taken port before starting anything, keeps
 * the Worker's secrets in a 0600 env file instead of wrangler's command line, gives its login
 * roles a random password sent only as a SCRAM verifier, and prints a host token that drives its
 * named replica. The last tests run the real thing: wrangler dev, the local proxy and PostgreSQL,
 * with the Worker bundled by wrangler itself exporting its spans to a local OTLP receiver.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { DEFAULT_DEV_PORT, devReplica, devVarsText, writeDevVars } from "../../scripts/dev-worker.js";
import { scramVerifier } from "../../dev/local-database.js";
import { cleanEnv, freePort, runCli, ROOT } from "../cli/support.js";
import { databaseUrl } from "../support/server.js";
import { startOtlpReceiver, type OtlpReceiver } from "../support/otlp-receiver.js";

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "aip-dev-"));
});
afterAll(() => rm(dir, { recursive: true, force: true }));

function runDev(env: Record<string, string>, args: string[] = []): ChildProcess & { output: () => string } {
  const child = spawn(process.execPath, ["--import", "tsx", "scripts/dev-worker.ts", ...args], {
    cwd: ROOT,
    env: cleanEnv(env),
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
  });
  let output = "";
  child.stdout?.on("data", (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on("data", (chunk: Buffer) => (output += chunk.toString()));
  return Object.assign(child, { output: () => output });
}

const exitOf = (child: ChildProcess) => new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));

/** Command lines of every process on the machine (what `ps` shows anyone). */
function commandLines(): { pid: number; ppid: number; cmdline: string }[] {
  return readdirSync("/proc")
    .filter((name) => /^\d+$/.test(name))
    .flatMap((pid) => {
      try {
        const cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ");
        const ppid = Number(readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ")[1]);
        return [{ pid: Number(pid), ppid, cmdline }];
      } catch {
        return [];
      }
    });
}

/** `pid` and every process it started, and theirs. */
function tree(pid: number): { pid: number; cmdline: string }[] {
  const all = commandLines();
  const found = all.filter((p) => p.pid === pid);
  for (let i = 0; i < found.length; i++) found.push(...all.filter((p) => p.ppid === found[i]?.pid));
  return found;
}

describe("the env file", () => {
  it("quotes each variable under a header, and refuses values an env file cannot hold", () => {
    expect(devVarsText({ A: "postgres://u:p@h/db", B: "x y" })).toMatch(/^# Written by `npm run dev`.*\nA="postgres:\/\/u:p@h\/db"\nB="x y"\n$/);
    expect(() => devVarsText({ A: 'a"b' })).toThrow(/A cannot be written/);
    expect(() => devVarsText({ A: "a\nb" })).toThrow(/A cannot be written/);
  });

  it("is written 0600, replaces its own earlier file, and never someone else's", async () => {
    const path = join(dir, ".dev.vars");
    await writeFile(path, "# written by npm run dev? no\nMINE=1\n", { mode: 0o644 });
    await expect(writeDevVars(path, { A: "1" })).rejects.toThrow(/was not written by `npm run dev`.*DEV_VARS_FILE/);
    expect(await readFile(path, "utf8")).toContain("MINE=1");
    await rm(path);
    await writeDevVars(path, { A: "1" });
    await writeDevVars(path, { A: "2" });
    expect(await readFile(path, "utf8")).toMatch(/\nA="2"\n$/);
    expect((await stat(path)).mode & 0o777).toBe(0o600);
  });
});

it("binds the host token to a replica of the example fleet (the first, or DEV_REPLICA)", async () => {
  const fleet = join(ROOT, "examples", "fleet.yaml");
  expect(await devReplica(fleet)).toEqual({ id: "crepl_tenant_a_crm_euw1a", peerPrincipalId: "service:crm-euw1a.tenant-a" });
  expect(await devReplica(fleet, "crepl_tenant_a_crm_euw1b")).toEqual({ id: "crepl_tenant_a_crm_euw1b", peerPrincipalId: "service:crm-euw1b.tenant-a" });
  await expect(devReplica(fleet, "crepl_nope")).rejects.toThrow(/DEV_REPLICA names one of: crepl_tenant_a_crm_euw1a, /);
});

it("sends PostgreSQL the SCRAM-SHA-256 verifier PostgreSQL itself computes for the password", async () => {
  const admin = new pg.Client({ connectionString: inject("pgServer").adminUrl });
  await admin.connect();
  const role = `aip_scram_${randomBytes(4).toString("hex")}`;
  try {
    await admin.query("SET password_encryption = 'scram-sha-256'");
    await admin.query(`CREATE ROLE ${role} PASSWORD 'correct horse battery staple'`);
    const { rows } = await admin.query<{ rolpassword: string }>("SELECT rolpassword FROM pg_authid WHERE rolname = $1", [role]);
    const stored = rows[0]?.rolpassword as string;
    const [, iterations, salt] = /^SCRAM-SHA-256\$(\d+):([^$]+)\$/.exec(stored) ?? [];
    expect(scramVerifier("correct horse battery staple", Buffer.from(salt as string, "base64"), Number(iterations))).toBe(stored);
    expect(scramVerifier("correct horse battery stapler", Buffer.from(salt as string, "base64"), Number(iterations))).not.toBe(stored);
  } finally {
    await admin.query(`DROP ROLE IF EXISTS ${role}`);
    await admin.end();
  }
});

describe("a taken port", () => {
  let occupied: Server;
  let port: number;
  beforeAll(async () => {
    occupied = createServer();
    await new Promise<void>((resolve) => occupied.listen(0, "127.0.0.1", () => resolve()));
    port = (occupied.address() as { port: number }).port;
  });
  afterAll(() => new Promise<void>((resolve) => occupied.close(() => resolve())));

  it("stops `npm run dev` at once, saying what to do, before a database, proxy or wrangler starts", async () => {
    const devVars = join(dir, "taken.dev.vars");
    // An unreachable database: reaching for it would be a different failure.
    const child = runDev({
      DEV_PORT: String(port),
      DATABASE_URL: "postgres://postgres@127.0.0.1:1/none",
      DEV_VARS_FILE: devVars,
      DATA_DIR: join(dir, "taken-data"),
    });
    expect(await exitOf(child)).toBe(1);
    expect(child.output()).toContain(
      `npm run dev: port ${port} is in use (is \`npm start\` or another \`npm run dev\` running?): stop it or choose another port with DEV_PORT=<port> npm run dev`,
    );
    await expect(stat(devVars)).rejects.toThrow(/ENOENT/);
    expect(tree(child.pid as number)).toEqual([]);
  });

  it("defaults to a port other than npm start's 8787", () => {
    expect(DEFAULT_DEV_PORT).toBe(8788);
  });
});

describe("the real thing: wrangler dev against PostgreSQL", () => {
  const server = inject("pgServer");
  const database = `aip_t_${server.runId}_devworker`;
  let child: ReturnType<typeof runDev>;
  let url: string;
  let devVars: string;
  let dataDir: string;
  let receiver: OtlpReceiver;

  beforeAll(async () => {
    const port = await freePort();
    url = `http://127.0.0.1:${port}`;
    devVars = join(dir, "run.dev.vars");
    dataDir = join(dir, "data");
    receiver = await startOtlpReceiver();
    child = runDev({ DEV_PORT: String(port), DATABASE_URL: databaseUrl(server, database), DEV_VARS_FILE: devVars, DATA_DIR: dataDir }, [
      "--var",
      `OTEL_EXPORTER_OTLP_ENDPOINT:${receiver.endpoint()}`,
      "--var",
      "OTEL_EXPORTER_OTLP_PROTOCOL:http/json",
    ]);
    const deadline = Date.now() + 90_000;
    for (;;) {
      if (child.exitCode !== null) throw new Error(`npm run dev exited with ${child.exitCode}:\n${child.output()}`);
      const ready = await fetch(`${url}/readyz`).then(
        (r) => r.status,
        () => 0,
      );
      if (ready === 200) break;
      if (Date.now() > deadline) throw new Error(`wrangler dev did not become ready:\n${child.output()}`);
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
  }, 120_000);

  afterAll(async () => {
    if (child && child.exitCode === null) {
      child.kill("SIGINT");
      await exitOf(child);
    }
    const admin = new pg.Client({ connectionString: server.adminUrl });
    await admin.connect();
    await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
    await admin.end();
    await receiver?.close();
  });

  it("exports the caller's trace from the bundle wrangler builds (OpenTelemetry on workerd)", async () => {
    const trace = randomBytes(16).toString("hex");
    const parent = randomBytes(8).toString("hex");
    expect((await fetch(`${url}/readyz`, { headers: { traceparent: `00-${trace}-${parent}-01` } })).status).toBe(200);
    const deadline = Date.now() + 20_000;
    let spans = receiver.spans().filter((s) => s.traceId === trace);
    while (!spans.some((s) => s.kind === 3) && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      spans = receiver.spans().filter((s) => s.traceId === trace);
    }
    expect(spans.find((s) => s.kind === 2)).toMatchObject({ name: "GET /readyz", parentSpanId: parent, attributes: { "http.response.status_code": 200 } });
    expect(spans.find((s) => s.kind === 3)).toMatchObject({
      attributes: { "db.system.name": "postgresql", "db.operation.name": expect.stringMatching(/^aip_/) },
    });
  });

  it("keeps every secret off the command lines `ps` shows", async () => {
    const secrets = [(await readFile(join(dataDir, "auth-secret"), "utf8")).trim(), (await readFile(join(dataDir, "dev-role-password"), "utf8")).trim()];
    const vars = await readFile(devVars, "utf8");
    for (const secret of secrets) expect(vars).toContain(secret);
    expect((await stat(devVars)).mode & 0o777).toBe(0o600);
    expect(
      tree(child.pid as number)
        .map((p) => p.cmdline)
        .join("\n"),
    ).toMatch(/wrangler\.js dev .*--env-file/);
    const anywhere = commandLines().map((p) => p.cmdline);
    for (const secret of secrets) expect(anywhere.filter((cmdline) => cmdline.includes(secret))).toEqual([]);
  });

  it("prints a host token that registers its named replica", async () => {
    const printed = (name: string) => new RegExp(`^  ${name}=(\\S+)`, "m").exec(child.output())?.[1] as string;
    expect(child.output()).toMatch(/HOST_TOKEN=\S+ +# peer_principal_id=service:crm-euw1a\.tenant-a: drives replica crepl_tenant_a_crm_euw1a only/);
    // As printed: the CLI signs its own token with the same development secret.
    expect(child.output()).toContain(`AIP_REGISTRY_URL=${url} npx --no-install aip-registry apply -f examples/fleet.yaml`);
    const applied = await runCli(["apply", "-f", "examples/fleet.yaml"], { env: cleanEnv({ AIP_REGISTRY_URL: url, DATA_DIR: dataDir }), timeoutMs: 60_000 });
    expect(applied.code, `${applied.stdout}\n${applied.stderr}`).toBe(0);
    // What the printed `registration` command derives from the fleet file (both replicas run the same version).
    const printedRegistration = await runCli(["registration", "-f", "examples/fleet.yaml", "crepl_tenant_a_crm_euw1a"], { env: cleanEnv() });
    expect(printedRegistration.code, printedRegistration.stderr).toBe(0);
    expect(child.output()).toContain("npx --no-install aip-registry registration -f examples/fleet.yaml crepl_tenant_a_crm_euw1a");
    const evidence = JSON.parse(printedRegistration.stdout) as Record<string, unknown>;
    const register = (replica: string) =>
      fetch(`${url}/v1/replicas/${replica}/register`, {
        method: "POST",
        headers: { authorization: `Bearer ${printed("HOST_TOKEN")}`, "content-type": "application/json" },
        body: JSON.stringify({ request_id: `msg_dev_${randomBytes(4).toString("hex")}`, lease_ttl_ms: 60_000, ...evidence }),
      });
    const own = await register("crepl_tenant_a_crm_euw1a");
    expect(own.status, await own.clone().text()).toBe(200);
    expect(await own.json()).toMatchObject({ replica_id: "crepl_tenant_a_crm_euw1a", status: "ready" });
    // Bound to its replica: any other is invisible to it.
    expect((await register("crepl_tenant_a_crm_euw1b")).status).toBe(404);
  });

  it("stops everything it started (wrangler, workerd, esbuild) when stopped", async () => {
    const started = tree(child.pid as number);
    expect(started.map((p) => p.cmdline).join("\n")).toMatch(/esbuild/);
    child.kill("SIGINT");
    await exitOf(child);
    const alive = () => {
      const now = new Map(commandLines().map((p) => [p.pid, p.cmdline]));
      return started.filter((p) => now.get(p.pid) === p.cmdline).map((p) => p.cmdline);
    };
    const deadline = Date.now() + 15_000;
    while (alive().length > 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 200));
    expect(alive()).toEqual([]);
  }, 30_000);
});
