/**
 * Contention, on small fleets published through the real publication path beside the seeded one:
 * - hot replicas: many concurrent new actions on one instance with only two replicas (capacity
 *   1000 each), so routers constantly find the better replica row locked (SKIP LOCKED) and take
 *   the other or wait for one, never failing for lack of an unlocked row;
 * - noisy neighbour: one tenant driven far past its tenant in-flight limit (its own policy) while
 *   a quiet tenant routes beside it; the quiet tenant's latency and success rate are reported
 *   alone and under the noise. The noisy tenant ignores Retry-After on purpose (worst case).
 */
import type { Registry } from "../../src/registry/registry.js";
import { binding, connectorType, instance, policy, registerReplica, replica, version } from "../../fixtures/records.js";
import { invariants, type Recorder } from "../lib/figures.js";
import type { BenchDatabase } from "../lib/target.js";
import { newActionId, UnexpectedOutcome } from "./routing.js";

const LEASE_MS = 300_000;
const NOISY_TENANT_LIMIT = 32;

export async function publishContentionFleets(registry: Registry): Promise<void> {
  const replicas = [
    replica("crepl_hot_a", "cinst_hot", "cver_hot_1", { capacity: 1000 }),
    replica("crepl_hot_b", "cinst_hot", "cver_hot_1", { capacity: 1000, zone: "eu-west-1b" }),
    ...["a", "b", "c", "d"].flatMap((z) => [
      replica(`crepl_noisy_${z}`, "cinst_noisy", "cver_nq_1", { capacity: 1000 }),
      replica(`crepl_quiet_${z}`, "cinst_quiet", "cver_nq_1", { capacity: 1000 }),
    ]),
  ];
  await registry.publish([
    connectorType("ctype_hot"),
    await version("cver_hot_1", "ctype_hot", ["cap:hot.run"]),
    instance("cinst_hot", "ctype_hot", "cver_hot_1", "tenant-hot"),
    binding("tenant-hot", "cap:hot.run", "cinst_hot"),
    policy("quota:noisy", {
      max_tenant_in_flight: NOISY_TENANT_LIMIT,
      max_instance_in_flight: null,
      max_binding_in_flight: null,
      max_tenant_retry_in_flight: null,
    }),
    connectorType("ctype_nq"),
    await version("cver_nq_1", "ctype_nq", ["cap:nq.run"]),
    instance("cinst_noisy", "ctype_nq", "cver_nq_1", "tenant-noisy"),
    instance("cinst_quiet", "ctype_nq", "cver_nq_1", "tenant-quiet"),
    binding("tenant-noisy", "cap:nq.run", "cinst_noisy", { quota_policy_ref: "quota:noisy" }),
    binding("tenant-quiet", "cap:nq.run", "cinst_quiet"),
    ...replicas,
  ]);
  for (const r of replicas) await registerReplica(registry, r.id, LEASE_MS);
}

/** Resolve a new action for `tenant`, optionally hold it (simulated dispatch), settle it. */
export async function cycle(registry: Registry, tenant: string, capability: string, holdMs = 0): Promise<void> {
  const actionId = newActionId(tenant);
  const result = await registry.resolveRoute(actionId, tenant, capability);
  if (result.outcome !== "created") throw new UnexpectedOutcome(`resolve returned ${result.outcome}`);
  if (holdMs > 0) await new Promise((resolve) => setTimeout(resolve, holdMs));
  const settled = await registry.settleRoute(actionId, tenant, result.assignment, "completed");
  if (!settled.released) throw new UnexpectedOutcome("settlement released nothing");
}

export interface ContentionPlan {
  target: string;
  durationMs: number;
  hotConcurrency: number;
  hotPool: number;
  noisyConcurrency: number;
  noisyPool: number;
}

export async function runContention(recorder: Recorder, db: BenchDatabase, plan: ContentionPlan): Promise<void> {
  const publisher = await db.registry(2);
  try {
    await publishContentionFleets(publisher.registry);
    await measureHot(recorder, db, plan);
    await measureNoisy(recorder, db, plan);
    // One check after the noisy pair, so it sees the end state of both.
    const last = recorder.figures.at(-1);
    if (last) last.invariants = await invariants(publisher.registry);
  } finally {
    await publisher.close();
  }
}

async function measureHot(recorder: Recorder, db: BenchDatabase, plan: ContentionPlan): Promise<void> {
  const hot = await db.registry(plan.hotPool);
  const spec = {
    suite: "contention",
    name: "hot replicas: 1 instance, 2 replicas (capacity 1000)",
    concurrency: plan.hotConcurrency,
    pool: plan.hotPool,
    durationMs: plan.durationMs,
    warmupMs: plan.durationMs / 4,
  };
  try {
    await recorder.measure(db, plan.target, spec, () => cycle(hot.registry, "tenant-hot", "cap:hot.run"), hot.registry);
  } finally {
    await hot.close();
  }
}

async function measureNoisy(recorder: Recorder, db: BenchDatabase, plan: ContentionPlan): Promise<void> {
  const quiet = await db.registry(4);
  const noisy = await db.registry(plan.noisyPool);
  const warmupMs = plan.durationMs / 4;
  const quietSpec = (name: string, durationMs: number) => ({ suite: "contention", name, concurrency: 4, pool: 4, durationMs, warmupMs });
  const noisySpec = {
    suite: "contention",
    name: `noisy tenant at its limit (${NOISY_TENANT_LIMIT} in flight, 10 ms hold)`,
    concurrency: plan.noisyConcurrency,
    pool: plan.noisyPool,
    durationMs: plan.durationMs,
    // The same warm-up as the quiet side's, so both measure over the same window.
    warmupMs,
    note: "capacity-exceeded errors are the limit working; ops/s counts accepted cycles",
  };
  const quietCycle = () => cycle(quiet.registry, "tenant-quiet", "cap:nq.run");
  try {
    await recorder.measure(db, plan.target, quietSpec("quiet tenant alone", plan.durationMs / 2), quietCycle);
    await Promise.all([
      recorder.measure(db, plan.target, { ...noisySpec, overlapping: true }, () => cycle(noisy.registry, "tenant-noisy", "cap:nq.run", 10)),
      recorder.measure(db, plan.target, { ...quietSpec("quiet tenant beside the noisy one", plan.durationMs), overlapping: true }, quietCycle),
    ]);
  } finally {
    await Promise.all([quiet.close(), noisy.close()]);
  }
}
