/**
 * Whether to export traces, and how, from the standard OpenTelemetry variables only
 * (https://opentelemetry.io/docs/specs/otel/configuration/sdk-environment-variables/): on Node
 * from the environment, on Workers from bindings of the same names. This module loads nothing of
 * OpenTelemetry: with none of these set, `otelSettings` returns null and no OpenTelemetry code is
 * loaded at all (src/entry/node.ts imports it only then).
 *
 * Read here:
 * - OTEL_SDK_DISABLED=true: off, whatever else is set.
 * - OTEL_TRACES_EXPORTER: `otlp`, `console` or `none` (comma-separated). Unset, tracing is on
 *   exactly when an OTLP endpoint is set, so that an unconfigured server sends nothing anywhere.
 * - OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (used as is) or OTEL_EXPORTER_OTLP_ENDPOINT (+ `/v1/traces`);
 *   default http://localhost:4318/v1/traces.
 * - OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL: `http/protobuf` (default) or `http/json`; `grpc` is
 *   refused (no gRPC exporter here).
 * - OTEL_EXPORTER_OTLP_[TRACES_]HEADERS (`k=v,...`, values URL-decoded), _TIMEOUT (ms), _COMPRESSION (`gzip`, `none`).
 * - OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES.
 * - OTEL_TRACES_SAMPLER (`always_on`, `always_off`, `traceidratio`, `parentbased_always_on`
 *   (default), `parentbased_always_off`, `parentbased_traceidratio`) and OTEL_TRACES_SAMPLER_ARG
 *   (the ratio, default 1).
 * - OTEL_BSP_SCHEDULE_DELAY, OTEL_BSP_EXPORT_TIMEOUT, OTEL_BSP_MAX_QUEUE_SIZE,
 *   OTEL_BSP_MAX_EXPORT_BATCH_SIZE: the batch span processor.
 *
 * A value that cannot be honoured is refused (OtelSettingsError) rather than ignored: a server
 * that starts must export what it was told to.
 */

const SAMPLERS = ["always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio"] as const;
type SamplerName = (typeof SAMPLERS)[number];

type OtlpProtocol = "http/protobuf" | "http/json";

export interface OtelSettings {
  /** Export over OTLP/HTTP (absent: no OTLP exporter). */
  otlp?: {
    protocol: OtlpProtocol;
    /** The traces endpoint, path included. */
    url: string;
    headers: Record<string, string>;
    timeoutMillis?: number;
    compression?: "gzip" | "none";
  };
  /** Also print finished spans to stdout (OTEL_TRACES_EXPORTER=console). */
  console: boolean;
  /** OTEL_RESOURCE_ATTRIBUTES, with service.name from OTEL_SERVICE_NAME (default `aip-registry`). */
  resource: Record<string, string>;
  sampler: { name: SamplerName; ratio: number };
  batch: { scheduledDelayMillis?: number; exportTimeoutMillis?: number; maxQueueSize?: number; maxExportBatchSize?: number };
}

export class OtelSettingsError extends Error {
  override name = "OtelSettingsError";
}

type Env = Record<string, string | undefined>;

const value = (env: Env, name: string): string | undefined => {
  const raw = env[name]?.trim();
  return raw ? raw : undefined;
};

/** `k1=v1,k2=v2` with URL-encoded values (OTEL_RESOURCE_ATTRIBUTES, OTEL_EXPORTER_OTLP_HEADERS). */
function keyValues(env: Env, name: string): Record<string, string> {
  const raw = value(env, name);
  const pairs: Record<string, string> = {};
  if (!raw) return pairs;
  for (const member of raw.split(",")) {
    const at = member.indexOf("=");
    const key = member.slice(0, at).trim();
    if (at <= 0 || key === "") throw new OtelSettingsError(`${name}: "${member.trim()}" is not key=value`);
    try {
      pairs[key] = decodeURIComponent(member.slice(at + 1).trim());
    } catch {
      throw new OtelSettingsError(`${name}: the value of ${key} is not URL-encoded text`);
    }
  }
  return pairs;
}

function nonNegativeInteger(env: Env, name: string): number | undefined {
  const raw = value(env, name);
  if (raw === undefined) return undefined;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0) throw new OtelSettingsError(`${name}: "${raw}" is not a non-negative integer`);
  return n;
}

/** The signal-specific variable when set, else the general one. */
const traces = (env: Env, suffix: string) => value(env, `OTEL_EXPORTER_OTLP_TRACES_${suffix}`) ?? value(env, `OTEL_EXPORTER_OTLP_${suffix}`);

