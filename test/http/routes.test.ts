/**
 * The routes API over HTTP: statuses, the AIP-Route-Outcome header, problem+json bodies with
 * their extension members and Retry-After, tenant isolation and input validation.
 */
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { useTestDatabase } from "../support/database.js";
import { createTestApi, type TestApi } from "../support/http.js";
import { expectHealthy } from "../support/invariants.js";
import { counters, publishRoutingFleet, replicaTransition, type RoutingFleet } from "../support/routing-fleet.js";

const db = useTestDatabase();
let api: TestApi;
let fleet: RoutingFleet;
let token: string;

beforeAll(async () => {
  api = createTestApi(db.registry);
  fleet = await publishRoutingFleet(db.registry, {
    prefix: "http",
    tenant: "tenant-http",
    policy: { max_tenant_in_flight: 3 },
    instances: [
      {
        name: "i",
        replicas: [
          { name: "a", zone: "za" },
          { name: "b", zone: "zb" },
        ],
      },
    ],
  });
  token = await api.tenantToken(fleet.tenant);
});
afterEach(() => expectHealthy(db.registry));

let actionCounter = 0;
const newAction = () => `act_http_${(++actionCounter).toString().padStart(5, "0")}`;

const put = (actionId: string, body: unknown, bearer = token) => api.call("PUT", `/v1/routes/${actionId}`, { token: bearer, body });
const get = (actionId: string, bearer = token) => api.call("GET", `/v1/routes/${actionId}`, { token: bearer });
const settle = (actionId: string, body: unknown, bearer = token) => api.call("POST", `/v1/routes/${actionId}/settlement`, { token: bearer, body });

/** A JSON body (a RouteAssignment or a settlement result); `any` keeps the assertions terse. */
const json = async (response: Response): Promise<any> => response.json();

async function problem(response: Response, status: number, code: string) {
  expect(response.status).toBe(status);
  expect(response.headers.get("content-type")).toBe("application/problem+json");
  const body = (await response.json()) as Record<string, unknown>;
  expect(body).toMatchObject({ status, code, type: `https://aip.dev/problems/${code}` });
  return body;
}

describe("PUT /v1/routes/{action_id}", () => {
  it("201 created, 200 existing, 200 reacquired: the same bytes every time", async () => {
    const actionId = newAction();
    const created = await put(actionId, { capability_id: fleet.capability, topology: { zone: "za" } });
    expect(created.status).toBe(201);
    expect(created.headers.get("aip-route-outcome")).toBe("created");
    const text = await created.text();
    const assignment = JSON.parse(text);
    expect(assignment).toMatchObject({ action_id: actionId, tenant_id: fleet.tenant, capability_id: fleet.capability, replica_id: fleet.replica.a });
    expect(assignment.fence_token).toMatch(/^route_[0-9a-f]{32}$/);
    expect(assignment.assigned_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);

    const existing = await put(actionId, { capability_id: fleet.capability, topology: { zone: "zb" } });
    expect(existing.status).toBe(200);
    expect(existing.headers.get("aip-route-outcome")).toBe("existing");
    expect(await existing.text()).toBe(text);

    expect((await settle(actionId, { assignment, outcome: "cancelled" })).status).toBe(200);
    const reacquired = await put(actionId, { capability_id: fleet.capability });
    expect(reacquired.status).toBe(200);
    expect(reacquired.headers.get("aip-route-outcome")).toBe("reacquired");
    expect(await reacquired.text()).toBe(text);

    const read = await get(actionId);
    expect(read.status).toBe(200);
    expect(await read.text()).toBe(text);
    expect(read.headers.get("aip-route-reserved")).toBe("true");
    await settle(actionId, { assignment, outcome: "completed" });
  });

  it("429 capacity-exceeded with scope, retry_after_ms and Retry-After", async () => {
    const held = [];
    for (let i = 0; i < 3; i++) held.push(await json(await put(newAction(), { capability_id: fleet.capability })));
    const body = await problem(await put(newAction(), { capability_id: fleet.capability }), 429, "capacity-exceeded");
    expect(body).toMatchObject({ scope: "tenant", retry_after_ms: 100 });
    const response = await put(newAction(), { capability_id: fleet.capability });
    expect(response.headers.get("retry-after")).toBe("1");
    for (const assignment of held) await settle(assignment.action_id, { assignment, outcome: "cancelled" });
  });

  it("503 replica-unavailable with instance_id and Retry-After, for a new action and for a pinned retry", async () => {
    const response = await put(newAction(), { capability_id: fleet.capability, topology: { capacity_class: "gpu" } });
    const body = await problem(response, 503, "replica-unavailable");
    expect(body.instance_id).toBe(fleet.instance.i);
    expect(response.headers.get("retry-after")).toBe("1");

    const actionId = newAction();
    const assignment = await json(await put(actionId, { capability_id: fleet.capability, topology: { zone: "zb" } }));
    expect(assignment.replica_id).toBe(fleet.replica.b);
    await replicaTransition(db.registry, db.owner, fleet.replica.b!, "offline");
    const retry = await put(actionId, { capability_id: fleet.capability });
    expect((await problem(retry, 503, "replica-unavailable")).instance_id).toBe(fleet.instance.i);
    expect(retry.headers.get("retry-after")).toBe("1");
    expect(await json(await get(actionId))).toEqual(assignment);
    await replicaTransition(db.registry, db.owner, fleet.replica.b!, "register");
  });

  it("404 binding-unavailable; 409 conflict for another capability", async () => {
    const missing = await problem(await put(newAction(), { capability_id: "cap:nobody.binds.this" }), 404, "binding-unavailable");
    expect(missing).toMatchObject({ tenant_id: fleet.tenant, capability_id: "cap:nobody.binds.this" });
    const actionId = newAction();
    const assignment = await json(await put(actionId, { capability_id: fleet.capability }));
    await problem(await put(actionId, { capability_id: "cap:nobody.binds.this" }), 409, "conflict");
    await settle(actionId, { assignment, outcome: "completed" });
  });

  it("400 for malformed bodies, before the database is asked", async () => {
    const before = await counters(db.owner);
    for (const body of [
      {},
      { capability_id: "" },
      { capability_id: fleet.capability, topology: { region: "eu west" } },
      { capability_id: fleet.capability, topology: { allow_cross_region: "yes" } },
      { capability_id: fleet.capability, topology: { instance_id: fleet.instance.i } },
      { capability_id: fleet.capability, replica_id: fleet.replica.a },
    ]) {
      const refusal = await problem(await put(newAction(), body), 400, "invalid");
      expect(refusal.errors).toEqual(expect.arrayContaining([expect.objectContaining({ field: expect.any(String) })]));
    }
    expect(await counters(db.owner)).toEqual(before);
  });

  it("needs a token with routes:write and a tenant", async () => {
    expect((await api.call("PUT", `/v1/routes/${newAction()}`, { body: { capability_id: fleet.capability } })).status).toBe(401);
    await problem(await put(newAction(), { capability_id: fleet.capability }, await api.tenantToken(fleet.tenant, ["routes:read"])), 403, "forbidden");
    await problem(await put(newAction(), { capability_id: fleet.capability }, await api.token({ scopes: ["routes:write"] })), 403, "forbidden");
  });
});

