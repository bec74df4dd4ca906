/**
 * `migrate` against an empty PostgreSQL database (and again: nothing to do), and `serve` as a
 * long-running subprocess that answers and shuts down cleanly on SIGTERM.
 */
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it, inject, vi } from "vitest";
import { createTestDatabase, type TestDatabase } from "../support/database.js";
import { TEST_SECRET } from "../support/http.js";
import { databaseUrl } from "../support/server.js";
import { BIN, cleanEnv, freePort, ROOT, runCli } from "./support.js";

// Each test runs the CLI as a subprocess (a Node start-up each): give them room on a busy machine.
vi.setConfig({ testTimeout: 180_000, hookTimeout: 120_000 });

const server = inject("pgServer");
const emptyDatabase = `aip_t_${server.runId}_cli_${randomBytes(4).toString("hex")}`;

async function admin<T>(fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: server.adminUrl });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

beforeAll(() => admin((c) => c.query(`CREATE DATABASE ${emptyDatabase}`)));
afterAll(() => admin((c) => c.query(`DROP DATABASE IF EXISTS ${emptyDatabase} WITH (FORCE)`)));

describe("migrate", () => {
  it("refuses a runtime role's URL, saying that migrations run as the owner", async () => {
    const result = await runCli(["migrate", "--database-url", databaseUrl(server, emptyDatabase, "aip_tests_control")], { env: cleanEnv() });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(
      "error: aip_tests_control may not install the schema (permission denied for schema public): migrations run as the database owner; pass the owner's URL with --database-url (docs/deploy.md)",
    );
  });

  it("installs the schema into an empty database, then finds it up to date", async () => {
    const url = databaseUrl(server, emptyDatabase);
    const first = await runCli(["migrate", "--database-url", url], { env: cleanEnv() });
    expect(first.code, first.stderr).toBe(0);
    // The target is named with its password masked (the machine's server may have none).
    const { password } = new URL(url);
    expect(first.stderr).toContain(password ? "migrating postgres://postgres:***@" : "migrating postgres://postgres@");
    expect(first.stderr).toMatch(/applying migration 1 /);
    expect(first.stderr).toMatch(/installing function set aip_fn_[0-9a-f]{12} \(\d+ files\)/);
    expect(first.stdout).toMatch(/^schema version \d+: applied 0000_\S+, .*; functions installed$/m);

    const tables = await admin(async () => {
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      const { rows } = await client.query("SELECT to_regclass('aip_connector_replicas') IS NOT NULL AS ok, (SELECT count(*) FROM aip_schema_applied) AS n");
      await client.end();
      return rows[0];
    });
    expect(tables.ok).toBe(true);
    expect(Number(tables.n)).toBeGreaterThan(0);

    // DATABASE_URL works as well; nothing left to do.
    const again = await runCli(["migrate", "--json"], { env: cleanEnv({ DATABASE_URL: url }) });
    expect(again.code, again.stderr).toBe(0);
    expect(JSON.parse(again.stdout)).toMatchObject({ applied: [], functionsInstalled: false });
  });

  it("fails with exit 3 when the database cannot be reached", async () => {
    const result = await runCli(["migrate", "--database-url", "postgres://nobody:secret@127.0.0.1:9/none"], { env: cleanEnv() });
    expect(result.code).toBe(3);
    expect(result.stderr).toContain("error: the database at postgres://nobody:***@127.0.0.1:9/none is unreachable: connect ECONNREFUSED");
    expect(result.stderr).not.toContain("secret");
  });
});

describe("migrate --finalize", () => {
  it("drops nothing but says what is installed on a database that only this build serves, and refuses its options without it", async () => {
    const db = await createTestDatabase();
    try {
      const result = await runCli(["migrate", "--finalize", "--seen-within", "90s", "--database-url", db.ownerUrl], { env: cleanEnv() });
      expect(result.code, result.stderr).toBe(0);
      expect(result.stdout).toMatch(/^schema version \d+: up to date$/m);
      expect(result.stdout).toMatch(/^function set aip_fn_[0-9a-f]{12} \(this build\); roles \S+_aip_data, \S+_aip_control$/m);
      const json = await runCli(["migrate", "--finalize", "--json", "--database-url", db.ownerUrl], { env: cleanEnv() });
      expect(JSON.parse(json.stdout)).toMatchObject({ droppedSets: [], contracted: [], otherSets: [] });
      const usage = await runCli(["migrate", "--force", "--database-url", db.ownerUrl], { env: cleanEnv() });
      expect(usage.code).toBe(2);
      expect(usage.stderr).toContain("--seen-within and --force go with --finalize");
      const bad = await runCli(["migrate", "--finalize", "--seen-within", "soon", "--database-url", db.ownerUrl], { env: cleanEnv() });
      expect(bad.code).toBe(2);
      expect(bad.stderr).toContain('--seen-within must be a duration (90s, 15m, 2h, 1d), not "soon"');
    } finally {
      await db.close();
    }
  });
});

describe("serve", () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(() => db?.close());

  it("serves the API until SIGTERM, then exits 0", async () => {
    const port = await freePort();
    const child = spawn(process.execPath, [BIN, "serve", "--port", String(port), "--database-url", db.dataUrl], {
      cwd: ROOT,
      env: cleanEnv({ CONTROL_DATABASE_URL: db.controlUrl, MIGRATE_ON_START: "false", AUTH_HS256_SECRET: TEST_SECRET, ACCESS_LOG: "false" }),
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.once("close", resolve));
    try {
      const deadline = Date.now() + 45_000;
      while (!stdout.includes("listening on") && Date.now() < deadline && child.exitCode === null) await new Promise((r) => setTimeout(r, 100));
      expect(stdout, stderr).toContain(`aip-registry listening on http://127.0.0.1:${port} (PostgreSQL)`);
      const ready = await fetch(`http://127.0.0.1:${port}/readyz`);
      expect(ready.status).toBe(200);
      expect(await ready.json()).toMatchObject({ status: "ready" });
    } finally {
      child.kill("SIGTERM");
    }
    expect(await exited).toBe(0);
    // The graceful stop (src/node/signals.ts) says so on stdout, as JSON lines.
    expect(stdout).toMatch(/"msg":"stopping","signal":"SIGTERM","in_flight":0/);
    expect(stdout).toMatch(/"msg":"stopped","signal":"SIGTERM","drained_ms":\d+,"cut":0/);
  });
});
