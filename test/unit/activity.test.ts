/**
 * The activity history (src/observability/activity.ts): samples land in their minute, buckets
 * merge by adding (an isolate's parts into the Durable Object's minute), percentiles come from the
 * histogram, refusals are counted by problem code, tenants are bounded per minute, and a window
 * reports every minute, empty ones included.
 */
import { expect, it } from "vitest";
import {
  activityKind,
  addSample,
  MAX_TENANTS_PER_MINUTE,
  MemoryActivity,
  mergeBucket,
  OTHER_TENANTS,
  quantile,
  summarize,
  type ActivityBucket,
  type ActivitySample,
} from "../../src/observability/activity.js";

const T0 = Date.parse("2026-12-01T10:00:00Z");
const sample = (over: Partial<ActivitySample>): ActivitySample => ({
  kind: "resolve",
  outcome: "created",
  refused: false,
  latencyMs: 3,
  route: "/v1/routes/:action_id",
  method: "PUT",
  status: 201,
  ...over,
});

it("classifies requests by route template and method", () => {
  expect(activityKind("PUT", "/v1/routes/:action_id")).toBe("resolve");
  expect(activityKind("GET", "/v1/routes/:action_id")).toBe("other");
  expect(activityKind("POST", "/v1/routes/:action_id/settlement")).toBe("settle");
  expect(activityKind("POST", "/v1/admin/publications")).toBe("publish");
  expect(activityKind("GET", "/v1/catalog/capabilities/:capability_id")).toBe("catalog");
  expect(activityKind("POST", "/v1/replicas/:replica_id/:operation")).toBe("lifecycle");
  expect(activityKind("GET", "unmatched")).toBe("other");
});

it("reports a window minute by minute: rates, refusals by code, latency percentiles and tenants", () => {
  let now = T0;
  const history = new MemoryActivity(() => now);
  for (let i = 0; i < 100; i++) history.record(sample({ tenantId: "tenant-a", latencyMs: i < 90 ? 4 : 400 }));
  history.record(sample({ tenantId: "tenant-b", outcome: "capacity-exceeded", refused: true, status: 429 }));
  history.record(sample({ kind: "settle", outcome: "ok", tenantId: "tenant-b", route: "/v1/routes/:action_id/settlement", method: "POST", status: 200 }));
  now += 2 * 60_000;
  history.record(sample({ kind: "catalog", outcome: "hit", tenantId: "tenant-a", latencyMs: 0.2 }));

  const report = history.report({ minutes: 5 });
  expect(report.series.map((p) => p.at)).toEqual([
    "2026-12-01T09:58:00.000Z",
    "2026-12-01T09:59:00.000Z",
    "2026-12-01T10:00:00.000Z",
    "2026-12-01T10:01:00.000Z",
    "2026-12-01T10:02:00.000Z",
  ]);
  expect(report.series[2]).toMatchObject({ requests: { resolve: 101, settle: 1 }, refusals: { "capacity-exceeded": 1 } });
  expect(report.series[3]).toEqual({ at: "2026-12-01T10:01:00.000Z", requests: {}, refusals: {}, latency_ms: {} });
  expect(report.totals.requests).toEqual({ resolve: 101, settle: 1, catalog: 1 });
  expect(report.totals.outcomes.resolve).toEqual({ created: 100, "capacity-exceeded": 1 });
  expect(report.totals.refusals).toEqual({ "capacity-exceeded": 1 });
  expect(report.totals.refused).toEqual({ resolve: 1 });
  // 90 of 101 resolves took 4 ms (bucket 3-5 ms), 10 took 400 ms (300-500 ms).
  const resolve = report.totals.latency_ms.resolve;
  expect(resolve?.p50).toBeGreaterThan(3);
  expect(resolve?.p50).toBeLessThanOrEqual(5);
  expect(resolve?.p99).toBeGreaterThan(300);
  expect(resolve?.p99).toBeLessThanOrEqual(500);
  expect(report.tenants).toEqual([
    { tenant_id: "tenant-a", requests: 101, resolves: 100, settlements: 0, refusals: 0, p99_ms: expect.any(Number) },
    { tenant_id: "tenant-b", requests: 2, resolves: 1, settlements: 1, refusals: 1, p99_ms: expect.any(Number) },
  ]);

  const tenant = history.report({ minutes: 5, tenantId: "tenant-b" });
  expect(tenant.tenant_id).toBe("tenant-b");
  expect(tenant.totals.requests).toEqual({ resolve: 1, settle: 1 });
  expect(tenant.totals.refusals).toEqual({ "capacity-exceeded": 1 });
  expect(tenant.totals.latency_ms.all?.p50).not.toBeNull();
  expect(tenant.tenants).toEqual([]);
  // The window moves on: three minutes later the first minute is out of a one-minute window.
  now += 3 * 60_000;
  expect(history.report({ minutes: 1 }).totals.requests).toEqual({});
});

it("merges an isolate's part into a stored minute by adding", () => {
  const stored: ActivityBucket = { minute: 1, ops: {}, outcomes: {}, tenants: {} };
  const part = (): ActivityBucket => {
    const bucket: ActivityBucket = { minute: 1, ops: {}, outcomes: {}, tenants: {} };
    addSample(bucket, sample({ tenantId: "t1", latencyMs: 12 }));
    addSample(bucket, sample({ tenantId: "t2", outcome: "replica-unavailable", refused: true }));
    return bucket;
  };
  mergeBucket(stored, part());
  mergeBucket(stored, part());
  expect(stored.ops.resolve).toMatchObject({ count: 4, refused: 2 });
  expect(stored.outcomes).toEqual({ "resolve:created": 2, "resolve:replica-unavailable": 2 });
  expect(stored.tenants.t1?.outcomes).toEqual({ "resolve:created": 2 });
  const whole = summarize([stored], { minutes: 1 }, 60_000 + 30_000);
  expect(whole.totals.refusals).toEqual({ "replica-unavailable": 2 });
});

it("keeps at most MAX_TENANTS_PER_MINUTE tenants a minute, the rest together", () => {
  const bucket: ActivityBucket = { minute: 1, ops: {}, outcomes: {}, tenants: {} };
  for (let i = 0; i < MAX_TENANTS_PER_MINUTE + 10; i++) addSample(bucket, sample({ tenantId: `tenant-${i}` }));
  expect(Object.keys(bucket.tenants)).toHaveLength(MAX_TENANTS_PER_MINUTE + 1);
  expect(bucket.tenants[OTHER_TENANTS]?.outcomes["resolve:created"]).toBe(10);
  expect(bucket.ops.resolve?.count).toBe(MAX_TENANTS_PER_MINUTE + 10);
});

it("interpolates quantiles within histogram buckets and knows nothing of an empty one", () => {
  expect(quantile({}, 0.99)).toBeNull();
  // 100 samples in (2, 3] ms: the median is halfway.
  expect(quantile({ 3: 100 }, 0.5)).toBe(2.5);
  expect(quantile({ 3: 100 }, 1)).toBe(3);
});
