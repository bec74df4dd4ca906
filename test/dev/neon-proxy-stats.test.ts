/**
 * The proxy's counters over HTTP (GET /__stats, GET /__stats/log, POST /__stats/reset): how the
 * workerd suite, which cannot reach the proxy's memory, counts the statements an API call sends;
 * its plain TCP path (how the Node suite counts the statements `pg` sends); and its stand-in for a
 * suspended compute (POST /__suspend: connections close, the next work waits for a wake-up).
 */
import pg from "pg";
import { afterAll, beforeAll, expect, inject, it } from "vitest";
import { startNeonProxy, type LoggedStatement, type NeonProxy, type NeonProxyStatsSnapshot } from "../../dev/neon-proxy.js";

let proxy: NeonProxy;
const target = new URL(inject("pgServer").adminUrl);
const connectionString = `postgres://${target.username}:${target.password}@db.localtest.me:5432/postgres`;
const tcpUrl = () => `postgres://${target.username}:${target.password}@127.0.0.1:${proxy.tcpPort}/postgres`;

beforeAll(async () => {
  proxy = await startNeonProxy({ pgHost: target.hostname, pgPort: Number(target.port || 5432), tcp: true });
});
afterAll(() => proxy?.close());

const snapshot = async (method = "GET", path = "/__stats") => (await (await fetch(`${proxy.url}${path}`, { method })).json()) as NeonProxyStatsSnapshot;
const logged = async () => ((await (await fetch(`${proxy.url}/__stats/log`)).json()) as { statements: LoggedStatement[] }).statements;
const sql = (query: string) =>
  fetch(proxy.fetchEndpoint, { method: "POST", headers: { "Neon-Connection-String": connectionString }, body: JSON.stringify({ query, params: [] }) });
const zero = {
  http: { requests: 0, statements: 0, errors: 0 },
  ws: { opened: 0, open: 0, queries: 0, parses: 0 },
  tcp: { opened: 0, queries: 0, parses: 0 },
  wakes: 0,
  statements: 0,
};

it("serves the counters and the statement log as JSON, and resets them", async () => {
  expect(await snapshot()).toEqual(zero);
  const before = Date.now();
  expect((await sql("SELECT 1")).status).toBe(200);
  expect((await sql("SELECT * FROM no_such_table")).status).toBe(400);
  expect(await snapshot()).toMatchObject({ http: { requests: 2, statements: 2, errors: 1 }, statements: 2 });
  const log = await logged();
  expect(log.map(({ via, user, database, text }) => ({ via, user, database, text }))).toEqual([
    { via: "http", user: target.username, database: "postgres", text: "SELECT 1" },
    { via: "http", user: target.username, database: "postgres", text: "SELECT * FROM no_such_table" },
  ]);
  for (const entry of log) expect(entry.at).toBeGreaterThanOrEqual(before);
  expect(await snapshot("POST", "/__stats/reset")).toEqual(zero);
  expect(await snapshot()).toEqual(zero);
  expect(await logged()).toEqual([]);
  expect((await fetch(`${proxy.url}/__stats`, { method: "DELETE" })).status).toBe(404);
});

it("counts and logs what pg sends over the plain TCP path", async () => {
  await snapshot("POST", "/__stats/reset");
  const client = new pg.Client({ connectionString: tcpUrl() });
  await client.connect();
  try {
    await client.query("SELECT 1 AS simple");
    await client.query("SELECT $1::int AS extended", [2]);
  } finally {
    await client.end();
  }
  expect(await snapshot()).toMatchObject({ tcp: { opened: 1, queries: 1, parses: 1 }, statements: 2 });
  expect((await logged()).map(({ via, database, text }) => ({ via, database, text }))).toEqual([
    { via: "tcp", database: "postgres", text: "SELECT 1 AS simple" },
    { via: "tcp", database: "postgres", text: "SELECT $1::int AS extended" },
  ]);
});

it("stands in for a suspended compute: connections close, the next work waits for one wake-up", async () => {
  await snapshot("POST", "/__stats/reset");
  const client = new pg.Client({ connectionString: tcpUrl() });
  const ended = new Promise((resolve) => client.once("end", resolve));
  client.on("error", () => {});
  await client.connect();
  expect((await fetch(`${proxy.url}/__suspend?wake_ms=300`, { method: "POST" })).status).toBe(200);
  // The open connection is closed, as Neon closes them when it suspends a compute.
  await ended;
  // Work arriving during the wake-up (HTTP and TCP) waits for the same one, then succeeds.
  const started = Date.now();
  const fresh = new pg.Client({ connectionString: tcpUrl() });
  const [http] = await Promise.all([sql("SELECT 1"), fresh.connect().then(() => fresh.query("SELECT 1"))]);
  await fresh.end();
  expect(http.status).toBe(200);
  expect(Date.now() - started).toBeGreaterThanOrEqual(290);
  expect((await snapshot()).wakes).toBe(1);
  // Awake: nothing waits any more.
  expect((await sql("SELECT 1")).status).toBe(200);
  expect((await snapshot()).wakes).toBe(1);
  expect((await fetch(`${proxy.url}/__suspend?wake_ms=-1`, { method: "POST" })).status).toBe(400);
});
