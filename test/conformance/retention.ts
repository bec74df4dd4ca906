/**
 * Route retention and export over HTTP: the on-demand retention batch, export pages and the
 * export watermark, with their scopes and input rules. (Which routes go, and the retry contract,
 * need routes settled days ago: test/db/retention.test.ts and test/http/retention.test.ts.) The
 * watermarks are global (other suites may share the database), so they are checked as bounds.
 */
import { describe, expect, it } from "vitest";
import { type Api, expectProblem } from "./target.js";

const HOUR = 3_600_000;
const DAY = 24 * HOUR;

export function retentionConformance(api: Api): void {
  describe("route retention and export", () => {
    it("POST /v1/fleet/route-retention: a bounded batch for an operator; other scopes and limits refused", async () => {
      const admin = await api.admin();
      const batch = await api.call("POST", "/v1/fleet/route-retention?limit=100", { token: admin });
      expect(batch.status, JSON.stringify(batch.body)).toBe(200);
      expect(batch.body.removed).toBeGreaterThanOrEqual(0);
      expect(batch.body.removed).toBeLessThanOrEqual(100);
      for (const field of ["removed_before", "exported_before", "next_due"]) expect(Object.keys(batch.body)).toContain(field);
      expectProblem(await api.call("POST", "/v1/fleet/route-retention", { token: await api.fleetReader() }), 403, "forbidden");
      for (const limit of ["0", "10001", "many"]) {
        expectProblem(await api.call("POST", `/v1/fleet/route-retention?limit=${limit}`, { token: admin }), 400, "invalid");
      }
    });

    it("GET /v1/admin/routes: released routes settled before a bound an hour old at most, page by page", async () => {
      const admin = await api.admin();
      const now = Date.now();
      const page = await api.call("GET", `/v1/admin/routes?settled_before=${new Date(now).toISOString()}&limit=5`, { token: admin });
      expect(page.status, JSON.stringify(page.body)).toBe(200);
      expect(Date.parse(page.body.settled_before)).toBeLessThanOrEqual(now - HOUR + 60_000);
      expect(page.body.routes.length).toBeLessThanOrEqual(5);
      for (const route of page.body.routes) {
        expect(route.reserved).toBe(false);
        expect(Date.parse(route.settled_at)).toBeLessThan(Date.parse(page.body.settled_before));
      }
      const bad = await api.call("GET", "/v1/admin/routes?settled_before=yesterday", { token: admin });
      expectProblem(bad, 400, "invalid");
      expect(bad.body.errors).toEqual([expect.objectContaining({ field: "settled_before" })]);
      expectProblem(await api.call("GET", "/v1/admin/routes", { token: admin }), 400, "invalid");
      expectProblem(
        await api.call("GET", `/v1/admin/routes?settled_before=${new Date(now).toISOString()}`, { token: await api.tenant(`${api.prefix}-ret`) }),
        403,
        "forbidden",
      );
    });

    it("POST /v1/admin/route-exports: the export watermark moves forward from where it is, never over a gap", async () => {
      const admin = await api.admin();
      const before = new Date(Date.now() - 2 * DAY).toISOString();
      const recorded = await api.call("POST", "/v1/admin/route-exports", { token: admin, body: { settled_before: before } });
      expect(recorded.status, JSON.stringify(recorded.body)).toBe(200);
      expect(Date.parse(recorded.body.exported_before)).toBeGreaterThanOrEqual(Date.parse(before));
      expect(Date.parse(recorded.body.exported_before)).toBeLessThanOrEqual(Date.now() - HOUR + 60_000);
      // An export that starts later than the watermark left routes out.
      const gap = await api.call("POST", "/v1/admin/route-exports", {
        token: admin,
        body: { settled_after: new Date(Date.now() + DAY).toISOString(), settled_before: new Date(Date.now() + 2 * DAY).toISOString() },
      });
      expectProblem(gap, 409, "conflict");
      expect(Date.parse(gap.body.exported_before)).toBeGreaterThanOrEqual(Date.parse(before));
      expectProblem(await api.call("POST", "/v1/admin/route-exports", { token: admin, body: { settled_before: "soon" } }), 400, "invalid");
    });
  });
}
