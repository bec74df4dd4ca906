/**
 * Refused settlements racing the replica's releasers (the host's `offline`, lease expiry), on real
 * parallel connections.
 *
 * A settlement that is refused (another tenant's action: not-found; a forged fence: fence-lost)
 * used to lock the route row before it checked anything, and the releasers skipped locked routes
 * on the assumption that the lock holder would settle them. The refusal rolled back instead, the
 * replica went offline with the route still reserved, and nothing ever looked at it again: its
 * counters and the replica's active count leaked for good. Anyone who knew an action ID could do
 * it. Each round here hammers one replica's routes with refused settlements while its host takes
 * it offline (or its lease expires and maintenance runs), then demands that every route was
 * released, that the replica holds nothing, and that the invariant checker agrees.
 */
import { expect, it } from "vitest";
import type { Registry } from "../../src/registry/registry.js";
import type { RouteAssignment } from "../../src/schemas.js";
import { useTestDatabase } from "../support/database.js";
import { hostPrincipal } from "../../fixtures/records.js";
import { expectHealthy } from "../support/invariants.js";
import { counters, lifecycle, provisionFleet, replicaRow, shortenLeases, waitForLeaseEnd } from "../support/replicas.js";

const db = useTestDatabase();

const ROUNDS = 20;
// Expiry rounds each wait out a 1 s lease; the race is rarer there (seen in 1 of 8 rounds on the old code).
const ROUTES = 48;
const HAMMERS = 16;
const EXPIRY_ROUNDS = 14;

/** Refused settlements of random routes, as fast as the pool allows, until `stop` resolves. */
async function hammer(registry: Registry, routes: RouteAssignment[], stop: Promise<void>): Promise<{ refused: Record<string, number>; unexpected: string[] }> {
  let stopped = false;
  void stop.then(() => {
    stopped = true;
  });
  const refused: Record<string, number> = {};
  const unexpected: string[] = [];
  const worker = async (n: number) => {
    for (let i = n; !stopped; i += HAMMERS) {
      const route = routes[i % routes.length]!;
      // Half as another tenant (not-found), half with a forged fence (fence-lost).
      const call =
        i % 2 === 0
          ? registry.settleRoute(route.action_id, "tenant-intruder", route, "outcome_unknown")
          : registry.settleRoute(route.action_id, route.tenant_id, { ...route, fence_token: "route_forged" }, "completed");
      await call.then(
        () => unexpected.push(`settlement of ${route.action_id} succeeded`),
        (error: { code?: string }) => {
          refused[error.code ?? String(error)] = (refused[error.code ?? String(error)] ?? 0) + 1;
        },
      );
    }
  };
  await Promise.all(Array.from({ length: HAMMERS }, (_, n) => worker(n)));
  return { refused, unexpected };
}

async function reservedOn(replicaId: string): Promise<number> {
  const { rows } = await db.owner.query<{ n: number }>("SELECT count(*)::int AS n FROM aip_route_assignments WHERE replica_id = $1 AND reserved", [replicaId]);
  return rows[0]!.n;
}

async function routesOn(registry: Registry, tenant: string, capability: string, round: string): Promise<RouteAssignment[]> {
  return Promise.all(Array.from({ length: ROUTES }, async (_, n) => (await registry.resolveRoute(`act_race_${round}_${n}`, tenant, capability)).assignment));
}

it("refused settlements racing `offline` never leave a route reserved on the offline replica", async () => {
  const fleet = await provisionFleet(db.registry, { prefix: "race_off", capacity: ROUTES });
  const { tenant, replicas } = fleet.tenants[0]!;
  const replicaId = replicas[0]!;
  const { registry: hammerRegistry } = db.registryWithPool(HAMMERS);
  const leaks: string[] = [];
  const refusedTotal: Record<string, number> = {};
  for (let round = 0; round < ROUNDS; round++) {
    const { sequence } = await lifecycle(db.registry, replicaId, "register", { lease_ttl_ms: 60_000 });
    const routes = await routesOn(db.registry, tenant, fleet.capability, `off${round}`);
    let stop!: () => void;
    const stopped = new Promise<void>((resolve) => (stop = resolve));
    const hammering = hammer(hammerRegistry, routes, stopped);
    // Let the hammer reach full speed, then take the replica offline under it.
    await new Promise((resolve) => setTimeout(resolve, 30));
    const offline = await lifecycle(db.registry, replicaId, "offline", { previous_sequence: sequence });
    stop();
    const { refused, unexpected } = await hammering;
    expect(unexpected).toEqual([]);
    for (const [code, n] of Object.entries(refused)) refusedTotal[code] = (refusedTotal[code] ?? 0) + n;
    expect(offline.status).toBe("offline");
    const left = await reservedOn(replicaId);
    const row = await replicaRow(db, replicaId);
    if (left > 0 || row.active_assignments > 0) leaks.push(`round ${round}: ${left} routes reserved, active_assignments ${row.active_assignments}`);
    if (leaks.length > 0) break;
    // A settlement after the releaser is the idempotent repeat, naming the releaser's outcome.
    const late = await db.registry.settleRoute(routes[0]!.action_id, tenant, routes[0]!, "completed");
    expect(late).toEqual({ action_id: routes[0]!.action_id, released: false, last_settlement: "lease_expired" });
  }
  expect(leaks).toEqual([]);
  // Both refusals really raced the releaser.
  expect(refusedTotal["not-found"]).toBeGreaterThan(0);
  expect(refusedTotal["fence-lost"]).toBeGreaterThan(0);
  expect(Object.values(await counters(db)).every((active) => active === 0)).toBe(true);
  await expectHealthy(db.registry);
});

