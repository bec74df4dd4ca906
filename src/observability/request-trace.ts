/**
 * The app's first middleware: the request's trace. Reads `traceparent` and `tracestate` (or
 * starts a trace), opens the request's span with the tracer, and runs everything after it inside
 * that span (src/observability/request-context.ts), so that SQL statements and log lines name it.
 * Once the response is decided, the span gets what it was: route template, status, problem code,
 * tenant, and how a catalog answer or a resolution came about.
 */
import type { MiddlewareHandler } from "hono";
import type { AppEnv } from "../http/env.js";
import { runInRequest } from "./request-context.js";
import { CATALOG_CACHE_HEADER, problemCodeOf, routeLabel } from "./request-info.js";
import type { Tracer } from "./tracing.js";

export function traceRequests(tracer: Tracer): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const span = tracer.startRequest(c.req);
    c.set("span", span);
    await runInRequest(span, next);
    // Nothing to tell a span nobody records: the untraced path stops here.
    if (!span.recording) return;
    const headers = c.res.headers;
    span.end({
      route: routeLabel(c),
      requestId: c.get("requestId"),
      status: c.res.status,
      code: problemCodeOf(c),
      tenantId: (c.get("principal") as AppEnv["Variables"]["principal"] | undefined)?.tenantId ?? undefined,
      catalogCache: headers.get(CATALOG_CACHE_HEADER) ?? undefined,
      routeOutcome: headers.get("aip-route-outcome") ?? undefined,
    });
  };
}
