/**
 * GET /metrics: Prometheus exposition of request latency, resolve outcomes, pool usage and the
 * fleet gauges, over the real app and database.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { createApp, type PoolUsage } from "../../src/app.js";
import { MemoryCatalogCache } from "../../src/catalog/cache.js";
import { createAuthenticator } from "../../src/http/auth.js";
import { Registry } from "../../src/registry/registry.js";
import { useTestDatabase } from "../support/database.js";
import { publishSimpleFleet } from "../../fixtures/records.js";
import { find, parseExposition, value } from "../support/exposition.js";
import { createTestApi, TEST_SECRET, type TestApi } from "../support/http.js";

const db = useTestDatabase();
let api: TestApi;
let app: ReturnType<typeof createApp>;
let adminToken: string;
let lastPoolUsage: PoolUsage | undefined;

beforeAll(async () => {
  api = createTestApi(db.registry);
  app = createApp({
    registry: db.registry,
    authenticator: createAuthenticator({ hs256Secret: TEST_SECRET }),
    metrics: {
      pools: () => {
        lastPoolUsage = { pool: "data", total: db.dataPool.totalCount, idle: db.dataPool.idleCount, waiting: db.dataPool.waitingCount, max: 8 };
        return [lastPoolUsage];
      },
    },
  });
  adminToken = await api.adminToken();
  await publishSimpleFleet(db.registry, { prefix: "m", capacity: 1 });
});

const call = (method: string, path: string, token?: string, body?: unknown) =>
  app.request(path, {
    method,
    headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...(body ? { "content-type": "application/json" } : {}) },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });

describe("/metrics", () => {
  it("needs a token with fleet:read by default", async () => {
    expect((await call("GET", "/metrics")).status).toBe(401);
    const tenant = await api.tenantToken("tenant-a");
    const refused = await call("GET", "/metrics", tenant);
    expect(refused.status).toBe(403);
    expect(((await refused.json()) as { code: string }).code).toBe("forbidden");
    const fleetReader = await api.token({ scopes: ["fleet:read"] });
    expect((await call("GET", "/metrics", fleetReader)).status).toBe(200);
  });

  it("can be served publicly, and is absent unless the app is given metrics options", async () => {
    const authenticator = createAuthenticator({ hs256Secret: TEST_SECRET });
    const open = createApp({ registry: db.registry, authenticator, metrics: { public: true } });
    expect((await open.request("/metrics")).status).toBe(200);
    const worker = createApp({ registry: db.registry, authenticator });
    expect((await worker.request("/metrics")).status).toBe(404);
  });

  it("counts resolve outcomes by code, times requests by route template, and reports pool and fleet gauges", async () => {
    const token = await api.tenantToken("tenant-a");
    const resolve = (action: string, capability = "cap:m.search") => call("PUT", `/v1/routes/${action}`, token, { capability_id: capability });
    expect((await resolve("act_metrics_1")).status).toBe(201);
    expect((await resolve("act_metrics_1")).status).toBe(200);
    expect((await resolve("act_metrics_2")).status).toBe(503); // capacity 1: replica-unavailable
    expect((await resolve("act_metrics_3", "cap:m.unbound")).status).toBe(404); // binding-unavailable
    expect((await resolve("act_metrics_4", "")).status).toBe(400);
    expect((await call("PUT", "/v1/routes/act_metrics_5", undefined, { capability_id: "cap:m.search" })).status).toBe(401);

    const response = await call("GET", "/metrics", adminToken);
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8");
    const text = await response.text();
    const { samples, types } = parseExposition(text);

    // Resolve outcomes.
    expect(types.get("aip_route_resolutions_total")).toBe("counter");
    for (const [outcome, count] of Object.entries({
      created: 1,
      existing: 1,
      "replica-unavailable": 1,
      "binding-unavailable": 1,
      invalid: 1,
      unauthorized: 1,
    })) {
      expect(value(samples, "aip_route_resolutions_total", { outcome }), outcome).toBe(count);
    }

    // Latency histogram: labelled by template, never by action ID; cumulative buckets.
    expect(types.get("aip_http_request_duration_seconds")).toBe("histogram");
    const labels = { method: "PUT", route: "/v1/routes/:action_id", status: "201" };
    expect(value(samples, "aip_http_request_duration_seconds_count", labels)).toBe(1);
    const buckets = find(samples, "aip_http_request_duration_seconds_bucket", labels);
    expect(buckets.length).toBeGreaterThan(5);
    expect(buckets.at(-1)?.labels.le).toBe("+Inf");
    expect(buckets.at(-1)?.value).toBe(1);
    for (let i = 1; i < buckets.length; i++) expect(buckets[i]!.value).toBeGreaterThanOrEqual(buckets[i - 1]!.value);
    expect(value(samples, "aip_http_request_duration_seconds_sum", labels)).toBeGreaterThan(0);
    expect(text).not.toContain("act_metrics");
    expect(text).not.toContain("tenant-a");
    expect(text).not.toContain("crepl_");

    // Pool usage from the option, fleet gauges from aip_fleet_status() at scrape time.
    expect(lastPoolUsage).toBeDefined();
    expect(value(samples, "aip_db_pool_max_connections", { pool: "data" })).toBe(8);
    expect(value(samples, "aip_db_pool_connections", { pool: "data" })).toBe(lastPoolUsage?.total);
    expect(value(samples, "aip_db_pool_idle_connections", { pool: "data" })).toBe(lastPoolUsage?.idle);
    expect(value(samples, "aip_db_pool_waiting_requests", { pool: "data" })).toBe(lastPoolUsage?.waiting);
    expect(value(samples, "aip_db_pool_in_use_connections", { pool: "data" })).toBe((lastPoolUsage?.total ?? 0) - (lastPoolUsage?.idle ?? 0));
    const status = await db.registry.fleetStatus();
    expect(value(samples, "aip_fleet_status_up")).toBe(1);
    expect(value(samples, "aip_catalog_revision")).toBe(status.catalog_revision);
    expect(value(samples, "aip_fleet_replicas", { status: "ready" })).toBe(1);
    expect(value(samples, "aip_fleet_replicas", { status: "offline" })).toBe(0);
    expect(value(samples, "aip_fleet_replicas", { status: "expired" })).toBe(0);
    expect(value(samples, "aip_fleet_active_assignments")).toBe(1);
    expect(value(samples, "aip_fleet_ready_capacity")).toBe(1);
    expect(value(samples, "aip_fleet_records", { kind: "connector_types" })).toBe(status.connector_types);
  });

  it("counts catalog answers by kind and cache outcome: miss, revalidated, hit", async () => {
    let now = 1_000_000;
    const cached = createApp({
      registry: db.registry,
      authenticator: createAuthenticator({ hs256Secret: TEST_SECRET }),
      catalog: { cache: new MemoryCatalogCache(1024 * 1024), maxStalenessMs: 1000, now: () => now },
      metrics: { public: true },
    });
    const token = await api.tenantToken("tenant-a");
    const get = async (path: string) => {
      const response = await cached.request(path, { headers: { authorization: `Bearer ${token}` } });
      expect(response.status).toBe(200);
      return response.headers.get("aip-catalog-cache");
    };
    // The first read builds; within the staleness bound the next is a hit; after it, revalidated.
    expect(await get("/v1/catalog/capabilities")).toBe("miss");
    expect(await get("/v1/catalog/capabilities")).toBe("hit");
    now += 5000;
    expect(await get("/v1/catalog/capabilities")).toBe("revalidated");
    expect(await get("/v1/catalog/capabilities/cap%3Am.search")).toBe("miss");
    const { samples, types } = parseExposition(await (await cached.request("/metrics")).text());
    expect(types.get("aip_catalog_cache_requests_total")).toBe("counter");
    expect(find(samples, "aip_catalog_cache_requests_total").map((s) => [s.labels.kind, s.labels.outcome, s.value])).toEqual([
      ["page", "miss", 1],
      ["page", "hit", 1],
      ["page", "revalidated", 1],
      ["definition", "miss", 1],
    ]);
  });

  it("still answers when the fleet status cannot be read, without stale fleet gauges", async () => {
    let fail = false;
    const flaky = new Registry({
      data: {
        query: (text, params) =>
          fail
            ? Promise.reject(Object.assign(new Error("connection refused"), { code: "08006" }))
            : db.dataPool.query(text, params as unknown[]).then((r) => r.rows),
      },
    });
    const flakyApp = createApp({ registry: flaky, authenticator: createAuthenticator({ hs256Secret: TEST_SECRET }), metrics: { public: true } });
    const first = parseExposition(await (await flakyApp.request("/metrics")).text()).samples;
    expect(value(first, "aip_fleet_status_up")).toBe(1);
    expect(find(first, "aip_fleet_replicas")).toHaveLength(4);
    fail = true;
    const second = await flakyApp.request("/metrics");
    expect(second.status).toBe(200);
    const samples = parseExposition(await second.text()).samples;
    expect(value(samples, "aip_fleet_status_up")).toBe(0);
    expect(find(samples, "aip_fleet_replicas")).toEqual([]);
    expect(find(samples, "aip_catalog_revision")).toEqual([]);
    expect(value(samples, "aip_http_request_duration_seconds_count", { route: "/metrics", status: "200" })).toBe(1);
  });
});
