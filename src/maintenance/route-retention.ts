/**
 * Route retention at run time: which maintenance cycles also remove released routes past the
 * evidence window (functions/82_retention.sql), and how many.
 *
 * Retention rides on the lease-maintenance cycles (src/maintenance/cycle.ts), which run only when a
 * lease can have ended, so an idle deployment still sends the database nothing. Within them it
 * runs at most once per ROUTE_RETENTION_PAUSE_MS (15 minutes), and not before the oldest released
 * route can be due (the previous run's `next_due`); a process that does not know yet (just
 * started, or a Worker isolate that was evicted) runs it in its next cycle. A run removes at most
 * `maxBatches` batches; when its last batch comes back full there is a backlog, and the next cycle
 * comes after the minimum interval, as for a lease backlog, until it is drained.
 *
 * So while any replica holds a lease (every route needs one), a released route is removed within
 * about fifteen minutes after its window ends. While nothing is live nothing runs: routes that
 * come due then are removed in the first cycle after, or on demand (`POST
 * /v1/fleet/route-retention`, `aip-registry routes prune`). The table cannot grow meanwhile: new
 * routes need live leases.
 *
 * The policy applied is the database's (functions/82_retention.sql): this process's settings only
 * make it stricter, never looser. Every batch states them; with ROUTE_RETENTION_DAYS=0 (keep every
 * route) no batch runs, so the schedule's first run states the policy alone. The Node server also
 * states it at start-up, before it serves (src/entry/node.ts).
 */
import { ROUTE_RETENTION_BATCH, ROUTE_RETENTION_PAUSE_MS } from "../limits.js";
import type { Registry } from "../registry/registry.js";

export interface RetentionSettings {
  /** ROUTE_RETENTION_DAYS: 0 keeps every route (no batch runs; the policy is still stated). */
  days: number;
  /** ROUTE_RETENTION_REQUIRE_EXPORT: remove only what an export covered. */
  requireExport: boolean;
  /** Routes per aip_remove_settled_routes call, within ROUTE_RETENTION_BATCH (src/limits.ts). */
  batchSize: number;
  /** Calls per run, at least 1. */
  maxBatches: number;
  /** The pause after a run that caught up (default ROUTE_RETENTION_PAUSE_MS). */
  pauseMs?: number;
}

export interface RetentionCycle {
  removed: number;
  batches: number;
  /** The last batch came back full: more routes are due now. */
  backlog: boolean;
  /** When the oldest released route left is due (RFC 3339), or null. */
  next_due: string | null;
}

/** Up to `maxBatches` retention batches, stopping at the first short one. */
async function removeSettledRoutes(registry: Registry, settings: RetentionSettings): Promise<RetentionCycle> {
  const cycle: RetentionCycle = { removed: 0, batches: 0, backlog: false, next_due: null };
  while (cycle.batches < settings.maxBatches) {
    const result = await registry.removeSettledRoutes(settings.days, settings.requireExport, settings.batchSize);
    cycle.batches++;
    cycle.removed += result.removed;
    cycle.next_due = result.next_due;
    cycle.backlog = result.removed >= settings.batchSize;
    if (!cycle.backlog) break;
  }
  return cycle;
}

/** One process's retention schedule: is a run due in this maintenance cycle, and when is the next. */
export class RetentionSchedule {
  /** When the next run is due (epoch ms); null: not known yet, so the next cycle runs it. */
  private dueAt: number | null = null;

  constructor(readonly settings: RetentionSettings) {
    if (!Number.isInteger(settings.days) || settings.days < 0) throw new RangeError("days must be a non-negative integer");
    if (!Number.isInteger(settings.maxBatches) || settings.maxBatches < 1) throw new RangeError("maxBatches must be a positive integer");
  }

  /** When the next run is due (epoch ms), or null when the next cycle runs it. */
  get nextRunAt(): number | null {
    return this.dueAt;
  }

  /**
   * Runs retention if it is due at `now()`; undefined when it is not, or when every route is kept
   * (ROUTE_RETENTION_DAYS=0: the first run only states that policy). A failure pauses retention
   * (lease maintenance goes on without it) and is rethrown for the caller to report.
   */
  async runIfDue(registry: Registry, now: () => number): Promise<RetentionCycle | undefined> {
    if (this.dueAt !== null && now() < this.dueAt) return undefined;
    const pauseMs = this.settings.pauseMs ?? ROUTE_RETENTION_PAUSE_MS;
    let cycle: RetentionCycle;
    try {
      if (this.settings.days === 0) {
        // Nothing to remove, ever: the first run states the policy ("keep every route") and none follows.
        await registry.routeRetentionPolicy(0, this.settings.requireExport);
        this.dueAt = Number.POSITIVE_INFINITY;
        return undefined;
      }
      cycle = await removeSettledRoutes(registry, this.settings);
    } catch (error) {
      this.dueAt = now() + pauseMs;
      throw new Error(`route retention failed (next attempt in ${Math.round(pauseMs / 1000)} s): ${String(error)}`, { cause: error });
    }
    const at = now();
    const due = cycle.next_due === null ? Number.NaN : Date.parse(cycle.next_due);
    this.dueAt = cycle.backlog ? at : Math.max(at + pauseMs, Number.isNaN(due) ? 0 : due);
    return cycle;
  }
}

/** The retention settings of a configuration (Node and Worker alike); `days` 0 keeps every route. */
export function retentionSettings(config: {
  ROUTE_RETENTION_DAYS: number;
  ROUTE_RETENTION_REQUIRE_EXPORT: boolean;
  LEASE_EXPIRY_MAX_BATCHES: number;
}): RetentionSettings {
  return {
    days: config.ROUTE_RETENTION_DAYS,
    requireExport: config.ROUTE_RETENTION_REQUIRE_EXPORT,
    batchSize: ROUTE_RETENTION_BATCH.default,
    maxBatches: config.LEASE_EXPIRY_MAX_BATCHES,
  };
}
