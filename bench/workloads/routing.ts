/**
 * The data-plane hot path at each concurrency, through the typed registry client over a pg pool:
 * - baseline: `SELECT 1` through the same executor and pool (the no-op ceiling);
 * - ceiling and peer (workloads/peers.ts): a one-row durable write, and graphile-worker's
 *   claim+complete, at the same concurrency over pools of the same size;
 * - resolve: new actions, each a fresh route on a random routable (tenant, capability);
 * - settle: the routes that phase created, settled `completed`;
 * - retry: a settled action resolved again (reacquisition of its pinned replica under the retry
 *   budget; only that call is timed) and settled again;
 * - cycle: resolve a new action and settle it, the unit of work a gateway does per action.
 */
import { pgExecutor } from "../../src/db/pg.js";
import type { Registry } from "../../src/registry/registry.js";
import type { RouteAssignment } from "../../src/schemas.js";
import type { Recorder } from "../lib/figures.js";
import { randomRoute, type Layout } from "../../fixtures/layout.js";
import type { BenchDatabase, RegistryHandle } from "../lib/target.js";
import { measureGraphileWorker, measureWriteCeiling } from "./peers.js";

export interface Held {
  actionId: string;
  tenant: string;
  assignment: RouteAssignment;
}

export class UnexpectedOutcome extends Error {
  readonly code = "unexpected-outcome";
}

let sequence = 0;
/** Per process, so a rerun against a database that already has routes (bench/ab.ts, scratch runs) does not collide. */
const run = Math.random().toString(36).slice(2, 8);
/** Action IDs unique across the whole run (the database is fresh per run). */
export const newActionId = (label: string) => `act_bench_${run}_${label}_${(++sequence).toString(36)}`;

/** Where new routes go: the bench layout's random routable pairs, or a picker of another fleet's (bench/ab.ts --fleet=probe). */
export type RouteSource = Layout | (() => { tenant: string; capability: string; region: string });

export async function resolveNew(registry: Registry, l: RouteSource, label: string): Promise<Held> {
  const pick = typeof l === "function" ? l() : randomRoute(l);
  const actionId = newActionId(label);
  const result = await registry.resolveRoute(actionId, pick.tenant, pick.capability, { region: pick.region });
  if (result.outcome !== "created") throw new UnexpectedOutcome(`resolve returned ${result.outcome}`);
  return { actionId, tenant: pick.tenant, assignment: result.assignment };
}

export async function settle(registry: Registry, held: Held): Promise<void> {
  const result = await registry.settleRoute(held.actionId, held.tenant, held.assignment, "completed");
  if (!result.released) throw new UnexpectedOutcome("settlement released nothing");
}

/**
 * Runs whole route lifecycles (new, settle, reacquire, settle) on every connection of a new pool,
 * untimed: a fresh session compiles the PL/pgSQL functions and plans its statements (custom plans
 * for the first five executions), which a long-lived production pool has long done. Without this,
 * a new pool's first calls would land in the measured tail.
 */
export async function warmUp(registry: Registry, l: RouteSource, connections: number, rounds = 6): Promise<void> {
  for (let round = 0; round < rounds; round++) {
    await Promise.all(
      Array.from({ length: connections }, async () => {
        const held = await resolveNew(registry, l, "w");
        await settle(registry, held);
        await registry.resolveRoute(held.actionId, held.tenant, held.assignment.capability_id);
        await settle(registry, held);
        // Refusals under an overload (e.g. lock timeouts with hundreds of sessions on two cores)
        // are measured by the phases themselves; warming only needs the attempts.
      }).map((lifecycle) => lifecycle.catch(() => {})),
    );
  }
}

export interface RoutingPlan {
  target: string;
  concurrencies: number[];
  /** Connections for a given concurrency (bounded by the server's budget). */
  poolFor(concurrency: number): number;
  durationMs: number;
  baselineMs: number;
  /** Warm-up lifecycles per connection before timing (see warmUp). */
  warmRounds: number;
  /** Measure the write ceiling and graphile-worker at each concurrency (default true). */
  peers?: boolean;
  /** Run only these phases (all by default). */
  phases?: readonly ("resolve" | "settle" | "retry" | "cycle")[];
}

