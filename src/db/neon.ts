/**
 * `@neondatabase/serverless` adapters for the Worker. Runtime-neutral (fetch and the global
 * WebSocket only): nothing here may pull Node modules into the Worker bundle.
 *
 * Two transports, one statement per registry call on either:
 * - HTTP (`neon()`): each query is one HTTPS request to Neon's SQL-over-HTTP endpoint, run in its
 *   own implicit transaction. No connection set-up at all, so it is the default: every registry
 *   operation is a single statement by design.
 * - WebSocket (`Pool`): the PostgreSQL wire protocol over a WebSocket. A Worker may not keep a
 *   socket beyond the request that opened it, so a pool lives for one request (or one lease-clock alarm)
 *   and is ended with `waitUntil` once the response is on its way.
 */
import { Pool, neon } from "@neondatabase/serverless";
import type { SqlExecutor } from "./executor.js";
import { traced } from "./traced.js";

/**
 * `timeoutMs` bounds one statement's whole round trip (a compute waking from suspension, the
 * statement, the answer): past it the call fails, which the registry answers 503 `storage`. The
 * statement may still commit; every registry call is safe to retry (docs/reliability.md).
 */
export function neonHttpExecutor(connectionString: string, options: { timeoutMs?: number } = {}): SqlExecutor {
  const sql = neon(connectionString);
  return traced({
    async query<R extends Record<string, unknown>>(text: string, params: readonly unknown[] = []) {
      const fetchOptions = options.timeoutMs ? { signal: AbortSignal.timeout(options.timeoutMs) } : undefined;
      return (await sql.query(text, [...params], fetchOptions ? { fetchOptions } : undefined)) as R[];
    },
  });
}

/**
 * WebSocket pools of one request, one per connection string, opened on first use. `end()` closes
 * whatever was opened; hand it to `ctx.waitUntil` so the response does not wait for it.
 */
export class RequestPools {
  private readonly pools = new Map<string, Pool>();

  executor(connectionString: string): SqlExecutor {
    return traced({
      query: async <R extends Record<string, unknown>>(text: string, params: readonly unknown[] = []) => {
        const result = await this.pool(connectionString).query(text, [...params]);
        return result.rows as R[];
      },
    });
  }

  async end(): Promise<void> {
    const pools = [...this.pools.values()];
    this.pools.clear();
    // A pool whose socket already died has nothing left to close.
    await Promise.all(pools.map((pool) => pool.end().catch(() => {})));
  }

  private pool(connectionString: string): Pool {
    let pool = this.pools.get(connectionString);
    if (!pool) {
      // One statement per call, calls of one request run one after another: one connection.
      pool = new Pool({ connectionString, max: 1, connectionTimeoutMillis: 10_000 });
      // An idle client dying (server restart) is reported on the pool; the next query fails
      // on its own and maps to `storage`. Unhandled, the event would throw.
      pool.on("error", () => {});
      this.pools.set(connectionString, pool);
    }
    return pool;
  }
}
