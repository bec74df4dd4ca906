/**
 * Tracing is configured by the standard OpenTelemetry variables alone
 * (src/observability/otel-env.ts): off unless an endpoint or an exporter is named, the same
 * defaults as the specification, and a value that cannot be honoured refused rather than ignored.
 */
import { expect, it } from "vitest";
import { otelSettings } from "../../src/observability/otel-env.js";

it("is off without the variables, with OTEL_TRACES_EXPORTER=none and with OTEL_SDK_DISABLED=true", () => {
  expect(otelSettings({})).toBeNull();
  expect(otelSettings({ OTEL_SERVICE_NAME: "x", OTEL_TRACES_SAMPLER: "always_on" })).toBeNull();
  expect(otelSettings({ OTEL_TRACES_EXPORTER: "none", OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318" })).toBeNull();
  expect(otelSettings({ OTEL_SDK_DISABLED: "true", OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318" })).toBeNull();
});

it("exports over OTLP/HTTP protobuf to the endpoint's /v1/traces by default, parent-based always-on", () => {
  expect(otelSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318/" })).toEqual({
    otlp: { protocol: "http/protobuf", url: "http://collector:4318/v1/traces", headers: {} },
    console: false,
    resource: { "service.name": "aip-registry" },
    sampler: { name: "parentbased_always_on", ratio: 1 },
    batch: {},
  });
  // OTEL_TRACES_EXPORTER=otlp alone: the specification's default endpoint.
  expect(otelSettings({ OTEL_TRACES_EXPORTER: "otlp" })?.otlp?.url).toBe("http://localhost:4318/v1/traces");
});

it("reads every standard variable it supports, signal-specific ones first", () => {
  const settings = otelSettings({
    OTEL_TRACES_EXPORTER: "otlp,console",
    OTEL_EXPORTER_OTLP_ENDPOINT: "http://ignored:4318",
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "https://collector.example/custom/path",
    OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf",
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "http/json",
    OTEL_EXPORTER_OTLP_HEADERS: "authorization=Bearer%20abc,x-team=core",
    OTEL_EXPORTER_OTLP_TRACES_HEADERS: "x-team=registry",
    OTEL_EXPORTER_OTLP_TIMEOUT: "5000",
    OTEL_EXPORTER_OTLP_COMPRESSION: "gzip",
    OTEL_SERVICE_NAME: "registry-eu",
    OTEL_RESOURCE_ATTRIBUTES: "deployment.environment.name=prod,service.name=overridden",
    OTEL_TRACES_SAMPLER: "parentbased_traceidratio",
    OTEL_TRACES_SAMPLER_ARG: "0.25",
    OTEL_BSP_SCHEDULE_DELAY: "200",
    OTEL_BSP_MAX_EXPORT_BATCH_SIZE: "64",
  });
  expect(settings).toEqual({
    otlp: {
      protocol: "http/json",
      url: "https://collector.example/custom/path",
      headers: { authorization: "Bearer abc", "x-team": "registry" },
      timeoutMillis: 5000,
      compression: "gzip",
    },
    console: true,
    resource: { "deployment.environment.name": "prod", "service.name": "registry-eu" },
    sampler: { name: "parentbased_traceidratio", ratio: 0.25 },
    batch: { scheduledDelayMillis: 200, maxExportBatchSize: 64 },
  });
});

it("refuses what it cannot honour, naming the variable", () => {
  const refused = (env: Record<string, string>) => () => otelSettings(env);
  expect(refused({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4317", OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" })).toThrow(
    /OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" is not supported/,
  );
  expect(refused({ OTEL_TRACES_EXPORTER: "zipkin" })).toThrow(/OTEL_TRACES_EXPORTER: "zipkin" is not supported/);
  expect(refused({ OTEL_EXPORTER_OTLP_ENDPOINT: "not a url" })).toThrow(/OTEL_EXPORTER_OTLP_ENDPOINT: .* is not a URL/);
  expect(refused({ OTEL_EXPORTER_OTLP_ENDPOINT: "ftp://c" })).toThrow(/must be http or https/);
  expect(refused({ OTEL_TRACES_EXPORTER: "otlp", OTEL_TRACES_SAMPLER: "jaeger_remote" })).toThrow(/OTEL_TRACES_SAMPLER: "jaeger_remote"/);
  expect(refused({ OTEL_TRACES_EXPORTER: "otlp", OTEL_TRACES_SAMPLER: "traceidratio", OTEL_TRACES_SAMPLER_ARG: "1.5" })).toThrow(/OTEL_TRACES_SAMPLER_ARG/);
  expect(refused({ OTEL_TRACES_EXPORTER: "otlp", OTEL_BSP_SCHEDULE_DELAY: "-1" })).toThrow(/OTEL_BSP_SCHEDULE_DELAY/);
  expect(refused({ OTEL_TRACES_EXPORTER: "otlp", OTEL_EXPORTER_OTLP_HEADERS: "novalue" })).toThrow(/OTEL_EXPORTER_OTLP_HEADERS/);
});
