/**
 * Before/after measurement of a candidate schema or function change, robust to a noisy machine:
 *
 *   npx tsx bench/ab.ts <candidate.sql> [--workload=cycle|resolve|hot|noisy|serial|publish-version|toggle-type]
 *     [--concurrency=16] [--pool=16] [--rounds=4] [--seconds=4] [--replicas=10000] [--tenants=N]
 *   npx tsx bench/ab.ts --functions-at=<commit> [--workload=...]
 *
 * With --functions-at, A runs the whole function set (functions/) as committed at <commit> and B
 * the current one: a before/after of a change to the functions themselves, candidate or not.
 * Two databases get the same seeded fleet (plus the contention fleets for `hot` and `noisy`);
 * the candidate SQL is applied to B only, as the owner (the way the owner of functions/ or
 * drizzle/ would ship it). The workload then alternates A, B, B, A, A, B ... so that load from
 * anything else on the machine hits both sides alike, and the median of each side is compared.
 * Only one side holds connections at a time. Hot-table HOT update ratios are reported per side.
 *
 * Workloads: `cycle` / `resolve` on random routable pairs (`--tenants=1`: all on one tenant);
 * `hot`: cycles on one instance with two replicas; `noisy`: a tenant at its limit (128 in flight
 * over 32 connections) beside a quiet tenant (4 over 4), whose figures are the ones compared;
 * `serial`: cycles one at a time on one session, comparing the server CPU per cycle (the figure
 * least moved by other load on the machine); `publish-version`: publications of a small version
 * (a new type and a two-capability version), one at a time; `toggle-type`: publications that
 * disable or enable one of the reference fleet's types, whose live chains are evaluated again.
 *
 * A candidate file is written from the current functions for one measurement and not committed:
 * a copy of production functions goes stale as soon as they change. A change worth keeping is a
 * commit, measured with --functions-at against its parent. Past candidates and their figures are
 * in docs/decisions.md.
 */
