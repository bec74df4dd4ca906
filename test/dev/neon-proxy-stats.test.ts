/**
 * The proxy's counters over HTTP (GET /__stats, POST /__stats/reset): how the workerd suite, which
 * cannot reach the proxy's memory, counts the statements an API call sends.
 */
import { afterAll, beforeAll, expect, inject, it } from "vitest";
import { startNeonProxy, type NeonProxy, type NeonProxyStatsSnapshot } from "../../src/dev/neon-proxy.js";

let proxy: NeonProxy;
const target = new URL(inject("pgServer").adminUrl);
const connectionString = `postgres://${target.username}:${target.password}@db.localtest.me:5432/postgres`;

beforeAll(async () => {
  proxy = await startNeonProxy({ pgHost: target.hostname, pgPort: Number(target.port || 5432) });
});
afterAll(() => proxy?.close());

const snapshot = async (method = "GET", path = "/__stats") => (await (await fetch(`${proxy.url}${path}`, { method })).json()) as NeonProxyStatsSnapshot;

it("serves the counters as JSON and resets them", async () => {
  const zero = { http: { requests: 0, statements: 0, errors: 0 }, ws: { opened: 0, open: 0, queries: 0, parses: 0 }, statements: 0 };
  expect(await snapshot()).toEqual(zero);
  const sql = (query: string) =>
    fetch(proxy.fetchEndpoint, { method: "POST", headers: { "Neon-Connection-String": connectionString }, body: JSON.stringify({ query, params: [] }) });
  expect((await sql("SELECT 1")).status).toBe(200);
  expect((await sql("SELECT * FROM no_such_table")).status).toBe(400);
  expect(await snapshot()).toMatchObject({ http: { requests: 2, statements: 2, errors: 1 }, statements: 2 });
  expect(await snapshot("POST", "/__stats/reset")).toEqual(zero);
  expect(await snapshot()).toEqual(zero);
  expect((await fetch(`${proxy.url}/__stats`, { method: "DELETE" })).status).toBe(404);
});
