/**
 * Lease expiry (aip_expire_leases) and the invariant checker (aip_check_invariants) through the
 * runtime roles; corruption is done deliberately as the owner. Tests run in order on one database
 * and each leaves no expired live lease behind.
 */
import { beforeAll, describe, expect, it } from "vitest";
import type { RouteAssignment } from "../../src/schemas.js";
import { useTestDatabase } from "../support/database.js";
import { counters, lifecycle, provisionFleet, replicaRow, shortenLeases, waitForLeaseEnd } from "../support/replicas.js";
import { expectRefusal } from "../support/assertions.js";

const db = useTestDatabase();

/** The stored route row minus its bookkeeping: everything that names the destination. */
async function routeRow(actionId: string) {
  const { rows } = await db.owner.query("SELECT * FROM aip_route_assignments WHERE action_id = $1", [actionId]);
  const { reserved, retry, last_settlement, settled_at, updated_at, ...destination } = rows[0];
  return { destination, reserved, retry, last_settlement, settled_at, updated_at };
}

describe("lease expiry", () => {
  it("stops new routes at once; maintenance then releases capacity and keeps every destination", async () => {
    const fleet = await provisionFleet(db.registry, { prefix: "exp", tenants: ["tenant-x", "tenant-y"] });
    const [a, b] = fleet.replicas as [string, string];
    await lifecycle(db.registry, a, "register", { lease_ttl_ms: 120_000 });
    await lifecycle(db.registry, b, "register", { lease_ttl_ms: 120_000 });
    const onA: RouteAssignment[] = [];
    for (let n = 0; n < 3; n++) onA.push((await db.registry.resolveRoute(`act_exp_x${n}`, "tenant-x", fleet.capability)).assignment);
    const onB = (await db.registry.resolveRoute("act_exp_y0", "tenant-y", fleet.capability)).assignment;
    expect(onA.every((r) => r.replica_id === a)).toBe(true);
    await db.registry.settleRoute(onA[0]!.action_id, "tenant-x", onA[0]!, "completed");
    expect(await replicaRow(db, a)).toMatchObject({ status: "ready", active_assignments: 2 });
    // a's host stops: its last heartbeat asked for a 1 s lease.
    const { sequence: seqA } = (await shortenLeases(db, [a]))[0]!;

    await waitForLeaseEnd(db, [a]);
    // No maintenance has run: the row still says ready, yet routing already refuses it.
    expect(await replicaRow(db, a)).toMatchObject({ status: "ready", active_assignments: 2 });
    await expectRefusal(db.registry.resolveRoute("act_exp_x_new", "tenant-x", fleet.capability), "replica-unavailable");
    await expectRefusal(db.registry.resolveRoute(onA[0]!.action_id, "tenant-x", fleet.capability), "replica-unavailable");
    expect((await db.registry.fleetStatus()).expired_leases).toBe(1);

    const before = await Promise.all(onA.map((r) => routeRow(r.action_id)));
    const statesBefore = await Promise.all(onA.map((r) => db.registry.getRoute(r.action_id, "tenant-x")));
    const leaseBefore = (await replicaRow(db, a)).lease_expires_at;
    const heldBefore = await counters(db);
    expect(heldBefore).toMatchObject({ "tenant:tenant-x": 2, "tenant:tenant-y": 1 });

    expect(await db.registry.expireLeases(100)).toMatchObject({ expired: 1, released: 2 });

    expect(await replicaRow(db, a)).toMatchObject({ status: "offline", active_assignments: 0, health_revision: seqA + 1, lease_expires_at: leaseBefore });
    expect(await replicaRow(db, b)).toMatchObject({ status: "ready", active_assignments: 1 });
    const held = await counters(db);
    expect(held).toMatchObject({ "tenant:tenant-x": 0, [`instance:${fleet.tenants[0]!.instanceId}`]: 0, "tenant:tenant-y": 1 });
    for (const [n, route] of onA.entries()) {
      const after = await routeRow(route.action_id);
      expect(after.destination).toEqual(before[n]!.destination);
      const state = await db.registry.getRoute(route.action_id, "tenant-x");
      expect(JSON.stringify(state!.assignment)).toBe(JSON.stringify(statesBefore[n]!.assignment));
      expect(state).toMatchObject({ reserved: false, last_settlement: n === 0 ? "completed" : "lease_expired" });
      // Settling after expiry is an idempotent no-op: nothing is released twice.
      expect(await db.registry.settleRoute(route.action_id, "tenant-x", route, "completed")).toMatchObject({ released: false });
    }
    expect(await counters(db)).toEqual(held);
    expect((await routeRow(onB.action_id)).reserved).toBe(true);
    expect(await db.registry.expireLeases(100)).toMatchObject({ expired: 0, released: 0 });
    expect(await db.registry.checkInvariants()).toMatchObject({ healthy: true, violations: [] });
  });

  it("skips, without waiting, a replica another transaction holds, and releases every route of the ones it takes", async () => {
    const fleet = await provisionFleet(db.registry, { prefix: "held", tenants: ["tenant-held"], replicasPerTenant: 2 });
    const [held, free] = fleet.replicas as [string, string];
    for (const id of fleet.replicas) await lifecycle(db.registry, id, "register", { lease_ttl_ms: 60_000 });
    const routes: RouteAssignment[] = [];
    for (let n = 0; n < 8; n++) routes.push((await db.registry.resolveRoute(`act_held_${n}`, "tenant-held", fleet.capability)).assignment);
    const onHeld = routes.filter((r) => r.replica_id === held);
    const onFree = routes.filter((r) => r.replica_id === free);
    expect(onHeld.length).toBeGreaterThanOrEqual(2);
    expect(onFree.length).toBeGreaterThanOrEqual(2);
    // Both leases end (sequence 1 -> 2, then a 1 s lease runs out).
    for (const id of fleet.replicas) await lifecycle(db.registry, id, "heartbeat", { previous_sequence: 1, lease_ttl_ms: 1000 });
    await waitForLeaseEnd(db, fleet.replicas);

    // A gateway's settlement holds one replica row (settle, resolve and reacquire lock the replica
    // before its routes and counters). Expiry passes that replica over without waiting and takes
    // the other whole; the held one stays in the backlog (next_deadline in the past).
    const gateway = await db.owner.connect();
    try {
      await gateway.query("BEGIN");
      await gateway.query("SELECT 1 FROM aip_connector_replicas WHERE replica_id = $1 FOR NO KEY UPDATE", [held]);
      const run = await db.registry.expireLeases(10);
      expect(run).toMatchObject({ expired: 1, released: onFree.length });
      expect(Date.parse(run.next_deadline!)).toBeLessThanOrEqual(Date.now() + 1000);
      expect(await replicaRow(db, held)).toMatchObject({ status: "ready", active_assignments: onHeld.length });
    } finally {
      await gateway.query("COMMIT");
      gateway.release();
    }
    expect(await db.registry.checkInvariants()).toMatchObject({ healthy: true });
    // The next run takes it, routes and all: nothing is left reserved on an offline replica.
    expect(await db.registry.expireLeases(10)).toMatchObject({ expired: 1, released: onHeld.length });
    for (const id of fleet.replicas) expect(await replicaRow(db, id)).toMatchObject({ status: "offline", active_assignments: 0 });
    expect((await counters(db))["tenant:tenant-held"]).toBe(0);
    for (const route of routes) {
      expect(await db.registry.getRoute(route.action_id, "tenant-held")).toMatchObject({ reserved: false, last_settlement: "lease_expired" });
      expect(await db.registry.settleRoute(route.action_id, "tenant-held", route, "cancelled")).toMatchObject({ released: false });
    }
    expect(await db.registry.checkInvariants()).toMatchObject({ healthy: true });
  });

  it("works through a backlog in bounded batches, earliest lease first", async () => {
    const fleet = await provisionFleet(db.registry, { prefix: "batch", replicasPerTenant: 7 });
    for (const id of fleet.replicas) await lifecycle(db.registry, id, "register", { lease_ttl_ms: 1000 });
    await waitForLeaseEnd(db, fleet.replicas);
    const { rows } = await db.owner.query<{ replica_id: string }>(
      "SELECT replica_id FROM aip_connector_replicas WHERE replica_id = ANY ($1) ORDER BY lease_expires_at, replica_id",
      [fleet.replicas],
    );
    const order = rows.map((r) => r.replica_id);
    const offline = async () => {
      const states = await Promise.all(order.map((id) => replicaRow(db, id)));
      return order.filter((_, n) => states[n]!.status === "offline");
    };

    expect(await db.registry.expireLeases(3)).toMatchObject({ expired: 3, released: 0 });
    expect(await offline()).toEqual(order.slice(0, 3));
    expect((await db.registry.fleetStatus()).expired_leases).toBe(4);
    expect(await db.registry.expireLeases(3)).toMatchObject({ expired: 3, released: 0 });
    expect(await offline()).toEqual(order.slice(0, 6));
    expect(await db.registry.expireLeases(3)).toMatchObject({ expired: 1, released: 0 });
    expect(await db.registry.expireLeases(3)).toMatchObject({ expired: 0, released: 0 });
    expect((await db.registry.fleetStatus()).expired_leases).toBe(0);
  });

  it("refuses a batch limit outside [1, 10000]", async () => {
    for (const limit of [0, -1, 10_001]) {
      const error = await expectRefusal(db.registry.expireLeases(limit), "invalid");
      expect(error.extensions.errors).toEqual([expect.objectContaining({ field: "limit" })]);
    }
  });
});

