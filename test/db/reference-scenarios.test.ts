/**
 * The reference implementation's routing scenarios, each as one story: failover to a
 * lower-priority binding, zonal failover inside a residency constraint, and revocation. In each,
 * new actions follow the fleet while pinned routes never move.
 */
import { afterEach, expect, it } from "vitest";
import type { TopologyPreference } from "../../src/registry/registry.js";
import type { RouteAssignment } from "../../src/schemas.js";
import { useTestDatabase } from "../support/database.js";
import { expectHealthy } from "../support/invariants.js";
import { publishRoutingFleet, replicaTransition, routeCount, type RoutingFleet } from "../support/routing-fleet.js";
import { refusal as refused } from "../support/assertions.js";

const db = useTestDatabase();
afterEach(() => expectHealthy(db.registry));

let actionCounter = 0;
const newAction = () => `act_scn_${(++actionCounter).toString().padStart(5, "0")}`;
const resolve = (fleet: RoutingFleet, actionId: string, topology: TopologyPreference = {}) =>
  db.registry.resolveRoute(actionId, fleet.tenant, fleet.capability, topology);
const settle = (a: RouteAssignment) => db.registry.settleRoute(a.action_id, a.tenant_id, a, "completed");
const offline = (replicaId: string) => replicaTransition(db.registry, db.owner, replicaId, "offline");

it("when the priority-0 replica goes offline, a new action falls back to the priority-1 binding; a pinned retry still fails", async () => {
  const fleet = await publishRoutingFleet(db.registry, {
    prefix: "scnprio",
    tenant: "tenant-scnprio",
    instances: [
      { name: "backup", priority: 1, replicas: [{ name: "backup" }] },
      { name: "primary", priority: 0, replicas: [{ name: "primary" }] },
    ],
  });
  const old = await resolve(fleet, newAction());
  expect(old.assignment).toMatchObject({ instance_id: fleet.instance.primary, replica_id: fleet.replica.primary });
  await settle(old.assignment);

  await offline(fleet.replica.primary!);
  const fresh = await resolve(fleet, newAction());
  expect(fresh.outcome).toBe("created");
  expect(fresh.assignment).toMatchObject({ instance_id: fleet.instance.backup, replica_id: fleet.replica.backup });

  const retry = await refused(resolve(fleet, old.assignment.action_id));
  expect(retry.code).toBe("replica-unavailable");
  expect(retry.extensions.instance_id).toBe(fleet.instance.primary);
  expect((await db.registry.getRoute(old.assignment.action_id, fleet.tenant))?.assignment).toEqual(old.assignment);
});

it("zonal failover within a residency constraint: zone 1 offline goes to zone 2; zone 2 offline is refused, never served from region b or global", async () => {
  const fleet = await publishRoutingFleet(db.registry, {
    prefix: "scnzone",
    tenant: "tenant-scnzone",
    instances: [
      {
        name: "i",
        replicas: [
          { name: "a1", region: "region-a", zone: "zone-1" },
          { name: "a2", region: "region-a", zone: "zone-2" },
          { name: "b1", region: "region-b", zone: "zone-1" },
          { name: "g", region: "global", zone: "default" },
        ],
      },
    ],
  });
  const resident: TopologyPreference = { region: "region-a", zone: "zone-1", allow_cross_region: false };
  expect((await resolve(fleet, newAction(), resident)).assignment.replica_id).toBe(fleet.replica.a1);

  await offline(fleet.replica.a1!);
  expect((await resolve(fleet, newAction(), resident)).assignment).toMatchObject({
    replica_id: fleet.replica.a2,
    topology: { region: "region-a", zone: "zone-2" },
  });

  await offline(fleet.replica.a2!);
  const routesBefore = await routeCount(db.owner, fleet.tenant);
  const refusal = await refused(resolve(fleet, newAction(), resident));
  expect(refusal.code).toBe("replica-unavailable");
  expect(refusal.extensions.instance_id).toBe(fleet.instance.i);
  expect(await routeCount(db.owner, fleet.tenant)).toBe(routesBefore);
  // Region b and global were ready all along: only the residency constraint kept them out.
  expect((await resolve(fleet, newAction(), { ...resident, allow_cross_region: true })).assignment.replica_id).toMatch(
    new RegExp(`^(${fleet.replica.b1}|${fleet.replica.g})$`),
  );
});

it("after revocation, a new action gets binding-unavailable and a pinned retry fails", async () => {
  const fleet = await publishRoutingFleet(db.registry, {
    prefix: "scnrevoke",
    tenant: "tenant-scnrevoke",
    instances: [{ name: "i", replicas: [{ name: "r" }] }],
  });
  const old = await resolve(fleet, newAction());
  await settle(old.assignment);

  await db.registry.publish([{ op: "set_version_status", id: fleet.versionId, status: "revoked" }]);
  const fresh = await refused(resolve(fleet, newAction()));
  expect(fresh.code).toBe("binding-unavailable");
  expect(fresh.extensions).toEqual({ tenant_id: fleet.tenant, capability_id: fleet.capability });
  const retry = await refused(resolve(fleet, old.assignment.action_id));
  expect(retry.code).toBe("replica-unavailable");
  expect(retry.extensions.instance_id).toBe(fleet.instance.i);
  expect((await db.registry.getRoute(old.assignment.action_id, fleet.tenant))?.reserved).toBe(false);
});
