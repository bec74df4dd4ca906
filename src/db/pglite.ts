/**
 * PGlite, the embedded default (Node only): the same PostgreSQL and the same SQL functions in
 * process, with no server to install. It is a single session, so it serializes every call; it
 * is for development and small deployments, never for testing concurrency.
 */
import { PGlite } from "@electric-sql/pglite";
import type { SqlExecutor } from "./executor.js";
import type { MigrationSession } from "./migrate.js";
import { traced } from "./traced.js";

export async function openPglite(dataDir?: string): Promise<PGlite> {
  return PGlite.create(dataDir ? { dataDir } : {});
}

/** Statements of a request carry its trace (src/db/traced.ts). */
export function pgliteExecutor(db: PGlite): SqlExecutor {
  return traced({
    async query<R extends Record<string, unknown>>(text: string, params: readonly unknown[] = []) {
      const result = await db.query<R>(text, params as unknown[]);
      return result.rows;
    },
  });
}

export function pgliteSession(db: PGlite): MigrationSession {
  return {
    exec: async (sql) => {
      await db.exec(sql);
    },
    query: async <R extends Record<string, unknown>>(text: string, params: readonly unknown[] = []) => (await db.query<R>(text, params as unknown[])).rows,
  };
}
