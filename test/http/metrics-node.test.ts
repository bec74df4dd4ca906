/**
 * The Node server's wiring of /metrics: every pg pool reported, process and runtime metrics, the
 * build, lease maintenance, JSON access lines on stdout, and METRICS=false / METRICS_PUBLIC=true
 * honoured.
 */
import { afterAll, expect, it, vi } from "vitest";
import { mintToken } from "../../src/http/tokens.js";
import { startServer, type RunningServer } from "../../src/entry/node.js";
import { FUNCTION_SET, FUNCTIONS_CHECKSUM, SCHEMA_VERSION } from "../../src/db/schema-version.js";
import { useTestDatabase } from "../support/database.js";
import { find, parseExposition, value } from "../support/exposition.js";
import { TEST_SECRET } from "../support/http.js";
import { lifecycle, provisionFleet } from "../support/replicas.js";

const db = useTestDatabase();
const servers: RunningServer[] = [];
const start = async (extra: Record<string, string> = {}) => {
  const server = await startServer(
    {
      DATABASE_URL: db.dataUrl,
      CONTROL_DATABASE_URL: db.controlUrl,
      AUTH_HS256_SECRET: TEST_SECRET,
      PORT: "0",
      MIGRATE_ON_START: "false",
      LEASE_MAINTENANCE_INTERVAL_MS: "0",
      ...extra,
    },
    () => {},
  );
  servers.push(server);
  return server;
};

afterAll(async () => {
  for (const server of servers) await server.close();
});

it("reports both pools and logs one JSON line per request, without the token", async () => {
  const lines: string[] = [];
  const spy = vi.spyOn(console, "log").mockImplementation((line: unknown) => void lines.push(String(line)));
  try {
    const server = await start({ DB_POOL_MAX: "6" });
    const token = await mintToken(TEST_SECRET, { subject: "prometheus", scopes: ["fleet:read"] });
    expect((await fetch(`${server.url}/metrics`)).status).toBe(401);
    const response = await fetch(`${server.url}/metrics`, { headers: { authorization: `Bearer ${token}` } });
    expect(response.status).toBe(200);
    const text = await response.text();
    expect(text).toMatch(/^aip_db_pool_max_connections\{pool="data"\} 6$/m);
    expect(text).toMatch(/^aip_db_pool_max_connections\{pool="control"\} 4$/m);
    expect(text).toMatch(/^aip_db_pool_connections\{pool="data"\} \d+$/m);
    expect(text).toMatch(/^aip_fleet_status_up 1$/m);
    const access = lines.map((line) => JSON.parse(line)).filter((entry) => entry.msg === "request");
    expect(access.map((e) => [e.route, e.status, e.level])).toEqual([
      ["/metrics", 401, "info"],
      ["/metrics", 200, "info"],
    ]);
    expect(lines.join("\n")).not.toContain(token);
  } finally {
    spy.mockRestore();
  }
});

it("serves public metrics with METRICS_PUBLIC=true and none with METRICS=false", async () => {
  const open = await start({ METRICS_PUBLIC: "true", ACCESS_LOG: "false" });
  expect((await fetch(`${open.url}/metrics`)).status).toBe(200);
  const off = await start({ METRICS: "false", ACCESS_LOG: "false" });
  expect((await fetch(`${off.url}/metrics`)).status).toBe(404);
});

const scrape = async (server: RunningServer) => {
  const response = await fetch(`${server.url}/metrics`);
  expect(response.status).toBe(200);
  return parseExposition(await response.text());
};

