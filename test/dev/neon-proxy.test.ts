/**
 * Drives the REAL @neondatabase/serverless driver (Node + ws) through the
 * local Neon proxy against a plain PostgreSQL, over HTTP and WebSocket.
 *
 * Runs against the test server of the global setup (its superuser may CREATE ROLE and TABLE).
 */
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import pg from "pg";
import { Client, NeonDbError, Pool, neon, neonConfig } from "@neondatabase/serverless";
import { FrontendMessageCounter, configureNeonForLocalProxy, startNeonProxy, type NeonProxy } from "../../dev/neon-proxy.js";

const PG_URL = inject("pgServer").adminUrl;
const target = new URL(PG_URL);
const suffix = randomBytes(4).toString("hex");
const table = `neon_proxy_test_${suffix}`;
const role = `neon_proxy_role_${suffix}`;
const rolePassword = `pw_${suffix}`;

/** Connection string the way a Worker would have it: a fake Neon-ish host. */
function neonUrl(user: string, password: string): string {
  const auth = password ? `${encodeURIComponent(user)}:${encodeURIComponent(password)}` : encodeURIComponent(user);
  return `postgres://${auth}@db.localtest.me:5432${target.pathname}`;
}
const adminUrl = neonUrl(decodeURIComponent(target.username), decodeURIComponent(target.password));
const roleUrl = neonUrl(role, rolePassword);

let proxy: NeonProxy;
let admin: pg.Client;
let pool: Pool;

/** A pg-protocol-level raise that carries SQLSTATE, message, detail and hint. */
const RAISE_AR409 = `DO $$ BEGIN
  RAISE EXCEPTION USING ERRCODE = 'AR409', MESSAGE = 'x', DETAIL = '{"a":1}', HINT = 'h';
END $$`;

beforeAll(async () => {
  admin = new pg.Client({ connectionString: PG_URL });
  await admin.connect();
  await admin.query(`CREATE TABLE ${table} (id serial PRIMARY KEY, v text UNIQUE)`);
  await admin.query(`CREATE ROLE ${role} LOGIN PASSWORD '${rolePassword}'`);

  proxy = await startNeonProxy({ port: 0, pgHost: target.hostname, pgPort: Number(target.port || 5432) });
  configureNeonForLocalProxy(neonConfig, proxy); // webSocketConstructor defaults to ws on Node
  pool = new Pool({ connectionString: adminUrl, max: 2 });
});

afterAll(async () => {
  await pool?.end();
  await proxy?.close();
  if (admin) {
    await admin.query(`DROP TABLE IF EXISTS ${table}`);
    // Proxy pools are closed, but be robust against a straggling session of the role.
    await admin.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, [role]);
    await admin.query(`DROP ROLE IF EXISTS ${role}`);
    await admin.end();
  }
});

