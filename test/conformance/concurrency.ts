/**
 * Requests in flight together: whatever the interleaving (parallel sessions on pg and Neon, one
 * serializing session on PGlite), duplicate resolves yield one route, a replica's capacity is
 * never overbooked, a route is released once, and the bookkeeping stays consistent. Nothing here
 * needs two sessions at once, so every target runs all of it; what does (lock waits, SKIP LOCKED,
 * publication against readers) is test/concurrency's, on PostgreSQL servers only.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { type Api, publishFleet, smallFleet, type SmallFleet } from "./target.js";

export function concurrencyConformance(api: Api): void {
  describe("requests in flight together", () => {
    let fleet: SmallFleet;
    let token: string;
    let capability: string;
    const action = (name: string) => `act_${api.prefix}_cc_${name}`;
    const resolve = (actionId: string) => api.call("PUT", `/v1/routes/${actionId}`, { token, body: { capability_id: capability } });

    beforeAll(async () => {
      const tenant = `${api.prefix}-cc-tenant`;
      fleet = await smallFleet(`${api.prefix}_cc`, { tenants: [tenant], capacity: 3 });
      await publishFleet(api, fleet);
      token = await api.tenant(tenant);
      capability = fleet.capabilities[0] as string;
    });

    it("duplicate resolves of one action create one route and return it to every caller", async () => {
      const answers = await Promise.all(Array.from({ length: 8 }, () => resolve(action("dup"))));
      expect(answers.map((a) => a.status).sort()).toEqual([200, 200, 200, 200, 200, 200, 200, 201]);
      expect(new Set(answers.map((a) => a.body.fence_token)).size).toBe(1);
    });

    it("new actions racing for the last slots get exactly that many routes; the rest are refused", async () => {
      // One of the three slots is held by the route above.
      const answers = await Promise.all(Array.from({ length: 8 }, (_, i) => resolve(action(`race${i}`))));
      expect(answers.filter((a) => a.status === 201)).toHaveLength(2);
      for (const refused of answers.filter((a) => a.status !== 201))
        expect({ status: refused.status, code: refused.body.code }).toEqual({ status: 503, code: "replica-unavailable" });
    });

    it("settlements of one route racing each other release it once", async () => {
      const created = await resolve(action("dup"));
      const answers = await Promise.all(
        Array.from({ length: 6 }, () =>
          api.call("POST", `/v1/routes/${action("dup")}/settlement`, { token, body: { assignment: created.body, outcome: "completed" } }),
        ),
      );
      expect(answers.map((a) => a.status)).toEqual(answers.map(() => 200));
      expect(answers.filter((a) => a.body.released === true)).toHaveLength(1);
      const replica = await api.call("GET", `/v1/admin/replicas/${Object.values(fleet.replicas)[0]}`, { token: await api.admin() });
      expect(replica.body.active_assignments).toBe(2);
      const invariants = await api.call("GET", "/v1/admin/invariants", { token: await api.admin() });
      expect(invariants.body).toMatchObject({ healthy: true, violations: [] });
    });
  });
}
