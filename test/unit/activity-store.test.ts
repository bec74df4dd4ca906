/**
 * The Worker's activity history (src/observability/activity-store.ts), with the Durable Object's
 * storage in memory: isolates send their minute buckets at most every FLUSH_MS or when the minute
 * changes (never per request), the object adds the parts of a minute together, keeps
 * HISTORY_MINUTES of them, and a report includes the asking isolate's unsent part.
 */
import { expect, it } from "vitest";
import { HISTORY_MINUTES, type ActivitySample } from "../../src/observability/activity.js";
import { ActivityHistoryObject, EdgeActivity, FLUSH_MS, type HistoryNamespace } from "../../src/observability/activity-store.js";

function memoryStorage() {
  const data = new Map<string, unknown>();
  return {
    data,
    get: async <T>(key: string) => data.get(key) as T | undefined,
    put: async <T>(key: string, value: T) => void data.set(key, structuredClone(value)),
    delete: async (keys: string[]) => keys.filter((k) => data.delete(k)).length,
    list: async <T>({ prefix, start, end }: { prefix: string; start?: string; end?: string }) =>
      new Map(
        [...data.entries()]
          .filter(([k]) => k.startsWith(prefix) && (start === undefined || k >= start) && (end === undefined || k < end))
          .sort(([a], [b]) => (a < b ? -1 : 1)) as [string, T][],
      ),
  };
}

const sample: ActivitySample = {
  kind: "resolve",
  outcome: "created",
  refused: false,
  latencyMs: 5,
  tenantId: "t1",
  route: "/v1/routes/:action_id",
  method: "PUT",
  status: 201,
};

it("sends an isolate's samples at most every FLUSH_MS or at a new minute, and adds isolates' parts together", async () => {
  let now = Date.parse("2026-12-01T10:00:05Z");
  const storage = memoryStorage();
  const object = new ActivityHistoryObject({ storage }, () => now);
  let calls = 0;
  const namespace: HistoryNamespace = {
    idFromName: (name) => name,
    get: () => ({
      fetch: (input, init) => {
        calls++;
        return object.fetch(new Request(input, init));
      },
    }),
  };
  const first = new EdgeActivity(namespace, () => now);
  for (let i = 0; i < 50; i++) expect(first.record(sample)).toBeUndefined();
  expect(calls).toBe(0);
  now += FLUSH_MS;
  await first.record(sample);
  expect(calls).toBe(1);
  const second = new EdgeActivity(namespace, () => now);
  expect(second.record({ ...sample, outcome: "capacity-exceeded", refused: true, tenantId: "t2" })).toBeUndefined();
  now += 60_000; // a new minute: the finished one is sent with the next request
  await second.record(sample);
  expect(calls).toBe(2);
  first.record(sample);
  const report = await first.report({ minutes: 5 });
  expect(report.totals.outcomes.resolve).toEqual({ created: 53, "capacity-exceeded": 1 });
  expect(report.series.at(-2)?.requests.resolve).toBe(52);
  expect(report.series.at(-1)?.requests.resolve).toBe(2);
  expect(report.tenants.map((t) => t.tenant_id)).toEqual(["t1", "t2"]);
});

it("keeps HISTORY_MINUTES minutes and ignores parts older than that", async () => {
  let now = Date.parse("2026-12-01T10:00:00Z");
  const storage = memoryStorage();
  const object = new ActivityHistoryObject({ storage }, () => now);
  const minute = Math.floor(now / 60_000);
  await object.record([{ minute, ops: {}, outcomes: { "resolve:created": 1 }, tenants: {} }]);
  now += HISTORY_MINUTES * 60_000;
  await object.record([
    { minute: minute + HISTORY_MINUTES, ops: {}, outcomes: { "resolve:created": 2 }, tenants: {} },
    { minute: minute - 1, ops: {}, outcomes: { "resolve:created": 100 }, tenants: {} },
  ]);
  expect([...storage.data.keys()]).toEqual([`m:${String(minute + HISTORY_MINUTES).padStart(12, "0")}`]);
  expect((await object.report({ minutes: HISTORY_MINUTES })).totals.requests).toEqual({ resolve: 2 });
  const refused = await object.fetch(new Request("https://activity-history/record", { method: "POST", body: "not json" }));
  expect(refused.status).toBe(400);
});
