/**
 * Lease maintenance: expire stale replica leases in bounded batches, and decide when the next
 * cycle is due. One cycle runs at most `maxBatches` calls of `batchSize` and stops at the first
 * short batch. Routing ignores an expired lease by itself, so maintenance only returns capacity:
 * running it late or twice is harmless, each batch is its own transaction.
 *
 * Nothing runs on a fixed clock: a cycle is due only when a lease can have ended. The Worker's
 * LeaseClock Durable Object (src/maintenance/lease-clock.ts) and the Node server's timer
 * (src/maintenance/timer.ts) both run a cycle at the earliest deadline they know and take the next
 * one from the cycle's `next_deadline`; with no live lease there is no next cycle at all, so an
 * idle deployment sends the database nothing. Route retention runs within these cycles
 * (src/maintenance/route-retention.ts), and so does trimming the catalog change feed's history
 * (src/catalog/change-history.ts).
 */
import { LEASE_EXPIRY_BATCH, LEASE_EXPIRY_MAX_BATCHES, LEASE_MAINTENANCE_INTERVAL_MS } from "../limits.js";
import type { ChangeHistoryCycle, ChangeHistorySchedule } from "../catalog/change-history.js";
import type { Registry } from "../registry/registry.js";
import type { RetentionCycle, RetentionSchedule } from "./route-retention.js";

export interface MaintenanceBounds {
  /** Replicas per aip_expire_leases call, within LEASE_EXPIRY_BATCH (src/limits.ts). */
  batchSize: number;
  /** Calls per cycle, at least 1. */
  maxBatches: number;
}

/** The reference daemon's bounds: up to 8 batches of 500 per cycle. */
const DEFAULT_MAINTENANCE: MaintenanceBounds = { batchSize: LEASE_EXPIRY_BATCH.default, maxBatches: LEASE_EXPIRY_MAX_BATCHES.default };

/** The shortest pause between two cycles (LEASE_MAINTENANCE_INTERVAL_MS) unless configured. */
export const DEFAULT_MIN_INTERVAL_MS = LEASE_MAINTENANCE_INTERVAL_MS.default;

/** The longest pause while a backlog stays stuck or the database fails. */
export const MAX_BACKOFF_MS = 30_000;

export interface MaintenanceCycle {
  expired: number;
  released: number;
  batches: number;
  /** The last batch's: the earliest lease end still live (past: a backlog remains), null when none is. */
  next_deadline: string | null;
  /** Route retention, when it ran in this cycle (src/maintenance/route-retention.ts). */
  retention?: RetentionCycle;
  /** The catalog change feed's history trimmed, when it ran in this cycle (src/catalog/change-history.ts). */
  changes?: ChangeHistoryCycle;
}

export async function runLeaseMaintenance(registry: Registry, bounds: MaintenanceBounds = DEFAULT_MAINTENANCE): Promise<MaintenanceCycle> {
  const { batchSize, maxBatches } = bounds;
  if (!Number.isInteger(batchSize) || batchSize < LEASE_EXPIRY_BATCH.min || batchSize > LEASE_EXPIRY_BATCH.max) {
    throw new RangeError(`batchSize must be an integer in [${LEASE_EXPIRY_BATCH.min}, ${LEASE_EXPIRY_BATCH.max}]`);
  }
  if (!Number.isInteger(maxBatches) || maxBatches < 1) throw new RangeError("maxBatches must be a positive integer");
  const cycle: MaintenanceCycle = { expired: 0, released: 0, batches: 0, next_deadline: null };
  while (cycle.batches < maxBatches) {
    const result = await registry.expireLeases(batchSize);
    cycle.batches++;
    cycle.expired += result.expired;
    cycle.released += result.released;
    cycle.next_deadline = result.next_deadline;
    // A short batch means the backlog is drained (or the rest is held by a concurrent run).
    if (result.expired < batchSize) break;
  }
  return cycle;
}

/** What a runtime's lease maintenance has done since it started, for /metrics. */
export interface MaintenanceStats {
  /** Cycles run, whether they succeeded or failed. */
  runs: number;
  /** Cycles that failed (each is retried after a backoff). */
  failures: number;
  /** Replicas whose lease ended that cycles marked offline, and the routes they released. */
  expired: number;
  released: number;
  /** When the last cycle that succeeded ended (epoch ms, this timer's clock), or null. */
  lastSuccessAt: number | null;
}

/**
 * One maintenance cycle: lease expiry, then route retention and the change feed's trimming when
 * their schedules say they are due (they ride on these cycles and add none of their own, but for a
 * retention backlog: see planNextCycle).
 */
export async function runMaintenanceCycle(
  registry: Registry,
  bounds: MaintenanceBounds = DEFAULT_MAINTENANCE,
  retention?: RetentionSchedule,
  now: () => number = Date.now,
  changeHistory?: ChangeHistorySchedule,
): Promise<MaintenanceCycle> {
  const cycle: MaintenanceCycle = await runLeaseMaintenance(registry, bounds);
  const retained = await retention?.runIfDue(registry, now);
  if (retained) cycle.retention = retained;
  const trimmed = await changeHistory?.runIfDue(registry, now);
  if (trimmed) cycle.changes = trimmed;
  return cycle;
}

/** When the next cycle is due (epoch ms; null: none), and how many cycles in a row found a stuck backlog. */
export interface NextCycle {
  at: number | null;
  stalled: number;
}

/**
 * The schedule after a cycle that ended at `now`, never sooner than `minIntervalMs` later:
 * - no live lease: no next cycle;
 * - the earliest lease ends in the future: at that deadline;
 * - it has already ended (a backlog past the cycle's bounds, a replica another transaction held,
 *   or this clock running ahead of the database's): again after the minimum interval if the cycle
 *   made progress, otherwise backing off (doubling up to 30 s) while nothing moves;
 * - route retention left a backlog: no later than after the minimum interval.
 */
export function planNextCycle(
  cycle: Pick<MaintenanceCycle, "expired" | "next_deadline" | "retention">,
  now: number,
  minIntervalMs: number,
  stalled: number,
): NextCycle {
  const next = planLeaseCycle(cycle, now, minIntervalMs, stalled);
  // A retention backlog is drained cycle after cycle, at the minimum interval.
  if (cycle.retention?.backlog) return { at: Math.min(next.at ?? Number.POSITIVE_INFINITY, now + minIntervalMs), stalled: next.stalled };
  return next;
}

function planLeaseCycle(cycle: Pick<MaintenanceCycle, "expired" | "next_deadline">, now: number, minIntervalMs: number, stalled: number): NextCycle {
  if (cycle.next_deadline === null) return { at: null, stalled: 0 };
  const deadline = Date.parse(cycle.next_deadline);
  const earliest = now + minIntervalMs;
  if (deadline > now) return { at: Math.max(deadline, earliest), stalled: 0 };
  if (cycle.expired > 0) return { at: earliest, stalled: 0 };
  return { at: now + backoff(minIntervalMs, stalled + 1), stalled: stalled + 1 };
}

/** The pause after the `attempt`-th failure (or stuck cycle) in a row: the interval doubled per attempt, at most 30 s. */
export function backoff(minIntervalMs: number, attempt: number): number {
  return Math.max(minIntervalMs, Math.min(minIntervalMs * 2 ** Math.min(attempt, 20), MAX_BACKOFF_MS));
}
