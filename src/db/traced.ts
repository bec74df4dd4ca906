/**
 * Every statement of a request names the request's trace, in PostgreSQL and in the trace:
 *
 * - The statement text ends with a sqlcommenter comment (https://google.github.io/sqlcommenter/),
 *   `SELECT aip_resolve_route(...) AS result /*traceparent='00-<trace>-<span>-01'*\/`, so a slow
 *   statement in pg_stat_activity, the server log (log_min_duration_statement) or auto_explain
 *   names its trace. Still one statement, the same one; its parameters are unchanged. The comment
 *   is built from validated hex only (src/telemetry/trace-context.ts), so nothing a caller
 *   sends reaches the SQL text. pg_stat_statements ignores comments: its entries do not split.
 * - When spans are recorded (src/observability/otel.ts), the statement is a child span of the
 *   request's, named by the SQL function it calls (`db.operation.name`), and the comment carries
 *   that span's id.
 *
 * Statements outside a request (start-up checks, maintenance cycles) are sent as they are.
 * With LOG_LEVEL=debug each statement is logged with its operation and duration.
 */
import { formatTraceparent } from "../telemetry/trace-context.js";
import { log } from "../telemetry/log.js";
import { currentSpan } from "../telemetry/request-context.js";
import type { SqlExecutor } from "./executor.js";

/** A registry call `aip_<name>(`, schema-qualified or not: the first one in the statement. */
const FUNCTION_CALL = /\b(aip_[a-z0-9_]+)\s*\(/;
const operations = new Map<string, string>();
const MAX_OPERATIONS = 512;

/**
 * The SQL function a statement calls, without any schema prefix (`aip_resolve_route`); for a
 * statement that calls none, its first keyword (`SELECT`). Statements are a small fixed set of
 * texts: each is parsed once.
 */
export function operationOf(text: string): string {
  let operation = operations.get(text);
  if (operation === undefined) {
    operation = FUNCTION_CALL.exec(text)?.[1] ?? (/^\s*([A-Za-z]+)/.exec(text)?.[1]?.toUpperCase() || "SQL");
    if (operations.size < MAX_OPERATIONS) operations.set(text, operation);
  }
  return operation;
}

/** `executor`, with each statement of a request commented and, when recorded, spanned. */
export function traced(executor: SqlExecutor): SqlExecutor {
  return {
    query<R extends Record<string, unknown>>(text: string, params?: readonly unknown[]): Promise<R[]> {
      const request = currentSpan();
      if (!request) return executor.query<R>(text, params);
      const statement = request.statement(operationOf(text), text);
      const commented = `${text} /*traceparent='${formatTraceparent(request.traceId, statement.spanId, request.flags)}'*/`;
      if (!statement.recording && !log.enabled("debug")) return executor.query<R>(commented, params);
      const started = performance.now();
      return executor.query<R>(commented, params).then(
        (rows) => {
          statement.end();
          debugLine(text, started);
          return rows;
        },
        (error: unknown) => {
          statement.end(error);
          debugLine(text, started, error);
          throw error;
        },
      );
    },
  };
}

function debugLine(text: string, started: number, error?: unknown): void {
  if (!log.enabled("debug")) return;
  const code = (error as { code?: unknown } | undefined)?.code;
  log.debug("statement", {
    operation: operationOf(text),
    duration_ms: Math.round((performance.now() - started) * 100) / 100,
    ...(error ? { error: typeof code === "string" ? code : "failed" } : {}),
  });
}
