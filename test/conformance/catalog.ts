/**
 * The tenant capability catalog over HTTP: revision-consistent pages, cursors, stale cursors,
 * single reads, conditional requests and tenant isolation.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { binding } from "../../fixtures/records.js";
import { type Api, expectProblem, smallFleet, type SmallFleet } from "./target.js";

const ids = (page: { capabilities: { capability: { id: string } }[] }) => page.capabilities.map((d) => d.capability.id);

export function catalogConformance(api: Api): void {
  describe("catalog", () => {
    let fleet: SmallFleet;
    let tenantA: string;
    let tenantB: string;
    let tokenA: string;
    let tokenB: string;

    beforeAll(async () => {
      tenantA = `${api.prefix}-cat-a`;
      tenantB = `${api.prefix}-cat-b`;
      const p = `${api.prefix}_cat`;
      fleet = await smallFleet(p, { tenants: [tenantA], capabilities: [`cap:${p}.alpha`, `cap:${p}.beta`, `cap:${p}.gamma`] });
      // Tenant B gets its own instance, bound to alpha only.
      fleet.changes.push(
        { ...fleet.changes.find((c) => c.op === "put_instance"), id: `cinst_${p}_b`, tenant_id: tenantB, secret_provider_ref: "vault://b" },
        binding(tenantB, `cap:${p}.alpha`, `cinst_${p}_b`),
      );
      await api.publish(fleet.changes);
      tokenA = await api.tenant(tenantA);
      tokenB = await api.tenant(tenantB);
    });

    it("pages in capability order at one revision, then follows the cursor", async () => {
      const first = await api.call("GET", "/v1/catalog/capabilities?limit=2", { token: tokenA });
      expect(first.status).toBe(200);
      expect(ids(first.body)).toEqual(fleet.capabilities.slice(0, 2));
      expect(first.body).toMatchObject({ total: 3, next_cursor: expect.any(String), catalog_revision: expect.any(Number) });
      for (const definition of first.body.capabilities) {
        expect(definition).toMatchObject({
          contract_digest: expect.stringMatching(/^sha256:[0-9a-f]{64}$/),
          schema_digest: expect.stringMatching(/^sha256:[0-9a-f]{64}$/),
        });
      }
      const second = await api.call("GET", `/v1/catalog/capabilities?limit=2&cursor=${encodeURIComponent(first.body.next_cursor)}`, { token: tokenA });
      expect(second.status).toBe(200);
      expect(ids(second.body)).toEqual(fleet.capabilities.slice(2));
      expect(second.body.next_cursor).toBeNull();
      expect(second.body.catalog_revision).toBe(first.body.catalog_revision);
    });

    it("answers 304 to If-None-Match with the page's ETag", async () => {
      const page = await api.call("GET", "/v1/catalog/capabilities", { token: tokenA });
      const etag = page.headers.get("etag");
      expect(etag).toMatch(/^"\d+-[0-9a-f]{16}"$/);
      const again = await api.call("GET", "/v1/catalog/capabilities", { token: tokenA, headers: { "if-none-match": etag as string } });
      expect(again.status).toBe(304);
    });

    it("filters by text, literally", async () => {
      const page = await api.call("GET", "/v1/catalog/capabilities?q=BETA", { token: tokenA });
      expect(ids(page.body)).toEqual([fleet.capabilities[1]]);
      const wildcard = await api.call("GET", "/v1/catalog/capabilities?q=%25", { token: tokenA });
      expect(wildcard.body.total).toBe(0);
    });

    it("shows each tenant only its own bindings", async () => {
      const page = await api.call("GET", "/v1/catalog/capabilities", { token: tokenB });
      expect(ids(page.body)).toEqual([fleet.capabilities[0]]);
      const noTenant = await api.call("GET", "/v1/catalog/capabilities", { token: await api.target.mintToken({ scopes: ["catalog:read"] }) });
      expect(noTenant.status).toBe(200);
      expect(noTenant.body).toMatchObject({ total: 0, capabilities: [] });
    });

    it("reads one definition; another tenant's is not found", async () => {
      const id = fleet.capabilities[2] as string;
      const entry = await api.call("GET", `/v1/catalog/capabilities/${encodeURIComponent(id)}`, { token: tokenA });
      expect(entry.status).toBe(200);
      expect(entry.body).toMatchObject({ catalog_revision: expect.any(Number), definition: { capability: { id } } });
      expectProblem(await api.call("GET", `/v1/catalog/capabilities/${encodeURIComponent(id)}`, { token: tokenB }), 404, "not-found");
    });

    it("a cursor survives another tenant's publication; 409 stale-cursor after one that reaches the tenant; page 1 works again", async () => {
      const first = await api.call("GET", "/v1/catalog/capabilities?limit=1", { token: tokenA });
      const cursor = first.body.next_cursor as string;
      const etag = first.headers.get("etag")!;
      await api.publish([{ ...binding(tenantB, fleet.capabilities[1] as string, `cinst_${api.prefix}_cat_b`) }]);
      const next = await api.call("GET", `/v1/catalog/capabilities?limit=1&cursor=${encodeURIComponent(cursor)}`, { token: tokenA });
      expect(next.status).toBe(200);
      expect(next.body).toMatchObject({ catalog_revision: first.body.catalog_revision, capabilities: [{ capability: { id: fleet.capabilities[1] } }] });
      expect((await api.call("GET", "/v1/catalog/capabilities?limit=1", { token: tokenA, headers: { "if-none-match": etag } })).status).toBe(304);
      await api.publish([{ ...binding(tenantA, fleet.capabilities[2] as string, fleet.instances[tenantA]!), enabled: false, policy_revision: 2 }]);
      const stale = await api.call("GET", `/v1/catalog/capabilities?limit=1&cursor=${encodeURIComponent(cursor)}`, { token: tokenA });
      expectProblem(stale, 409, "stale-cursor");
      const restarted = await api.call("GET", "/v1/catalog/capabilities?limit=1", { token: tokenA });
      expect(restarted.body.catalog_revision).toBeGreaterThan(first.body.catalog_revision);
      expectProblem(await api.call("GET", "/v1/catalog/capabilities?cursor=garbage", { token: tokenA }), 400, "invalid");

      // The changes feed from the first page's revision: the capability the tenant no longer sees,
      // and from the restarted page's, nothing (an empty last page with a strong ETag, then 304 for it).
      const changes = await api.call("GET", `/v1/catalog/changes?since=${first.body.catalog_revision}`, { token: tokenA });
      expect(changes.status).toBe(200);
      expect(changes.body).toEqual({
        catalog_revision: restarted.body.catalog_revision,
        since: first.body.catalog_revision,
        changes: [{ capability_id: fleet.capabilities[2], change: "removed", revision: restarted.body.catalog_revision, definition: null }],
        next_cursor: null,
      });
      const none = await api.call("GET", `/v1/catalog/changes?since=${restarted.body.catalog_revision}`, { token: tokenA });
      expect(none.status).toBe(200);
      expect(none.body).toMatchObject({ catalog_revision: restarted.body.catalog_revision, changes: [], next_cursor: null });
      const etagOfNone = none.headers.get("etag")!;
      expect(etagOfNone).toMatch(/^"\d+-[0-9a-f]{16}"$/);
      const validated = await api.call("GET", `/v1/catalog/changes?since=${restarted.body.catalog_revision}`, {
        token: tokenA,
        headers: { "if-none-match": etagOfNone },
      });
      expect(validated.status).toBe(304);
    });
  });
}