function tracesUrl(env: Env): string {
  const specific = value(env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
  const base = value(env, "OTEL_EXPORTER_OTLP_ENDPOINT");
  const url = specific ?? (base ? `${base.replace(/\/+$/, "")}/v1/traces` : "http://localhost:4318/v1/traces");
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new OtelSettingsError(`${specific ? "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" : "OTEL_EXPORTER_OTLP_ENDPOINT"}: "${url}" is not a URL`);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") throw new OtelSettingsError(`the OTLP traces endpoint must be http or https: ${url}`);
  return url;
}

/** What the OTEL_* variables ask for; null when traces are not to be exported. */
export function otelSettings(env: Env): OtelSettings | null {
  if (value(env, "OTEL_SDK_DISABLED")?.toLowerCase() === "true") return null;
  const endpointSet = value(env, "OTEL_EXPORTER_OTLP_ENDPOINT") !== undefined || value(env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") !== undefined;
  const named = value(env, "OTEL_TRACES_EXPORTER");
  const exporters = named
    ? named
        .split(",")
        .map((e) => e.trim())
        .filter((e) => e !== "")
    : endpointSet
      ? ["otlp"]
      : [];
  for (const exporter of exporters) {
    if (exporter !== "otlp" && exporter !== "console" && exporter !== "none") {
      throw new OtelSettingsError(`OTEL_TRACES_EXPORTER: "${exporter}" is not supported (otlp, console or none)`);
    }
  }
  const otlp = exporters.includes("otlp");
  const toConsole = exporters.includes("console");
  if (!otlp && !toConsole) return null;

  const settings: OtelSettings = { console: toConsole, resource: {}, sampler: sampler(env), batch: {} };
  if (otlp) {
    const protocol = traces(env, "PROTOCOL") ?? "http/protobuf";
    if (protocol !== "http/protobuf" && protocol !== "http/json") {
      throw new OtelSettingsError(`OTEL_EXPORTER_OTLP_PROTOCOL: "${protocol}" is not supported (http/protobuf or http/json)`);
    }
    const compression = traces(env, "COMPRESSION");
    if (compression !== undefined && compression !== "gzip" && compression !== "none") {
      throw new OtelSettingsError(`OTEL_EXPORTER_OTLP_COMPRESSION: "${compression}" is not supported (gzip or none)`);
    }
    const timeout = nonNegativeInteger(env, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT") ?? nonNegativeInteger(env, "OTEL_EXPORTER_OTLP_TIMEOUT");
    settings.otlp = {
      protocol,
      url: tracesUrl(env),
      headers: { ...keyValues(env, "OTEL_EXPORTER_OTLP_HEADERS"), ...keyValues(env, "OTEL_EXPORTER_OTLP_TRACES_HEADERS") },
      ...(timeout !== undefined ? { timeoutMillis: timeout } : {}),
      ...(compression ? { compression } : {}),
    };
  }
  const attributes = keyValues(env, "OTEL_RESOURCE_ATTRIBUTES");
  settings.resource = { ...attributes, "service.name": value(env, "OTEL_SERVICE_NAME") ?? attributes["service.name"] ?? "aip-registry" };
  const batch = {
    scheduledDelayMillis: nonNegativeInteger(env, "OTEL_BSP_SCHEDULE_DELAY"),
    exportTimeoutMillis: nonNegativeInteger(env, "OTEL_BSP_EXPORT_TIMEOUT"),
    maxQueueSize: nonNegativeInteger(env, "OTEL_BSP_MAX_QUEUE_SIZE"),
    maxExportBatchSize: nonNegativeInteger(env, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"),
  };
  for (const [key, n] of Object.entries(batch)) if (n !== undefined) settings.batch[key as keyof typeof batch] = n;
  return settings;
}

function sampler(env: Env): OtelSettings["sampler"] {
  const name = (value(env, "OTEL_TRACES_SAMPLER") ?? "parentbased_always_on") as SamplerName;
  if (!SAMPLERS.includes(name)) throw new OtelSettingsError(`OTEL_TRACES_SAMPLER: "${name}" is not supported (${SAMPLERS.join(", ")})`);
  const arg = value(env, "OTEL_TRACES_SAMPLER_ARG");
  const ratio = arg === undefined ? 1 : Number(arg);
  if (name.endsWith("traceidratio") && !(Number.isFinite(ratio) && ratio >= 0 && ratio <= 1)) {
    throw new OtelSettingsError(`OTEL_TRACES_SAMPLER_ARG: "${arg}" is not a ratio between 0 and 1`);
  }
  return { name, ratio };
}
