/**
 * New routes: which replica a new action gets (filters, then each ordering rule in turn) and
 * which refusal wins when several apply (reference-behaviour §5 and §10.3). Each ordering test
 * arranges every lower-ranked rule to favour the other candidate, so only the rule under test
 * can explain the choice.
 */
import { afterEach, describe, expect, it } from "vitest";
import type { TopologyPreference } from "../../src/registry/registry.js";
import { useTestDatabase } from "../support/database.js";
import { binding, instance, policy, replica, version } from "../../fixtures/records.js";
import { expectHealthy } from "../support/invariants.js";
import { counters, publishRoutingFleet, replicaTransition, routeCount, type RoutingFleet } from "../support/routing-fleet.js";
import { refusal as refused } from "../support/assertions.js";

const db = useTestDatabase();
afterEach(() => expectHealthy(db.registry));

let actionCounter = 0;
const newAction = () => `act_sel_${(++actionCounter).toString().padStart(5, "0")}`;

async function route(fleet: RoutingFleet, topology: TopologyPreference = {}, actionId = newAction()) {
  const result = await db.registry.resolveRoute(actionId, fleet.tenant, fleet.capability, topology);
  expect(result.outcome).toBe("created");
  return result.assignment;
}

async function settle(assignment: Awaited<ReturnType<typeof route>>) {
  await db.registry.settleRoute(assignment.action_id, assignment.tenant_id, assignment, "cancelled");
}

describe("ordering", () => {
  it("lower binding priority wins over region, zone and load", async () => {
    const fleet = await publishRoutingFleet(db.registry, {
      prefix: "prio",
      tenant: "tenant-prio",
      instances: [
        { name: "low", priority: 20, replicas: [{ name: "low", region: "us-east", zone: "us-east-1a" }] },
        { name: "high", priority: 1, replicas: [{ name: "high", region: "eu-west", zone: "eu-west-1a" }] },
      ],
    });
    const first = await route(fleet, { region: "us-east", zone: "us-east-1a" });
    expect(first.replica_id).toBe(fleet.replica.high);
    // The high-priority replica now also carries more load; it still wins.
    const second = await route(fleet, { region: "us-east", zone: "us-east-1a" });
    expect(second.replica_id).toBe(fleet.replica.high);
    expect(second.instance_id).toBe(fleet.instance.high);
  });

  it("a preferred-region match wins over a zone match and lower load", async () => {
    const fleet = await publishRoutingFleet(db.registry, {
      prefix: "region",
      tenant: "tenant-region",
      instances: [
        {
          name: "i",
          replicas: [
            { name: "east", region: "us-east", zone: "z1" },
            { name: "west", region: "eu-west", zone: "z2" },
          ],
        },
      ],
    });
    const load = await route(fleet, { region: "us-east" });
    expect(load.replica_id).toBe(fleet.replica.east);
    // east has more load and the wrong zone; the region preference still decides.
    expect((await route(fleet, { region: "us-east", zone: "z2" })).replica_id).toBe(fleet.replica.east);
    // Without a region preference the zone decides.
    expect((await route(fleet, { zone: "z2" })).replica_id).toBe(fleet.replica.west);
  });

  it("a preferred-zone match wins over lower load, whatever the region", async () => {
    const fleet = await publishRoutingFleet(db.registry, {
      prefix: "zone",
      tenant: "tenant-zone",
      instances: [
        {
          name: "i",
          replicas: [
            { name: "a", region: "eu-west", zone: "z-a" },
            { name: "b", region: "eu-west", zone: "z-b" },
          ],
        },
      ],
    });
    for (let i = 0; i < 3; i++) expect((await route(fleet, { zone: "z-b" })).replica_id).toBe(fleet.replica.b);
    // A zone match counts even when the region preference matches no replica.
    expect((await route(fleet, { region: "ap-south", zone: "z-b" })).replica_id).toBe(fleet.replica.b);
  });

  it("fewer active assignments wins over the spreading hash", async () => {
    const fleet = await publishRoutingFleet(db.registry, {
      prefix: "load",
      tenant: "tenant-load",
      instances: [{ name: "i", replicas: [{ name: "r1" }, { name: "r2" }, { name: "r3" }] }],
    });
    const load: Record<string, number> = { [fleet.replica.r1!]: 0, [fleet.replica.r2!]: 0, [fleet.replica.r3!]: 0 };
    for (let i = 0; i < 9; i++) {
      const least = Math.min(...Object.values(load));
      const chosen = (await route(fleet)).replica_id;
      expect(load[chosen], `route ${i} went to a replica with more than the least load`).toBe(least);
      load[chosen]! += 1;
    }
    expect(Object.values(load)).toEqual([3, 3, 3]);
  });

  it("an action-dependent hash spreads equal candidates, and the same action always gets the same one", async () => {
    const names = ["h1", "h2", "h3", "h4", "h5", "h6", "h7", "h8"];
    const fleet = await publishRoutingFleet(db.registry, {
      prefix: "hash",
      tenant: "tenant-hash",
      instances: [{ name: "i", replicas: names.map((name) => ({ name, capacity: 100 })) }],
    });
    const replicaIds = names.map((name) => fleet.replica[name]!);
    const chosen = new Set<string>();
    for (let i = 0; i < 32; i++) {
      const actionId = newAction();
      // The expected choice is a pure function of the action: the smallest hashtextextended(replica_id || action_id, 0).
      const { rows } = await db.owner.query<{ replica_id: string }>(
        `SELECT r AS replica_id FROM unnest($1::text[]) r ORDER BY hashtextextended(r || $2, 0), r LIMIT 1`,
        [replicaIds, actionId],
      );
      const assignment = await route(fleet, {}, actionId);
      expect(assignment.replica_id).toBe(rows[0]!.replica_id);
      chosen.add(assignment.replica_id);
      await settle(assignment); // keep every replica at zero load, so only the hash decides
    }
    expect(chosen.size).toBeGreaterThanOrEqual(5);
  });
});

