/**
 * The Node server's lease-maintenance loop: cycles of runLeaseMaintenance on a jittered timer,
 * backing off on failure. Node only (timers that must not keep the process alive); the Worker
 * runs one cycle per cron invocation instead.
 */
import type { Registry } from "./registry/registry.js";
import { runLeaseMaintenance, type MaintenanceBounds, type MaintenanceCycle } from "./maintenance.js";

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
