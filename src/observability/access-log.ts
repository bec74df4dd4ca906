/**
 * Structured access logs: one JSON object per request. The entry is built from a fixed set of
 * fields, so nothing from headers, the query string or the body can reach the log: no bearer
 * tokens, no secret_provider_ref or credential_revision_ref, no identifiers in the route (it is
 * the template, not the path). The request's trace and span ids (src/observability/tracing.ts)
 * are hex generated or validated here, never the caller's text.
 */
import type { MiddlewareHandler } from "hono";
import type { AppEnv } from "../http/env.js";
import { formatLine, type LogLevel } from "./log.js";
import { CATALOG_CACHE_HEADER, problemCodeOf, routeLabel } from "./request-info.js";

export interface AccessLogEntry {
  request_id: string;
  /** The request's trace: the caller's `traceparent` trace, or one started for it. */
  trace_id?: string;
  /** The request's own span in that trace. */
  span_id?: string;
  method: string;
  route: string;
  status: number;
  latency_ms: number;
  /** The problem code of an error response. */
  code?: string;
  /** The verified tenant of the caller, when its token carries one. */
  tenant_id?: string;
  /** How a catalog answer was produced (`hit`, `revalidated`, `miss`): on Workers, the log is where these are counted. */
  catalog_cache?: string;
}

export type AccessLogSink = (entry: AccessLogEntry) => void;

/**
 * A sink writing one JSON line per entry (stdout by default) in the format of every log line
 * (src/observability/log.ts): `error` for 5xx answers, else `info`; lines below `level`
 * (LOG_LEVEL) are not written.
 */
export function jsonLines(write: (line: string) => void = (line) => console.log(line), level: LogLevel = "info"): AccessLogSink {
  const quiet = level === "error" || level === "warn";
  return (entry) => {
    const lineLevel = entry.status >= 500 ? "error" : "info";
    if (lineLevel === "info" && quiet) return;
    // The entry carries the request's trace ids itself (a transport refusal has no request context).
    const { trace_id, span_id, ...fields } = entry;
    write(formatLine(lineLevel, "request", { ...(trace_id ? { trace_id, span_id } : {}), ...fields }));
  };
}

export function accessLog(sink: AccessLogSink): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const started = performance.now();
    await next();
    const status = c.res.status;
    const code = problemCodeOf(c);
    // Unset when authentication failed or the route needs none.
    const tenant = (c.get("principal") as AppEnv["Variables"]["principal"] | undefined)?.tenantId;
    const route = routeLabel(c);
    const cache = route.startsWith("/v1/catalog/") ? c.res.headers.get(CATALOG_CACHE_HEADER) : null;
    const span = c.get("span") as AppEnv["Variables"]["span"] | undefined;
    const entry: AccessLogEntry = {
      request_id: c.get("requestId"),
      ...(span ? { trace_id: span.traceId, span_id: span.spanId } : {}),
      method: c.req.method,
      route,
      status,
      latency_ms: Math.round((performance.now() - started) * 100) / 100,
      ...(code ? { code } : {}),
      ...(tenant ? { tenant_id: tenant } : {}),
      ...(cache ? { catalog_cache: cache } : {}),
    };
    try {
      sink(entry);
    } catch {
      // A failing log sink must not turn a served request into an error.
    }
  };
}
