/**
 * The scale curve: the same resolve+settle cycle, at the same concurrency and pool, on fresh
 * fleets of 1,000, 10,000 and 100,000 replicas (10 bindings per replica; 10 instances per
 * tenant, so 100 to 10,000 tenants; see layout.ts). Requests are spread over every tenant, so the
 * working set grows with the fleet while the work per request and the in-flight requests per
 * tenant (at most 0.64 on average) stay small and alike. Index-driven routing should keep
 * throughput flat: the ratio largest/smallest is reported.
 */
import type { Figure, Recorder } from "../lib/figures.js";
import { seedFleet, type SeedReport } from "../../fixtures/seed.js";
import { dropDatabase, freshDatabase, type Server } from "../lib/target.js";
import { resolveNew, settle, warmUp } from "./routing.js";

export interface ScalePoint {
  replicas: number;
  seed: SeedReport;
  cycle: Figure;
}

export async function runScale(
  recorder: Recorder,
  server: Server,
  plan: { target: string; replicas: number[]; concurrency: number; pool: number; durationMs: number; warmRounds: number; log: (line: string) => void },
): Promise<{ points: ScalePoint[]; throughputRatio: number | null; p99Ratio: number | null }> {
  const points: ScalePoint[] = [];
  for (const replicas of plan.replicas) {
    const name = `aip_bench_r${replicas}`;
    const db = await freshDatabase(server, name);
    try {
      const seed = await db.withOwner((session) => seedFleet(session, { replicas, types: Math.min(1000, replicas), instancesPerTenant: 10 }));
      plan.log(
        `  seeded ${replicas} replicas / ${seed.layout.bindings} bindings in ${(seed.seedMs / 1000).toFixed(1)} s (+ ANALYZE ${(seed.analyzeMs / 1000).toFixed(1)} s)`,
      );
      const { registry } = await db.registry(plan.pool);
      // closePools (below) closes this pool with the database.
      await warmUp(registry, seed.layout, plan.pool, plan.warmRounds);
      const cycle = await recorder.measure(
        db,
        plan.target,
        {
          suite: "scale",
          name: `${replicas} replicas / ${seed.layout.bindings} bindings`,
          concurrency: plan.concurrency,
          pool: plan.pool,
          durationMs: plan.durationMs,
        },
        async () => settle(registry, await resolveNew(registry, seed.layout, `s${replicas}`)),
        registry,
      );
      points.push({ replicas, seed, cycle });
    } finally {
      await db.closePools();
      await dropDatabase(server, name);
    }
  }
  const first = points[0];
  const last = points.at(-1);
  return {
    points,
    throughputRatio: first && last && first.cycle.throughput > 0 ? last.cycle.throughput / first.cycle.throughput : null,
    p99Ratio: first && last && first.cycle.latency.p99 > 0 ? last.cycle.latency.p99 / first.cycle.latency.p99 : null,
  };
}
