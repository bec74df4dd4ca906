/**
 * Lease maintenance: expire stale replica leases in bounded batches. One cycle runs at most
 * `maxBatches` calls of `batchSize` and stops at the first short batch; the Worker's cron trigger
 * runs one cycle per invocation and the Node server runs cycles on a jittered timer with
 * exponential backoff on failure. Routing ignores an expired lease by itself, so maintenance only
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

export const MAX_BACKOFF_MS = 30_000;

/** The delay after a cycle: the interval after a success, doubled (up to 30 s) after a failure. */
export function nextDelay(intervalMs: number, previousDelayMs: number, failed: boolean): number {
  if (!failed) return intervalMs;
  return Math.max(intervalMs, Math.min(previousDelayMs * 2, MAX_BACKOFF_MS));
}

/** Uniform in [delay - delay/5, delay + delay/5], so many servers do not run in lockstep. */
export function jittered(delayMs: number, random: () => number = Math.random): number {
  return delayMs + (delayMs / 5) * (random() * 2 - 1);
}

export interface MaintenanceLoop {
  stop(): Promise<void>;
}

/** Runs cycles every `intervalMs` (±20% jitter); on failure backs off, doubling up to 30 s. */
export function startMaintenanceLoop(
  registry: Registry,
  options: {
    intervalMs: number;
    bounds?: MaintenanceBounds;
    onError?: (error: unknown) => void;
    onCycle?: (cycle: MaintenanceCycle) => void;
  },
): MaintenanceLoop {
  let stopped = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let running: Promise<void> = Promise.resolve();
  let delay = options.intervalMs;
  const schedule = () => {
    if (stopped) return;
    timer = setTimeout(() => {
      running = (async () => {
        let failed = false;
        try {
          options.onCycle?.(await runLeaseMaintenance(registry, options.bounds));
        } catch (error) {
          failed = true;
          options.onError?.(error);
        }
        delay = nextDelay(options.intervalMs, delay, failed);
        schedule();
      })();
    }, jittered(delay));
    // The loop never keeps a process alive on its own.
    timer.unref?.();
  };
  schedule();
  return {
    async stop() {
      stopped = true;
      clearTimeout(timer);
      await running;
    },
  };
}
