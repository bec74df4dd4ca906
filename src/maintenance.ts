/**
 * Lease maintenance: expire stale replica leases in bounded batches. One cycle runs at most
 * `maxBatches` calls of `batchSize`; the Worker's cron trigger runs one cycle per invocation and
 * the Node server runs cycles on a jittered timer with exponential backoff on failure.
 */
import type { Registry } from "./registry/registry.js";

export interface MaintenanceBounds {
  batchSize: number;
  maxBatches: number;
}

export const DEFAULT_MAINTENANCE: MaintenanceBounds = { batchSize: 500, maxBatches: 8 };

export async function runLeaseMaintenance(registry: Registry, bounds: MaintenanceBounds = DEFAULT_MAINTENANCE) {
  let expired = 0;
  let released = 0;
  for (let batch = 0; batch < bounds.maxBatches; batch++) {
    const result = await registry.expireLeases(bounds.batchSize);
    expired += result.expired;
    released += result.released;
    if (result.expired < bounds.batchSize) break;
  }
  return { expired, released };
}

export interface MaintenanceLoop {
  stop(): Promise<void>;
}

/** Runs cycles every `intervalMs` (±20% jitter); on failure backs off, doubling up to 30 s. */
export function startMaintenanceLoop(
  registry: Registry,
  options: { intervalMs: number; bounds?: MaintenanceBounds; onError?: (error: unknown) => void; onCycle?: (r: { expired: number; released: number }) => void },
): MaintenanceLoop {
  let stopped = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let running: Promise<void> = Promise.resolve();
  let delay = options.intervalMs;
  const schedule = () => {
    if (stopped) return;
    const jitter = delay * 0.2 * (Math.random() * 2 - 1);
    timer = setTimeout(() => {
      running = (async () => {
        try {
          const result = await runLeaseMaintenance(registry, options.bounds);
          options.onCycle?.(result);
          delay = options.intervalMs;
        } catch (error) {
          options.onError?.(error);
          delay = Math.min(delay * 2, 30_000);
        }
        schedule();
      })();
    }, delay + jitter);
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