describe("filters", () => {
  it("capacity class is a filter, not a preference", async () => {
    const fleet = await publishRoutingFleet(db.registry, {
      prefix: "class",
      tenant: "tenant-class",
      instances: [
        { name: "std", priority: 1, replicas: [{ name: "std", region: "eu-west", zone: "z1", capacity_class: "standard" }] },
        { name: "gpu", priority: 9, replicas: [{ name: "gpu", region: "us-east", zone: "z9", capacity_class: "gpu" }] },
      ],
    });
    expect((await route(fleet, { region: "eu-west", zone: "z1" })).replica_id).toBe(fleet.replica.std);
    // Worse priority, region and zone: the class filter still picks it.
    expect((await route(fleet, { region: "eu-west", zone: "z1", capacity_class: "gpu" })).replica_id).toBe(fleet.replica.gpu);
    const before = await routeCount(db.owner, fleet.tenant);
    const refusal = await refused(db.registry.resolveRoute(newAction(), fleet.tenant, fleet.capability, { capacity_class: "tpu" }));
    expect(refusal.code).toBe("replica-unavailable");
    expect(refusal.extensions.instance_id).toBe(fleet.instance.std);
    expect(await routeCount(db.owner, fleet.tenant)).toBe(before);
  });

  it("allow_cross_region=false restricts to the region; otherwise another region serves when the preferred one has nothing", async () => {
    const fleet = await publishRoutingFleet(db.registry, {
      prefix: "xregion",
      tenant: "tenant-xregion",
      instances: [
        { name: "eu", priority: 1, replicas: [{ name: "eu", region: "eu-west" }] },
        { name: "us", priority: 5, replicas: [{ name: "us", region: "us-east", capacity: 1 }] },
      ],
    });
    // Allowed (the default): priority first, so the eu replica serves a us-east preference.
    expect((await route(fleet, { region: "us-east" })).replica_id).toBe(fleet.replica.eu);
    // Forbidden: only us-east is eligible, whatever the priority.
    const us = await route(fleet, { region: "us-east", allow_cross_region: false });
    expect(us.replica_id).toBe(fleet.replica.us);
    // us-east is now full: forbidden means refused, allowed means the other region.
    const refusal = await refused(db.registry.resolveRoute(newAction(), fleet.tenant, fleet.capability, { region: "us-east", allow_cross_region: false }));
    expect(refusal.code).toBe("replica-unavailable");
    expect((await route(fleet, { region: "ap-south", allow_cross_region: true })).replica_id).toBe(fleet.replica.eu);
    // allow_cross_region=false without a region constrains nothing.
    expect((await route(fleet, { allow_cross_region: false })).replica_id).toBe(fleet.replica.eu);
  });

  it("only ready replicas with a live lease, a free slot and a closed circuit take new work", async () => {
    const fleet = await publishRoutingFleet(db.registry, {
      prefix: "elig",
      tenant: "tenant-elig",
      instances: [
        {
          name: "i",
          replicas: [
            { name: "ready", capacity: 2, zone: "z-ready" },
            { name: "offline", register: false, zone: "z-pref" },
            { name: "draining", zone: "z-pref" },
            { name: "expired", zone: "z-pref" },
            { name: "open", zone: "z-pref" },
          ],
        },
      ],
    });
    await replicaTransition(db.registry, db.owner, fleet.replica.draining!, "drain");
    await db.owner.query("UPDATE aip_connector_replicas SET lease_expires_at = now() - interval '1 second' WHERE replica_id = $1", [fleet.replica.expired]);
    await db.owner.query("UPDATE aip_connector_replicas SET circuit_open_until = now() + interval '1 hour' WHERE replica_id = $1", [fleet.replica.open]);
    // Every other replica is preferred by zone; none is eligible.
    expect((await route(fleet, { zone: "z-pref" })).replica_id).toBe(fleet.replica.ready);
    expect((await route(fleet, { zone: "z-pref" })).replica_id).toBe(fleet.replica.ready);
    const refusal = await refused(db.registry.resolveRoute(newAction(), fleet.tenant, fleet.capability, { zone: "z-pref" }));
    expect(refusal.code).toBe("replica-unavailable");
    expect(refusal.extensions).toMatchObject({ instance_id: fleet.instance.i, retry_after_ms: 1000 });
  });

  it("a replica of an instance's old version never gets a new route", async () => {
    const fleet = await publishRoutingFleet(db.registry, {
      prefix: "oldver",
      tenant: "tenant-oldver",
      instances: [{ name: "i", replicas: [{ name: "r" }] }],
    });
    await db.registry.publish([
      await version("cver_oldver_2", fleet.typeId, fleet.capabilities, { version: "2.0.0" }),
      instance(fleet.instance.i!, fleet.typeId, "cver_oldver_2", fleet.tenant, 2),
      replica("crepl_oldver_v2", fleet.instance.i!, "cver_oldver_2", { capacity: 1 }),
    ]);
    expect((await refused(db.registry.resolveRoute(newAction(), fleet.tenant, fleet.capability))).code).toBe("replica-unavailable");
    await replicaTransition(db.registry, db.owner, "crepl_oldver_v2", "register");
    const assignment = await route(fleet);
    expect(assignment).toMatchObject({ replica_id: "crepl_oldver_v2", version_id: "cver_oldver_2" });
  });
});

