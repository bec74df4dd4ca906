/**
 * The app's first middleware: the request's trace, and what the request turned out to be.
 *
 * Before: reads `traceparent` (or starts a trace), opens the request's span with the tracer, and
 * runs everything after it inside that span (src/telemetry/request-context.ts), so that SQL
 * statements and log lines name it.
 *
 * After: the request's facts (route template, status, latency, problem code, tenant, how a
 * catalog answer or a resolution came about) are read once (src/observability/request-info.ts)
 * and handed to each observer: the access log, the Prometheus metrics, the activity history, and
 * the span when one is recorded. One middleware instead of one per observer: a request pays for
 * one async frame and one reading of its facts, however many observe it.
 */
import type { Context, MiddlewareHandler } from "hono";
import type { AppEnv } from "../http/env.js";
import { runInRequest } from "../telemetry/request-context.js";
import { requestFacts, type RequestFacts } from "./request-info.js";
import type { RequestSpan, Tracer } from "../telemetry/tracing.js";

/** Told of every finished request (after onError made its problem answer). Must not throw. */
export type RequestObserver = (facts: RequestFacts, span: RequestSpan, c: Context<AppEnv>) => void;

export function observeRequests(tracer: Tracer, observers: RequestObserver[]): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const started = performance.now();
    const span = tracer.startRequest(c.req);
    c.set("span", span);
    await runInRequest(span, next);
    if (observers.length === 0 && !span.recording) return;
    const facts = requestFacts(c, started);
    for (const observe of observers) {
      try {
        observe(facts, span, c);
      } catch {
        // Observing a request never fails it.
      }
    }
    if (span.recording) span.end(facts);
  };
}
