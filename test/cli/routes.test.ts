/**
 * `routes export` and `routes prune` as subprocesses, over HTTP and over SQL: NDJSON on stdout or
 * in a file (never overwritten), the export watermark recorded only by a complete export that
 * starts where the last one ended, retention now, with the server's window over HTTP and the
 * CLI's over SQL (which can only make the database's policy stricter), and the policy itself, the
 * owner's to relax (`routes policy`).
 */
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { useTestDatabase } from "../support/database.js";
import { publishSimpleFleet } from "../../fixtures/records.js";
import { DAY_MS, settledDaysAgo, stored, watermarks } from "../support/retention.js";
import { cleanEnv, cliEnv, runCli, startApiServer, type ApiServer } from "./support.js";

// Each test runs the CLI as a subprocess (a Node start-up each): give them room on a busy machine.
vi.setConfig({ testTimeout: 180_000, hookTimeout: 120_000 });

const db = useTestDatabase();
let server: ApiServer;
let dir: string;
const tenant = "tenant-cret";
const capability = "cap:cret.search";

beforeAll(async () => {
  server = await startApiServer(db.registry);
  await publishSimpleFleet(db.registry, { prefix: "cret", tenants: [tenant], capacity: 100 });
  await db.owner.query("UPDATE aip_connector_replicas SET lease_expires_at = now() + interval '1 hour'");
  dir = await mkdtemp(join(tmpdir(), "aip-routes-"));
});
afterAll(async () => {
  await server?.close();
  await rm(dir, { recursive: true, force: true });
});

const cli = (...args: string[]) => runCli(args, { env: cliEnv(server.url) });
let n = 0;

/** Released routes whose settlement lies `days` in the past. */
async function released(count: number, days: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < count; i++) {
    const actionId = `act_cret_${(++n).toString().padStart(4, "0")}`;
    const { assignment } = await db.registry.resolveRoute(actionId, tenant, capability);
    await db.registry.settleRoute(actionId, tenant, assignment, "completed");
    ids.push(actionId);
  }
  await settledDaysAgo(db.owner, ids, days);
  return ids;
}

const lines = (text: string) =>
  text
    .split("\n")
    .filter((line) => line !== "")
    .map((line) => JSON.parse(line));

describe("routes export", () => {
  it("streams every released route settled before --before as NDJSON on stdout, then records the export watermark", async () => {
    const old = await released(5, 40);
    await released(1, 20);
    const result = await cli("routes", "export", "--before", "35d", "--limit", "2");
    expect(result.code, result.stderr).toBe(0);
    const exported = lines(result.stdout);
    expect(exported.map((r) => r.assignment.action_id)).toEqual(old);
    for (const route of exported) {
      expect(Object.keys(route)).toEqual(["assignment", "reserved", "last_settlement", "settled_at"]);
      expect(route).toMatchObject({ reserved: false, last_settlement: "completed" });
    }
    expect(result.stderr).toMatch(/exported 5 routes; export watermark: routes settled before \S+ are exported/);
    const { exported_before } = await watermarks(db.owner);
    expect(Math.abs(exported_before!.getTime() - (Date.now() - 35 * DAY_MS))).toBeLessThan(5 * 60_000);
  });

  it("writes to a new file over SQL (the control role), continuing from the watermark; never overwrites one", async () => {
    const { exported_before } = await watermarks(db.owner);
    const out = join(dir, "routes.ndjson");
    const result = await runCli(
      ["routes", "export", "--database-url", db.controlUrl, "--after", exported_before!.toISOString(), "--before", "15d", "--out", out, "--json"],
      { env: cleanEnv() },
    );
    expect(result.code, result.stderr).toBe(0);
    const summary = JSON.parse(result.stdout);
    expect(summary).toMatchObject({ exported: 1, settled_after: exported_before!.toISOString() });
    const exported = lines(await readFile(out, "utf8"));
    expect(exported).toHaveLength(1);
    expect(exported[0].settled_at < summary.settled_before).toBe(true);
    expect((await watermarks(db.owner)).exported_before!.getTime()).toBe(Date.parse(summary.exported_before));

    await writeFile(join(dir, "kept.ndjson"), "precious\n");
    const clobber = await cli("routes", "export", "--before", "15d", "--out", join(dir, "kept.ndjson"));
    expect(clobber.code).toBe(1);
    expect(clobber.stderr).toMatch(/EEXIST/);
    expect(await readFile(join(dir, "kept.ndjson"), "utf8")).toBe("precious\n");
  });

  it("does not move the watermark with --no-record, nor over a gap (exit 1)", async () => {
    const before = (await watermarks(db.owner)).exported_before;
    const unrecorded = await cli("routes", "export", "--before", "1d", "--no-record");
    expect(unrecorded.code, unrecorded.stderr).toBe(0);
    expect(unrecorded.stderr).toContain("the export watermark was not moved (--no-record)");
    const gap = await cli("routes", "export", "--after", "2d", "--before", "1d");
    expect(gap.code).toBe(1);
    expect(gap.stderr).toMatch(/error: conflict: the export starts at .* after the export watermark/);
    expect((await watermarks(db.owner)).exported_before).toEqual(before);
  });

  it("refuses bad usage with exit 2 before contacting anything", async () => {
    for (const args of [
      ["routes"],
      ["routes", "purge"],
      ["routes", "export"],
      ["routes", "export", "--before", "last tuesday"],
      ["routes", "export", "--before", "2d", "--after", "1d"],
      ["routes", "prune", "--retention-days", "7"],
      ["routes", "prune", "--limit", "0"],
      ["routes", "policy", "--retention-days", "7"],
      ["routes", "policy", "--database-url", "postgres://nowhere.invalid/x", "--require-export", "--no-require-export"],
    ]) {
      const result = await cli(...args);
      expect({ args, code: result.code }).toEqual({ args, code: 2 });
    }
  });
});

