/**
 * The Node server's wiring of /metrics: both pg pools reported, JSON access lines on stdout, and
 * METRICS=false / METRICS_PUBLIC=true honoured.
 */
import { afterAll, beforeAll, expect, it, vi } from "vitest";
import { mintToken } from "../../src/http/tokens.js";
import { startServer, type RunningServer } from "../../src/node.js";
import { createTestDatabase, type TestDatabase } from "../support/database.js";
import { TEST_SECRET } from "../support/http.js";

let db: TestDatabase;
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

beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  for (const server of servers) await server.close();
  await db?.close();
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
