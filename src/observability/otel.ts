/**
 * The tracer that records and exports spans, with the official OpenTelemetry JS packages: the
 * SDK's TracerProvider, sampler and batch span processor, and the OTLP/HTTP exporters (JSON or
 * protobuf). Loaded only when src/observability/otel-env.ts finds tracing asked for: the Node
 * server imports this module dynamically; the Worker bundles it and builds it only then.
 *
 * The same code runs on both runtimes: the exporter packages pick their transport by platform
 * (Node's http module on Node, `fetch` on workerd).
 *
 * Spans (semantic conventions: https://opentelemetry.io/docs/specs/semconv/):
 * - one SERVER span per request, named `<method> <route template>`: `http.request.method`,
 *   `http.route`, `http.response.status_code`, `url.path`, `url.scheme`, and the registry's own
 *   `aip.request_id`, `aip.tenant.id`, `aip.problem.code`, `aip.catalog.cache`,
 *   `aip.route.outcome`; `error.type` and an error status for 5xx answers;
 * - one CLIENT span per SQL statement of the request, its child, named by the SQL function it
 *   calls: `db.system.name` and `db.system` (`postgresql`), `db.operation.name` (the function,
 *   without schema), `db.query.text` (the parameterized text: no values), and on failure
 *   `db.response.status_code` (the SQLSTATE) and an error status.
 *
 * A caller's `traceparent` is the parent of the request's span (its `tracestate` kept); the
 * sampler decides as OTEL_TRACES_SAMPLER says (by default, as the caller did).
 */
import { diag, DiagLogLevel, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Attributes, type Span, type Tracer as OtelTracer } from "@opentelemetry/api";
import { TraceState } from "@opentelemetry/core";
import { OTLPTraceExporter as OtlpJsonExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { OTLPTraceExporter as OtlpProtobufExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { resourceFromAttributes } from "@opentelemetry/resources";
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BatchSpanProcessor,
  ConsoleSpanExporter,
  ParentBasedSampler,
  TraceIdRatioBasedSampler,
  TracerProvider,
  type Sampler,
  type SpanProcessor,
} from "@opentelemetry/sdk-trace";
import { log } from "../telemetry/log.js";
import type { OtelSettings } from "./otel-env.js";
import { parseTraceparent, parseTracestate } from "../telemetry/trace-context.js";
import type { RequestFacts } from "./request-info.js";
import type { RequestSpan, StatementSpan, TracedRequest, Tracer } from "../telemetry/tracing.js";

/** A tracer that exports, and the means to flush and stop it. */
export interface ExportingTracer extends Tracer {
  /** Exports what has ended so far (the Worker calls it after each response, with waitUntil). */
  flush(): Promise<void>;
  /** Exports what is left, then stops (the Node server's graceful stop). */
  shutdown(): Promise<void>;
}

function samplerOf({ name, ratio }: OtelSettings["sampler"]): Sampler {
  switch (name) {
    case "always_on":
      return new AlwaysOnSampler();
    case "always_off":
      return new AlwaysOffSampler();
    case "traceidratio":
      return new TraceIdRatioBasedSampler(ratio);
    case "parentbased_always_on":
      return new ParentBasedSampler({ root: new AlwaysOnSampler() });
    case "parentbased_always_off":
      return new ParentBasedSampler({ root: new AlwaysOffSampler() });
    case "parentbased_traceidratio":
      return new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(ratio) });
  }
}

/** Export failures are the operator's to know: OpenTelemetry's own warnings and errors go to the log. */
function reportExportProblems(): void {
  const write =
    (level: "warn" | "error") =>
    (message: string, ...args: unknown[]) =>
      log.line(level, "opentelemetry", { detail: [message, ...args.map((arg) => (arg instanceof Error ? arg.message : String(arg)))].join(" ") });
  diag.setLogger(
    { error: write("error"), warn: write("warn"), info: () => {}, debug: () => {}, verbose: () => {} },
    { logLevel: DiagLogLevel.WARN, suppressOverrideMessage: true },
  );
}

