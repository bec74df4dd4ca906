/**
 * Settlement: the fence check on the complete assignment, the one-time release of every counter
 * and the replica slot, idempotent repeats, and the replica circuit (reference-behaviour §6.2).
 */
import { afterEach, describe, expect, it } from "vitest";
import type { RouteAssignment, SettlementOutcome } from "../../src/schemas.js";
import { useTestDatabase } from "../support/database.js";
import { policy } from "../../fixtures/records.js";
import { expectHealthy } from "../support/invariants.js";
import { counters, publishRoutingFleet, replicaState, type RoutingFleet } from "../support/routing-fleet.js";
import { refusal as refused } from "../support/assertions.js";

const db = useTestDatabase();
afterEach(() => expectHealthy(db.registry));

let actionCounter = 0;
const newAction = () => `act_set_${(++actionCounter).toString().padStart(5, "0")}`;

async function route(fleet: RoutingFleet, topology = {}, actionId = newAction()): Promise<RouteAssignment> {
  return (await db.registry.resolveRoute(actionId, fleet.tenant, fleet.capability, topology)).assignment;
}
const settle = (a: unknown, outcome: SettlementOutcome, actionId = (a as RouteAssignment).action_id, tenant = (a as RouteAssignment).tenant_id) =>
  db.registry.settleRoute(actionId, tenant, a, outcome);

const clone = <T>(value: T): T => JSON.parse(JSON.stringify(value)) as T;

describe("release", () => {
  it("returns every counter and the replica slot to their prior values, once, and keeps the route", async () => {
    const fleet = await publishRoutingFleet(db.registry, {
      prefix: "release",
      tenant: "tenant-release",
      policy: { max_global_in_flight: 50, max_connector_type_in_flight: 50 },
      instances: [{ name: "i", replicas: [{ name: "r" }] }],
    });
    const keep = await route(fleet); // a second route keeps counters above zero
    const prior = await counters(db.owner);
    const assignment = await route(fleet);
    const reserved = await counters(db.owner);
    expect(assignment.admission.scopes).toHaveLength(5);
    for (const s of assignment.admission.scopes) expect(reserved[`${s.kind}:${s.key}`]).toBe(prior[`${s.kind}:${s.key}`]! + 1);
    expect((await replicaState(db.owner, fleet.replica.r!)).active_assignments).toBe(2);

    expect(await settle(assignment, "completed")).toEqual({ action_id: assignment.action_id, released: true, last_settlement: "completed" });
    expect(await counters(db.owner)).toEqual(prior);
    expect((await replicaState(db.owner, fleet.replica.r!)).active_assignments).toBe(1);
    expect(await db.registry.getRoute(assignment.action_id, fleet.tenant)).toMatchObject({ assignment, reserved: false, last_settlement: "completed" });

    // A repeat, even with another outcome, changes nothing and reports the first settlement.
    const before = await replicaState(db.owner, fleet.replica.r!);
    expect(await settle(assignment, "outcome_unknown")).toEqual({ action_id: assignment.action_id, released: false, last_settlement: "completed" });
    expect(await settle(assignment, "completed")).toEqual({ action_id: assignment.action_id, released: false, last_settlement: "completed" });
    expect(await counters(db.owner)).toEqual(prior);
    expect(await replicaState(db.owner, fleet.replica.r!)).toEqual(before);
    await settle(keep, "cancelled");
  });

  it("releases the retry scope a reacquisition took", async () => {
    const fleet = await publishRoutingFleet(db.registry, {
      prefix: "retryrel",
      tenant: "tenant-retryrel",
      instances: [{ name: "i", replicas: [{ name: "r" }] }],
    });
    const assignment = await route(fleet);
    await settle(assignment, "cancelled");
    const prior = await counters(db.owner);
    expect((await db.registry.resolveRoute(assignment.action_id, fleet.tenant, fleet.capability)).outcome).toBe("reacquired");
    expect((await counters(db.owner))[`tenant_retry:${fleet.tenant}`]).toBe(1);
    expect((await settle(assignment, "completed")).released).toBe(true);
    expect(await counters(db.owner)).toEqual({ ...prior, [`tenant_retry:${fleet.tenant}`]: 0 });
  });
});