import { execFileSync } from "node:child_process";
import { readFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { FUNCTION_SET } from "../src/db/schema-version.js";
import { RegistryError } from "../src/registry/errors.js";
import type { Registry } from "../src/registry/registry.js";
import type { Layout } from "../fixtures/layout.js";
import { closedLoop, type Measurement } from "./lib/load.js";
import { connectorType, version } from "../fixtures/records.js";
import { observe, tableWrites, writesBetween } from "./lib/observe.js";
import { seedFleet, seedRouteHistory } from "../fixtures/seed.js";
import { dropDatabase, externalServer, freshDatabase, MACHINE_URL, type BenchDatabase } from "./lib/target.js";
import { cycle, publishContentionFleets } from "./workloads/contention.js";
import { backendCpuMs } from "./workloads/cost.js";
import { resolveNew, settle, warmUp } from "./workloads/routing.js";

const args = new Map(
  process.argv
    .slice(2)
    .filter((arg) => arg.startsWith("--"))
    .map((arg) => {
      const [key, value] = arg.replace(/^--/, "").split("=");
      return [key as string, value ?? "true"];
    }),
);
const candidate = process.argv.slice(2).find((arg) => !arg.startsWith("--"));
const functionsAt = args.get("functions-at");
if (!candidate === !functionsAt)
  throw new Error(
    "usage: npx tsx bench/ab.ts <candidate.sql> | --functions-at=<commit> [--workload=cycle|resolve|hot|noisy|serial|publish-version|toggle-type] [--concurrency=16] [--pool=16] [--rounds=4] [--seconds=4]",
  );
const workload = args.get("workload") ?? "cycle";
const concurrency = Number(args.get("concurrency") ?? 16);
const pool = Number(args.get("pool") ?? Math.min(concurrency, 64));
const rounds = Number(args.get("rounds") ?? 4);
const seconds = Number(args.get("seconds") ?? 4);
const replicas = Number(args.get("replicas") ?? 10_000);
/** Restrict requests to the first N tenants (1: every transaction shares one tenant counter). */
const tenants = args.get("tenants") ? Number(args.get("tenants")) : undefined;

/** Refusals retried after their retry_after_ms in the current round (the `hot` workload). */
let retries = 0;

type Result = Measurement & { waits: Record<string, number>; extra?: string; cpuMsPerOp?: number };
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? NaN;

/** The operation of one worker for the simple workloads. */
function operation(registry: Registry, layout: Layout): () => Promise<void> {
  switch (workload) {
    case "resolve":
      return async () => {
        await resolveNew(registry, layout, "ab");
      };
    case "hot":
      // As a gateway would: a refusal that names a retry_after_ms is retried after it, so a
      // candidate that refuses instead of waiting is charged its retries in latency and throughput.
      return async () => {
        for (let attempt = 1; ; attempt++) {
          try {
            return await cycle(registry, "tenant-hot", "cap:hot.run");
          } catch (error) {
            const retryAfter = error instanceof RegistryError ? Number(error.extensions.retry_after_ms) : NaN;
            if (!(retryAfter > 0) || attempt >= 50) throw error;
            retries++;
            await new Promise((resolve) => setTimeout(resolve, retryAfter));
          }
        }
      };
    default:
      return async () => settle(registry, await resolveNew(registry, layout, "ab"));
  }
}

/** One measured round on one side; pools are opened and closed around it. */
async function round(db: BenchDatabase, layout: Layout): Promise<Result> {
  if (workload === "noisy") return noisyRound(db);
  if (workload === "serial") return serialRound(db, layout);
  if (workload === "publish-version" || workload === "toggle-type") return publicationRound(db);
  const handle = await db.registry(pool);
  try {
    await warmUp(handle.registry, layout, pool);
    const op = operation(handle.registry, layout);
    if (workload === "hot") await closedLoop({ concurrency, durationMs: 1000 }, op);
    const observer = await observe(db.server.adminUrl, db.name);
    retries = 0;
    const measurement = await closedLoop({ concurrency, durationMs: seconds * 1000 }, op);
    const extra = workload === "hot" ? `${(retries / measurement.seconds).toFixed(1)} refusals retried/s` : undefined;
    return { ...measurement, waits: (await observer.stop()).waits, ...(extra ? { extra } : {}) };
  } finally {
    await handle.close();
  }
}

async function serialRound(db: BenchDatabase, layout: Layout): Promise<Result> {
  const handle = await db.registry(1);
  try {
    const op = operation(handle.registry, layout);
    await warmUp(handle.registry, layout, 1);
    const pid = Number((await handle.pool.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]?.pid);
    const cpu0 = await backendCpuMs(pid);
    const measurement = await closedLoop({ concurrency: 1, durationMs: seconds * 1000 }, op);
    const cpu1 = await backendCpuMs(pid);
    const cpu = cpu0 !== null && cpu1 !== null ? (cpu1 - cpu0) / measurement.ops : NaN;
    return { ...measurement, waits: {}, extra: `server CPU ${cpu.toFixed(2)} ms/op` };
  } finally {
    await handle.close();
  }
}

/** Publications made so far on each side: every new version needs new IDs, every toggle a change. */
const publications = new Map<string, number>();
/** A type of the reference fleet (fixtures/seed.ts): its instances' live chains are evaluated again on each toggle. */
const TOGGLED_TYPE = "ctype_bench_0001";

/** Publications one at a time (they serialize on the catalog lock anyway), timed without building the change. */
async function publicationRound(db: BenchDatabase): Promise<Result> {
  const handle = await db.registry(1);
  try {
    const next = () => {
      const n = publications.get(db.name) ?? 0;
      publications.set(db.name, n + 1);
      return n;
    };
    const change = async (n: number) =>
      workload === "toggle-type"
        ? [{ op: "set_connector_type_enabled", id: TOGGLED_TYPE, enabled: n % 2 === 1 }]
        : [connectorType(`ctype_ab_${n}`), await version(`cver_ab_${n}`, `ctype_ab_${n}`, [`cap:ab.${n}.a`, `cap:ab.${n}.b`])];
    const op = async () => {
      const changes = await change(next());
      const started = performance.now();
      const result = await handle.registry.publish(changes);
      if (result.changed === 0) throw new Error("the publication changed nothing");
      return performance.now() - started;
    };
    await closedLoop({ concurrency: 1, durationMs: 500 }, op);
    // Publications run on the control pool's sessions: their server CPU, the figure other load on
    // a shared machine moves least.
    const controlCpu = async () => {
      const { rows } = await handle.pool.query<{ pid: number }>(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'aip-bench-control'",
      );
      let total = 0;
      for (const { pid } of rows) total += (await backendCpuMs(pid)) ?? Number.NaN;
      return total;
    };
    const cpu0 = await controlCpu();
    const measurement = await closedLoop({ concurrency: 1, durationMs: seconds * 1000 }, op);
    const cpuMsPerOp = ((await controlCpu()) - cpu0) / measurement.ops;
    return { ...measurement, waits: {}, cpuMsPerOp, extra: `server CPU ${cpuMsPerOp.toFixed(2)} ms/publication` };
  } finally {
    await handle.close();
  }
}

async function noisyRound(db: BenchDatabase): Promise<Result> {
  const quiet = await db.registry(4);
  const noisy = await db.registry(32);
  try {
    const quietOp = () => cycle(quiet.registry, "tenant-quiet", "cap:nq.run");
    const noisyOp = () => cycle(noisy.registry, "tenant-noisy", "cap:nq.run", 10);
    await Promise.all([closedLoop({ concurrency: 4, durationMs: 1000 }, quietOp), closedLoop({ concurrency: 128, durationMs: 1000 }, noisyOp)]);
    const observer = await observe(db.server.adminUrl, db.name);
    const [q, n] = await Promise.all([
      closedLoop({ concurrency: 4, durationMs: seconds * 1000 }, quietOp),
      closedLoop({ concurrency: 128, durationMs: seconds * 1000 }, noisyOp),
    ]);
    const rejected = (n.errors["capacity-exceeded"] ?? 0) / n.seconds;
    return {
      ...q,
      waits: (await observer.stop()).waits,
      extra: `noisy: ${n.throughput.toFixed(1)} accepted/s, ${rejected.toFixed(1)} rejected/s, p50 ${n.latency.p50.toFixed(0)} ms`,
    };
  } finally {
    await Promise.all([quiet.close(), noisy.close()]);
  }
}

const FUNCTIONS_DIR = fileURLToPath(new URL("../functions/", import.meta.url));

/**
 * functions/*.sql as committed at `commit`, installed in place of this build's function set (the
 * schema the bench's registries call). Sets from before function sets named `public` in their
 * search paths: they get the set's own. Grants are every function of the set to both runtime
 * roles (an older grants file names other roles): grants cost nothing per call.
 */
function functionSetAt(commit: string): string {
  const git = (...a: string[]) => execFileSync("git", ["-C", FUNCTIONS_DIR, ...a], { encoding: "utf8", maxBuffer: 64 << 20 });
  const files = git("ls-tree", "--name-only", "--full-name", commit, ".")
    .split("\n")
    .filter((f) => f.endsWith(".sql") && !f.endsWith("90_grants.sql"))
    .sort();
  const sources = files.map((f) => git("show", `${commit}:${f}`).replaceAll("SET search_path = pg_catalog, public, pg_temp", "SET search_path FROM CURRENT"));
  return [
    `DROP SCHEMA ${FUNCTION_SET} CASCADE; CREATE SCHEMA ${FUNCTION_SET}; SET search_path = ${FUNCTION_SET}, public, pg_temp;`,
    ...sources,
    `DO $$
     DECLARE r aip_schema_roles; f regprocedure;
     BEGIN
       SELECT * INTO STRICT r FROM aip_schema_roles;
       EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I, %I', current_schema(), r.data_role, r.control_role);
       FOR f IN SELECT p.oid::regprocedure FROM pg_proc p WHERE p.pronamespace = current_schema()::regnamespace LOOP
         EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I, %I', f, r.data_role, r.control_role);
       END LOOP;
     END $$;
     RESET search_path;`,
  ].join("\n");
}

async function main() {
  // What each side runs besides the functions the fresh database was migrated with.
  let apply: Partial<Record<"A" | "B", string>>;
  let label: string;
  if (functionsAt) {
    apply = { A: functionSetAt(functionsAt) };
    label = `functions/ at ${functionsAt} (A) and in the working tree (B)`;
  } else {
    apply = { B: await readFile(candidate as string, "utf8") };
    label = candidate as string;
  }
  const server = await externalServer(process.env.BENCH_DATABASE_URL ?? MACHINE_URL, "machine");
  const sides: Record<"A" | "B", BenchDatabase> = {
    // BENCH_DATABASE_NAME: another prefix, so that two runs on one server cannot drop each other's databases.
    A: await freshDatabase(server, `${process.env.BENCH_DATABASE_NAME ?? "aip_bench_ab"}_a`),
    B: await freshDatabase(server, `${process.env.BENCH_DATABASE_NAME ?? "aip_bench_ab"}_b`),
  };
  try {
    const seeds = await Promise.all(Object.values(sides).map((db) => db.withOwner((s) => seedFleet(s, { replicas, types: Math.min(1000, replicas) }))));
    // Route history, so that routing is planned against a route table like a registry's (run.ts).
    await Promise.all(Object.values(sides).map((db) => db.withOwner((s) => seedRouteHistory(s, 20_000))));
    if (workload === "hot" || workload === "noisy") {
      for (const db of Object.values(sides)) {
        const publisher = await db.registry(1);
        await publishContentionFleets(publisher.registry).finally(() => publisher.close());
      }
    }
    for (const name of ["A", "B"] as const) {
      const sql = apply[name];
      if (sql) await sides[name].withOwner((s) => s.exec(sql));
    }
    await Promise.all(Object.values(sides).map((db) => db.withOwner((s) => s.exec("ANALYZE"))));
    const layout = { ...seeds[0]!.layout, ...(tenants ? { tenants } : {}) };
    const before = { A: await sides.A.withOwner((s) => tableWrites((q) => s.query(q))), B: await sides.B.withOwner((s) => tableWrites((q) => s.query(q))) };
    const results: Record<"A" | "B", Result[]> = { A: [], B: [] };
    const shape =
      workload === "noisy"
        ? "quiet tenant (4 over 4) beside a noisy one (128 over 32)"
        : ["serial", "publish-version", "toggle-type"].includes(workload)
          ? "one at a time"
          : `concurrency ${concurrency} over ${pool} connections`;
    console.log(`${label}: ${workload}, ${shape}, ${rounds} x ${seconds} s per side, alternating`);
    for (let r = 0; r < rounds; r++) {
      for (const name of (r % 2 === 0 ? ["A", "B"] : ["B", "A"]) as ("A" | "B")[]) {
        const m = await round(sides[name], layout);
        results[name].push(m);
        const waits = Object.entries(m.waits)
          .slice(0, 3)
          .map(([w, n]) => `${w} ${n}`)
          .join(", ");
        console.log(
          `  ${name} round ${r + 1}: ${m.throughput.toFixed(1)} ops/s p50 ${m.latency.p50.toFixed(1)} p99 ${m.latency.p99.toFixed(1)} ms ${JSON.stringify(m.errors)} ${m.extra ?? ""} waits: ${waits}`,
        );
      }
    }
    await new Promise((resolve) => setTimeout(resolve, 1500)); // let backends flush table statistics
    for (const name of ["A", "B"] as const) {
      const after = await sides[name].withOwner((s) => tableWrites((q) => s.query(q)));
      const hot = writesBetween(before[name], after)
        .map((w) => `${w.table.replace("aip_", "")} HOT ${w.hotPct ?? "-"}%`)
        .join(", ");
      const ms = results[name];
      console.log(
        `${name === "A" ? "before" : "after "}: median ${median(ms.map((m) => m.throughput)).toFixed(1)} ops/s, p50 ${median(ms.map((m) => m.latency.p50)).toFixed(1)} ms, p99 ${median(ms.map((m) => m.latency.p99)).toFixed(1)} ms; ${hot}`,
      );
    }
    const ratio = median(results.B.map((m) => m.throughput)) / median(results.A.map((m) => m.throughput));
    console.log(`after/before throughput: x${ratio.toFixed(2)}`);
    if (results.A.every((m) => m.cpuMsPerOp !== undefined)) {
      const cpu = (name: "A" | "B") => median(results[name].map((m) => m.cpuMsPerOp as number));
      console.log(`server CPU per publication: before ${cpu("A").toFixed(2)} ms, after ${cpu("B").toFixed(2)} ms (x${(cpu("B") / cpu("A")).toFixed(2)})`);
    }
  } finally {
    for (const db of Object.values(sides)) {
      await db.closePools();
      await dropDatabase(server, db.name);
    }
  }
}

main().catch((error: unknown) => {
  console.error(error instanceof Error && error.message.startsWith("refusing ") ? error.message : error);
  process.exit(1);
});
