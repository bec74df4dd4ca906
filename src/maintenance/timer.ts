/**
 * The Node server's lease-maintenance timer: one cycle at start-up (which learns the earliest
 * live lease end), then a cycle only when a lease can have ended: at the earliest of the last
 * cycle's `next_deadline` and every deadline this process learned since (its own lifecycle
 * answers, lease-expiry calls). With no live lease no timer is armed at all, so an idle server
 * sends the database nothing. Failures back off (doubling, ±20 % jitter, at most 30 s) until a
 * cycle succeeds. Node only (the timer must not keep the process alive); the Worker's
 * counterpart is the LeaseClock Durable Object's alarm (src/maintenance/lease-clock.ts).
 *
 * Several servers on one database each follow the deadlines they learn plus the database's
 * earliest one, so together they cover every live lease; concurrent cycles take disjoint batches.
 */
import type { ChangeHistorySchedule } from "../catalog/change-history.js";
import type { Registry } from "../registry/registry.js";
import { backoff, planNextCycle, runMaintenanceCycle, type MaintenanceBounds, type MaintenanceCycle, type MaintenanceStats } from "./cycle.js";
import type { RetentionSchedule } from "./route-retention.js";

/** Time and timers, injectable so tests can drive a simulated clock. */
export interface MaintenanceClock {
  now(): number;
  setTimer(run: () => void, delayMs: number): unknown;
  clearTimer(timer: unknown): void;
}

const systemClock: MaintenanceClock = {
  now: () => Date.now(),
  setTimer(run, delayMs) {
    // setTimeout's longest delay is 2^31 - 1 ms; leases last at most 5 minutes anyway.
    const timer = setTimeout(run, Math.min(Math.max(0, delayMs), 2 ** 31 - 1));
    // The timer never keeps a process alive on its own.
    timer.unref?.();
    return timer;
  },
  clearTimer: (timer) => clearTimeout(timer as ReturnType<typeof setTimeout>),
};

/** Uniform in [delay - delay/5, delay + delay/5], so many servers do not retry in lockstep. */
export function jittered(delayMs: number, random: () => number = Math.random): number {
  return delayMs + (delayMs / 5) * (random() * 2 - 1);
}

export interface MaintenanceTimer {
  /** Starts with one cycle now. */
  start(): void;
  /** A lease deadline this process learned (RFC 3339 or epoch ms): a cycle is due no later than then. */
  note(deadline: string | number): void;
  /** When the next cycle is due (epoch ms), or null: nothing is live as far as this process knows. */
  readonly nextCycleAt: number | null;
  /** A snapshot of what the cycles so far have done. */
  readonly stats: MaintenanceStats;
  /** Resolves once no cycle is running. */
  settled(): Promise<void>;
  stop(): Promise<void>;
}

export function createMaintenanceTimer(
  registry: Registry,
  options: {
    /** The shortest pause between two cycles (LEASE_MAINTENANCE_INTERVAL_MS), > 0. */
    minIntervalMs: number;
    bounds?: MaintenanceBounds;
    /** Route retention, run within these cycles (src/maintenance/route-retention.ts); none: routes are kept. */
    retention?: RetentionSchedule;
    /** The catalog change feed's history, trimmed within these cycles (src/catalog/change-history.ts). */
    changeHistory?: ChangeHistorySchedule;
    clock?: MaintenanceClock;
    onError?: (error: unknown) => void;
    onCycle?: (cycle: MaintenanceCycle) => void;
  },
): MaintenanceTimer {
  const clock = options.clock ?? systemClock;
  const { minIntervalMs } = options;
  if (!(minIntervalMs > 0)) throw new RangeError("minIntervalMs must be positive");
  let started = false;
  let stopped = false;
  let timer: unknown;
  let dueAt: number | null = null;
  let running: Promise<void> | undefined;
  /** Deadlines learned while a cycle runs: its answer may predate them. */
  let learned: number | null = null;
  let failures = 0;
  let stalled = 0;
  let lastCycleEnd = -Infinity;
  const stats: MaintenanceStats = { runs: 0, failures: 0, expired: 0, released: 0, lastSuccessAt: null };

  const arm = (at: number | null) => {
    if (timer !== undefined) clock.clearTimer(timer);
    timer = undefined;
    dueAt = at;
    if (at === null || stopped) return;
    timer = clock.setTimer(cycle, at - clock.now());
  };

  function cycle() {
    timer = undefined;
    dueAt = null;
    running = (async () => {
      let next: number | null;
      try {
        const result = await runMaintenanceCycle(registry, options.bounds, options.retention, clock.now, options.changeHistory);
        stats.runs++;
        stats.expired += result.expired;
        stats.released += result.released;
        stats.lastSuccessAt = clock.now();
        failures = 0;
        const planned = planNextCycle(result, clock.now(), minIntervalMs, stalled);
        stalled = planned.stalled;
        next = planned.at;
        options.onCycle?.(result);
      } catch (error) {
        stats.runs++;
        stats.failures++;
        failures++;
        next = clock.now() + jittered(backoff(minIntervalMs, failures));
        options.onError?.(error);
      }
      lastCycleEnd = clock.now();
      running = undefined;
      if (learned !== null) next = Math.min(next ?? Infinity, Math.max(learned, lastCycleEnd + minIntervalMs));
      learned = null;
      arm(next);
    })();
  }

  return {
    start() {
      if (started || stopped) return;
      started = true;
      cycle();
    },
    note(deadline) {
      if (stopped) return;
      const at = typeof deadline === "number" ? deadline : Date.parse(deadline);
      if (Number.isNaN(at)) return;
      if (!started || running) {
        learned = Math.min(learned ?? Infinity, at);
        return;
      }
      const spaced = Math.max(at, lastCycleEnd + minIntervalMs);
      if (dueAt === null || spaced < dueAt) arm(spaced);
    },
    get stats() {
      return { ...stats };
    },
    get nextCycleAt() {
      return running ? null : dueAt;
    },
    async settled() {
      while (running) await running;
    },
    async stop() {
      stopped = true;
      arm(null);
      while (running) await running;
    },
  };
}
