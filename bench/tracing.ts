/**
 * What tracing costs the Node server's hot paths, A B C alternated in one run:
 *
 *   npx tsx bench/tracing.ts [--base=37e72cb] [--rounds=4] [--seconds=5] [--replicas=10000]
 *
 * Three servers (bench/workloads/http-server.ts, each its own process, data plane, the same
 * seeded database, REGISTRY_MODE=data-plane, access log off as in the other HTTP suites):
 * - `base`: the server as committed at --base (default: 37e72cb, the release before trace context),
 *   from `git archive` into a temporary directory that shares this checkout's node_modules;
 * - `off`: this tree with no OTEL_* variables: every request has a trace (its ids in the SQL
 *   comment, the access log, the activity history), nothing is recorded or exported;
 * - `on`: this tree exporting every span (OTEL_TRACES_SAMPLER=always_on, OTLP/HTTP protobuf) to a
 *   local receiver that reads and discards them.
 * Two workloads, each autocannon against one server at a time, in the order A B C, then C B A, ...:
 * - `catalog`: warm first catalog pages of 32 sampled tenants, 32 connections, one statement per
 *   request (CATALOG_SHARED_REVISION_CHECK=false: every request's statement carries its comment);
 * - `cycle`: PUT /v1/routes/{new action} + POST .../settlement, 16 connections (bench/workloads/http.ts).
 * Per server and workload: the median over rounds of throughput, p50 and p99 latency, and the
 * server process's CPU per request (/proc, 10 ms ticks: the figure other load on a shared machine
 * moves least), with `off` and `on` as ratios to `base` and `on` - `off` as tracing's cost per request.
 */
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { createServer, type Server as HttpServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import autocannon from "autocannon";
import { mintToken } from "../src/http/tokens.js";
import { randomRoute, tenantId, type Layout } from "../fixtures/layout.js";
import { seedFleet, seedRouteHistory } from "../fixtures/seed.js";
import { dropDatabase, externalServer, freshDatabase, MACHINE_URL, type BenchDatabase } from "./lib/target.js";
import { newActionId } from "./workloads/routing.js";

const args = new Map(
  process.argv
    .slice(2)
    .filter((arg) => arg.startsWith("--"))
    .map((arg) => {
      const [key, value] = arg.replace(/^--/, "").split("=");
      return [key as string, value ?? "true"];
    }),
);
const base = args.get("base") ?? "37e72cb";
const rounds = Number(args.get("rounds") ?? 4);
const seconds = Number(args.get("seconds") ?? 5);
const replicas = Number(args.get("replicas") ?? 10_000);
const POOL = Number(args.get("pool") ?? 12);
const SECRET = "aip-bench-secret-aip-bench-secret-0123456789";
const ROOT = fileURLToPath(new URL("../", import.meta.url));

type Variant = "base" | "off" | "on";
type Workload = "catalog" | "cycle";
interface Measurement {
  throughput: number;
  p50: number;
  p99: number;
  cpuUsPerRequest: number;
  errors: number;
}

/** This tree's server code as committed at `commit`, runnable with this checkout's node_modules. */
function checkoutAt(commit: string): string {
  const dir = mkdtempSync(join(tmpdir(), "aip-bench-base-"));
  const archive = execFileSync(
    "git",
    ["-C", ROOT, "archive", commit, "src", "functions", "drizzle", "bench/workloads/http-server.ts", "package.json", "tsconfig.json"],
    {
      maxBuffer: 256 << 20,
    },
  );
  execFileSync("tar", ["-x", "-C", dir], { input: archive });
  symlinkSync(join(ROOT, "node_modules"), join(dir, "node_modules"));
  return dir;
}

/** An OTLP receiver that reads every export and keeps nothing (what `on` exports to). */
async function discardingReceiver(): Promise<{ url: string; exports: () => number; server: HttpServer }> {
  let count = 0;
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      count++;
      res.writeHead(200, { "content-type": "application/x-protobuf" }).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, exports: () => count, server };
}