describe("routes prune", () => {
  it("removes released routes past the server's window over HTTP, and the CLI's over SQL", async () => {
    // Everything exported above is past the window: the server's 30 days remove them.
    const old = await released(3, 31);
    const overHttp = await cli("routes", "prune", "--all", "--limit", "2", "--json");
    expect(overHttp.code, overHttp.stderr).toBe(0);
    expect(JSON.parse(overHttp.stdout).removed).toBeGreaterThanOrEqual(3);
    expect((await stored(db.owner, old)).size).toBe(0);

    // Over SQL (the data role) the CLI's window can only make the database's policy stricter: 10
    // days is looser than its 30, so nothing younger goes...
    const recent = await released(2, 12);
    const looser = await runCli(["routes", "prune", "--database-url", db.dataUrl, "--retention-days", "10"], { env: cleanEnv() });
    expect(looser.code, looser.stderr).toBe(0);
    expect(looser.stdout).toMatch(/^removed 0 routes;/);
    // ...until the owner shortens it (routes policy; a runtime role's URL is refused).
    const refused = await runCli(["routes", "policy", "--database-url", db.dataUrl, "--retention-days", "10"], { env: cleanEnv() });
    expect(refused.code, refused.stderr).toBe(1);
    expect(refused.stderr).toMatch(/forbidden|may not/);
    const shortened = await runCli(["routes", "policy", "--database-url", db.ownerUrl, "--retention-days", "10", "--json"], { env: cleanEnv() });
    expect(shortened.code, shortened.stderr).toBe(0);
    expect(JSON.parse(shortened.stdout)).toMatchObject({ retention_days: 10, require_export: false });
    // Then 10 days removes the 20-day-old route, and --require-export keeps what no export covered.
    const required = await runCli(["routes", "prune", "--database-url", db.dataUrl, "--retention-days", "10", "--require-export"], { env: cleanEnv() });
    expect(required.code, required.stderr).toBe(0);
    expect(required.stdout).toMatch(/^removed 1 route;/);
    expect((await stored(db.owner, recent)).size).toBe(2);
    // The requirement stays the database's until the owner drops it.
    const stillRequired = await runCli(["routes", "prune", "--database-url", db.dataUrl, "--json"], { env: cleanEnv({ ROUTE_RETENTION_DAYS: "10" }) });
    expect(JSON.parse(stillRequired.stdout)).toMatchObject({ removed: 0 });
    const shown = await runCli(["routes", "policy", "--database-url", db.dataUrl], { env: cleanEnv() });
    expect(shown.stdout).toMatch(/removed 10 days after their last settlement, once exported/);
    expect((await runCli(["routes", "policy", "--database-url", db.ownerUrl, "--no-require-export"], { env: cleanEnv() })).code).toBe(0);
    const plain = await runCli(["routes", "prune", "--database-url", db.dataUrl, "--json"], { env: cleanEnv({ ROUTE_RETENTION_DAYS: "10" }) });
    expect(plain.code, plain.stderr).toBe(0);
    expect(JSON.parse(plain.stdout).removed).toBe(2);
    const off = await runCli(["routes", "prune", "--database-url", db.dataUrl], { env: cleanEnv({ ROUTE_RETENTION_DAYS: "0" }) });
    expect(off.code).toBe(2);
  });
});