describe("invariant checker", () => {
  let fleet: Awaited<ReturnType<typeof provisionFleet>>;
  let routes: RouteAssignment[];
  let tenant: string;

  beforeAll(async () => {
    fleet = await provisionFleet(db.registry, { prefix: "inv", replicasPerTenant: 2 });
    tenant = fleet.tenants[0]!.tenant;
    for (const id of fleet.replicas) await lifecycle(db.registry, id, "register");
    routes = [];
    for (let n = 0; n < 4; n++) routes.push((await db.registry.resolveRoute(`act_inv_${n}`, tenant, fleet.capability)).assignment);
    await db.registry.settleRoute(routes[3]!.action_id, tenant, routes[3]!, "completed");
  });

  /**
   * Applies owner SQL, returns the report, and undoes the change inside one rolled-back
   * transaction. `asResolved`: the changed routes are as if resolved that way, their assignment
   * digests (of the record, which the change may touch) those of their records.
   */
  async function reportWith(sql: string, params: unknown[] = [], options: { asResolved?: boolean } = {}) {
    const client = await db.owner.connect();
    try {
      await client.query("BEGIN");
      await client.query(sql, params);
      if (options.asResolved) {
        await client.query("UPDATE aip_route_assignments a SET assignment_digest = aip_assignment_digest(aip_assignment_json(a)::jsonb) WHERE reserved");
      }
      const { rows } = await client.query("SELECT aip_check_invariants() AS report");
      return rows[0].report as { healthy: boolean; violations: { kind: string; detail: Record<string, unknown> }[] };
    } finally {
      await client.query("ROLLBACK");
      client.release();
    }
  }

  const setTenantLimits = (limits: number[]) =>
    reportWith(
      `UPDATE aip_route_assignments a SET admission_max_tenant_in_flight = l.lim
       FROM unnest($1::text[], $2::int[]) AS l(action_id, lim)
       WHERE a.action_id = l.action_id`,
      [routes.slice(0, limits.length).map((r) => r.action_id), limits],
      { asResolved: true },
    );

  it("reports a healthy registry as healthy", async () => {
    expect(await db.registry.checkInvariants()).toEqual({ checked_at: expect.any(String), healthy: true, violations: [] });
  });

  it("reports a counter that differs from the reservations holding it", async () => {
    const report = await reportWith("UPDATE aip_admission_counters SET active = active + 1 WHERE scope_kind = 'tenant' AND scope_key = $1", [tenant]);
    expect(report).toMatchObject({
      healthy: false,
      violations: [{ kind: "counter_mismatch", detail: { scope: "tenant", key: tenant, active: 4, reserved_routes: 3 } }],
    });
    const reset = await reportWith("UPDATE aip_admission_counters SET active = 0 WHERE scope_kind = 'instance' AND scope_key = $1", [
      fleet.tenants[0]!.instanceId,
    ]);
    expect(reset.violations).toEqual([
      { kind: "counter_mismatch", detail: { scope: "instance", key: fleet.tenants[0]!.instanceId, active: 0, reserved_routes: 3 } },
    ]);
  });

  it("reports a replica whose active count differs from its reserved routes", async () => {
    const replicaId = routes[0]!.replica_id;
    const expected = (await replicaRow(db, replicaId)).active_assignments;
    const report = await reportWith("UPDATE aip_connector_replicas SET active_assignments = active_assignments + 1 WHERE replica_id = $1", [replicaId]);
    expect(report.violations).toEqual([
      { kind: "replica_active_mismatch", detail: { replica_id: replicaId, active_assignments: expected + 1, reserved_routes: expected } },
    ]);
  });

  it("reports reservations that no admission order under their pinned limits explains", async () => {
    // Limits are pinned per route and counters shared: {1, 10} is a legal history (the limit-1
    // route came first), {1, 1, 10} is not (two routes each admitted when the counter was empty).
    expect(await setTenantLimits([1, 10])).toMatchObject({ healthy: true });
    expect(await setTenantLimits([10, 1, 2])).toMatchObject({ healthy: true });
    const report = await setTenantLimits([1, 1, 10]);
    expect(report.violations).toEqual([
      { kind: "counter_above_pinned_limit", detail: { scope: "tenant", key: tenant, reserved_routes: 3, limit: 1, position: 2 } },
    ]);
    expect((await setTenantLimits([2, 2, 2])).violations.map((v) => v.kind)).toEqual(["counter_above_pinned_limit"]);
  });

  it("counts the retry budget only for a reservation that holds it", async () => {
    // A reserved route marked as a reacquisition holds the tenant_retry scope its counter lacks.
    const report = await reportWith("UPDATE aip_route_assignments SET retry = true WHERE action_id = $1", [routes[1]!.action_id]);
    expect(report.violations).toEqual([{ kind: "counter_mismatch", detail: { scope: "tenant_retry", key: tenant, active: 0, reserved_routes: 1 } }]);
    // A released route holds nothing, whatever its flag says.
    expect(await reportWith("UPDATE aip_route_assignments SET retry = true WHERE action_id = $1", [routes[3]!.action_id])).toMatchObject({ healthy: true });
  });

  it("reports routes pinned to a catalog or health revision from the future", async () => {
    const catalog = await reportWith(
      "UPDATE aip_route_assignments SET catalog_revision = catalog_revision + 100 WHERE action_id = $1",
      [routes[0]!.action_id],
      {
        asResolved: true,
      },
    );
    expect(catalog.violations).toEqual([
      { kind: "revision_behind_route", detail: expect.objectContaining({ route_catalog_revision: routes[0]!.catalog_revision + 100 }) },
    ]);
    const health = await reportWith(
      "UPDATE aip_route_assignments SET replica_health_revision = replica_health_revision + 5 WHERE action_id = $1",
      [routes[0]!.action_id],
      { asResolved: true },
    );
    expect(health.violations).toEqual([
      {
        kind: "health_behind_route",
        detail: {
          replica_id: routes[0]!.replica_id,
          health_revision: routes[0]!.replica_health_revision,
          route_health_revision: routes[0]!.replica_health_revision + 5,
        },
      },
    ]);
  });

  it("reports a released route without its settlement, which route retention and export would never find", async () => {
    const released = routes[3]!.action_id;
    const report = await reportWith("UPDATE aip_route_assignments SET settled_at = NULL WHERE action_id = $1", [released]);
    expect(report.violations).toEqual([
      { kind: "released_without_settlement", detail: { action_id: released, last_settlement: "completed", settled_at: null } },
    ]);
    const outcome = await reportWith("UPDATE aip_route_assignments SET last_settlement = NULL WHERE action_id = $1", [released]);
    expect(outcome.violations.map((v) => v.kind)).toEqual(["released_without_settlement"]);
  });

  it("reports a reserved route whose assignment digest is not its record's; a route without one (an earlier release's) is healthy", async () => {
    const [route] = routes;
    const stale = await reportWith("UPDATE aip_route_assignments SET assignment_digest = sha256('x') WHERE action_id = $1", [route!.action_id]);
    expect(stale.violations).toEqual([{ kind: "assignment_digest_mismatch", detail: { action_id: route!.action_id } }]);
    // A record changed under its digest (here the fence token) is the same violation.
    const changed = await reportWith("UPDATE aip_route_assignments SET fence_token = fence_token || 'x' WHERE action_id = $1", [route!.action_id]);
    expect(changed.violations).toEqual([{ kind: "assignment_digest_mismatch", detail: { action_id: route!.action_id } }]);
    expect(await reportWith("UPDATE aip_route_assignments SET assignment_digest = NULL WHERE action_id = $1", [route!.action_id])).toMatchObject({
      healthy: true,
    });
  });

  it("is healthy again once nothing is corrupted (every change above was rolled back)", async () => {
    expect(await db.registry.checkInvariants()).toMatchObject({ healthy: true, violations: [] });
  });
});
