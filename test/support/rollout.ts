/**
 * A rolling upgrade as an operator runs one, for the upgrade tests: servers of two builds started
 * as processes on one database, gateways' traffic (catalog pages, new routes, settlements) from
 * several clients moved from one to the other, readiness polled the way Kubernetes polls it, and
 * every answer that is not a success counted.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { mintToken } from "../../src/http/tokens.js";
import { binding, connectorType, instance, replica, version } from "../../fixtures/records.js";
import { freePort } from "../../fixtures/free-port.js";
import { TEST_SECRET } from "./http.js";
import type { Build } from "./releases.js";

export interface ServerProcess {
  url: string;
  child: ChildProcess;
  output(): string;
  /** SIGTERM, then its exit code. */
  stop(): Promise<number | null>;
}

/** `build`'s Node server (node dist/entry/node.js, as `npm start` runs it) with `env`, once it listens. */
export async function startServer(build: Build, env: Record<string, string>): Promise<ServerProcess> {
  const port = await freePort();
  const child = spawn(process.execPath, [build.server], {
    cwd: build.dir,
    env: {
      PATH: process.env.PATH ?? "",
      HOME: process.env.HOME ?? "",
      PORT: String(port),
      AUTH_HS256_SECRET: TEST_SECRET,
      MIGRATE_ON_START: "false",
      ACCESS_LOG: "false",
      ALLOW_REGISTRATION_WITHOUT_EVIDENCE: "true",
      ...env,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout?.on("data", (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60_000;
  while (!output.includes("listening on")) {
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`${build.dir} server did not start:\n${output}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return {
    url,
    child,
    output: () => output,
    async stop() {
      if (child.exitCode !== null) return child.exitCode;
      const exited = once(child, "exit");
      child.kill("SIGTERM");
      const [code] = await exited;
      return code as number | null;
    },
  };
}

/**
 * `build`'s Worker (its dev/worker.ts: src/entry/worker.ts pointed at the local Neon proxy) in
 * `wrangler dev`, with `vars` as its bindings, once it answers; stop() ends wrangler's process
 * group. Each Worker keeps its Durable Object state apart (--persist-to).
 */
export async function startWorker(build: Build, vars: Record<string, string>): Promise<ServerProcess> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), "aip-rollout-worker-"));
  const envFile = join(dir, ".dev.vars");
  writeFileSync(
    envFile,
    Object.entries({ AUTH_HS256_SECRET: TEST_SECRET, ACCESS_LOG: "false", ...vars })
      .map(([k, v]) => `${k}="${v}"`)
      .join("\n"),
    { mode: 0o600 },
  );
  const wrangler = join(dirname(createRequire(import.meta.url).resolve("wrangler/package.json")), "bin", "wrangler.js");
  const child = spawn(
    process.execPath,
    [
      wrangler,
      "dev",
      join(build.dir, "dev/worker.ts"),
      "--config",
      join(build.dir, "wrangler.toml"),
      "--port",
      String(port),
      "--ip",
      "127.0.0.1",
      "--env-file",
      envFile,
      "--persist-to",
      join(dir, "state"),
    ],
    {
      cwd: build.dir,
      detached: true,
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, CLOUDFLARE_CF_FETCH_ENABLED: "false", WRANGLER_SEND_METRICS: "false" },
    },
  );
  let output = "";
  child.stdout?.on("data", (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const url = `http://127.0.0.1:${port}`;
  const group = (signal: NodeJS.Signals) => {
    try {
      if (child.pid !== undefined) process.kill(-child.pid, signal);
    } catch {
      // Gone already.
    }
  };
  const deadline = Date.now() + 120_000;
  for (;;) {
    if (child.exitCode !== null || Date.now() > deadline) {
      group("SIGKILL");
      throw new Error(`wrangler dev of ${build.dir} did not start:\n${output}`);
    }
    const up = await fetch(`${url}/healthz`).then(
      (r) => r.ok,
      () => false,
    );
    if (up) break;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  return {
    url,
    child,
    output: () => output,
    async stop() {
      if (child.exitCode === null) {
        const exited = once(child, "exit");
        group("SIGTERM");
        await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 10_000))]);
        group("SIGKILL");
      }
      rmSync(dir, { recursive: true, force: true });
      return child.exitCode;
    },
  };
}

const tokens = {
  admin: () => mintToken(TEST_SECRET, { subject: "rollout-operator", scopes: ["registry:admin", "fleet:read"] }),
  tenant: (tenantId: string) => mintToken(TEST_SECRET, { subject: "rollout-gateway", tenantId, scopes: ["catalog:read", "routes:write", "routes:read"] }),
  host: (replicaId: string) => mintToken(TEST_SECRET, { subject: replicaId, peerPrincipalId: `service:${replicaId}`, scopes: ["replicas:write"] }),
};

/** Requests in flight, per server URL. */
const inFlight = new Map<string, number>();

async function call(url: string, method: string, path: string, token: string, body?: unknown): Promise<{ status: number; body: unknown }> {
  inFlight.set(url, (inFlight.get(url) ?? 0) + 1);
  try {
    return await send(url, method, path, token, body);
  } finally {
    inFlight.set(url, (inFlight.get(url) ?? 1) - 1);
  }
}

async function send(url: string, method: string, path: string, token: string, body?: unknown): Promise<{ status: number; body: unknown }> {
  const response = await fetch(`${url}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await response.text();
  return { status: response.status, body: text ? (JSON.parse(text) as unknown) : null };
}

export interface Fleet {
  tenants: string[];
  /** Routed. */
  capability: string;
  /** Every capability the tenants see (their catalog pages, one per page, and their change feed). */
  capabilities: string[];
}

/**
 * A fleet published and registered through `url`: two tenants, each an instance with two
 * replicas of ample capacity (hosts register without evidence: the servers allow it here).
 */
export async function publishFleet(url: string, prefix: string): Promise<Fleet> {
  const tenants = ["tenant-a", "tenant-b"];
  const capabilities = ["fetch", "search", "update"].map((name) => `cap:${prefix}.${name}`);
  const capability = capabilities[1] as string;
  const typeId = `ctype_${prefix}`;
  const versionId = `cver_${prefix}_1`;
  const changes: Record<string, unknown>[] = [connectorType(typeId), await version(versionId, typeId, capabilities)];
  const replicas: string[] = [];
  for (const tenant of tenants) {
    const instanceId = `cinst_${prefix}_${tenant}`;
    changes.push(instance(instanceId, typeId, versionId, tenant), ...capabilities.map((cap) => binding(tenant, cap, instanceId)));
    for (const n of [1, 2]) {
      const replicaId = `crepl_${prefix}_${tenant}_${n}`;
      changes.push(replica(replicaId, instanceId, versionId, { capacity: 10_000 }));
      replicas.push(replicaId);
    }
  }
  const published = await call(url, "POST", "/v1/admin/publications", await tokens.admin(), { changes });
  if (published.status !== 200) throw new Error(`publication refused: ${JSON.stringify(published)}`);
  for (const replicaId of replicas) {
    const registered = await call(url, "POST", `/v1/replicas/${replicaId}/register`, await tokens.host(replicaId), {
      request_id: `msg_${prefix}_${replicaId}`,
      lease_ttl_ms: 300_000,
    });
    if (registered.status !== 200) throw new Error(`register refused: ${JSON.stringify(registered)}`);
  }
  return { tenants, capability, capabilities };
}

export interface Traffic {
  /** Where the clients send their next requests: one server, or several sharing the traffic (a gradual deployment). */
  target: string | string[];
  /** Resolves once no request to `url` is in flight (after traffic moved away from it). */
  drained(url: string): Promise<void>;
  stop(): Promise<TrafficReport>;
}

interface TrafficReport {
  requests: number;
  /** Requests per server URL. */
  served: Record<string, number>;
  failures: string[];
}

/**
 * `clients` gateways, each looping: the catalog walked a page at a time and the change feed from
 * the start (each page from whichever server the traffic goes to then: a walk may cross from one
 * build to the other), a new route and its settlement; every answer other than 200/201/304 is a
 * failure, named with its server, path and problem, and so is a walk that does not add up.
 */
export async function startTraffic(initial: string | string[], fleet: Fleet, clients = 8): Promise<Traffic> {
  const tenantTokens = await Promise.all(fleet.tenants.map((tenant) => tokens.tenant(tenant)));
  const report: TrafficReport = { requests: 0, served: {}, failures: [] };
  const traffic = { target: initial, running: true };
  const pick = () => (Array.isArray(traffic.target) ? (traffic.target[Math.floor(Math.random() * traffic.target.length)] as string) : traffic.target);
  let sequence = 0;
  const record = (url: string, what: string, status: number, body: unknown, ok: number[]) => {
    report.requests++;
    report.served[url] = (report.served[url] ?? 0) + 1;
    if (!ok.includes(status)) report.failures.push(`${url} ${what}: ${status} ${JSON.stringify(body).slice(0, 300)}`);
    return ok.includes(status);
  };
  /** A request to whichever server the traffic goes to as it is sent; a transport failure is a failure too. */
  const send = async (what: string, method: string, path: string, token: string, body: unknown, ok: number[]) => {
    const url = pick();
    try {
      const answer = await call(url, method, path, token, body);
      return record(url, what, answer.status, answer.body, ok) ? answer : undefined;
    } catch (error) {
      report.requests++;
      const cause = (error as { cause?: { code?: string; message?: string } }).cause;
      report.failures.push(`${url} ${what}: ${(error as Error).message}${cause ? ` (${cause.code ?? cause.message})` : ""}`);
      return undefined;
    }
  };
  const loop = async (client: number) => {
    while (traffic.running) {
      const n = client % fleet.tenants.length;
      const token = tenantTokens[n] as string;
      const tenant = fleet.tenants[n] as string;
      await walk(token, "/v1/catalog/capabilities?limit=1", "capabilities", (item) => (item as { capability: { id: string } }).capability.id);
      await walk(token, "/v1/catalog/changes?since=0&limit=1", "changes", (item) => (item as { capability_id: string }).capability_id);
      const action = `act_roll_${tenant}_${client}_${++sequence}`;
      const routed = await send(`resolve ${action}`, "PUT", `/v1/routes/${action}`, token, { capability_id: fleet.capability }, [200, 201]);
      if (routed) await send(`settle ${action}`, "POST", `/v1/routes/${action}/settlement`, token, { assignment: routed.body, outcome: "completed" }, [200]);
    }
  };
  /** A paged read followed to its end, each page from the server the traffic goes to now. */
  const walk = async (token: string, first: string, member: string, idOf: (item: unknown) => string) => {
    const seen: string[] = [];
    let path: string | null = first;
    while (path) {
      const page = await send(`${first} page`, "GET", path, token, undefined, [200]);
      if (!page) return;
      const body = page.body as Record<string, unknown>;
      seen.push(...(body[member] as unknown[]).map(idOf));
      path = body.next_cursor ? `${first}&cursor=${encodeURIComponent(body.next_cursor as string)}` : null;
    }
    if (seen.join() !== fleet.capabilities.join()) report.failures.push(`${first}: the walk saw ${seen.join()}`);
  };
  const loops = Array.from({ length: clients }, (_, client) => loop(client));
  return {
    get target() {
      return traffic.target;
    },
    set target(url: string | string[]) {
      traffic.target = url;
    },
    async drained(url: string) {
      while ((inFlight.get(url) ?? 0) > 0) await new Promise((resolve) => setTimeout(resolve, 20));
    },
    async stop() {
      traffic.running = false;
      await Promise.all(loops);
      return report;
    },
  };
}

/** /readyz of `url` every `everyMs` until stopped: every answer that is not 200, with its reason. */
export function pollReadiness(url: string, everyMs = 100): { stop(): Promise<{ probes: number; notReady: string[] }> } {
  const result = { probes: 0, notReady: [] as string[] };
  let running = true;
  const loop = (async () => {
    while (running) {
      try {
        const response = await fetch(`${url}/readyz`);
        const body = (await response.json()) as { reason?: string };
        result.probes++;
        if (response.status !== 200) result.notReady.push(`${response.status} ${body.reason ?? ""}`);
      } catch (error) {
        result.probes++;
        result.notReady.push((error as Error).message);
      }
      await new Promise((resolve) => setTimeout(resolve, everyMs));
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return result;
    },
  };
}
