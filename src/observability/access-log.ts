/**
 * Structured access logs: one JSON object per request. The entry is built from a fixed set of
 * fields, so nothing from headers, the query string or the body can reach the log: no bearer
 * tokens, no secret_provider_ref or credential_revision_ref, no identifiers in the route (it is
 * the template, not the path).
 */
import type { MiddlewareHandler } from "hono";
import type { AppEnv } from "../http/env.js";
import { CATALOG_CACHE_HEADER, problemCodeOf, routeLabel } from "./request-info.js";

export interface AccessLogEntry {
  request_id: string;
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

/** A sink writing one JSON line per entry (stdout by default), with time and level. */
export function jsonLines(write: (line: string) => void = (line) => console.log(line)): AccessLogSink {
  return (entry) => write(JSON.stringify({ time: new Date().toISOString(), level: entry.status >= 500 ? "error" : "info", msg: "request", ...entry }));
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
    const entry: AccessLogEntry = {
      request_id: c.get("requestId"),
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
