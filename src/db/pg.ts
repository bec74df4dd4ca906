/**
 * node-postgres adapters (Node only): a pooled executor for the runtime roles and a single-client
 * session for migrations.
 */
import pg from "pg";
import { DB_POOL_MAX, DB_STATEMENT_TIMEOUT_MS, CLI_CONNECT_TIMEOUT_MS, MIGRATION_QUERY_TIMEOUT_MS } from "../limits.js";
import type { SqlExecutor } from "./executor.js";
import { applicationNameOf, type MigrationSession } from "./migrate.js";
import { FUNCTION_SET } from "./schema-version.js";
import { traced } from "./traced.js";
import { databaseFailure, type DatabaseFailure } from "./sqlstate.js";

/** Failures after which the session cannot be trusted: the connection broke or the server ended it. */
const SESSION_GONE: ReadonlySet<DatabaseFailure> = new Set(["connection", "cannot-connect-now", "session-ended"]);

export interface PgPoolOptions {
  max?: number;
  /**
   * Server-side statement_timeout for every session of the pool, sent as a startup parameter;
   * 0 sends none (PgBouncer and Neon's pooled endpoints refuse startup parameters: set it on the
   * login role instead).
   */
  statementTimeoutMs?: number;
  connectionTimeoutMs?: number;
  /**
   * Client-side bound on each query (pg's query_timeout): the answer to a server that stops
   * answering mid-session, which no server-side timeout can end. Unset: none.
   */
  queryTimeoutMs?: number;
  /**
   * Default `aip-registry/<function set>`: `migrate --finalize` counts a set's connected servers
   * by it (src/db/migrate.ts).
   */
  applicationName?: string;
}

export function createPgPool(connectionString: string, options: PgPoolOptions = {}): pg.Pool {
  const statementTimeoutMs = options.statementTimeoutMs ?? DB_STATEMENT_TIMEOUT_MS.default;
  const pool = new pg.Pool({
    connectionString,
    max: options.max ?? DB_POOL_MAX.default,
    ...(statementTimeoutMs > 0 ? { statement_timeout: statementTimeoutMs } : {}),
    connectionTimeoutMillis: options.connectionTimeoutMs ?? 5_000,
    ...(options.queryTimeoutMs ? { query_timeout: options.queryTimeoutMs } : {}),
    idleTimeoutMillis: 30_000,
    application_name: options.applicationName ?? applicationNameOf(FUNCTION_SET),
  });
  // An idle client can die under us (server restart, pg_terminate_backend): the pool replaces it.
  // Without a listener that event would crash the process.
  pool.on("error", () => {});
  return pool;
}

/** Statements of a request carry its trace (src/db/traced.ts). */
export function pgExecutor(pool: pg.Pool): SqlExecutor {
  return traced({
    async query<R extends Record<string, unknown>>(text: string, params: readonly unknown[] = []) {
      // Not pool.query(): pg-pool destroys the connection after ANY query error, and every
      // refusal the registry raises in SQL (400, 409, 429 ...) is a query error. A server-reported
      // error leaves the session healthy; only other failures may have broken it.
      let broken: Error | undefined;
      // A checked-out client has no 'error' listener of the pool's: if the server ends the session
      // meanwhile (termination, restart, failover), an unhandled 'error' event would kill the
      // process. The callback form hands the client over synchronously, before its next event.
      const onError = (error: Error) => {
        broken ??= error;
      };
      const client = await new Promise<pg.PoolClient>((resolve, reject) =>
        pool.connect((error, connected) => {
          if (error || !connected) return reject(error ?? new Error("no connection"));
          connected.on("error", onError);
          resolve(connected);
        }),
      );
      try {
        return (await client.query<R>(text, params as unknown[])).rows;
      } catch (error) {
        // ...except connection failures and shutdowns (SQLSTATE classes 08 and 57P).
        if (!(error instanceof pg.DatabaseError) || SESSION_GONE.has(databaseFailure(error))) broken ??= error as Error;
        throw error;
      } finally {
        client.removeListener("error", onError);
        client.release(broken);
      }
    },
  });
}

/**
 * One session for a migration. Bounded: connecting by `connectionTimeoutMs` (default
 * CLI_CONNECT_TIMEOUT_MS), and each statement client-side by `queryTimeoutMs` (default
 * MIGRATION_QUERY_TIMEOUT_MS, past the migration's own server-side statement timeout), so a server
 * that accepts the connection and never answers cannot hang the caller.
 */
export async function withPgSession<T>(
  connectionString: string,
  fn: (session: MigrationSession) => Promise<T>,
  options: { connectionTimeoutMs?: number; queryTimeoutMs?: number } = {},
): Promise<T> {
  const client = new pg.Client({
    connectionString,
    application_name: "aip-registry-migrate",
    connectionTimeoutMillis: options.connectionTimeoutMs ?? CLI_CONNECT_TIMEOUT_MS,
    query_timeout: options.queryTimeoutMs ?? MIGRATION_QUERY_TIMEOUT_MS,
  });
  client.on("error", () => {});
  await client.connect();
  try {
    return await fn({
      exec: async (sql) => {
        await client.query(sql);
      },
      query: async <R extends Record<string, unknown>>(text: string, params: readonly unknown[] = []) =>
        (await client.query<R>(text, params as unknown[])).rows,
    });
  } finally {
    await client.end().catch(() => {});
  }
}

/** Strips the password from a connection string for messages. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = "***";
    return parsed.toString();
  } catch {
    return "(unparseable database URL)";
  }
}
