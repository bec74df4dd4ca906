/**
 * Structured access logs: one JSON object per request. The entry is built from a fixed set of
 * fields, so nothing from headers, the query string or the body can reach the log: no bearer
 * tokens, no secret_provider_ref or credential_revision_ref, no identifiers in the route (it is
 * the template, not the path). The request's trace and span ids (src/telemetry/tracing.ts)
 * are hex generated or validated here, never the caller's text.
 */
import { formatLine, type LogLevel } from "../telemetry/log.js";
import type { RequestObserver } from "./request-trace.js";

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
 * (src/telemetry/log.ts): `error` for 5xx answers, else `info`; lines below `level`
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

/** The access log as an observer of finished requests (src/observability/request-trace.ts). */
export function accessLogObserver(sink: AccessLogSink): RequestObserver {
  return (facts, span) => {
    const entry: AccessLogEntry = {
      request_id: facts.requestId,
      trace_id: span.traceId,
      span_id: span.spanId,
      method: facts.method,
      route: facts.route,
      status: facts.status,
      latency_ms: Math.round(facts.latencyMs * 100) / 100,
      ...(facts.code ? { code: facts.code } : {}),
      ...(facts.tenantId ? { tenant_id: facts.tenantId } : {}),
      ...(facts.catalogCache && facts.route.startsWith("/v1/catalog/") ? { catalog_cache: facts.catalogCache } : {}),
    };
    try {
      sink(entry);
    } catch {
      // A failing log sink must not turn a served request into an error.
    }
  };
}
