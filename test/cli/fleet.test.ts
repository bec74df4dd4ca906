/**
 * `status`, `doctor` and `expire-leases` as subprocesses, over HTTP and over SQL.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { pgExecutor } from "../../src/db/pg.js";
import { Registry } from "../../src/registry/registry.js";
import { useTestDatabase } from "../support/database.js";
import { publishSimpleFleet } from "../../fixtures/records.js";
import { cleanEnv, cliEnv, runCli, startApiServer, type ApiServer } from "./support.js";

// Each test runs the CLI as a subprocess (a Node start-up each): give them room on a busy machine.
vi.setConfig({ testTimeout: 180_000, hookTimeout: 120_000 });

const db = useTestDatabase();
let server: ApiServer;

beforeAll(async () => {
  server = await startApiServer(db.registry);
  // Two tenants: two replicas, registered (ready), capacity 10 each.
  await publishSimpleFleet(db.registry, { prefix: "cli", tenants: ["tenant-a", "tenant-b"] });
  await db.registry.resolveRoute("act_cli_status_1", "tenant-a", "cap:cli.search");
  // Leases outlive the file, however slowly its subprocesses run.
  await db.owner.query("UPDATE aip_connector_replicas SET lease_expires_at = now() + interval '1 hour'");
});
afterAll(async () => {
  await server?.close();
});

const cli = (...args: string[]) => runCli(args, { env: cliEnv(server.url) });

describe("status", () => {
  it("prints the fleet status as tables, or JSON", async () => {
    const [result, json] = await Promise.all([cli("status"), cli("status", "--json")]);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toContain(`Fleet status of ${server.url} at `);
    expect(result.stdout).toMatch(/^REPLICAS\s+READY\s+DRAINING\s+OFFLINE\s+EXPIRED LEASES\s+OPEN CIRCUITS\n\s+2\s+2\s+0\s+0\s+0\s+0$/m);
    expect(result.stdout).toMatch(/^READY CAPACITY\s+RESERVED\s+USED\n\s+20\s+1\s+5%$/m);
    expect(result.stdout).toMatch(
      /^REGION\s+REPLICAS\s+READY\s+DRAINING\s+OFFLINE\s+EXPIRED\s+OPEN CIRCUITS\s+RESERVED\s+READY CAPACITY\neu-west\s+2\s+2\s+0\s+0\s+0\s+0\s+1\s+20$/m,
    );
    expect(JSON.parse(json.stdout).regions).toEqual([expect.objectContaining({ region: "eu-west", replicas: 2 })]);
    expect(JSON.parse(json.stdout)).toMatchObject(await db.registry.fleetStatus().then((s) => ({ ...s, observed_at: expect.any(String) })));
  });

  it("reads the same status directly over SQL with --database-url", async () => {
    const result = await runCli(["status", "--json", "--database-url", db.dataUrl], { env: cleanEnv() });
    expect(result.code, result.stderr).toBe(0);
    expect(JSON.parse(result.stdout)).toMatchObject({ replicas: 2, ready_replicas: 2, active_assignments: 1 });
  });

  it("is refused without fleet:read (exit 1) and fails fast when the registry is down (exit 3)", async () => {
    const { TEST_SECRET } = await import("../support/http.js");
    const { mintToken } = await import("../../src/http/tokens.js");
    const gatewayToken = await mintToken(TEST_SECRET, { subject: "gw", scopes: ["routes:write"], tenantId: "tenant-a" });
    const [refused, down] = await Promise.all([
      runCli(["status", "--url", server.url, "--token", gatewayToken], { env: cleanEnv() }),
      runCli(["status", "--url", "http://127.0.0.1:9", "--token", gatewayToken], { env: cleanEnv() }),
    ]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/error: forbidden: this operation needs the fleet:read or registry:admin scope/);
    expect(down.code).toBe(3);
  });
});

describe("doctor and expire-leases", () => {
  it("passes a healthy registry, warns about expired leases, and expire-leases clears them", async () => {
    const healthy = await cli("doctor");
    expect(healthy.code, healthy.stderr).toBe(0);
    expect(healthy.stdout).toMatch(/^ok\s+schema: version \d+, functions intact/m);
    expect(healthy.stdout).toMatch(/^ok\s+invariants: no violations/m);
    expect(healthy.stdout).toContain("0 problems, 0 warnings");

    // tenant-b's replica lease runs out (its host stopped heartbeating).
    await db.owner.query("UPDATE aip_connector_replicas SET lease_expires_at = now() - interval '1 minute' WHERE replica_id = 'crepl_cli_tenant-b'");
    const warned = await cli("doctor");
    expect(warned.code).toBe(0);
    expect(warned.stdout).toMatch(/^warn\s+1 replica lease has expired without being marked offline/m);
    expect(warned.stdout).toContain("0 problems, 1 warning");

    const expired = await cli("expire-leases", "--limit", "5", "--all");
    expect(expired.code, expired.stderr).toBe(0);
    expect(expired.stdout.trim()).toBe("expired 1 replica lease; released 0 routes");
    expect(expired.stderr).toContain("batch 1: expired 1, released 0");
    const status = await db.owner.query("SELECT status FROM aip_connector_replicas WHERE replica_id = 'crepl_cli_tenant-b'");
    expect(status.rows[0].status).toBe("offline");
    const [again, invalid] = await Promise.all([cli("expire-leases", "--json"), cli("expire-leases", "--limit", "0")]);
    expect(JSON.parse(again.stdout)).toEqual({ expired: 0, released: 0 });
    expect(invalid.code).toBe(2);
  });

  it("fails (exit 1) and lists the violations when the bookkeeping is broken, over HTTP and SQL", async () => {
    // Corrupt a replica's counter behind the registry's back: active_assignments no longer
    // matches its reserved routes.
    await db.owner.query("UPDATE aip_connector_replicas SET active_assignments = active_assignments + 1 WHERE replica_id = 'crepl_cli_tenant-a'");
    try {
      const [result, sql] = await Promise.all([cli("doctor"), runCli(["doctor", "--json", "--database-url", db.dataUrl], { env: cleanEnv() })]);
      expect(result.code).toBe(1);
      expect(result.stdout).toMatch(/^FAIL\s+invariants: 1 violation/m);
      expect(result.stdout).toMatch(/^replica_active_mismatch\s+\{"replica_id": ?"crepl_cli_tenant-a"/m);
      expect(result.stdout).toMatch(/^1 problem, \d+ warnings?$/m);
      expect(sql.code).toBe(1);
      const report = JSON.parse(sql.stdout);
      expect(report.healthy).toBe(false);
      expect(report.invariants.violations.map((v: { kind: string }) => v.kind)).toEqual(["replica_active_mismatch"]);
    } finally {
      await db.owner.query("UPDATE aip_connector_replicas SET active_assignments = active_assignments - 1 WHERE replica_id = 'crepl_cli_tenant-a'");
    }
  });

  it("fails (exit 1) when a table was changed by hand since the migrations, over HTTP and SQL", async () => {
    await db.owner.query("CREATE INDEX aip_cli_hand_made_idx ON aip_route_assignments (tenant_id)");
    try {
      const [result, sql] = await Promise.all([cli("doctor"), runCli(["doctor", "--json", "--database-url", db.dataUrl], { env: cleanEnv() })]);
      expect(result.code).toBe(1);
      expect(result.stdout).toMatch(/^ok\s+schema: version \d+, functions intact/m);
      expect(result.stdout).toMatch(/^FAIL\s+tables: the registry's tables, columns or indexes differ from what the migrations made/m);
      expect(sql.code).toBe(1);
      expect(JSON.parse(sql.stdout)).toMatchObject({ healthy: false, readiness: { status: "ready", tables_intact: false } });
    } finally {
      await db.owner.query("DROP INDEX aip_cli_hand_made_idx");
    }
    expect((await cli("doctor")).code).toBe(0);
  });

  it("checks a data-plane-only deployment over HTTP: the invariant checker needs only the data role", async () => {
    const dataPlane = await startApiServer(new Registry({ data: pgExecutor(db.dataPool) }));
    try {
      const result = await runCli(["doctor"], { env: cliEnv(dataPlane.url) });
      expect(result.code, result.stderr).toBe(0);
      expect(result.stdout).toMatch(/^ok\s+invariants: no violations/m);
    } finally {
      await dataPlane.close();
    }
  });
});
