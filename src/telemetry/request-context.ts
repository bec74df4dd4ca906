/**
 * The request a piece of code runs for, without passing it down: an AsyncLocalStorage holding the
 * request's span (its trace id and span id), set by the app's first middleware
 * (src/observability/request-trace.ts) around everything the request does. What reads it:
 * - every SQL statement (src/db/traced.ts): its comment names the trace, its span is a child;
 * - every log line (src/telemetry/log.ts): `trace_id` and `span_id`.
 *
 * Node has AsyncLocalStorage built in; the Worker gets it from the `nodejs_als` compatibility flag
 * (wrangler.toml), the one Node API it uses (scripts/bundle-size.ts allows only that import).
 */
import { AsyncLocalStorage } from "node:async_hooks";
import type { RequestSpan } from "./tracing.js";

const storage = new AsyncLocalStorage<RequestSpan>();

/** Runs `fn` (and everything it starts) as part of the request `span` stands for. */
export function runInRequest<R>(span: RequestSpan, fn: () => R): R {
  return storage.run(span, fn);
}

/** The span of the request this code runs for; undefined outside requests (start-up, maintenance cycles). */
export function currentSpan(): RequestSpan | undefined {
  return storage.getStore();
}
