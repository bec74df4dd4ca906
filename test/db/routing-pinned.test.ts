/**
 * An existing action never runs target selection again: a resolve of a reserved route returns it
 * as is, a retry after settlement reacquires the same replica (plus the tenant retry budget) or
 * fails, and nothing a publication or a host does afterwards moves it (reference-behaviour §6.1).
 */
import { afterEach, describe, expect, it } from "vitest";
import type { RouteAssignment } from "../../src/schemas.js";
import { useTestDatabase } from "../support/database.js";
import { binding, instance, policy, replica, version } from "../../fixtures/records.js";
import { expectHealthy } from "../support/invariants.js";
import { counters, publishRoutingFleet, replicaState, replicaTransition, routeCount, type RoutingFleet } from "../support/routing-fleet.js";
import { refusal as refused } from "../support/assertions.js";

const db = useTestDatabase();
afterEach(() => expectHealthy(db.registry));

let actionCounter = 0;
const newAction = () => `act_pin_${(++actionCounter).toString().padStart(5, "0")}`;

const resolve = (fleet: RoutingFleet, actionId: string, topology = {}) => db.registry.resolveRoute(actionId, fleet.tenant, fleet.capability, topology);
const settle = (a: RouteAssignment, outcome: "completed" | "cancelled" | "outcome_unknown" = "cancelled") =>
  db.registry.settleRoute(a.action_id, a.tenant_id, a, outcome);

/** Two replicas of one instance, in zones z1 and z2, so a test can steer a route to either. */
async function twoReplicaFleet(prefix: string, policyOverrides: Record<string, unknown> = {}) {
  return publishRoutingFleet(db.registry, {
    prefix,
    tenant: `tenant-${prefix}`,
    policy: policyOverrides,
    instances: [
      {
        name: "i",
        replicas: [
          { name: "one", zone: "z1" },
          { name: "two", zone: "z2" },
        ],
      },
    ],
  });
}

