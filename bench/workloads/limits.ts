/**
 * Experiments that show what bounds throughput, each against the spread-out cycle figure of the
 * routing suite:
 * - pool size: 500 in-flight cycles over pools of different sizes (on two cores, every extra
 *   active backend adds context switches and lock-manager contention rather than throughput);
 * - one tenant: every cycle on a single tenant, so every transaction updates the same tenant
 *   counter row and they serialize on it until commit (the commit's WAL flush included, which
 *   the same experiment without waiting for the flush isolates);
 * - commit latency: the same cycles with synchronous_commit=off for the data role (commits stop
 *   waiting for the WAL flush; durability is traded, so this is evidence, never a setting).
 */
import type { Recorder } from "../lib/figures.js";
import type { Layout } from "../../fixtures/layout.js";
import type { BenchDatabase } from "../lib/target.js";
import { resolveNew, settle, warmUp } from "./routing.js";

export interface LimitsPlan {
  target: string;
  durationMs: number;
  concurrency: number;
  poolSizes: number[];
  /** Pool for the single-tenant and commit experiments (the routing suite's at this concurrency). */
  pool: number;
  experimentConcurrency: number;
  warmRounds: number;
}

async function withRoleSetting<T>(db: BenchDatabase, setting: string, fn: () => Promise<T>): Promise<T | null> {
  if (db.ownerFallback) return null;
  const role = new URL(db.dataUrl).username;
  await db.withOwner((s) => s.exec(`ALTER ROLE ${role} IN DATABASE ${db.name} SET ${setting}`));
  try {
    return await fn();
  } finally {
    await db.withOwner((s) => s.exec(`ALTER ROLE ${role} IN DATABASE ${db.name} RESET ${setting.split("=")[0]?.trim()}`));
  }
}

export async function runLimits(recorder: Recorder, db: BenchDatabase, l: Layout, plan: LimitsPlan): Promise<void> {
  const cycle = (registry: Parameters<typeof resolveNew>[0], layout: Layout, label: string) => async () => {
    await settle(registry, await resolveNew(registry, layout, label));
  };
  const measure = async (name: string, concurrency: number, pool: number, layout: Layout, label: string) => {
    const handle = await db.registry(pool);
    try {
      await warmUp(handle.registry, l, pool, plan.warmRounds);
      await recorder.measure(
        db,
        plan.target,
        { suite: "limits", name, concurrency, pool, durationMs: plan.durationMs },
        cycle(handle.registry, layout, label),
        handle.registry,
      );
    } finally {
      await handle.close();
    }
  };
  for (const pool of plan.poolSizes) await measure(`pool size ${pool}`, plan.concurrency, pool, l, `p${pool}`);
  const c = plan.experimentConcurrency;
  await measure("one tenant (500 capabilities)", c, plan.pool, { ...l, tenants: 1 }, "t1");
  // Pools opened inside see the role setting; it is reset for every later session.
  await withRoleSetting(db, "synchronous_commit = off", async () => {
    for (const concurrency of [1, c]) await measure("synchronous_commit=off", concurrency, Math.min(concurrency, plan.pool), l, `a${concurrency}`);
    await measure("one tenant, synchronous_commit=off", c, plan.pool, { ...l, tenants: 1 }, "a1t");
  });
}
