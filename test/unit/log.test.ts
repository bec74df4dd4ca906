/**
 * One log format (src/telemetry/log.ts): every line a JSON object with time, level and msg,
 * the request's trace ids when written for a request, and LOG_LEVEL deciding what is written.
 */
import { expect, it } from "vitest";
import { jsonLines } from "../../src/observability/access-log.js";
import { Logger, type LogLevel } from "../../src/telemetry/log.js";
import { runInRequest } from "../../src/telemetry/request-context.js";
import { untraced } from "../../src/telemetry/tracing.js";

const capture = (level: LogLevel) => {
  const lines: { line: string; level: LogLevel }[] = [];
  return { lines, logger: new Logger(level, (line, at) => lines.push({ line, level: at })) };
};

it("writes time, level and msg first, then the fields", () => {
  const { lines, logger } = capture("info");
  logger.info("started", { port: 8787 });
  const line = lines[0]?.line as string;
  expect(Object.keys(JSON.parse(line))).toEqual(["time", "level", "msg", "port"]);
  const entry = JSON.parse(line);
  expect(entry).toMatchObject({ level: "info", msg: "started", port: 8787 });
  expect(new Date(entry.time).toISOString()).toBe(entry.time);
});

it("writes only the levels LOG_LEVEL lets through", () => {
  const written = (level: LogLevel) => {
    const { lines, logger } = capture(level);
    logger.error("e");
    logger.warn("w");
    logger.info("i");
    logger.debug("d");
    return lines.map((l) => JSON.parse(l.line).msg);
  };
  expect(written("error")).toEqual(["e"]);
  expect(written("warn")).toEqual(["e", "w"]);
  expect(written("info")).toEqual(["e", "w", "i"]);
  expect(written("debug")).toEqual(["e", "w", "i", "d"]);
});

it("names the request's trace in a line written for a request, and none outside", async () => {
  const { lines, logger } = capture("info");
  const span = untraced.startRequest({ method: "GET", url: "http://r/", header: () => "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" });
  await runInRequest(span, async () => {
    await Promise.resolve();
    logger.warn("inside");
  });
  logger.info("outside");
  const [inside, outside] = lines.map((l) => JSON.parse(l.line));
  expect(inside).toMatchObject({ msg: "inside", trace_id: "4bf92f3577b34da6a3ce929d0e0e4736", span_id: span.spanId });
  expect(outside).not.toHaveProperty("trace_id");
});

it("leaves the access log's info lines out below info, never its 5xx lines", () => {
  const lines: string[] = [];
  const sink = jsonLines((line) => lines.push(line), "warn");
  sink({ request_id: "r1", method: "GET", route: "/healthz", status: 200, latency_ms: 1 });
  sink({ request_id: "r2", method: "GET", route: "/readyz", status: 503, latency_ms: 1, code: "storage" });
  expect(lines.map((line) => JSON.parse(line).request_id)).toEqual(["r2"]);
});

it("never throws from a failing sink", () => {
  const logger = new Logger("info", () => {
    throw new Error("disk full");
  });
  expect(() => logger.error("x")).not.toThrow();
});