describe("an existing route", () => {
  it("a resolve of a reserved route returns the same record and reserves nothing", async () => {
    const fleet = await twoReplicaFleet("same");
    const actionId = newAction();
    const created = await resolve(fleet, actionId, { zone: "z1" });
    const held = await counters(db.owner);
    // Another topology preference changes nothing for an existing action.
    const again = await resolve(fleet, actionId, { zone: "z2", capacity_class: "gpu" });
    expect(again.outcome).toBe("existing");
    expect(JSON.stringify(again.assignment)).toBe(JSON.stringify(created.assignment));
    expect(await counters(db.owner)).toEqual(held);
    expect((await replicaState(db.owner, fleet.replica.one!)).active_assignments).toBe(1);
  });

  it("a retry after settlement returns the identical record, on the same replica, under the retry budget", async () => {
    const fleet = await twoReplicaFleet("retry");
    const actionId = newAction();
    const created = await resolve(fleet, actionId, { zone: "z1" });
    const base = await counters(db.owner);
    await settle(created.assignment);
    const released = await counters(db.owner);
    // Load the pinned replica so a fresh decision would pick the other one.
    const load = await resolve(fleet, newAction(), { zone: "z1" });
    expect(load.assignment.replica_id).toBe(fleet.replica.one);

    const retry = await resolve(fleet, actionId, { zone: "z2" });
    expect(retry.outcome).toBe("reacquired");
    expect(JSON.stringify(retry.assignment)).toBe(JSON.stringify(created.assignment));
    expect((await replicaState(db.owner, fleet.replica.one!)).active_assignments).toBe(2);
    const now = await counters(db.owner);
    // The base scopes again, plus one in the tenant retry scope.
    for (const scope of created.assignment.admission.scopes) expect(now[`${scope.kind}:${scope.key}`]).toBe(base[`${scope.kind}:${scope.key}`]! + 1);
    expect(now[`tenant_retry:${fleet.tenant}`]).toBe((released[`tenant_retry:${fleet.tenant}`] ?? 0) + 1);
    const state = await db.registry.getRoute(actionId, fleet.tenant);
    expect(state).toMatchObject({ reserved: true, last_settlement: null, settled_at: null });

    // A reserved reacquisition answers as existing, and settles like any route.
    expect((await resolve(fleet, actionId)).outcome).toBe("existing");
    await settle(retry.assignment);
    await settle(load.assignment);
    expect((await counters(db.owner))[`tenant_retry:${fleet.tenant}`]).toBe(0);
  });

  it("a pinned replica that went offline fails the retry without a replacement route, until it returns", async () => {
    const fleet = await twoReplicaFleet("offline");
    const actionId = newAction();
    const created = await resolve(fleet, actionId, { zone: "z1" });
    // Going offline settles the reserved route as lease_expired.
    await replicaTransition(db.registry, db.owner, fleet.replica.one!, "offline");
    expect(await db.registry.getRoute(actionId, fleet.tenant)).toMatchObject({ reserved: false, last_settlement: "lease_expired" });
    const before = await counters(db.owner);
    const routes = await routeCount(db.owner, fleet.tenant);

    const refusal = await refused(resolve(fleet, actionId));
    expect(refusal.code).toBe("replica-unavailable");
    expect(refusal.extensions).toMatchObject({ instance_id: fleet.instance.i, replica_id: fleet.replica.one, retry_after_ms: 1000 });
    expect(await counters(db.owner)).toEqual(before);
    expect(await routeCount(db.owner, fleet.tenant)).toBe(routes);
    expect((await db.registry.getRoute(actionId, fleet.tenant))?.assignment).toEqual(created.assignment);
    // The other replica was there all along: a new action gets it.
    expect((await resolve(fleet, newAction(), { zone: "z1" })).assignment.replica_id).toBe(fleet.replica.two);

    // A registered-again replica serves its pinned retries again.
    await replicaTransition(db.registry, db.owner, fleet.replica.one!, "register");
    const retry = await resolve(fleet, actionId);
    expect(retry.outcome).toBe("reacquired");
    expect(retry.assignment).toEqual(created.assignment);
  });

  it("an expired lease fails the retry", async () => {
    const fleet = await twoReplicaFleet("expired");
    const actionId = newAction();
    const created = await resolve(fleet, actionId, { zone: "z1" });
    await settle(created.assignment);
    await db.owner.query("UPDATE aip_connector_replicas SET lease_expires_at = now() - interval '1 millisecond' WHERE replica_id = $1", [fleet.replica.one]);
    expect((await refused(resolve(fleet, actionId))).code).toBe("replica-unavailable");
  });

  it("a draining replica takes no new routes but serves pinned retries", async () => {
    const fleet = await publishRoutingFleet(db.registry, { prefix: "drain", tenant: "tenant-drain", instances: [{ name: "i", replicas: [{ name: "r" }] }] });
    const actionId = newAction();
    const created = await resolve(fleet, actionId);
    await settle(created.assignment);
    await replicaTransition(db.registry, db.owner, fleet.replica.r!, "drain");
    expect((await refused(resolve(fleet, newAction()))).code).toBe("replica-unavailable");
    const retry = await resolve(fleet, actionId);
    expect(retry.outcome).toBe("reacquired");
    expect(retry.assignment).toEqual(created.assignment);
  });

  it("a binding change or credential rotation applies to new actions only", async () => {
    const fleet = await publishRoutingFleet(db.registry, {
      prefix: "rotate",
      tenant: "tenant-rotate",
      instances: [
        { name: "a", priority: 1, replicas: [{ name: "a" }] },
        { name: "b", priority: 5, replicas: [{ name: "b" }] },
      ],
    });
    const actionId = newAction();
    const created = await resolve(fleet, actionId);
    expect(created.assignment).toMatchObject({ instance_id: fleet.instance.a, credential_revision_ref: "credential-revision-1", binding_policy_revision: 1 });
    await settle(created.assignment);
    // a now loses on priority; both credentials rotate.
    await db.registry.publish([
      binding(fleet.tenant, fleet.capability, fleet.instance.a!, {
        priority: 9,
        policy_revision: 2,
        credential_revision_ref: "credential-revision-2",
        quota_policy_ref: fleet.policyRef,
      }),
      binding(fleet.tenant, fleet.capability, fleet.instance.b!, {
        priority: 5,
        policy_revision: 2,
        credential_revision_ref: "credential-revision-2",
        quota_policy_ref: fleet.policyRef,
      }),
    ]);
    const fresh = await resolve(fleet, newAction());
    expect(fresh.assignment).toMatchObject({ instance_id: fleet.instance.b, credential_revision_ref: "credential-revision-2", binding_policy_revision: 2 });
    expect(fresh.assignment.catalog_revision).toBeGreaterThan(created.assignment.catalog_revision);

    const retry = await resolve(fleet, actionId);
    expect(retry.outcome).toBe("reacquired");
    expect(JSON.stringify(retry.assignment)).toBe(JSON.stringify(created.assignment));
    expect(retry.assignment.credential_revision_ref).toBe("credential-revision-1");
  });

  it("a policy change applies to new actions only: retries keep the pinned limits", async () => {
    const fleet = await publishRoutingFleet(db.registry, {
      prefix: "pinlimit",
      tenant: "tenant-pinlimit",
      policy: { max_tenant_in_flight: 5 },
      instances: [{ name: "i", replicas: [{ name: "r" }] }],
    });
    const actionId = newAction();
    const created = await resolve(fleet, actionId);
    await settle(created.assignment);
    await db.registry.publish([policy(fleet.policyRef!, { revision: 2, max_tenant_in_flight: 1 })]);
    const fresh = await resolve(fleet, newAction());
    expect(fresh.assignment.admission).toMatchObject({ policy_revision: 2, scopes: expect.arrayContaining([{ kind: "tenant", key: fleet.tenant, limit: 1 }]) });
    // The tenant counter is at 1: a new action is refused under the new limit, the retry is
    // admitted under its pinned limit of 5.
    expect((await refused(resolve(fleet, newAction()))).extensions.scope).toBe("tenant");
    const retry = await resolve(fleet, actionId);
    expect(retry.outcome).toBe("reacquired");
    expect(retry.assignment.admission.policy_revision).toBe(1);
    expect((await counters(db.owner))[`tenant:${fleet.tenant}`]).toBe(2);
  });

  it("after an instance rollout the retry on the old version fails; new actions take the new version", async () => {
    const fleet = await publishRoutingFleet(db.registry, {
      prefix: "rollout",
      tenant: "tenant-rollout",
      instances: [{ name: "i", replicas: [{ name: "r" }] }],
    });
    const actionId = newAction();
    const created = await resolve(fleet, actionId);
    await settle(created.assignment);
    await db.registry.publish([
      await version("cver_rollout_2", fleet.typeId, fleet.capabilities, { version: "2.0.0" }),
      instance(fleet.instance.i!, fleet.typeId, "cver_rollout_2", fleet.tenant, 2),
      replica("crepl_rollout_v2", fleet.instance.i!, "cver_rollout_2"),
    ]);
    await replicaTransition(db.registry, db.owner, "crepl_rollout_v2", "register");
    // The old replica is still ready with a live lease: only the version check refuses it.
    expect((await replicaState(db.owner, fleet.replica.r!)).status).toBe("ready");
    const refusal = await refused(resolve(fleet, actionId));
    expect(refusal.code).toBe("replica-unavailable");
    expect(refusal.extensions.instance_id).toBe(fleet.instance.i);
    expect((await resolve(fleet, newAction())).assignment).toMatchObject({ replica_id: "crepl_rollout_v2", version_id: "cver_rollout_2" });
    expect((await db.registry.getRoute(actionId, fleet.tenant))?.assignment).toEqual(created.assignment);
  });

  it("a revoked version fails the retry", async () => {
    const fleet = await publishRoutingFleet(db.registry, { prefix: "revoke", tenant: "tenant-revoke", instances: [{ name: "i", replicas: [{ name: "r" }] }] });
    const actionId = newAction();
    const created = await resolve(fleet, actionId);
    await settle(created.assignment);
    await db.registry.publish([{ op: "set_version_status", id: fleet.versionId, status: "revoked" }]);
    expect((await refused(resolve(fleet, actionId))).code).toBe("replica-unavailable");
  });
});

