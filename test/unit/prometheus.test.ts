import { expect, it } from "vitest";
import { MetricRegistry } from "../../src/observability/prometheus.js";

it("renders counters, gauges and cumulative histograms in the text format", () => {
  const metrics = new MetricRegistry();
  const requests = metrics.counter("demo_requests_total", "Requests.\nSecond line with \\ backslash.", ["route"]);
  const temperature = metrics.gauge("demo_temperature", "A gauge.");
  const latency = metrics.histogram("demo_latency_seconds", "Latency.", ["route"], [0.1, 1]);
  requests.inc({ route: '/a"b\\c\nd' });
  requests.inc({ route: '/a"b\\c\nd' }, 2);
  temperature.set({}, -1.5);
  latency.observe({ route: "/x" }, 0.05);
  latency.observe({ route: "/x" }, 0.5);
  latency.observe({ route: "/x" }, 5);
  expect(metrics.render()).toBe(
    [
      "# HELP demo_requests_total Requests.\\nSecond line with \\\\ backslash.",
      "# TYPE demo_requests_total counter",
      'demo_requests_total{route="/a\\"b\\\\c\\nd"} 3',
      "# HELP demo_temperature A gauge.",
      "# TYPE demo_temperature gauge",
      "demo_temperature -1.5",
      "# HELP demo_latency_seconds Latency.",
      "# TYPE demo_latency_seconds histogram",
      'demo_latency_seconds_bucket{route="/x",le="0.1"} 1',
      'demo_latency_seconds_bucket{route="/x",le="1"} 2',
      'demo_latency_seconds_bucket{route="/x",le="+Inf"} 3',
      'demo_latency_seconds_sum{route="/x"} 5.55',
      'demo_latency_seconds_count{route="/x"} 3',
      "",
    ].join("\n"),
  );
});

it("refuses what would render invalid output", () => {
  const metrics = new MetricRegistry();
  expect(() => metrics.counter("bad-name", "x")).toThrow(/invalid metric name/);
  const counter = metrics.counter("ok_total", "x", ["a"]);
  expect(() => counter.inc({})).toThrow(/needs label a/);
  expect(() => counter.inc({ a: "1" }, -1)).toThrow(/only goes up/);
  expect(() => metrics.counter("ok_total", "again")).toThrow(/registered twice/);
  expect(() => metrics.histogram("h", "x", ["le"], [1])).toThrow(/reserved/);
  expect(() => metrics.histogram("h2", "x", [], [1, 1])).toThrow(/increase/);
});

it("takes a counter's total from its source, and never lets it fall", () => {
  const metrics = new MetricRegistry();
  const counter = metrics.counter("runs_total", "x");
  counter.setTotal({}, 3);
  counter.setTotal({}, 5);
  expect(metrics.render()).toContain("\nruns_total 5\n");
  counter.setTotal({}, 2);
  expect(metrics.render()).toContain("\nruns_total 5\n");
});
