/**
 * Before/after measurement of a candidate schema or function change, robust to a noisy machine:
 *
 *   npx tsx bench/ab.ts <candidate.sql> [--workload=cycle|resolve|hot|noisy|serial|publish-version|toggle-type]
 *     [--concurrency=16] [--pool=16] [--rounds=4] [--seconds=4] [--replicas=10000] [--tenants=N]
 *   npx tsx bench/ab.ts --functions-at=<commit> [--workload=...] [--fleet=bench|probe] [--peer] [--peer-queue=N]
 *
 * With --functions-at, A runs the whole function set (functions/) as committed at <commit> and B
 * the current one: a before/after of a change to the functions themselves, candidate or not.
 * Two databases get the same seeded fleet (plus the contention fleets for `hot` and `noisy`);
 * the candidate SQL is applied to B only, as the owner (the way the owner of functions/ or
 * drizzle/ would ship it). The workload then alternates A, B, B, A, A, B ... so that load from
 * anything else on the machine hits both sides alike, and the median of each side is compared.
 * Only one side holds connections at a time. Hot-table HOT update ratios are reported per side.
 *
 * `--peer` adds graphile-worker (claim+complete of no-op jobs, bench/workloads/peers.ts) as a
 * third side at the same concurrency over the same pool size, in A's database, alternating with
 * A and B, and reports each side's median over the peer's: the same-run ratio the routing targets
 * are stated in. Its queue holds more jobs than a round can take, or `--peer-queue=N` (measured
 * while it drains from N to 1,000). `--fleet=probe` keeps one binding per instance (1,000
 * replicas: 10 tenants, 1,000 bindings; probeFleet) instead of
 * the bench layout's ten. `--tenant-limit=off` puts every binding under a policy without a tenant
 * limit (see withoutTenantLimit).
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
import { readFile } from "node:fs/promises";
import type { MigrationSession } from "../src/db/migrate.js";
import { RegistryError } from "../src/registry/errors.js";
import type { Registry } from "../src/registry/registry.js";
import type pg from "pg";
import { randomRoute } from "../fixtures/layout.js";
import { closedLoop, type Measurement } from "./lib/load.js";
import { connectorType, version } from "../fixtures/records.js";
import { observe, tableWrites, writesBetween } from "./lib/observe.js";
import { seedFleet, seedRouteHistory } from "../fixtures/seed.js";
import { dropDatabase, externalServer, freshDatabase, MACHINE_URL, type BenchDatabase } from "./lib/target.js";
import { cycle, publishContentionFleets } from "./workloads/contention.js";
import { backendCpuMs } from "./workloads/cost.js";
import { functionSetAt } from "./lib/functions-at.js";
import { FUNCTION_SET } from "../src/db/schema-version.js";
import { runGraphileWorker } from "./workloads/peers.js";
import { newActionId, resolveNew, settle, warmUp, type RouteSource } from "./workloads/routing.js";

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
const fleet = args.get("fleet") ?? "bench";
if (fleet !== "bench" && fleet !== "probe") throw new Error("--fleet is bench or probe");
const peer = args.has("peer");
/** `--tenant-limit=off`: every binding under a policy without a tenant limit (evidence: what the tenant counter's row costs). */
const tenantLimitOff = args.get("tenant-limit") === "off";
const peerQueue = args.get("peer-queue") ? Number(args.get("peer-queue")) : undefined;

/** The routable (tenant, capability, preferred region) triples of the probe fleet, read once after seeding. */
let probeRoutes: { tenant: string; capability: string; region: string }[] = [];

/** Refusals retried after their retry_after_ms in the current round (the `hot` workload). */
let retries = 0;

type Result = Measurement & { waits: Record<string, number>; extra?: string; cpuMsPerOp?: number };
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? NaN;

