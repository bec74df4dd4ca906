/**
 * Before/after measurement of a change to the Node server (not its SQL), robust to a noisy machine:
 *
 *   npx tsx bench/http-ab.ts --server-at=<commit> [--rounds=4] [--seconds=5] [--connections=16]
 *     [--workloads=cycle,catalog,healthz] [--replicas=1000]
 *
 * One seeded database, two server processes on it: A runs src/ as committed at <commit>, B the
 * working tree's (both over the working tree's SQL functions, so only the Node code differs; A gets
 * the working tree's src/db/schema-version.ts, so that it accepts the database as current). Each
 * round runs every workload against A and against B, alternating the order (A B, B A, ...), and
 * reports per side the throughput, the p99, and the server process's own CPU per operation
 * (/proc/<pid>/stat), the figure other load on a shared machine moves least. Medians of the rounds
 * are compared at the end.
 *
 * Workloads (autocannon, `connections` connections):
 * - cycle: each connection repeats PUT /v1/routes/{new action} + POST .../settlement with the
 *   assignment as received (bench/workloads/http.ts); an operation is a cycle.
 * - catalog: warm first catalog pages (limit 50) of the fleet's tenants with default settings (the
 *   shared revision check): what a gateway's catalog sync asks most.
 * - healthz: GET /healthz, the server's own no-op ceiling; the catalog figure is also given as a
 *   ratio to it.
 * BENCH_SERVER_NODE_ARGS (e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof") is passed to both servers.
 */
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import autocannon from "autocannon";
import { mintToken } from "../src/http/tokens.js";
import { randomRoute, tenantId, type Layout } from "../fixtures/layout.js";
import { seedFleet, seedRouteHistory } from "../fixtures/seed.js";
import { FUNCTION_SET } from "../src/db/schema-version.js";
import { dropDatabase, externalServer, freshDatabase, MACHINE_URL, type BenchDatabase } from "./lib/target.js";
import { newActionId } from "./workloads/routing.js";

const options = new Map(
  process.argv
    .slice(2)
    .filter((arg) => arg.startsWith("--"))
    .map((arg) => {
      const [key, value] = arg.replace(/^--/, "").split("=");
      return [key as string, value ?? "true"];
    }),
);
const serverAt = options.get("server-at");
if (!serverAt)
  throw new Error("usage: npx tsx bench/http-ab.ts --server-at=<commit> [--rounds=4] [--seconds=5] [--connections=16] [--workloads=cycle,catalog,healthz]");
const rounds = Number(options.get("rounds") ?? 4);
const seconds = Number(options.get("seconds") ?? 5);
const connections = Number(options.get("connections") ?? 16);
const replicas = Number(options.get("replicas") ?? 1000);
const workloads = (options.get("workloads") ?? "cycle,catalog,healthz").split(",");

const SECRET = "aip-bench-secret-aip-bench-secret-0123456789";
const ROOT = fileURLToPath(new URL("..", import.meta.url));

/** src/ and the server entry of `commit` in a directory of their own, over this checkout's node_modules. */
function checkoutAt(commit: string): string {
  const dir = mkdtempSync(join(tmpdir(), "aip-http-ab-"));
  const archive = execFileSync("git", ["-C", ROOT, "archive", commit, "src", "bench/workloads/http-server.ts", "package.json", "tsconfig.json"], {
    maxBuffer: 256 << 20,
  });
  execFileSync("tar", ["-x", "-C", dir], { input: archive });
  symlinkSync(join(ROOT, "node_modules"), join(dir, "node_modules"));
  cpSync(join(ROOT, "src/db/schema-version.ts"), join(dir, "src/db/schema-version.ts"));
  return dir;
}

function withSearchPath(url: string): string {
  const parsed = new URL(url);
  parsed.searchParams.set("options", `-c search_path=${FUNCTION_SET},public`);
  return parsed.toString();
}

interface Side {
  name: "A" | "B";
  url: string;
  child: ChildProcess;
}

async function startSide(name: "A" | "B", root: string, db: BenchDatabase): Promise<Side> {
  const nodeArgs = process.env.BENCH_SERVER_NODE_ARGS?.split(" ").filter(Boolean) ?? [];
  const child = spawn(process.execPath, [...nodeArgs, "--import", "tsx", join(root, "bench/workloads/http-server.ts")], {
    cwd: root,
    env: {
      ...process.env,
      // A build from before function sets calls its functions unqualified: the session's path
      // leads to the working tree's set (a build with sets names it, and ignores the path).
      DATABASE_URL: withSearchPath(db.dataUrl),
      REGISTRY_MODE: "data-plane",
      MIGRATE_ON_START: "false",
      AUTH_HS256_SECRET: SECRET,
      PORT: "0",
      HOST: "127.0.0.1",
      LEASE_MAINTENANCE_INTERVAL_MS: "0",
      ACCESS_LOG: "false",
      DB_POOL_MAX: String(connections),
    },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const lines = createInterface({ input: child.stdout! });
  const [line] = (await Promise.race([
    once(lines, "line"),
    once(child, "exit").then(() => {
      throw new Error(`server ${name} exited before listening`);
    }),
  ])) as [string];
  return { name, url: (JSON.parse(line) as { url: string }).url, child };
}

function processCpuMs(pid: number | undefined): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ") ?? [];
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

interface Figure {
  throughput: number;
  p99: number;
  cpuUs: number;
  failures: number;
}

type Run = (url: string, duration: number) => Promise<{ ops: number; p99: number; failures: number; duration: number }>;

function cycleRun(l: Layout, tokens: Map<string, string>): Run {
  return async (url, duration) => {
    let ops = 0;
    let failures = 0;
    const result = await autocannon({
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
            return {
              ...request,
              path: `/v1/routes/${context.action}`,
              headers: context.headers as Record<string, string>,
              body: JSON.stringify({ capability_id: pick.capability, topology: { region: pick.region } }),
            };
          },
          onResponse: (status, body, context) => {
            context.assignment = status === 201 ? body : undefined;
            if (status !== 201) failures++;
          },
        },
        {
          method: "POST",
          setupRequest: (request, context) =>
            context.assignment
              ? {
                  ...request,
                  path: `/v1/routes/${context.action}/settlement`,
                  headers: context.headers as Record<string, string>,
                  body: `{"assignment":${context.assignment as string},"outcome":"completed"}`,
                }
              : undefined,
          onResponse: (status) => {
            if (status === 200) ops++;
            else failures++;
          },
        },
      ],
    });
    // autocannon's p99 is per request; a cycle is two.
    return { ops, p99: result.latency.p99, failures, duration: result.duration };
  };
}