it("refused settlements racing lease expiry never leave a route reserved on the expired replica", async () => {
  const fleet = await provisionFleet(db.registry, { prefix: "race_exp", capacity: ROUTES });
  const { tenant, replicas } = fleet.tenants[0]!;
  const replicaId = replicas[0]!;
  const { registry: hammerRegistry } = db.registryWithPool(HAMMERS);
  const leaks: string[] = [];
  for (let round = 0; round < EXPIRY_ROUNDS; round++) {
    await lifecycle(db.registry, replicaId, "register", { lease_ttl_ms: 60_000 });
    const routes = await routesOn(db.registry, tenant, fleet.capability, `exp${round}`);
    await shortenLeases(db, [replicaId]);
    await waitForLeaseEnd(db, [replicaId]);
    let stop!: () => void;
    const stopped = new Promise<void>((resolve) => (stop = resolve));
    const hammering = hammer(hammerRegistry, routes, stopped);
    await new Promise((resolve) => setTimeout(resolve, 30));
    // Maintenance may find the replica held by nothing but a refused settlement: it must still
    // release every route, now or on its next run.
    let expired = 0;
    for (let run = 0; run < 50 && expired === 0; run++) expired += (await db.registry.expireLeases(10)).expired;
    stop();
    const { unexpected } = await hammering;
    expect(unexpected).toEqual([]);
    expect(expired).toBe(1);
    const left = await reservedOn(replicaId);
    const row = await replicaRow(db, replicaId);
    expect(row.status).toBe("offline");
    if (left > 0 || row.active_assignments > 0) leaks.push(`round ${round}: ${left} routes reserved, active_assignments ${row.active_assignments}`);
    if (leaks.length > 0) break;
  }
  expect(leaks).toEqual([]);
  expect(Object.values(await counters(db)).every((active) => active === 0)).toBe(true);
  await expectHealthy(db.registry);
});

it("the invariant checker reports a route left reserved on an offline replica, and one that outlived its lease", async () => {
  const fleet = await provisionFleet(db.registry, { prefix: "race_chk", capacity: 4 });
  const { tenant, replicas } = fleet.tenants[0]!;
  const replicaId = replicas[0]!;
  await lifecycle(db.registry, replicaId, "register", { lease_ttl_ms: 60_000 });
  await db.registry.resolveRoute("act_race_chk", tenant, fleet.capability);
  await expectHealthy(db.registry);
  // What the old race left behind: the replica offline, its route still reserved and counted.
  await db.owner.query("UPDATE aip_connector_replicas SET status = 'offline', lease_expires_at = now() WHERE replica_id = $1", [replicaId]);
  let report = await db.registry.checkInvariants();
  expect(report.healthy).toBe(false);
  expect(report.violations).toContainEqual(
    expect.objectContaining({ kind: "reserved_on_offline_replica", detail: expect.objectContaining({ replica_id: replicaId, reserved_routes: 1 }) }),
  );
  // A live status whose lease ended long ago: capacity nobody can use, not yet returned.
  await db.owner.query("UPDATE aip_connector_replicas SET status = 'ready', lease_expires_at = now() - interval '2 minutes' WHERE replica_id = $1", [
    replicaId,
  ]);
  report = await db.registry.checkInvariants();
  expect(report.violations).toContainEqual(
    expect.objectContaining({ kind: "reservation_outlived_lease", detail: expect.objectContaining({ replica_id: replicaId, replica_status: "ready" }) }),
  );
  // Maintenance returns it, and the checker is satisfied again.
  expect(await db.registry.expireLeases(10)).toMatchObject({ expired: 1, released: 1 });
  await expectHealthy(db.registry);
});

it("lease expiry reports when the next lease ends, and null once none is live", async () => {
  const fleet = await provisionFleet(db.registry, { prefix: "race_next", replicasPerTenant: 2 });
  const [a, b] = fleet.tenants[0]!.replicas as [string, string];
  // Earlier rounds of this file left their replicas offline: only these two can be live.
  expect((await db.registry.expireLeases(10)).next_deadline).toBeNull();
  const first = await lifecycle(db.registry, a, "register", { lease_ttl_ms: 60_000 });
  const second = await lifecycle(db.registry, b, "register", { lease_ttl_ms: 120_000 });
  expect((await db.registry.expireLeases(10)).next_deadline).toBe(first.lease_expires_at);
  await lifecycle(db.registry, a, "offline", { previous_sequence: first.sequence });
  expect((await db.registry.expireLeases(10)).next_deadline).toBe(second.lease_expires_at);
  await db.registry.replicaLifecycle(b, "offline", { request_id: `msg_race_next_${Date.now()}`, previous_sequence: second.sequence }, hostPrincipal(b));
  expect((await db.registry.expireLeases(10)).next_deadline).toBeNull();
});
