/**
 * W3C Trace Context as the registry reads and writes it (src/telemetry/trace-context.ts): a
 * valid `traceparent` is continued, anything else starts a trace; what is written is lowercase hex
 * only, so nothing a caller sends can reach the SQL comment or the logs.
 */
import { expect, it } from "vitest";
import { formatTraceparent, parseTraceparent, parseTracestate, randomSpanId, randomTraceId } from "../../src/telemetry/trace-context.js";
import { untraced } from "../../src/telemetry/tracing.js";

const VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

it("reads a valid traceparent, and a later version's first four fields", () => {
  expect(parseTraceparent(VALID)).toEqual({ traceId: "4bf92f3577b34da6a3ce929d0e0e4736", spanId: "00f067aa0ba902b7", flags: 1 });
  expect(parseTraceparent(` ${VALID} `)?.traceId).toBe("4bf92f3577b34da6a3ce929d0e0e4736");
  expect(parseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")?.flags).toBe(0);
  expect(parseTraceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes-next")?.spanId).toBe("00f067aa0ba902b7");
});

it("refuses every malformed traceparent (the request then starts its own trace)", () => {
  for (const header of [
    undefined,
    "",
    "garbage",
    "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // version ff is invalid
    "00-00000000000000000000000000000000-00f067aa0ba902b7-01", // all-zero trace id
    "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", // all-zero span id
    "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", // uppercase
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", // version 00 has exactly four fields
    "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01extra",
    "00-4bf92f3577b34da6a3ce929d0e0e473*-00f067aa0ba902b7-01",
    "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
    "00-4bf92f3577b34da6a3ce929d0e0e4736*/; DROP TABLE x; --",
  ]) {
    expect(parseTraceparent(header), String(header)).toBeUndefined();
  }
});

it("keeps a valid tracestate and drops an invalid one whole", () => {
  expect(parseTracestate("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")).toBe("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7");
  expect(parseTracestate(" vendor@system=value ,  other=1")).toBe("vendor@system=value,other=1");
  expect(parseTracestate("Upper=1")).toBeUndefined();
  expect(parseTracestate("novalue")).toBeUndefined();
  expect(parseTracestate("k=trailing ")).toBe("k=trailing");
  expect(parseTracestate(Array.from({ length: 33 }, (_, i) => `k${i}=v`).join(","))).toBeUndefined();
  expect(parseTracestate(`k=${"v".repeat(600)}`)).toBeUndefined();
  expect(parseTracestate(undefined)).toBeUndefined();
});

it("writes traceparent and generates ids as lowercase hex, never all zero", () => {
  expect(formatTraceparent("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 1)).toBe(VALID);
  expect(formatTraceparent("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 0x1f)).toBe("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1f");
  const traces = new Set(Array.from({ length: 200 }, () => randomTraceId()));
  expect(traces.size).toBe(200);
  for (const id of traces) expect(id).toMatch(/^[0-9a-f]{32}$/);
  expect(randomSpanId()).toMatch(/^[0-9a-f]{16}$/);
});

it("without a tracer, continues the caller's trace with a span of its own, or starts an unsampled one", () => {
  const request = (headers: Record<string, string>) => ({ method: "GET", url: "http://r/x", header: (name: string) => headers[name] });
  const continued = untraced.startRequest(request({ traceparent: VALID }));
  expect(continued).toMatchObject({ traceId: "4bf92f3577b34da6a3ce929d0e0e4736", flags: 1, recording: false });
  expect(continued.spanId).toMatch(/^[0-9a-f]{16}$/);
  expect(continued.spanId).not.toBe("00f067aa0ba902b7");
  // Its statements are named by its own span: nothing else is made per statement.
  expect(continued.statement("aip_resolve_route", "SELECT 1")).toBe(continued);
  const started = untraced.startRequest(request({ traceparent: "00-00000000000000000000000000000000-00f067aa0ba902b7-01" }));
  expect(started.traceId).toMatch(/^[0-9a-f]{32}$/);
  expect(started.traceId).not.toBe("00000000000000000000000000000000");
  expect(started.flags).toBe(0);
});