function getRun(paths: { path: string; token?: string }[], expect: number): Run {
  return async (url, duration) => {
    let next = 0;
    let failures = 0;
    const result = await autocannon({
      url,
      connections,
      duration,
      requests: [
        {
          method: "GET",
          setupRequest: (request) => {
            const target = paths[next++ % paths.length]!;
            const headers: Record<string, string> = target.token ? { authorization: `Bearer ${target.token}` } : {};
            return { ...request, path: target.path, headers };
          },
          onResponse: (status) => {
            if (status !== expect) failures++;
          },
        },
      ],
    });
    return { ops: result.requests.total - failures, p99: result.latency.p99, failures, duration: result.duration };
  };
}

async function measure(side: Side, run: Run): Promise<Figure> {
  await run(side.url, 1); // warm: sessions planned, caches filled
  const cpu0 = processCpuMs(side.child.pid);
  const { ops, p99, failures, duration } = await run(side.url, seconds);
  const cpu1 = processCpuMs(side.child.pid);
  return { throughput: ops / duration, p99, cpuUs: ops ? ((cpu1 - cpu0) * 1000) / ops : Number.NaN, failures };
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? Number.NaN;

async function main() {
  const server = await externalServer(process.env.BENCH_DATABASE_URL ?? MACHINE_URL, "machine");
  const db = await freshDatabase(server, `${process.env.BENCH_DATABASE_NAME ?? "aip_bench_http_ab"}`);
  const before = checkoutAt(serverAt as string);
  const sides: Side[] = [];
  try {
    const { layout: l } = await db.withOwner((s) => seedFleet(s, { replicas, types: Math.min(1000, replicas) }));
    await db.withOwner((s) => seedRouteHistory(s, 20_000));
    await db.withOwner((s) => s.exec("ANALYZE"));
    const tokens = new Map<string, string>();
    for (let n = 0; n < l.tenants; n++) {
      tokens.set(
        tenantId(n),
        await mintToken(SECRET, { subject: "bench-gateway", tenantId: tenantId(n), scopes: ["routes:write", "routes:read", "catalog:read"] }),
      );
    }
    const runs: Record<string, Run> = {
      cycle: cycleRun(l, tokens),
      catalog: getRun(
        [...tokens].map(([, token]) => ({ path: "/v1/catalog/capabilities?limit=50", token })),
        200,
      ),
      healthz: getRun([{ path: "/healthz" }], 200),
    };
    sides.push(await startSide("A", before, db), await startSide("B", ROOT, db));
    console.log(
      `Node server at ${serverAt} (A) and in the working tree (B): ${workloads.join(", ")}, ${connections} connections, ${rounds} x ${seconds} s per side, alternating; ${replicas} replicas`,
    );
    const results: Record<string, Record<"A" | "B", Figure[]>> = {};
    for (let r = 0; r < rounds; r++) {
      for (const side of r % 2 === 0 ? sides : [...sides].reverse()) {
        for (const workload of workloads) {
          const figure = await measure(side, runs[workload] as Run);
          const byWorkload = results[workload] ?? { A: [], B: [] };
          results[workload] = byWorkload;
          byWorkload[side.name].push(figure);
          console.log(
            `  ${side.name} round ${r + 1} ${workload}: ${figure.throughput.toFixed(0)}/s p99 ${figure.p99} ms, server CPU ${figure.cpuUs.toFixed(0)} µs/op${figure.failures ? `, ${figure.failures} failed` : ""}`,
          );
        }
      }
    }
    for (const [workload, bySide] of Object.entries(results)) {
      const line = (name: "A" | "B") => {
        const figures = bySide[name];
        return `${median(figures.map((f) => f.throughput)).toFixed(0)}/s (${figures.map((f) => f.throughput.toFixed(0)).join(", ")}), p99 ${median(figures.map((f) => f.p99))} ms, CPU ${median(figures.map((f) => f.cpuUs)).toFixed(0)} µs/op (${figures.map((f) => f.cpuUs.toFixed(0)).join(", ")})`;
      };
      console.log(`${workload}: before ${line("A")}; after ${line("B")}`);
    }
    if (results.catalog && results.healthz) {
      for (const name of ["A", "B"] as const) {
        const ratio = median(results.catalog[name].map((f) => f.throughput)) / median(results.healthz[name].map((f) => f.throughput));
        console.log(`catalog first page / healthz, ${name}: ${ratio.toFixed(3)}`);
      }
    }
  } finally {
    for (const side of sides) {
      side.child.kill("SIGTERM");
      await once(side.child, "exit").catch(() => {});
    }
    rmSync(before, { recursive: true, force: true });
    await db.closePools();
    await dropDatabase(server, db.name);
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