describe("fence", () => {
  it("any difference from the stored assignment is fence-lost and changes nothing", async () => {
    const fleet = await publishRoutingFleet(db.registry, { prefix: "fence", tenant: "tenant-fence", instances: [{ name: "i", replicas: [{ name: "r" }] }] });
    const assignment = await route(fleet);
    const other = await route(fleet);
    const mutations: [string, (a: Record<string, any>) => unknown][] = [
      ["another fence token", (a) => ({ ...a, fence_token: other.fence_token })],
      ["a stale copy of another route", () => clone(other)],
      [
        "a modified admission limit",
        (a) => ({ ...a, admission: { ...a.admission, scopes: a.admission.scopes.map((s: any) => ({ ...s, limit: s.limit + 1 })) } }),
      ],
      ["a dropped admission scope", (a) => ({ ...a, admission: { ...a.admission, scopes: a.admission.scopes.slice(1) } })],
      ["an extra member", (a) => ({ ...a, note: "hello" })],
      ["an extra admission member", (a) => ({ ...a, admission: { ...a.admission, extra: true } })],
      ["a missing member", ({ quota_policy_ref: _dropped, ...a }) => a],
      ["assigned_at a millisecond off", (a) => ({ ...a, assigned_at: new Date(Date.parse(a.assigned_at) + 1).toISOString() })],
      ["a number as a string", (a) => ({ ...a, catalog_revision: String(a.catalog_revision) })],
      ["another replica", (a) => ({ ...a, replica_id: `${a.replica_id}x` })],
      ["another topology", (a) => ({ ...a, topology: { ...a.topology, zone: "elsewhere" } })],
      ["another credential revision", (a) => ({ ...a, credential_revision_ref: "credential-revision-2" })],
      ["not an object", () => [clone(assignment)]],
    ];
    const prior = await counters(db.owner);
    const replicaBefore = await replicaState(db.owner, fleet.replica.r!);
    for (const [label, mutate] of mutations) {
      const refusal = await refused(settle(mutate(clone(assignment) as Record<string, any>), "completed", assignment.action_id, fleet.tenant));
      expect(refusal.code, label).toBe(label === "not an object" ? "invalid" : "fence-lost");
    }
    expect(await counters(db.owner)).toEqual(prior);
    expect(await replicaState(db.owner, fleet.replica.r!)).toEqual(replicaBefore);
    expect((await db.registry.getRoute(assignment.action_id, fleet.tenant))?.reserved).toBe(true);
    // Member order is not part of the record; the exact copy settles.
    const reordered = Object.fromEntries(Object.entries(clone(assignment)).reverse());
    expect((await settle(reordered, "completed", assignment.action_id, fleet.tenant)).released).toBe(true);
    // After release the fence still applies: a repeat with a wrong copy is refused, not a no-op.
    expect((await refused(settle({ ...clone(assignment), fence_token: other.fence_token }, "completed", assignment.action_id, fleet.tenant))).code).toBe(
      "fence-lost",
    );
    await settle(other, "completed");
  });

  it("another tenant's or an unknown action is not found", async () => {
    const fleet = await publishRoutingFleet(db.registry, {
      prefix: "foreign",
      tenant: "tenant-foreign",
      instances: [{ name: "i", replicas: [{ name: "r" }] }],
    });
    const assignment = await route(fleet);
    const prior = await counters(db.owner);
    const foreign = await refused(settle(assignment, "completed", assignment.action_id, "tenant-intruder"));
    expect(foreign.code).toBe("not-found");
    expect((await refused(settle({ ...assignment, action_id: "act_unknown" }, "completed", "act_unknown", fleet.tenant))).code).toBe("not-found");
    expect(await counters(db.owner)).toEqual(prior);
    expect((await db.registry.getRoute(assignment.action_id, fleet.tenant))?.reserved).toBe(true);
    await settle(assignment, "completed");
  });

  it("without a verified tenant it is invalid, never a way around tenant isolation", async () => {
    const fleet = await publishRoutingFleet(db.registry, {
      prefix: "notenant",
      tenant: "tenant-notenant",
      instances: [{ name: "i", replicas: [{ name: "r" }] }],
    });
    const assignment = await route(fleet);
    for (const tenant of [null, "", "  "]) {
      const refusal = await refused(settle(assignment, "completed", assignment.action_id, tenant as unknown as string));
      expect(refusal.code).toBe("invalid");
      expect(refusal.extensions.errors).toEqual([expect.objectContaining({ field: "tenant_id" })]);
    }
    expect((await db.registry.getRoute(assignment.action_id, fleet.tenant))?.reserved).toBe(true);
    await settle(assignment, "completed");
  });

  it("refuses an unknown outcome", async () => {
    const fleet = await publishRoutingFleet(db.registry, {
      prefix: "outcome",
      tenant: "tenant-outcome",
      instances: [{ name: "i", replicas: [{ name: "r" }] }],
    });
    const assignment = await route(fleet);
    expect((await refused(settle(assignment, "succeeded" as SettlementOutcome))).code).toBe("invalid");
    await settle(assignment, "completed");
  });
});

