/**
 * What the app needs of a tracer, and the tracer of a server that exports nothing.
 *
 * Every request has a trace: the caller's (`traceparent`) or one started here. Its ids name the
 * request in the access log, in every log line written for it and, in an SQL comment, in
 * PostgreSQL. That costs the same whether or not spans are exported.
 *
 * Spans are recorded and exported only by the OpenTelemetry tracer (src/observability/otel.ts),
 * loaded only when the standard OTEL_* variables ask for it (src/observability/otel-env.ts).
 * Without it `untraced` stands in: no span objects, no attributes, no clock reads; a statement is
 * named by its request's span.
 */
import type { RequestFacts } from "./request-facts.js";
import { parseTraceparent, randomSpanId, randomTraceId } from "./trace-context.js";

/** The parts of the HTTP request a tracer reads (Hono's HonoRequest has them). */
export interface TracedRequest {
  readonly method: string;
  /** The whole URL (only a recording tracer reads it, for `url.path` and `url.scheme`). */
  readonly url: string;
  header(name: string): string | undefined;
}

export interface StatementSpan {
  /** The span id the statement's SQL comment carries. */
  readonly spanId: string;
  /** False when nothing is recorded: the caller need not call end(). */
  readonly recording: boolean;
  /** The statement finished; `error` when it failed. */
  end(error?: unknown): void;
}

export interface RequestSpan {
  readonly traceId: string;
  readonly spanId: string;
  /** The trace flags this server propagates (bit 0: sampled). */
  readonly flags: number;
  /** False when nothing records the span: end() need not be called. */
  readonly recording: boolean;
  /** A child span for one SQL statement: `operation` is the SQL function it calls. */
  statement(operation: string, text: string): StatementSpan;
  /** The request is answered: what it was (its route, status, problem code, tenant, ...). */
  end(facts: RequestFacts): void;
}

export interface Tracer {
  startRequest(request: TracedRequest): RequestSpan;
}

/** A request nobody records: its ids, and nothing else. Its statements are named by its own span. */
class UntracedRequest implements RequestSpan, StatementSpan {
  readonly recording = false;

  constructor(
    readonly traceId: string,
    readonly spanId: string,
    readonly flags: number,
  ) {}

  statement(): StatementSpan {
    return this;
  }

  end(): void {}
}

/**
 * The tracer when OpenTelemetry is off: the caller's trace is continued (its flags passed on
 * unchanged, as the specification asks of a participant that records nothing), or a new one
 * started, unsampled since nothing here records it.
 */
export const untraced: Tracer = {
  startRequest(request) {
    const parent = parseTraceparent(request.header("traceparent"));
    return parent ? new UntracedRequest(parent.traceId, randomSpanId(), parent.flags) : new UntracedRequest(randomTraceId(), randomSpanId(), 0);
  },
};