describe("refusal precedence for a new route", () => {
  it("an empty tenant is invalid before anything else is looked at", async () => {
    for (const tenant of [null, "", "   "]) {
      const refusal = await refused(db.registry.resolveRoute(newAction(), tenant as unknown as string, "cap:does-not-exist"));
      expect(refusal.code).toBe("invalid");
      expect(refusal.extensions.errors).toEqual([expect.objectContaining({ field: "tenant_id" })]);
    }
  });

  it("binding-unavailable when no enabled binding chain exists, naming tenant and capability", async () => {
    const fleet = await publishRoutingFleet(db.registry, {
      prefix: "nobind",
      tenant: "tenant-nobind",
      instances: [{ name: "i", replicas: [{ name: "r" }] }],
    });
    const other = await refused(db.registry.resolveRoute(newAction(), "tenant-stranger", fleet.capability));
    expect(other.code).toBe("binding-unavailable");
    expect(other.extensions).toEqual({ tenant_id: "tenant-stranger", capability_id: fleet.capability });
    // A broken chain (disabled instance) is as good as no binding, even with a ready replica.
    await db.registry.publish([instance(fleet.instance.i!, fleet.typeId, fleet.versionId, fleet.tenant, 2, { status: "disabled" })]);
    expect((await refused(db.registry.resolveRoute(newAction(), fleet.tenant, fleet.capability))).code).toBe("binding-unavailable");
    expect(await routeCount(db.owner, fleet.tenant)).toBe(0);
  });

  it("replica-unavailable before the policy is consulted, naming the first-priority instance", async () => {
    const fleet = await publishRoutingFleet(db.registry, {
      prefix: "noreplica",
      tenant: "tenant-noreplica",
      policy: { enabled: false },
      instances: [
        { name: "second", priority: 7, replicas: [{ name: "second", register: false }] },
        { name: "first", priority: 3, replicas: [{ name: "first", register: false }] },
      ],
    });
    const refusal = await refused(db.registry.resolveRoute(newAction(), fleet.tenant, fleet.capability));
    expect(refusal.code).toBe("replica-unavailable");
    expect(refusal.extensions.instance_id).toBe(fleet.instance.first);
    // With a ready replica the disabled policy is what refuses.
    await replicaTransition(db.registry, db.owner, fleet.replica.second!, "register");
    const admission = await refused(db.registry.resolveRoute(newAction(), fleet.tenant, fleet.capability));
    expect(admission.code).toBe("admission");
    expect(admission.extensions.policy_ref).toBe(fleet.policyRef);
    expect(await routeCount(db.owner, fleet.tenant)).toBe(0);
  });

  it("a disabled policy refuses before exhausted capacity", async () => {
    // Two capabilities share the tenant's counter: one under a policy with tenant limit 1, the
    // other under a disabled policy.
    const fleet = await publishRoutingFleet(db.registry, {
      prefix: "disabled",
      tenant: "tenant-disabled",
      capabilities: ["cap:disabled.one", "cap:disabled.two"],
      policy: { max_tenant_in_flight: 1 },
      instances: [{ name: "i", replicas: [{ name: "r" }] }],
    });
    await db.registry.publish([
      policy("quota:disabled-off", { enabled: false, max_tenant_in_flight: 1 }),
      binding(fleet.tenant, "cap:disabled.two", fleet.instance.i!, { policy_revision: 2, quota_policy_ref: "quota:disabled-off" }),
    ]);
    const held = await route(fleet);
    expect((await refused(db.registry.resolveRoute(newAction(), fleet.tenant, "cap:disabled.one"))).code).toBe("capacity-exceeded");
    expect((await refused(db.registry.resolveRoute(newAction(), fleet.tenant, "cap:disabled.two"))).code).toBe("admission");
    await settle(held);
  });

  it("capacity-exceeded names the first exhausted scope in the order global, tenant, connector_type, instance, binding", async () => {
    const ranks = ["max_global_in_flight", "max_tenant_in_flight", "max_connector_type_in_flight", "max_instance_in_flight", "max_binding_in_flight"];
    const kinds = ["global", "tenant", "connector_type", "instance", "binding"];
    for (let k = 0; k < ranks.length; k++) {
      // Scopes before k have room; k and every later scope are full after one route.
      const limits = Object.fromEntries(ranks.map((field, i) => [field, i < k ? 100 : 1]));
      const fleet = await publishRoutingFleet(db.registry, {
        prefix: `scope${k}`,
        tenant: `tenant-scope${k}`,
        policy: limits,
        instances: [{ name: "i", replicas: [{ name: "r" }] }],
      });
      const held = await route(fleet);
      expect(held.admission.scopes.map((s) => s.kind)).toEqual(kinds);
      const before = await counters(db.owner);
      const refusal = await refused(db.registry.resolveRoute(newAction(), fleet.tenant, fleet.capability));
      expect(refusal.code).toBe("capacity-exceeded");
      expect(refusal.extensions).toMatchObject({ scope: kinds[k], limit: 1, retry_after_ms: 100 });
      // Nothing partial: the scopes reserved before the exhausted one were rolled back.
      expect(await counters(db.owner)).toEqual(before);
      expect(await routeCount(db.owner, fleet.tenant)).toBe(1);
      await settle(held); // the global counter is shared by every tenant
    }
  });

  it("a null limit keeps no counter for that scope", async () => {
    const fleet = await publishRoutingFleet(db.registry, {
      prefix: "nulls",
      tenant: "tenant-nulls",
      policy: {
        max_global_in_flight: null,
        max_tenant_in_flight: null,
        max_connector_type_in_flight: null,
        max_instance_in_flight: 3,
        max_binding_in_flight: null,
        max_tenant_retry_in_flight: null,
      },
      instances: [{ name: "i", replicas: [{ name: "r" }] }],
    });
    const assignment = await route(fleet);
    expect(assignment.admission).toMatchObject({
      policy_ref: fleet.policyRef,
      scopes: [{ kind: "instance", key: fleet.instance.i, limit: 3 }],
      retry_scope: null,
    });
    const all = await counters(db.owner);
    expect(Object.keys(all).filter((key) => key.includes("tenant-nulls") || key.includes(fleet.typeId))).toEqual([]);
    expect(all[`instance:${fleet.instance.i}`]).toBe(1);
  });

  it("a binding without a policy pins the implicit default", async () => {
    const fleet = await publishRoutingFleet(db.registry, {
      prefix: "implicit",
      tenant: "tenant-implicit",
      policy: null,
      instances: [{ name: "i", replicas: [{ name: "r" }] }],
    });
    const assignment = await route(fleet);
    const { rows } = await db.owner.query<{ key: string }>("SELECT aip_binding_scope_key($1, $2, $3) AS key", [
      fleet.tenant,
      fleet.capability,
      fleet.instance.i,
    ]);
    expect(assignment.admission).toEqual({
      policy_ref: null,
      policy_revision: 1,
      scopes: [
        { kind: "tenant", key: fleet.tenant, limit: 1000 },
        { kind: "instance", key: fleet.instance.i, limit: 500 },
        { kind: "binding", key: rows[0]!.key, limit: 250 },
      ],
      retry_scope: { kind: "tenant_retry", key: fleet.tenant, limit: 100 },
      circuit_failure_threshold: 5,
      circuit_open_ms: 30000,
    });
    expect(assignment.quota_policy_ref).toBeNull();
  });

  it("refuses malformed topology preferences", async () => {
    const fleet = await publishRoutingFleet(db.registry, { prefix: "topo", tenant: "tenant-topo", instances: [{ name: "i", replicas: [{ name: "r" }] }] });
    for (const topology of [{ region: "eu west" }, { zone: "" }, { capacity_class: "x".repeat(129) }, { allow_cross_region: "no" }]) {
      const refusal = await refused(db.registry.resolveRoute(newAction(), fleet.tenant, fleet.capability, topology as TopologyPreference));
      expect(refusal.code).toBe("invalid");
    }
    expect(await routeCount(db.owner, fleet.tenant)).toBe(0);
  });
});
