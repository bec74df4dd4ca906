/**
 * `catalog changes --since R` as a subprocess, over HTTP (the tenant in a token the CLI mints with
 * --tenant) and over SQL (--tenant): the changes after R and the revision they bring the caller
 * to, "no changes" when nothing changed, usage errors (a missing tenant named as such, never "no
 * changes"), and changes-expired below the history kept.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { createTestDatabase, type TestDatabase } from "../support/database.js";
import { binding, publishSimpleFleet } from "../../fixtures/records.js";
import { mintToken } from "../../src/http/tokens.js";
import { TEST_SECRET } from "../support/http.js";
import { cleanEnv, cliEnv, runCli, startApiServer, type ApiServer } from "./support.js";

vi.setConfig({ testTimeout: 180_000, hookTimeout: 120_000 });

let db: TestDatabase;
let server: ApiServer;
const tenant = "tenant-ccli";
let since: number;
let reached: number;

beforeAll(async () => {
  db = await createTestDatabase();
  server = await startApiServer(db.registry);
  const fleet = await publishSimpleFleet(db.registry, { prefix: "ccli", tenants: [tenant], capabilities: ["cap:ccli.a", "cap:ccli.b"] });
  since = fleet.revision;
  reached = (await db.registry.publish([binding(tenant, "cap:ccli.b", `cinst_ccli_${tenant}`, { enabled: false, policy_revision: 2 })])).catalog_revision;
});
afterAll(async () => {
  await server?.close();
  await db?.close();
});

describe("catalog changes", () => {
  it("prints the changes after --since and the revision reached, over HTTP and over SQL", async () => {
    const http = await runCli(["catalog", "changes", "--since", String(since), "--tenant", tenant], { env: cliEnv(server.url) });
    expect(http.code, http.stderr).toBe(0);
    expect(http.stdout).toMatch(/removed\s+cap:ccli\.b\s+\d+/);
    expect(http.stdout).toContain(`1 changes since revision ${since}; now at revision ${reached}`);

    const sql = await runCli(["catalog", "changes", "--since", String(since), "--database-url", db.dataUrl, "--tenant", tenant, "--json"], { env: cleanEnv() });
    expect(sql.code, sql.stderr).toBe(0);
    expect(JSON.parse(sql.stdout)).toEqual({
      since,
      catalog_revision: reached,
      changes: [{ capability_id: "cap:ccli.b", change: "removed", revision: reached, definition: null }],
    });

    const none = await runCli(["catalog", "changes", "--since", String(reached), "--tenant", tenant], { env: cliEnv(server.url) });
    expect(none.code, none.stderr).toBe(0);
    expect(none.stdout.trim()).toBe(`no changes since revision ${reached}`);
  });

  it("refuses bad arguments (exit 2) and reports changes-expired (exit 1)", async () => {
    for (const args of [
      ["catalog"],
      ["catalog", "changes"],
      ["catalog", "changes", "--since", "x"],
      ["catalog", "changes", "--since", "1", "--database-url", db.dataUrl],
    ]) {
      expect((await runCli(args, { env: cliEnv(server.url) })).code, args.join(" ")).toBe(2);
    }
    await db.registry.publish([binding(tenant, "cap:ccli.a", `cinst_ccli_${tenant}`, { enabled: false, policy_revision: 2 })]);
    // Without a tenant there is no catalog to read: say so (exit 2), never "no changes".
    const gateway = await mintToken(TEST_SECRET, { subject: "gw", scopes: ["catalog:read"], tenantId: tenant, ttlSeconds: 300 });
    const tenantless = await mintToken(TEST_SECRET, { subject: "gw", scopes: ["catalog:read"], ttlSeconds: 300 });
    for (const [args, said] of [
      [["catalog", "changes", "--since", "0"], /the tenant must be given: --tenant T/],
      [["catalog", "changes", "--since", "0", "--token", tenantless], /the token names no tenant/],
      [["catalog", "changes", "--since", "0", "--token", gateway, "--tenant", "tenant-elsewhere"], /not the token's tenant \(tenant-ccli\)/],
    ] as const) {
      const refused = await runCli([...args], { env: cliEnv(server.url) });
      expect(refused.code, args.join(" ")).toBe(2);
      expect(refused.stdout).toBe("");
      expect(refused.stderr).toMatch(said);
    }
    // The tenant's own token needs no --tenant.
    const own = await runCli(["catalog", "changes", "--since", String(since), "--token", gateway], { env: cliEnv(server.url) });
    expect(own.code, own.stderr).toBe(0);
    expect(own.stdout).toMatch(/removed\s+cap:ccli\.b/);
    await db.registry.trimCatalogChanges(1, 86_400, 10_000);
    const expired = await runCli(["catalog", "changes", "--since", String(since), "--tenant", tenant], { env: cliEnv(server.url) });
    expect(expired.code).toBe(1);
    expect(expired.stderr).toContain("changes-expired");
  });
});