describe("reacquisition refusals", () => {
  it("the tenant retry budget bounds concurrent retries", async () => {
    const fleet = await publishRoutingFleet(db.registry, {
      prefix: "budget",
      tenant: "tenant-budget",
      policy: { max_tenant_retry_in_flight: 2 },
      instances: [{ name: "i", replicas: [{ name: "r" }] }],
    });
    const routes = [];
    for (let i = 0; i < 3; i++) routes.push((await resolve(fleet, newAction())).assignment);
    for (const a of routes) await settle(a);
    expect((await resolve(fleet, routes[0]!.action_id)).outcome).toBe("reacquired");
    expect((await resolve(fleet, routes[1]!.action_id)).outcome).toBe("reacquired");
    const before = await counters(db.owner);
    const refusal = await refused(resolve(fleet, routes[2]!.action_id));
    expect(refusal.code).toBe("capacity-exceeded");
    expect(refusal.extensions).toMatchObject({ scope: "tenant_retry", limit: 2, retry_after_ms: 100 });
    expect(await counters(db.owner)).toEqual(before);
    // New actions are not retries: the budget does not apply to them.
    const fresh = await resolve(fleet, newAction());
    expect(fresh.outcome).toBe("created");
    // Settling a retry returns its budget.
    await settle(routes[0]!);
    expect((await resolve(fleet, routes[2]!.action_id)).outcome).toBe("reacquired");
  });

  it("precedence: conflict, then capacity-exceeded, then replica-unavailable", async () => {
    const fleet = await twoReplicaFleet("reprec", { max_tenant_in_flight: 1 });
    const actionId = newAction();
    const created = await resolve(fleet, actionId, { zone: "z1" });
    await settle(created.assignment);
    const other = await resolve(fleet, newAction(), { zone: "z2" }); // holds the tenant's only slot
    expect(other.assignment.replica_id).toBe(fleet.replica.two);
    await replicaTransition(db.registry, db.owner, fleet.replica.one!, "offline");

    expect((await refused(db.registry.resolveRoute(actionId, fleet.tenant, "cap:another.capability"))).code).toBe("conflict");
    expect((await refused(db.registry.resolveRoute(actionId, "tenant-someone-else", fleet.capability))).code).toBe("conflict");
    const capacity = await refused(resolve(fleet, actionId));
    expect(capacity.code).toBe("capacity-exceeded");
    expect(capacity.extensions.scope).toBe("tenant");
    await settle(other.assignment);
    expect((await refused(resolve(fleet, actionId))).code).toBe("replica-unavailable");
  });

  it("a full pinned replica fails the retry", async () => {
    const fleet = await publishRoutingFleet(db.registry, {
      prefix: "full",
      tenant: "tenant-full",
      instances: [{ name: "i", replicas: [{ name: "r", capacity: 1 }] }],
    });
    const actionId = newAction();
    const created = await resolve(fleet, actionId);
    await settle(created.assignment);
    const other = await resolve(fleet, newAction());
    expect((await refused(resolve(fleet, actionId))).code).toBe("replica-unavailable");
    await settle(other.assignment);
    expect((await resolve(fleet, actionId)).outcome).toBe("reacquired");
  });
});

describe("reading a route", () => {
  it("only the owning tenant sees it", async () => {
    const fleet = await publishRoutingFleet(db.registry, { prefix: "read", tenant: "tenant-read", instances: [{ name: "i", replicas: [{ name: "r" }] }] });
    const actionId = newAction();
    const created = await resolve(fleet, actionId);
    expect(await db.registry.getRoute(actionId, fleet.tenant)).toEqual({
      assignment: created.assignment,
      reserved: true,
      last_settlement: null,
      settled_at: null,
    });
    expect(await db.registry.getRoute(actionId, "tenant-someone-else")).toBeNull();
    expect(await db.registry.getRoute("act_unknown", fleet.tenant)).toBeNull();
    await settle(created.assignment, "completed");
    const settled = await db.registry.getRoute(actionId, fleet.tenant);
    expect(settled).toMatchObject({ assignment: created.assignment, reserved: false, last_settlement: "completed" });
    expect(settled?.settled_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  });
});