it("serves process and runtime metrics, the build, and every pool (catalog replica included) in one well-formed exposition", async () => {
  const server = await start({ METRICS_PUBLIC: "true", ACCESS_LOG: "false", CATALOG_DATABASE_URL: db.dataUrl, DB_POOL_MAX: "5" });
  await fetch(`${server.url}/healthz`);
  const { samples, types } = await scrape(server);
  // prom-client's defaults: CPU, memory, event-loop lag, GC, handles, heap.
  for (const [name, type] of [
    ["process_cpu_seconds_total", "counter"],
    ["process_resident_memory_bytes", "gauge"],
    ["process_start_time_seconds", "gauge"],
    ["nodejs_eventloop_lag_p99_seconds", "gauge"],
    ["nodejs_gc_duration_seconds", "histogram"],
    ["nodejs_active_handles", "gauge"],
    ["nodejs_active_handles_all", "gauge"],
    ["nodejs_heap_size_used_bytes", "gauge"],
  ]) {
    expect(types.get(name as string), name).toBe(type);
  }
  // `_total` is the counters' suffix alone (what `promtool check metrics` checks): prom-client's
  // three gauges named `nodejs_active_*_total` are served as `nodejs_active_*_all`.
  for (const [name, type] of types) {
    if (type === "counter") expect(name, name).toMatch(/_total$/);
    else expect(name, `${name} is a ${type}`).not.toMatch(/_total$/);
  }
  expect(value(samples, "process_resident_memory_bytes")).toBeGreaterThan(0);
  expect(find(samples, "aip_build_info")).toEqual([
    {
      name: "aip_build_info",
      labels: {
        version: (await import("../../package.json", { with: { type: "json" } })).default.version,
        runtime: "node",
        node_version: process.versions.node,
        schema_version: String(SCHEMA_VERSION),
        functions_checksum: FUNCTIONS_CHECKSUM,
        function_set: FUNCTION_SET,
        database: "postgres",
        registry_mode: "all",
      },
      value: 1,
    },
  ]);
  for (const [pool, max] of [
    ["data", 5],
    ["control", 4],
    ["catalog", 5],
  ] as const) {
    expect(value(samples, "aip_db_pool_max_connections", { pool }), pool).toBe(max);
    expect(value(samples, "aip_db_pool_in_use_connections", { pool }), pool).toBeGreaterThanOrEqual(0);
  }
  // The catalog replica (here the primary itself, not in recovery): no read yet, no fallback.
  expect(value(samples, "aip_catalog_replica_state", { state: "unknown" })).toBe(1);
  expect(value(samples, "aip_catalog_replica_state", { state: "unreachable" })).toBe(0);
  for (const reason of ["lagging", "behind_floor", "behind_request", "unreachable", "error"]) {
    expect(value(samples, "aip_catalog_replica_fallbacks_total", { reason }), reason).toBe(0);
  }
  // Lease maintenance is off here (LEASE_MAINTENANCE_INTERVAL_MS=0): no counters pretend it ran.
  expect(types.get("aip_lease_maintenance_runs_total")).toBe("counter");
  expect(find(samples, "aip_lease_maintenance_runs_total")).toEqual([]);
});

it("counts lease-maintenance runs and the leases they expired", async () => {
  const fleet = await provisionFleet(db.registry, { prefix: "metrics_lease" });
  const replicaId = fleet.replicas[0] as string;
  const registered = await lifecycle(db.registry, replicaId, "register", { lease_ttl_ms: 1000 });
  // The start-up cycle learns the lease's end from the database; the next cycle expires it.
  const server = await start({ METRICS_PUBLIC: "true", ACCESS_LOG: "false", LEASE_MAINTENANCE_INTERVAL_MS: "100" });
  const deadline = Date.parse(registered.lease_expires_at as string) + 60_000;
  let samples = (await scrape(server)).samples;
  while (find(samples, "aip_lease_maintenance_expired_replicas_total")[0]?.value !== 1) {
    if (Date.now() > deadline) throw new Error(`the lease was not expired: ${JSON.stringify(find(samples, "aip_lease_maintenance_expired_replicas_total"))}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
    samples = (await scrape(server)).samples;
  }
  expect(value(samples, "aip_lease_maintenance_runs_total")).toBeGreaterThanOrEqual(2);
  expect(value(samples, "aip_lease_maintenance_failures_total")).toBe(0);
  expect(value(samples, "aip_lease_maintenance_released_routes_total")).toBe(0);
  const lastSuccess = value(samples, "aip_lease_maintenance_last_success_timestamp_seconds") as number;
  expect(lastSuccess * 1000).toBeGreaterThanOrEqual(Date.parse(registered.lease_expires_at as string) - 5000);
  expect(lastSuccess * 1000).toBeLessThanOrEqual(Date.now());
});