export async function runRouting(recorder: Recorder, db: BenchDatabase, l: Layout, plan: RoutingPlan): Promise<void> {
  for (const concurrency of plan.concurrencies) {
    // Before the registry's pool opens: each of them holds a pool of the same size.
    if (plan.peers !== false) {
      const peerPlan = { target: plan.target, concurrency, pool: plan.poolFor(concurrency), durationMs: plan.durationMs };
      await measureWriteCeiling(recorder, db, peerPlan);
      await measureGraphileWorker(recorder, db, peerPlan);
      // And with a short queue, where its claims are faster (issue 25 reports both).
      await measureGraphileWorker(recorder, db, { ...peerPlan, queue: 5_000 });
    }
    const handle = await db.registry(plan.poolFor(concurrency));
    try {
      await routingAt(recorder, db, l, plan, concurrency, handle);
    } finally {
      await handle.close();
    }
  }
}

async function routingAt(recorder: Recorder, db: BenchDatabase, l: Layout, plan: RoutingPlan, concurrency: number, handle: RegistryHandle) {
  const phases = new Set(plan.phases ?? ["resolve", "settle", "retry", "cycle"]);
  const { registry } = handle;
  const executor = pgExecutor(handle.pool);
  const pool = handle.size;
  await warmUp(registry, l, pool, plan.warmRounds);
  const spec = (suite: string, name: string, durationMs = plan.durationMs) => ({
    suite,
    name,
    concurrency,
    pool,
    durationMs,
    ...(concurrency > pool ? { note: `${concurrency} in-flight requests multiplexed over ${pool} connections` } : {}),
  });

  await recorder.measure(db, plan.target, { ...spec("baseline", "SELECT 1", plan.baselineMs), skipInvariants: true }, async () => {
    await executor.query("SELECT 1");
  });

  const held: Held[] = [];
  if (phases.has("resolve")) {
    const resolveOne = async () => {
      held.push(await resolveNew(registry, l, `r${concurrency}`));
    };
    await recorder.measure(db, plan.target, spec("resolve", "new action"), resolveOne, registry);
  }
  if (phases.has("settle") && held.length > 0) {
    // Settle every route the resolve phase created, however long it takes.
    const settleSpec = { ...spec("settle", "completed", plan.durationMs * 20), maxOps: held.length };
    await recorder.measure(db, plan.target, settleSpec, (_w, i) => settle(registry, held[i] as Held), registry);
  }

  if (phases.has("retry") && phases.has("settle") && held.length > 0) {
    // Each worker owns a disjoint slice of settled actions, so no two reacquire one at once.
    const workers = Math.min(concurrency, held.length);
    const cursors = new Array<number>(workers).fill(0);
    const slices = Array.from({ length: workers }, (_, w) => held.filter((_, i) => i % workers === w));
    await recorder.measure(
      db,
      plan.target,
      { ...spec("retry", "reacquire after settlement"), concurrency: workers },
      async (w) => {
        const slice = slices[w] as Held[];
        cursors[w] = (cursors[w] ?? 0) + 1;
        const item = slice[cursors[w] % slice.length] as Held;
        const t0 = performance.now();
        const result = await registry.resolveRoute(item.actionId, item.tenant, item.assignment.capability_id);
        const elapsed = performance.now() - t0;
        if (result.outcome !== "reacquired") throw new UnexpectedOutcome(`retry returned ${result.outcome}`);
        await settle(registry, item);
        return elapsed;
      },
      registry,
    );
  }

  if (phases.has("cycle")) {
    await recorder.measure(
      db,
      plan.target,
      spec("cycle", "resolve + settle"),
      async () => {
        await settle(registry, await resolveNew(registry, l, `c${concurrency}`));
      },
      registry,
    );
  }
}
