/**
 * Refuse to serve a database whose schema this build was not made for, checking once per
 * process (per Worker isolate) instead of on every call.
 *
 * Only success is remembered: while a migration is in progress every request re-checks, and the
 * first one after it completes opens the gate. Concurrent first requests each check for
 * themselves rather than share one promise: in a Worker, a promise settled by another request's
 * I/O is not safe to await once that request has ended.
 */
import { Registry } from "./registry.js";
import { RegistryError } from "./errors.js";
import type { SqlExecutor } from "../db/executor.js";
import { verifySchema } from "./schema-check.js";

export class SchemaGate {
  private verified = false;

  get isOpen(): boolean {
    return this.verified;
  }

  /** Resolves once the schema matches; otherwise fails with `storage` (503, retryable). */
  async ensure(executor: SqlExecutor): Promise<void> {
    if (this.verified) return;
    const verdict = await verifySchema(new Registry({ data: executor }));
    if (!verdict.ok) {
      throw new RegistryError("storage", `refusing to serve: ${verdict.reason}`, { schema_version: verdict.schema_version }, true);
    }
    this.verified = true;
  }

  /** `executor`, whose first use checks the schema through `verifyWith` (a data-role executor). */
  guard(executor: SqlExecutor, verifyWith: SqlExecutor = executor): SqlExecutor {
    return {
      query: async <R extends Record<string, unknown>>(text: string, params?: readonly unknown[]) => {
        await this.ensure(verifyWith);
        return executor.query<R>(text, params);
      },
    };
  }
}
