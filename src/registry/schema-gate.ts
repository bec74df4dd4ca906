/**
 * Refuse to serve a database that lacks this build's function set, checking once per process (per
 * Worker isolate) instead of on every call, and report this process as a server of its set (a
 * sighting: `migrate --finalize` drops no set whose servers were seen recently).
 *
 * Only success is remembered: while a migration is in progress every request re-checks, and the
 * first one after it completes opens the gate. A call that finds the set gone (a newer build's
 * finalize dropped it) closes the gate again, so the next request says why. Concurrent first
 * requests each check for themselves rather than share one promise: in a Worker, a promise
 * settled by another request's I/O is not safe to await once that request has ended.
 */
import { Registry, type ServerIdentity } from "./registry.js";
import { RegistryError } from "./errors.js";
import type { SqlExecutor } from "../db/executor.js";
import { verifySchema } from "./schema-check.js";
import { databaseFailure } from "../db/sqlstate.js";

/** How often a serving process reports itself (the database keeps one report per 30 s at most). */
export const SIGHTING_INTERVAL_MS = 60_000;

export class SchemaGate {
  private verified = false;
  private seenAt = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly server?: ServerIdentity,
    private readonly now: () => number = Date.now,
  ) {}

  get isOpen(): boolean {
    return this.verified;
  }

  /** Resolves once the schema matches; otherwise fails with `storage` (503, retryable). */
  async ensure(executor: SqlExecutor): Promise<void> {
    if (this.verified) return;
    const verdict = await verifySchema(new Registry({ data: executor, ...(this.server ? { server: this.server } : {}) }));
    if (!verdict.ok) {
      throw new RegistryError("storage", `refusing to serve: ${verdict.reason}`, { schema_version: verdict.schema_version }, true);
    }
    this.seenAt = this.now();
    this.verified = true;
  }

  /** Whether this process's last report is older than SIGHTING_INTERVAL_MS (only while open). */
  get sightingDue(): boolean {
    return this.verified && this.now() - this.seenAt >= SIGHTING_INTERVAL_MS;
  }

  /** Reports this process again (after a response: the caller passes it to waitUntil). Never throws. */
  async reportSighting(executor: SqlExecutor): Promise<void> {
    this.seenAt = this.now();
    try {
      await new Registry({ data: executor, ...(this.server ? { server: this.server } : {}) }).schemaStatus();
    } catch {
      // A lost report only makes finalize's view older; the next one is due in a minute.
    }
  }

  /** `executor`, whose first use checks the schema through `verifyWith` (a data-role executor). */
  guard(executor: SqlExecutor, verifyWith: SqlExecutor = executor): SqlExecutor {
    return {
      query: async <R extends Record<string, unknown>>(text: string, params?: readonly unknown[]) => {
        await this.ensure(verifyWith);
        try {
          return await executor.query<R>(text, params);
        } catch (error) {
          if (databaseFailure(error) === "undefined-function") this.verified = false;
          throw error;
        }
      },
    };
  }
}