/** The operation of one worker for the simple workloads. */
function operation(registry: Registry, layout: RouteSource): () => Promise<void> {
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
async function round(db: BenchDatabase, layout: RouteSource): Promise<Result> {
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

async function serialRound(db: BenchDatabase, layout: RouteSource): Promise<Result> {
  const handle = await db.registry(1);
  try {
    const op = operation(handle.registry, layout);
    await warmUp(handle.registry, layout, 1);
    const pid = Number((await handle.pool.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]?.pid);
    const cpu0 = await backendCpuMs(pid);
    const measurement = await closedLoop({ concurrency: 1, durationMs: seconds * 1000 }, op);
    const cpu1 = await backendCpuMs(pid);
    const cpu = cpu0 !== null && cpu1 !== null ? (cpu1 - cpu0) / measurement.ops : NaN;
    const wal = await walPerCycle(handle.pool, layout, 40);
    return { ...measurement, waits: {}, cpuMsPerOp: cpu, extra: `server CPU ${cpu.toFixed(2)} ms/op, WAL ${wal.toFixed(0)} B/cycle` };
  } finally {
    await handle.close();
  }
}

/**
 * WAL one resolve + settle of a new action writes, this backend's records only (EXPLAIN (ANALYZE,
 * WAL) of each call: a server-wide LSN difference would count every other session's writes on a
 * shared server), median of `cycles`. The two commit records (about 50 B each) are not included.
 */
async function walPerCycle(pool: pg.Pool, layout: RouteSource, cycles: number): Promise<number> {
  const walOf = async (call: string, params: unknown[]) => {
    const { rows } = await pool.query<{ "QUERY PLAN": [{ Plan: Record<string, number> }] }>(`EXPLAIN (ANALYZE, WAL, FORMAT JSON) SELECT ${call}`, params);
    return rows[0]?.["QUERY PLAN"][0].Plan["WAL Bytes"] ?? 0;
  };
  const bytes: number[] = [];
  for (let i = 0; i < cycles; i++) {
    const pick = typeof layout === "function" ? layout() : randomRoute(layout);
    const actionId = newActionId("wal");
    const resolved = await walOf(`${FUNCTION_SET}.aip_resolve_route($1, $2, $3, $4)`, [
      actionId,
      pick.tenant,
      pick.capability,
      JSON.stringify({ region: pick.region }),
    ]);
    const { rows } = await pool.query<{ r: { assignment: unknown } }>(`SELECT ${FUNCTION_SET}.aip_get_route($1, $2) AS r`, [actionId, pick.tenant]);
    bytes.push(
      resolved + (await walOf(`${FUNCTION_SET}.aip_settle_route($1, $2, $3, 'completed')`, [actionId, pick.tenant, JSON.stringify(rows[0]?.r.assignment)])),
    );
  }
  // The median: a cycle that is the first to change a page after a checkpoint also writes that
  // page whole (a full-page image, up to 8 kB), on both sides alike but not in every round.
  return median(bytes);
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

/**
 * Every binding under one admission policy that is the default one but for the tenant limit, which
 * it leaves off: no route then updates its tenant's counter row, the row every route of a tenant
 * holds until its commit (`--tenant-limit=off`, evidence of what that serialization costs).
 */
async function withoutTenantLimit(session: MigrationSession): Promise<void> {
  await session.exec(`BEGIN;
    INSERT INTO aip_admission_policies (policy_ref, revision, enabled, max_global_in_flight, max_tenant_in_flight, max_connector_type_in_flight,
      max_instance_in_flight, max_binding_in_flight, max_tenant_retry_in_flight, circuit_failure_threshold, circuit_open_ms)
    VALUES ('quota:no-tenant-limit', 1, true, NULL, NULL, NULL, aip_default_policy_max_instance_in_flight(), aip_default_policy_max_binding_in_flight(),
      aip_default_policy_max_tenant_retry_in_flight(), aip_default_policy_circuit_failure_threshold(), aip_default_policy_circuit_open_ms());
    UPDATE aip_capability_bindings SET quota_policy_ref = 'quota:no-tenant-limit';
    SELECT aip_rebuild_catalog_entries();
    COMMIT`);
}

/**
 * The probe's fleet: the bench layout with one binding per instance (the first of its ten), so a
 * routable (tenant, capability) pair has the candidates of that one binding. Returns the pairs
 * with their tenant's home region (the layout's preference), for the workload to pick from.
 */
async function probeFleet(session: MigrationSession): Promise<{ tenant: string; capability: string; region: string }[]> {
  await session.exec(`BEGIN;
    DELETE FROM aip_capability_bindings b
    WHERE (b.tenant_id, b.capability_id, b.instance_id) NOT IN (
      SELECT DISTINCT ON (instance_id) tenant_id, capability_id, instance_id FROM aip_capability_bindings ORDER BY instance_id, capability_id);
    SELECT aip_rebuild_catalog_entries();
    DELETE FROM aip_admission_counters c WHERE c.scope_kind = 'binding' AND c.scope_key NOT IN (SELECT binding_key FROM aip_catalog_entries);
    COMMIT`);
  return session.query<{ tenant: string; capability: string; region: string }>(`
    SELECT DISTINCT e.tenant_id AS tenant, e.capability_id AS capability,
           (SELECT r.region FROM aip_connector_replicas r WHERE r.instance_id = e.instance_id LIMIT 1) AS region
    FROM aip_catalog_entries e`);
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
    if (fleet === "probe") probeRoutes = (await Promise.all(Object.values(sides).map((db) => db.withOwner(probeFleet))))[0] ?? [];
    if (tenantLimitOff) await Promise.all(Object.values(sides).map((db) => db.withOwner(withoutTenantLimit)));
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
    const benchLayout = { ...seeds[0]!.layout, ...(tenants ? { tenants } : {}) };
    const layout: RouteSource =
      fleet === "probe" ? () => probeRoutes[Math.floor(Math.random() * probeRoutes.length)] as (typeof probeRoutes)[number] : benchLayout;
    const before = { A: await sides.A.withOwner((s) => tableWrites((q) => s.query(q))), B: await sides.B.withOwner((s) => tableWrites((q) => s.query(q))) };
    const results: Record<"A" | "B" | "peer", Result[]> = { A: [], B: [], peer: [] };
    const shape =
      workload === "noisy"
        ? "quiet tenant (4 over 4) beside a noisy one (128 over 32)"
        : ["serial", "publish-version", "toggle-type"].includes(workload)
          ? "one at a time"
          : `concurrency ${concurrency} over ${pool} connections`;
    console.log(
      `${label}: ${workload}, ${shape}, ${rounds} x ${seconds} s per side, alternating; ${fleet} fleet, ${replicas} replicas` +
        (peer ? `; graphile-worker as the peer (${peerQueue === undefined ? "queue longer than a round" : `queue ${peerQueue}`})` : ""),
    );
    const order: ("A" | "B" | "peer")[] = peer ? ["A", "B", "peer"] : ["A", "B"];
    for (let r = 0; r < rounds; r++) {
      for (const name of r % 2 === 0 ? order : [...order].reverse()) {
        const m =
          name === "peer"
            ? {
                waits: {},
                ...(await runGraphileWorker(sides.A, { concurrency, pool, durationMs: seconds * 1000, ...(peerQueue ? { queue: peerQueue } : {}) })),
              }
            : await round(sides[name], layout);
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
    if (peer) {
      const peerMedian = median(results.peer.map((m) => m.throughput));
      const over = (name: "A" | "B") => (median(results[name].map((m) => m.throughput)) / peerMedian).toFixed(2);
      const range = (name: "A" | "B") => results[name].map((m, i) => (m.throughput / (results.peer[i]?.throughput ?? NaN)).toFixed(2)).join(", ");
      console.log(
        `graphile-worker: median ${peerMedian.toFixed(1)} jobs/s; before ${over("A")}x (rounds ${range("A")}), after ${over("B")}x (rounds ${range("B")})`,
      );
    }
    if (results.A.every((m) => m.cpuMsPerOp !== undefined)) {
      const cpu = (name: "A" | "B") => median(results[name].map((m) => m.cpuMsPerOp as number));
      const cpus = (name: "A" | "B") => results[name].map((m) => (m.cpuMsPerOp as number).toFixed(2)).join(", ");
      console.log(
        `server CPU per ${workload === "serial" ? "cycle" : "publication"}: before ${cpu("A").toFixed(2)} ms (${cpus("A")}), after ${cpu("B").toFixed(2)} ms (${cpus("B")}) (x${(cpu("B") / cpu("A")).toFixed(2)})`,
      );
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