async function startServer(root: string, db: BenchDatabase, env: Record<string, string>): Promise<{ url: string; child: ChildProcess }> {
  const child = spawn(process.execPath, ["--import", "tsx", join(root, "bench/workloads/http-server.ts")], {
    cwd: ROOT,
    env: {
      PATH: process.env.PATH ?? "",
      DATABASE_URL: db.dataUrl,
      REGISTRY_MODE: "data-plane",
      AUTH_HS256_SECRET: SECRET,
      PORT: "0",
      HOST: "127.0.0.1",
      LEASE_MAINTENANCE_INTERVAL_MS: "0",
      ACCESS_LOG: "false",
      DB_POOL_MAX: String(POOL),
      CATALOG_SHARED_REVISION_CHECK: "false",
      ...env,
    },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const lines = createInterface({ input: child.stdout! });
  const [line] = (await Promise.race([
    once(lines, "line"),
    once(child, "exit").then(() => {
      throw new Error("a server exited before listening");
    }),
  ])) as [string];
  return { url: (JSON.parse(line) as { url: string }).url, child };
}

/** CPU time the process has used, in ms (utime + stime, 10 ms ticks). */
function processCpuMs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ") ?? [];
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? Number.NaN;

async function main() {
  const server = await externalServer(process.env.BENCH_DATABASE_URL ?? MACHINE_URL, "machine");
  const baseDir = checkoutAt(base);
  // The base build migrates first and this one after it, as in an upgrade: both serve the database.
  const db = await freshDatabase(server, process.env.BENCH_DATABASE_NAME ?? "aip_bench_tracing", {
    migrateFirst: (ownerUrl) =>
      execFileSync(
        process.execPath,
        [
          "--import",
          "tsx",
          "-e",
          'import(require("node:url").pathToFileURL(process.argv[1]).href)',
          join(baseDir, "src/entry/cli.ts"),
          "migrate",
          "--database-url",
          ownerUrl,
        ],
        {
          cwd: baseDir,
          stdio: ["ignore", "ignore", "inherit"],
        },
      ),
  });
  const receiver = await discardingReceiver();
  const servers: Partial<Record<Variant, { url: string; child: ChildProcess }>> = {};
  try {
    const seed = await db.withOwner((s) => seedFleet(s, { replicas, types: Math.min(1000, replicas) }));
    await db.withOwner((s) => seedRouteHistory(s, 20_000));
    await db.withOwner((s) => s.exec("ANALYZE"));
    const layout: Layout = seed.layout;
    servers.base = await startServer(baseDir, db, {});
    servers.off = await startServer(ROOT, db, {});
    servers.on = await startServer(ROOT, db, {
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      OTEL_TRACES_SAMPLER: "always_on",
      OTEL_SERVICE_NAME: "aip-bench",
    });

    const catalogTenants = Array.from({ length: Math.min(32, layout.tenants) }, (_, i) => tenantId(Math.floor((i * layout.tenants) / 32)));
    const catalogTokens = await Promise.all(catalogTenants.map((t) => mintToken(SECRET, { subject: "bench-gateway", tenantId: t, scopes: ["catalog:read"] })));
    const routeTokens = new Map<string, string>();
    for (let n = 0; n < layout.tenants; n++) {
      routeTokens.set(tenantId(n), await mintToken(SECRET, { subject: "bench-gateway", tenantId: tenantId(n), scopes: ["routes:write", "routes:read"] }));
    }

    const catalog = (url: string, duration: number) => {
      let next = 0;
      return autocannon({
        url,
        connections: 32,
        duration,
        requests: [
          {
            method: "GET",
            setupRequest: (request) => ({
              ...request,
              path: "/v1/catalog/capabilities?limit=50",
              headers: { authorization: `Bearer ${catalogTokens[next++ % catalogTokens.length]}` },
            }),
          },
        ],
      });
    };
    const cycle = (url: string, duration: number) =>
      autocannon({
        url,
        connections: 16,
        duration,
        requests: [
          {
            method: "PUT",
            setupRequest: (request, context) => {
              const pick = randomRoute(layout);
              context.action = newActionId("t");
              context.headers = { authorization: `Bearer ${routeTokens.get(pick.tenant)}`, "content-type": "application/json" };
              return {
                ...request,
                path: `/v1/routes/${context.action}`,
                headers: context.headers as Record<string, string>,
                body: JSON.stringify({ capability_id: pick.capability, topology: { region: pick.region } }),
              };
            },
            onResponse: (status, body, context) => {
              context.assignment = status === 201 ? body : undefined;
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
          },
        ],
      });
    const runs: Record<Workload, (url: string, duration: number) => ReturnType<typeof autocannon>> = { catalog, cycle };

    // Warm every server on both workloads: sessions plan their statements, caches fill.
    for (const variant of ["base", "off", "on"] as const) for (const workload of ["catalog", "cycle"] as const) await runs[workload](servers[variant]!.url, 2);

    const results: Record<Workload, Record<Variant, Measurement[]>> = {
      catalog: { base: [], off: [], on: [] },
      cycle: { base: [], off: [], on: [] },
    };
    console.log(`tracing cost: base ${base}, off (this tree, no OTEL_*), on (always_on, OTLP protobuf); ${rounds} rounds x ${seconds} s`);
    for (let r = 0; r < rounds; r++) {
      const order: Variant[] = r % 2 === 0 ? ["base", "off", "on"] : ["on", "off", "base"];
      for (const workload of ["catalog", "cycle"] as const) {
        for (const variant of order) {
          const { url, child } = servers[variant]!;
          const cpu0 = processCpuMs(child.pid as number);
          const result = await runs[workload](url, seconds);
          const cpu1 = processCpuMs(child.pid as number);
          const m: Measurement = {
            throughput: result.requests.total / result.duration,
            p50: result.latency.p50,
            p99: result.latency.p99,
            cpuUsPerRequest: ((cpu1 - cpu0) * 1000) / result.requests.total,
            errors: result.non2xx + result.errors,
          };
          results[workload][variant].push(m);
          console.log(
            `  round ${r + 1} ${workload.padEnd(7)} ${variant.padEnd(4)} ${m.throughput.toFixed(0).padStart(6)} req/s  p50 ${m.p50} ms  p99 ${m.p99} ms  server CPU ${m.cpuUsPerRequest.toFixed(0)} µs/request${m.errors ? `  errors ${m.errors}` : ""}`,
          );
        }
      }
    }
    console.log(`\nmedians (${rounds} rounds; requests: a cycle is two):`);
    for (const workload of ["catalog", "cycle"] as const) {
      const of = (variant: Variant, key: keyof Measurement) => median(results[workload][variant].map((m) => m[key]));
      for (const variant of ["base", "off", "on"] as const) {
        const ratio =
          variant === "base"
            ? ""
            : ` (x${(of(variant, "throughput") / of("base", "throughput")).toFixed(3)} base throughput, CPU x${(of(variant, "cpuUsPerRequest") / of("base", "cpuUsPerRequest")).toFixed(3)})`;
        console.log(
          `  ${workload.padEnd(7)} ${variant.padEnd(4)} ${of(variant, "throughput").toFixed(0).padStart(6)} req/s  p50 ${of(variant, "p50")} ms  p99 ${of(variant, "p99")} ms  CPU ${of(variant, "cpuUsPerRequest").toFixed(0)} µs/request${ratio}`,
        );
      }
      const perRequest = median(results[workload].on.map((m, i) => m.cpuUsPerRequest - (results[workload].off[i] as Measurement).cpuUsPerRequest));
      console.log(`  ${workload.padEnd(7)} tracing on at 100 %: +${perRequest.toFixed(0)} µs server CPU per request (median of the rounds' on - off)`);
    }
    console.log(`\nOTLP exports received from 'on': ${receiver.exports()}`);
  } finally {
    for (const s of Object.values(servers)) {
      s?.child.kill("SIGTERM");
      if (s) await once(s.child, "exit").catch(() => {});
    }
    await new Promise<void>((resolve) => receiver.server.close(() => resolve()));
    rmSync(baseDir, { recursive: true, force: true });
    await db.closePools();
    await dropDatabase(server, db.name);
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