describe("GET and settlement", () => {
  it("another tenant gets 404 for reading and settling; the route stays reserved", async () => {
    const actionId = newAction();
    const assignment = await json(await put(actionId, { capability_id: fleet.capability }));
    const intruder = await api.tenantToken("tenant-intruder");
    await problem(await get(actionId, intruder), 404, "not-found");
    await problem(await settle(actionId, { assignment, outcome: "completed" }, intruder), 404, "not-found");
    await problem(await get("act_never_routed"), 404, "not-found");
    expect((await get(actionId)).headers.get("aip-route-reserved")).toBe("true");
    await settle(actionId, { assignment, outcome: "completed" });
  });

  it("200 released, then released:false on a repeat; 409 fence-lost on any difference", async () => {
    const actionId = newAction();
    const assignment = await json(await put(actionId, { capability_id: fleet.capability }));
    await problem(await settle(actionId, { assignment: { ...assignment, extra: 1 }, outcome: "completed" }), 409, "fence-lost");
    await problem(await settle(actionId, { assignment: { ...assignment, fence_token: "route_0" }, outcome: "completed" }), 409, "fence-lost");
    // A `__proto__` member is a member like any other (JSON.parse keeps it; a rebuilt copy would not).
    const text = JSON.stringify({ assignment, outcome: "completed" }).replace('{"action_id"', '{"__proto__":{"x":1},"action_id"');
    await problem(await settle(actionId, text), 409, "fence-lost");
    // The path names the action: another action's exact route is not this one's.
    const other = newAction();
    const otherAssignment = await json(await put(other, { capability_id: fleet.capability }));
    await problem(await settle(actionId, { assignment: otherAssignment, outcome: "completed" }), 409, "fence-lost");

    const first = await settle(actionId, { assignment, outcome: "outcome_unknown" });
    expect(first.status).toBe(200);
    expect(await first.json()).toEqual({ action_id: actionId, released: true, last_settlement: "outcome_unknown" });
    const repeat = await settle(actionId, { assignment, outcome: "completed" });
    expect(await repeat.json()).toEqual({ action_id: actionId, released: false, last_settlement: "outcome_unknown" });
    const read = await get(actionId);
    expect(read.headers.get("aip-route-reserved")).toBe("false");
    expect(read.headers.get("aip-last-settlement")).toBe("outcome_unknown");
    await settle(other, { assignment: otherAssignment, outcome: "completed" });
  });

  it("400 for an unknown outcome or a missing assignment", async () => {
    await problem(await settle(newAction(), { outcome: "completed" }), 400, "invalid");
    await problem(await settle(newAction(), { assignment: { action_id: "x", fence_token: "y" }, outcome: "done" }), 400, "invalid");
  });
});