describe("circuit", () => {
  /**
   * The window of the test that waits for it to pass. It is also a margin: the two statements
   * after the circuit opens must run inside it for the test to see it open (milliseconds on a
   * quiet machine; 1.5 s leaves room for a loaded one). Tests that never wait use an hour.
   */
  const OPEN_MS = 1500;
  const HOUR_MS = 3_600_000;

  /** Replicas `a` (zone za) and `b` (zone zb); routes steered to `a` by zone. */
  async function circuitFleet(prefix: string, openMs = HOUR_MS) {
    return publishRoutingFleet(db.registry, {
      prefix,
      tenant: `tenant-${prefix}`,
      policy: { circuit_failure_threshold: 2, circuit_open_ms: openMs },
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
  }

  it("outcome_unknown up to the pinned threshold opens it: new routes skip the replica, retries are refused; completed closes it", async () => {
    const fleet = await circuitFleet("open");
    const [x1, x2, x3] = [await route(fleet, { zone: "za" }), await route(fleet, { zone: "za" }), await route(fleet, { zone: "za" })];
    expect([x1, x2, x3].map((x) => x.replica_id)).toEqual([fleet.replica.a, fleet.replica.a, fleet.replica.a]);

    await settle(x1, "outcome_unknown");
    expect(await replicaState(db.owner, fleet.replica.a!)).toMatchObject({ consecutive_failures: 1, circuit_open: false });
    const stillA = await route(fleet, { zone: "za" });
    expect(stillA.replica_id).toBe(fleet.replica.a);
    await settle(stillA, "cancelled");

    await settle(x2, "outcome_unknown");
    expect(await replicaState(db.owner, fleet.replica.a!)).toMatchObject({ consecutive_failures: 2, circuit_open: true });
    const skipped = await route(fleet, { zone: "za" });
    expect(skipped.replica_id).toBe(fleet.replica.b);
    const refusal = await refused(db.registry.resolveRoute(x1.action_id, fleet.tenant, fleet.capability));
    expect(refusal.code).toBe("replica-unavailable");

    await settle(x3, "completed");
    expect(await replicaState(db.owner, fleet.replica.a!)).toMatchObject({ consecutive_failures: 0, circuit_open: false });
    const back = await route(fleet, { zone: "za" });
    expect(back.replica_id).toBe(fleet.replica.a);
    for (const a of [skipped, back]) await settle(a, "cancelled");
  });

  it("reopens for eligibility once the window passes; failures are not reset by time", async () => {
    const fleet = await circuitFleet("window", OPEN_MS);
    const routes = [await route(fleet, { zone: "za" }), await route(fleet, { zone: "za" }), await route(fleet, { zone: "za" })];
    await settle(routes[0]!, "outcome_unknown");
    await settle(routes[1]!, "outcome_unknown");
    const openedAt = Date.now();
    expect((await replicaState(db.owner, fleet.replica.a!)).circuit_open).toBe(true);

    // Poll the pinned retry (a refusal leaves nothing behind) until the window has passed.
    let attempts = 0;
    let outcome: string | undefined;
    while (Date.now() - openedAt < OPEN_MS + 5_000) {
      attempts += 1;
      try {
        outcome = (await db.registry.resolveRoute(routes[0]!.action_id, fleet.tenant, fleet.capability)).outcome;
        break;
      } catch (error) {
        expect((error as { code?: string }).code).toBe("replica-unavailable");
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
    }
    expect(outcome).toBe("reacquired");
    expect(attempts).toBeGreaterThan(1);
    expect(await replicaState(db.owner, fleet.replica.a!)).toMatchObject({ consecutive_failures: 2, circuit_open: false });
    expect((await route(fleet, { zone: "za" })).replica_id).toBe(fleet.replica.a);

    // One more unknown outcome reopens at once: the count is still at the threshold.
    await settle(routes[2]!, "outcome_unknown");
    expect(await replicaState(db.owner, fleet.replica.a!)).toMatchObject({ consecutive_failures: 3, circuit_open: true });
  });

  it("cancelled and lease_expired touch neither the failure count nor the circuit", async () => {
    const fleet = await circuitFleet("neutral");
    const routes = [];
    for (let i = 0; i < 4; i++) routes.push(await route(fleet, { zone: "za" }));
    await settle(routes[0]!, "outcome_unknown");
    await settle(routes[1]!, "cancelled");
    await settle(routes[2]!, "lease_expired");
    expect(await replicaState(db.owner, fleet.replica.a!)).toMatchObject({ consecutive_failures: 1, circuit_open: false, active_assignments: 1 });
    await settle(routes[3]!, "outcome_unknown");
    const open = await db.owner.query<{ until: string }>("SELECT circuit_open_until::text AS until FROM aip_connector_replicas WHERE replica_id = $1", [
      fleet.replica.a,
    ]);
    // Open now; cancelled / lease_expired settlements of other routes leave it exactly as is.
    const more = [await route(fleet, { zone: "zb" }), await route(fleet, { zone: "zb" })];
    expect(more.map((m) => m.replica_id)).toEqual([fleet.replica.b, fleet.replica.b]);
    await settle(more[0]!, "cancelled");
    await settle(more[1]!, "lease_expired");
    const after = await db.owner.query<{ until: string }>("SELECT circuit_open_until::text AS until FROM aip_connector_replicas WHERE replica_id = $1", [
      fleet.replica.a,
    ]);
    expect(after.rows[0]!.until).toBe(open.rows[0]!.until);
    expect(await replicaState(db.owner, fleet.replica.b!)).toMatchObject({ consecutive_failures: 0, circuit_open: false });
  });

  it("the threshold and window are the ones pinned in the route, not the policy's current ones", async () => {
    const PINNED_MS = 60_000;
    const fleet = await circuitFleet("pinned", PINNED_MS);
    const routes = [await route(fleet, { zone: "za" }), await route(fleet, { zone: "za" })];
    await db.registry.publish([policy(fleet.policyRef!, { revision: 2, circuit_failure_threshold: 100, circuit_open_ms: 3_600_000 })]);
    await settle(routes[0]!, "outcome_unknown");
    await settle(routes[1]!, "outcome_unknown");
    const state = await replicaState(db.owner, fleet.replica.a!);
    expect(state).toMatchObject({ consecutive_failures: 2, circuit_open: true });
    const { rows } = await db.owner.query<{ ms: number }>(
      "SELECT (extract(epoch FROM circuit_open_until - now()) * 1000)::float8 AS ms FROM aip_connector_replicas WHERE replica_id = $1",
      [fleet.replica.a],
    );
    expect(rows[0]!.ms).toBeLessThanOrEqual(PINNED_MS);
  });
});