describe("HTTP /sql path (neon())", () => {
  it("answers with Neon wire format: fields, raw text rows, command, rowCount", async () => {
    const res = await fetch(proxy.fetchEndpoint, {
      method: "POST",
      headers: { "Neon-Connection-String": adminUrl, "Neon-Raw-Text-Output": "true", "Neon-Array-Mode": "true" },
      body: JSON.stringify({ query: "SELECT $1::int AS one, NULL::text AS n, true AS b", params: ["1"] }),
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as Record<string, unknown>;
    expect(body).toMatchObject({
      rowAsArray: true,
      rows: [["1", null, "t"]], // text, exactly as PostgreSQL sent it
      command: "SELECT",
      rowCount: 1,
    });
    expect((body.fields as unknown[])[0]).toEqual({
      name: "one",
      dataTypeID: 23,
      tableID: 0,
      columnID: 0,
      dataTypeSize: 4,
      dataTypeModifier: -1,
      format: "text",
    });
  });

  it("returns typed values for params of every common kind", async () => {
    const sql = neon(adminUrl);
    const when = new Date("2024-01-02T03:04:05.678Z");
    const rows = await sql`
      SELECT ${42}::int AS i, ${"héllo, wörld"}::text AS t, ${{ a: [1, "x"], b: null }}::jsonb AS j,
             ${true}::bool AS b, ${when}::timestamptz AS ts, ${"9007199254740993"}::bigint AS big,
             ${null}::text AS n, ${[1, 2, 3]}::int[] AS ints, ${["a", "b c", null]}::text[] AS texts`;
    expect(rows).toEqual([
      {
        i: 42,
        t: "héllo, wörld",
        j: { a: [1, "x"], b: null },
        b: true,
        ts: when,
        big: "9007199254740993",
        n: null,
        ints: [1, 2, 3],
        texts: ["a", "b c", null],
      },
    ]);
  });

  it("supports array mode and full results", async () => {
    const sql = neon(adminUrl, { arrayMode: true, fullResults: true });
    const result = await sql`SELECT 1 AS a, 'x' AS b UNION ALL SELECT 2, 'y'`;
    expect(result.rows).toEqual([
      [1, "x"],
      [2, "y"],
    ]);
    expect(result.rowAsArray).toBe(true);
    expect(result.command).toBe("SELECT");
    expect(result.rowCount).toBe(2);
    expect(result.fields.map((f) => [f.name, f.dataTypeID])).toEqual([
      ["a", 23],
      ["b", 25],
    ]);
    // per-call override back to object rows
    expect(await neon(adminUrl).query("SELECT 3 AS c", [], { arrayMode: false })).toEqual([{ c: 3 }]);
  });

  it("runs sql.transaction([...]) in one transaction with the requested isolation level", async () => {
    const sql = neon(adminUrl);
    const [inserted, first, second] = await sql.transaction(
      (tx) => [
        tx`INSERT INTO ${tx.unsafe(table)} (v) VALUES (${"txn-1"}) RETURNING v`,
        tx`SELECT current_setting('transaction_isolation') AS iso, txid_current()::text AS x`,
        tx`SELECT txid_current()::text AS x`,
      ],
      { isolationLevel: "Serializable" },
    );
    expect(inserted).toEqual([{ v: "txn-1" }]);
    expect(first![0]!.iso).toBe("serializable");
    expect(second![0]!.x).toBe(first![0]!.x);

    // a failing statement rolls back the whole batch
    await expect(sql.transaction([sql`INSERT INTO ${sql.unsafe(table)} (v) VALUES ('txn-rolled-back')`, sql`SELECT 1/0`])).rejects.toMatchObject({
      name: "NeonDbError",
      code: "22012",
    });
    expect(await sql`SELECT count(*)::int AS n FROM ${sql.unsafe(table)} WHERE v = 'txn-rolled-back'`).toEqual([{ n: 0 }]);

    // read-only is honoured
    await expect(sql.transaction([sql`INSERT INTO ${sql.unsafe(table)} (v) VALUES ('ro')`], { readOnly: true })).rejects.toMatchObject({ code: "25006" });
  });

  it("raises NeonDbError carrying the PostgreSQL error fields", async () => {
    const sql = neon(adminUrl);
    const err = await sql.query(RAISE_AR409).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(NeonDbError);
    expect(err).toMatchObject({ message: "x", code: "AR409", detail: '{"a":1}', hint: "h", severity: "ERROR" });
    expect(JSON.parse((err as NeonDbError).detail!)).toEqual({ a: 1 });

    await sql`INSERT INTO ${sql.unsafe(table)} (v) VALUES ('dup')`;
    await expect(sql`INSERT INTO ${sql.unsafe(table)} (v) VALUES ('dup')`).rejects.toMatchObject({
      code: "23505",
      constraint: `${table}_v_key`,
      table,
      schema: "public",
    });
  });

  it("keeps pooled connections clean after errors, dead sessions and stray BEGINs", async () => {
    const sql = neon(adminUrl);
    await expect(sql`SELECT pg_terminate_backend(pg_backend_pid())`).rejects.toMatchObject({ code: "57P01" });
    await sql`BEGIN ISOLATION LEVEL SERIALIZABLE`; // would leak into the next request if re-pooled
    for (let i = 0; i < 3; i++) {
      expect(await sql`SELECT current_setting('transaction_isolation') AS iso`).toEqual([{ iso: "read committed" }]);
    }
  });

  it("never shares a pg client between concurrent requests", async () => {
    const sql = neon(adminUrl);
    const results = await Promise.all(
      Array.from({ length: 12 }, () =>
        sql.transaction([sql`SELECT txid_current()::text AS x`, sql`SELECT pg_sleep(0.02)`, sql`SELECT txid_current()::text AS x`]),
      ),
    );
    const txids = results.map(([a, , b]) => {
      expect(b).toEqual(a);
      return a![0]!.x as string;
    });
    expect(new Set(txids).size).toBe(12);
  });
});

describe("WebSocket path (Pool / Client)", () => {
  it("runs parameterised queries through Pool", async () => {
    const { rows } = await pool.query("SELECT $1::int + 1 AS n, $2::jsonb AS j, now() AS t", [41, { k: "v" }]);
    expect(rows[0]).toMatchObject({ n: 42, j: { k: "v" } });
    expect(rows[0].t).toBeInstanceOf(Date);
  });

  it("runs a multi-statement transaction on one Client", async () => {
    const client = await pool.connect();
    try {
      await client.query("BEGIN");
      await client.query(`INSERT INTO ${table} (v) VALUES ($1)`, ["ws-1"]);
      expect((await client.query(`SELECT v FROM ${table} WHERE v = 'ws-1'`)).rowCount).toBe(1);
      await client.query("ROLLBACK");
      expect((await client.query(`SELECT v FROM ${table} WHERE v = 'ws-1'`)).rowCount).toBe(0);
      // simple-protocol multi-statement string, committed
      await client.query(`BEGIN; INSERT INTO ${table} (v) VALUES ('ws-2'); COMMIT`);
    } finally {
      client.release();
    }
    // visible to the other transport
    const sql = neon(adminUrl);
    expect(await sql`SELECT v FROM ${sql.unsafe(table)} WHERE v = 'ws-2'`).toEqual([{ v: "ws-2" }]);
  });

  it("surfaces PostgreSQL error fields over the wire protocol", async () => {
    const err = await pool.query(RAISE_AR409).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toMatchObject({ message: "x", code: "AR409", detail: '{"a":1}', hint: "h", severity: "ERROR" });
    expect((await pool.query("SELECT 1 AS ok")).rows).toEqual([{ ok: 1 }]); // pool still fine
  });

  it("works with a standalone Client", async () => {
    const client = new Client(adminUrl);
    await client.connect();
    try {
      expect((await client.query("SELECT current_database() AS db")).rows[0].db).toBe(target.pathname.slice(1));
    } finally {
      await client.end();
    }
  });
});

describe("database roles", () => {
  it("connects as a different role on both paths", async () => {
    expect(await neon(roleUrl)`SELECT current_user AS u`).toEqual([{ u: role }]);
    const rolePool = new Pool({ connectionString: roleUrl });
    try {
      expect((await rolePool.query("SELECT current_user AS u")).rows).toEqual([{ u: role }]);
    } finally {
      await rolePool.end();
    }
    // the admin credentials still get their own pooled sessions
    expect(await neon(adminUrl)`SELECT current_user AS u`).toEqual([{ u: decodeURIComponent(target.username) }]);
    const conn = proxy.stats.ws.connections.find((c) => c.user === role);
    expect(conn).toMatchObject({ user: role, database: target.pathname.slice(1), address: "db.localtest.me:5432" });
  });
});

describe("stats", () => {
  const snapshot = () => ({
    requests: proxy.stats.http.requests,
    httpStatements: proxy.stats.http.statements,
    ws: proxy.stats.ws.queries + proxy.stats.ws.parses,
    total: proxy.stats.statements(),
  });

  it("counts one statement per pool.query() and per sql``", async () => {
    let before = snapshot();
    await pool.query("SELECT 1"); // simple protocol: one 'Q'
    expect(snapshot()).toEqual({ ...before, ws: before.ws + 1, total: before.total + 1 });

    before = snapshot();
    await pool.query("SELECT $1::int", [1]); // extended protocol: one 'P'
    expect(snapshot()).toEqual({ ...before, ws: before.ws + 1, total: before.total + 1 });

    const sql = neon(adminUrl);
    before = snapshot();
    await sql`SELECT 1`;
    expect(snapshot()).toEqual({
      ...before,
      requests: before.requests + 1,
      httpStatements: before.httpStatements + 1,
      total: before.total + 1,
    });

    before = snapshot();
    await sql.transaction([sql`SELECT 1`, sql`SELECT 2`, sql`SELECT 3`]);
    expect(snapshot()).toEqual({
      ...before,
      requests: before.requests + 1,
      httpStatements: before.httpStatements + 3,
      total: before.total + 3,
    });
  });

  it("parses frontend messages split across and packed into frames", () => {
    const startup = (params: Record<string, string>) => {
      const body = Buffer.from(
        `${Object.entries(params)
          .map(([k, v]) => `${k}\0${v}\0`)
          .join("")}\0`,
      );
      const head = Buffer.alloc(8);
      head.writeInt32BE(8 + body.length, 0);
      head.writeInt32BE(196608, 4); // protocol 3.0
      return Buffer.concat([head, body]);
    };
    const typed = (type: string, payload: string) => {
      const body = Buffer.from(payload);
      const head = Buffer.alloc(5);
      head.write(type, 0);
      head.writeInt32BE(4 + body.length, 1);
      return Buffer.concat([head, body]);
    };
    const stream = Buffer.concat([
      startup({ user: "u1", database: "d1" }),
      typed("Q", "SELECT 1\0"),
      typed("P", "\0SELECT $1\0\0\0"),
      typed("B", "\0\0\0\0\0\0\0\0\0\0"),
      typed("E", "\0\0\0\0\0"),
      typed("S", ""),
      typed("Q", "SELECT 'QQQPPP'\0"), // payload bytes that look like types must not count
      typed("X", ""),
    ]);
    // one frame, byte-by-byte, and random splits all give the same result
    for (const sizes of [[stream.length], Array(stream.length).fill(1), [3, 7, 1, 12, 5, 2, 40, 9, 500]]) {
      const counter = new FrontendMessageCounter();
      let offset = 0;
      for (const size of sizes) {
        counter.push(stream.subarray(offset, offset + size));
        offset += size;
      }
      expect(counter).toMatchObject({ queries: 2, parses: 1, user: "u1", database: "d1", broken: false });
    }
  });
});