/** The tracer the settings describe; `version` is the running build's (`service.version`). */
export function createOtelTracer(settings: OtelSettings, version: string): ExportingTracer {
  reportExportProblems();
  const processors: SpanProcessor[] = [];
  if (settings.otlp) {
    const { protocol, url, headers, timeoutMillis, compression } = settings.otlp;
    type ExporterConfig = NonNullable<ConstructorParameters<typeof OtlpJsonExporter>[0]>;
    const config: ExporterConfig = {
      url,
      headers,
      ...(timeoutMillis !== undefined ? { timeoutMillis } : {}),
      // The exporter's CompressionAlgorithm enum has exactly these two string values.
      ...(compression ? { compression: compression as ExporterConfig["compression"] } : {}),
    };
    const exporter = protocol === "http/json" ? new OtlpJsonExporter(config) : new OtlpProtobufExporter(config);
    processors.push(new BatchSpanProcessor({ exporter, ...settings.batch }));
  }
  if (settings.console) processors.push(new BatchSpanProcessor({ exporter: new ConsoleSpanExporter(), ...settings.batch }));
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ "service.version": version, ...settings.resource }),
    sampler: samplerOf(settings.sampler),
    spanProcessors: processors,
  });
  const tracer = provider.getTracer("aip-registry", version);
  return {
    startRequest: (request) => startRequest(tracer, request),
    flush: () => provider.forceFlush(),
    shutdown: () => provider.shutdown(),
  };
}

function startRequest(tracer: OtelTracer, request: TracedRequest): RequestSpan {
  const parent = parseTraceparent(request.header("traceparent"));
  const state = parent ? parseTracestate(request.header("tracestate")) : undefined;
  const context = parent
    ? trace.setSpanContext(ROOT_CONTEXT, {
        traceId: parent.traceId,
        spanId: parent.spanId,
        traceFlags: parent.flags,
        isRemote: true,
        ...(state ? { traceState: new TraceState(state) } : {}),
      })
    : ROOT_CONTEXT;
  const url = new URL(request.url);
  const span = tracer.startSpan(
    request.method,
    {
      kind: SpanKind.SERVER,
      attributes: { "http.request.method": request.method, "url.path": url.pathname, "url.scheme": url.protocol.replace(/:$/, "") },
    },
    context,
  );
  return new OtelRequestSpan(tracer, span, request.method);
}

class OtelRequestSpan implements RequestSpan {
  readonly traceId: string;
  readonly spanId: string;
  readonly flags: number;
  readonly recording: boolean;

  constructor(
    private readonly tracer: OtelTracer,
    private readonly span: Span,
    private readonly method: string,
  ) {
    const context = span.spanContext();
    this.traceId = context.traceId;
    this.spanId = context.spanId;
    this.flags = context.traceFlags;
    this.recording = span.isRecording();
  }

  statement(operation: string, text: string): StatementSpan {
    // An unsampled request records no children: its statements are named by its own span.
    if (!this.recording) return { spanId: this.spanId, recording: false, end: () => {} };
    const span = this.tracer.startSpan(
      operation,
      {
        kind: SpanKind.CLIENT,
        attributes: { "db.system.name": "postgresql", "db.system": "postgresql", "db.operation.name": operation, "db.query.text": text },
      },
      trace.setSpan(ROOT_CONTEXT, this.span),
    );
    return {
      spanId: span.spanContext().spanId,
      recording: true,
      end(error?: unknown) {
        if (error !== undefined) {
          const code = (error as { code?: unknown })?.code;
          if (typeof code === "string") span.setAttribute("db.response.status_code", code);
          span.setAttribute("error.type", typeof code === "string" ? code : ((error as Error)?.name ?? "Error"));
          span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
        }
        span.end();
      },
    };
  }

  end(outcome: RequestFacts): void {
    const attributes: Attributes = { "http.route": outcome.route, "http.response.status_code": outcome.status };
    if (outcome.code) attributes["aip.problem.code"] = outcome.code;
    if (outcome.tenantId) attributes["aip.tenant.id"] = outcome.tenantId;
    if (outcome.catalogCache) attributes["aip.catalog.cache"] = outcome.catalogCache;
    if (outcome.routeOutcome) attributes["aip.route.outcome"] = outcome.routeOutcome;
    if (outcome.requestId) attributes["aip.request_id"] = outcome.requestId;
    this.span.setAttributes(attributes);
    this.span.updateName(outcome.route === "unmatched" ? this.method : `${this.method} ${outcome.route}`);
    if (outcome.status >= 500) {
      this.span.setAttribute("error.type", outcome.code ?? String(outcome.status));
      this.span.setStatus({ code: SpanStatusCode.ERROR });
    }
    this.span.end();
  }
}
