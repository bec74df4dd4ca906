/**
 * Durable routes over HTTP: resolve (201 created / 200 existing / 200 reacquired), read, settle
 * (idempotent, fenced), and the refusals of resolution.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { RouteAssignment } from "../../src/schemas.js";
import { binding, instance, replica } from "../../fixtures/records.js";
import { type Api, expectProblem, publishFleet, smallFleet, type SmallFleet } from "./target.js";

export function routingConformance(api: Api): void {
  describe("routes", () => {
    let fleet: SmallFleet;
    let tenant: string;
    let token: string;
    let capability: string;
    const action = (name: string) => `act_${api.prefix}_${name}`;
    const resolve = (actionId: string, body: unknown, bearer = token) => api.call("PUT", `/v1/routes/${actionId}`, { token: bearer, body });
    const settle = (actionId: string, assignment: unknown, outcome = "completed") =>
      api.call("POST", `/v1/routes/${actionId}/settlement`, { token, body: { assignment, outcome } });

    beforeAll(async () => {
      tenant = `${api.prefix}-rt-tenant`;
      const p = `${api.prefix}_rt`;
      // At most two routes of this tenant in flight, so the third is refused by admission.
      fleet = await smallFleet(p, { tenants: [tenant], capabilities: [`cap:${p}.invoke`, `cap:${p}.other`], policy: { max_tenant_in_flight: 2 } });
      // An instance whose only replica never registers: no ready replica.
      fleet.changes.push(
        instance(`cinst_${p}_cold`, fleet.typeId, fleet.versionId, `${tenant}-cold`),
        binding(`${tenant}-cold`, `cap:${p}.invoke`, `cinst_${p}_cold`),
        replica(`crepl_${p}_cold`, `cinst_${p}_cold`, fleet.versionId),
      );
      await publishFleet(api, { ...fleet, replicas: { [tenant]: fleet.replicas[tenant] as string } });
      token = await api.tenant(tenant);
      capability = fleet.capabilities[0] as string;
    });

    it("201 creates a route pinned to a replica, then 200 returns the same route", async () => {
      const created = await resolve(action("one"), { capability_id: capability, topology: { region: "eu-west" } });
      expect(created.status, JSON.stringify(created.body)).toBe(201);
      expect(created.headers.get("aip-route-outcome")).toBe("created");
      const assignment = RouteAssignment.parse(created.body);
      expect(assignment).toMatchObject({
        action_id: action("one"),
        capability_id: capability,
        tenant_id: tenant,
        instance_id: fleet.instances[tenant],
        replica_id: fleet.replicas[tenant],
        version_id: fleet.versionId,
        quota_policy_ref: fleet.policyRef,
      });
      expect(assignment.assigned_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      const again = await resolve(action("one"), { capability_id: capability, topology: { region: "eu-west" } });
      expect(again.status).toBe(200);
      expect(again.headers.get("aip-route-outcome")).toBe("existing");
      expect(again.body).toEqual(created.body);
    });

    it("GET returns the pinned route to its tenant only", async () => {
      const created = await resolve(action("one"), { capability_id: capability });
      const read = await api.call("GET", `/v1/routes/${action("one")}`, { token });
      expect(read.status).toBe(200);
      expect(read.body).toEqual(created.body);
      expect(read.headers.get("aip-route-reserved")).toBe("true");
      const stranger = await api.tenant(`${api.prefix}-rt-stranger`);
      expectProblem(await api.call("GET", `/v1/routes/${action("one")}`, { token: stranger }), 404, "not-found");
      expectProblem(await api.call("GET", `/v1/routes/${action("never")}`, { token }), 404, "not-found");
    });

    it("409 conflict when an action is reused with another capability", async () => {
      expectProblem(await resolve(action("one"), { capability_id: fleet.capabilities[1] }), 409, "conflict");
    });

    it("settles once (released), then idempotently (not released); a tampered route is fence-lost", async () => {
      const { body: assignment } = await resolve(action("one"), { capability_id: capability });
      expectProblem(await settle(action("one"), { ...assignment, fence_token: `${assignment.fence_token}0` }), 409, "fence-lost");
      const settled = await settle(action("one"), assignment);
      expect(settled.status).toBe(200);
      expect(settled.body).toEqual({ action_id: action("one"), released: true, last_settlement: "completed" });
      const repeat = await settle(action("one"), assignment);
      expect(repeat.body).toEqual({ action_id: action("one"), released: false, last_settlement: "completed" });
      const read = await api.call("GET", `/v1/routes/${action("one")}`, { token });
      expect(read.headers.get("aip-route-reserved")).toBe("false");
      expect(read.headers.get("aip-last-settlement")).toBe("completed");
      expectProblem(await settle(action("never"), { ...assignment, action_id: action("never") }), 404, "not-found");
      expectProblem(await api.call("POST", `/v1/routes/${action("one")}/settlement`, { token, body: { assignment, outcome: "maybe" } }), 400, "invalid");
    });

    it("a retry after settlement reacquires the same replica (200 reacquired)", async () => {
      const { body: pinned } = await api.call("GET", `/v1/routes/${action("one")}`, { token });
      const retried = await resolve(action("one"), { capability_id: capability });
      expect(retried.status).toBe(200);
      expect(retried.headers.get("aip-route-outcome")).toBe("reacquired");
      expect(retried.body).toMatchObject({ replica_id: pinned.replica_id, fence_token: pinned.fence_token });
      expect((await settle(action("one"), retried.body)).body.released).toBe(true);
    });

    it("429 capacity-exceeded with Retry-After when an admission scope is full", async () => {
      const first = await resolve(action("cap1"), { capability_id: capability });
      const second = await resolve(action("cap2"), { capability_id: capability });
      expect([first.status, second.status]).toEqual([201, 201]);
      const third = await resolve(action("cap3"), { capability_id: capability });
      expectProblem(third, 429, "capacity-exceeded");
      expect(third.body).toMatchObject({ scope: "tenant", retry_after_ms: expect.any(Number) });
      expect(Number(third.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      for (const held of [first, second]) expect((await settle(held.body.action_id, held.body)).body.released).toBe(true);
      expect((await resolve(action("cap3"), { capability_id: capability })).status).toBe(201);
      await settle(action("cap3"), (await api.call("GET", `/v1/routes/${action("cap3")}`, { token })).body);
    });

    it("404 binding-unavailable for a capability the tenant has no binding for", async () => {
      const response = await resolve(action("unbound"), { capability_id: `cap:${api.prefix}.nowhere` });
      expectProblem(response, 404, "binding-unavailable");
      expect(response.body).toMatchObject({ tenant_id: tenant, capability_id: `cap:${api.prefix}.nowhere` });
    });

    it("503 replica-unavailable when no replica of the bound instance is ready", async () => {
      const cold = await api.tenant(`${tenant}-cold`);
      const response = await resolve(action("cold"), { capability_id: capability }, cold);
      expectProblem(response, 503, "replica-unavailable");
      expect(response.body.instance_id).toBe(`cinst_${api.prefix}_rt_cold`);
    });

    it("403 forbidden for a token without tenant; 400 invalid for a malformed request", async () => {
      const noTenant = await api.target.mintToken({ scopes: ["routes:write"] });
      expectProblem(await resolve(action("x"), { capability_id: capability }, noTenant), 403, "forbidden");
      expectProblem(await resolve(action("x"), { capability_id: capability, topology: { region: "not a label!" } }), 400, "invalid");
      expectProblem(await resolve(action("x"), {}), 400, "invalid");
    });
  });
}
