/**
 * The catalog change feed's history at run time: which maintenance cycles also trim removals
 * (tombstones) that fell out of the history kept (functions/31_catalog_changes.sql,
 * aip_trim_catalog_changes), and how many.
 *
 * Like route retention (src/route-retention.ts) it rides on the lease-maintenance cycles
 * (src/maintenance/cycle.ts) and adds none of its own: at most once per CATALOG_CHANGES_TRIM_PAUSE_MS
 * per process, up to `maxBatches` batches of CATALOG_CHANGES_TRIM_BATCH, stopping at the first
 * short one; a full last batch brings the next trim forward to the next cycle. A removal kept
 * longer than its bound only costs a row: the bound a gateway relies on is the 410 below what was
 * trimmed, never the other way round.
 */
import { CATALOG_CHANGES_TRIM_BATCH, CATALOG_CHANGES_TRIM_PAUSE_MS } from "../limits.js";
import type { Registry } from "../registry/registry.js";

export interface ChangeHistorySettings {
  /** CATALOG_CHANGES_KEEP_REVISIONS: a removal is kept while fewer revisions than this came after it. */
  keepRevisions: number;
  /** CATALOG_CHANGES_KEEP_SECONDS: ...and while it is at most this old. */
  keepSeconds: number;
  batchSize: number;
  maxBatches: number;
  pauseMs?: number;
}

export interface ChangeHistoryCycle {
  trimmed: number;
  batches: number;
  /** The last batch came back full: more is due now. */
  backlog: boolean;
}

/** The change-history settings of a configuration (Node and Worker alike). */
export function changeHistorySettings(config: {
  CATALOG_CHANGES_KEEP_REVISIONS: number;
  CATALOG_CHANGES_KEEP_SECONDS: number;
  LEASE_EXPIRY_MAX_BATCHES: number;
}): ChangeHistorySettings {
  return {
    keepRevisions: config.CATALOG_CHANGES_KEEP_REVISIONS,
    keepSeconds: config.CATALOG_CHANGES_KEEP_SECONDS,
    batchSize: CATALOG_CHANGES_TRIM_BATCH.default,
    maxBatches: config.LEASE_EXPIRY_MAX_BATCHES,
  };
}

/** One process's trimming schedule: is a trim due in this maintenance cycle. */
export class ChangeHistorySchedule {
  /** When the next trim is due (epoch ms); null: the next cycle trims. */
  private dueAt: number | null = null;

  constructor(readonly settings: ChangeHistorySettings) {
    if (!Number.isInteger(settings.maxBatches) || settings.maxBatches < 1) throw new RangeError("maxBatches must be a positive integer");
  }

  /** Trims if due at `now()`; undefined when not. A failure pauses trimming and is rethrown. */
  async runIfDue(registry: Registry, now: () => number): Promise<ChangeHistoryCycle | undefined> {
    if (this.dueAt !== null && now() < this.dueAt) return undefined;
    const pauseMs = this.settings.pauseMs ?? CATALOG_CHANGES_TRIM_PAUSE_MS;
    const cycle: ChangeHistoryCycle = { trimmed: 0, batches: 0, backlog: false };
    try {
      while (cycle.batches < this.settings.maxBatches) {
        const result = await registry.trimCatalogChanges(this.settings.keepRevisions, this.settings.keepSeconds, this.settings.batchSize);
        cycle.batches++;
        cycle.trimmed += result.trimmed;
        cycle.backlog = result.backlog;
        if (!result.backlog) break;
      }
    } catch (error) {
      this.dueAt = now() + pauseMs;
      throw error;
    }
    this.dueAt = cycle.backlog ? now() : now() + pauseMs;
    return cycle;
  }
}
