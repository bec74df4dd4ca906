/**
 * Lease maintenance: expire stale replica leases in bounded batches. One cycle runs at most
 * `maxBatches` calls of `batchSize` and stops at the first short batch; the Worker's cron trigger
 * runs one cycle per invocation and the Node server runs cycles on a jittered timer with
 * exponential backoff on failure (src/maintenance-loop.ts, kept out of the Worker bundle). Routing ignores an expired lease by itself, so maintenance only
 * returns capacity: running it late or twice is harmless, each batch is its own transaction.
 */
import type { Registry } from "./registry/registry.js";

export interface MaintenanceBounds {
  /** Replicas per aip_expire_leases call, 1..10000. */
  batchSize: number;
  /** Calls per cycle, at least 1. */
  maxBatches: number;
}

/** The reference daemon's bounds: up to 8 batches of 500 per cycle. */
export const DEFAULT_MAINTENANCE: MaintenanceBounds = { batchSize: 500, maxBatches: 8 };

export interface MaintenanceCycle {
  expired: number;
  released: number;
  batches: number;
}

export async function runLeaseMaintenance(registry: Registry, bounds: MaintenanceBounds = DEFAULT_MAINTENANCE): Promise<MaintenanceCycle> {
  const { batchSize, maxBatches } = bounds;
  if (!Number.isInteger(batchSize) || batchSize < 1 || batchSize > 10_000) throw new RangeError("batchSize must be an integer in [1, 10000]");
  if (!Number.isInteger(maxBatches) || maxBatches < 1) throw new RangeError("maxBatches must be a positive integer");
  const cycle: MaintenanceCycle = { expired: 0, released: 0, batches: 0 };
  while (cycle.batches < maxBatches) {
    const result = await registry.expireLeases(batchSize);
    cycle.batches++;
    cycle.expired += result.expired;
    cycle.released += result.released;
    // A short batch means the backlog is drained (or the rest is held by a concurrent run).
    if (result.expired < batchSize) break;
  }
  return cycle;
}
