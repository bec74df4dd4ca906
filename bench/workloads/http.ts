/**
 * The HTTP path: the Node server (src/entry/node.ts) in its own process over pg, driven by autocannon.
 * Each autocannon connection repeats one gateway cycle: PUT /v1/routes/{new action} with a tenant
 * token, then POST .../settlement with the assignment exactly as received. A cycle's latency runs
 * from the PUT being prepared to the settlement's answer. GET /healthz under the same load is
 * the HTTP stack's own no-op ceiling.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import autocannon from "autocannon";
import { mintToken } from "../../src/http/tokens.js";
import type { Recorder } from "../lib/figures.js";
import { randomRoute, tenantId, type Layout } from "../../fixtures/layout.js";
import { observe } from "../lib/observe.js";
import { Samples } from "../lib/stats.js";
import type { BenchDatabase } from "../lib/target.js";
import { backendCpuMs } from "./cost.js";
import { newActionId } from "./routing.js";

const SECRET = "aip-bench-secret-aip-bench-secret-0123456789";

async function startServerProcess(db: BenchDatabase, poolMax: number): Promise<{ url: string; child: ChildProcess }> {
  // BENCH_SERVER_NODE_ARGS: extra node flags for the server process, e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof".
  const nodeArgs = process.env.BENCH_SERVER_NODE_ARGS?.split(" ").filter(Boolean) ?? [];
  const child = spawn(process.execPath, [...nodeArgs, "--import", "tsx", fileURLToPath(new URL("./http-server.ts", import.meta.url))], {
    env: {
      ...process.env,
      DATABASE_URL: db.dataUrl,
      CONTROL_DATABASE_URL: db.controlUrl,
      MIGRATE_ON_START: "false",
      AUTH_HS256_SECRET: SECRET,
      PORT: "0",
      HOST: "127.0.0.1",
      LEASE_MAINTENANCE_INTERVAL_MS: "0",
      ACCESS_LOG: "false",
      DB_POOL_MAX: String(poolMax),
    },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const lines = createInterface({ input: child.stdout! });
  const [line] = (await Promise.race([
    once(lines, "line"),
    once(child, "exit").then(() => {
      throw new Error("HTTP server exited before listening");
    }),
  ])) as [string];
  return { url: (JSON.parse(line) as { url: string }).url, child };
}

export async function runHttp(
  recorder: Recorder,
  db: BenchDatabase,
  l: Layout,
  plan: { target: string; connections: number[]; poolMax: number; durationMs: number },
): Promise<void> {
  const tokens = new Map<string, string>();
  for (let n = 0; n < l.tenants; n++) {
    tokens.set(tenantId(n), await mintToken(SECRET, { subject: "bench-gateway", tenantId: tenantId(n), scopes: ["routes:write", "routes:read"] }));
  }
  const { url, child } = await startServerProcess(db, plan.poolMax);
  try {
    const seconds = Math.max(1, Math.round(plan.durationMs / 1000));
    for (const connections of plan.connections) await httpAt(recorder, db, l, { ...plan, url, tokens, seconds, connections, serverPid: child.pid ?? 0 });
  } finally {
    child.kill("SIGTERM");
    await once(child, "exit").catch(() => {});
  }
}

/** /healthz, then the cycle, over `connections` HTTP connections. */
async function httpAt(
  recorder: Recorder,
  db: BenchDatabase,
  l: Layout,
  plan: { target: string; poolMax: number; url: string; tokens: Map<string, string>; seconds: number; connections: number; serverPid: number },
): Promise<void> {
  const { url, tokens, seconds, connections } = plan;
  // BENCH_HTTP_CYCLES_ONLY=1 leaves /healthz out (e.g. to profile the server on cycles alone).
  if (!process.env.BENCH_HTTP_CYCLES_ONLY) {
    const health = await autocannon({ url: `${url}/healthz`, connections, duration: Math.max(1, Math.round(seconds / 2)) });
    recorder.add({
      suite: "http",
      name: "GET /healthz (HTTP no-op)",
      target: plan.target,
      concurrency: connections,
      pool: plan.poolMax,
      ops: health.requests.total,
      errors: health.non2xx ? { non2xx: health.non2xx } : {},
      seconds: health.duration,
      throughput: health.requests.total / health.duration,
      latency: {
        count: health.requests.total,
        mean: health.latency.average,
        p50: health.latency.p50,
        p95: health.latency.p90,
        p99: health.latency.p99,
        max: health.latency.max,
      },
      note: "autocannon request latency; p95 column shows p90",
    });
  }

  const run = (duration: number, cycles: Samples, failures: Record<string, number>) => {
    const fail = (what: string, status: number) => {
      const key = `${what} ${status}`;
      failures[key] = (failures[key] ?? 0) + 1;
    };
    return autocannon({
      url,
      connections,
      duration,
      requests: [
        {
          method: "PUT",
          setupRequest: (request, context) => {
            const pick = randomRoute(l);
            context.action = newActionId("h");
            context.headers = { authorization: `Bearer ${tokens.get(pick.tenant)}`, "content-type": "application/json" };
            context.started = performance.now();
            return {
              ...request,
              path: `/v1/routes/${context.action}`,
              headers: context.headers as Record<string, string>,
              body: JSON.stringify({ capability_id: pick.capability, topology: { region: pick.region } }),
            };
          },
          onResponse: (status, body, context) => {
            context.assignment = status === 201 ? body : undefined;
            if (status !== 201) fail("PUT", status);
          },
        },
        {
          method: "POST",
          // No assignment (the PUT failed): restart the sequence with a new action.
          setupRequest: (request, context) =>
            context.assignment
              ? {
                  ...request,
                  path: `/v1/routes/${context.action}/settlement`,
                  headers: context.headers as Record<string, string>,
                  body: `{"assignment":${context.assignment as string},"outcome":"completed"}`,
                }
              : undefined,
          onResponse: (status, _body, context) => {
            if (status === 200) cycles.add(performance.now() - (context.started as number));
            else fail("settlement", status);
          },
        },
      ],
    });
  };
  // Untimed first: the server's pool sessions compile and plan, as a long-running server's have.
  await run(Math.max(1, Math.round(seconds / 4)), new Samples(), {});
  const cycles = new Samples();
  const failures: Record<string, number> = {};
  const observer = await observe(db.server.adminUrl, db.name);
  const serverCpu0 = await backendCpuMs(plan.serverPid);
  const result = await run(seconds, cycles, failures);
  const serverCpu1 = await backendCpuMs(plan.serverPid);
  const observation = await observer.stop();
  // The Node server's own CPU (its process: HTTP, tokens, validation, JSON, the pg client) per cycle.
  const serverCpu =
    serverCpu0 !== null && serverCpu1 !== null && cycles.count ? `; Node server CPU ${((serverCpu1 - serverCpu0) / cycles.count).toFixed(2)} ms/cycle` : "";
  recorder.add({
    suite: "http",
    name: "PUT route + POST settlement cycle",
    target: plan.target,
    concurrency: connections,
    pool: plan.poolMax,
    ops: cycles.count,
    errors: { ...failures, ...(result.errors ? { socket: result.errors } : {}), ...(result.timeouts ? { timeouts: result.timeouts } : {}) },
    seconds: result.duration,
    throughput: cycles.count / result.duration,
    latency: cycles.summary(),
    observation,
    note: `${connections} HTTP connections, server pool ${plan.poolMax}; requests/s ${(result.requests.total / result.duration).toFixed(0)}, request p99 ${result.latency.p99} ms${serverCpu}`,
  });
}
