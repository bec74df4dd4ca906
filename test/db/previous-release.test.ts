/**
 * A rolling upgrade: the previous release's functions (0.1.0, test/support/previous-release.ts)
 * keep serving beside this release's on the tables this release migrated. Every pairing of an
 * old and a new writer on the same rows must leave the registry as either alone would:
 *
 * - a route resolved by one release is settled, reacquired and settled again by the other (a route
 *   the old functions wrote has no assignment digest: the new settlement compares it the old way;
 *   a route the new functions wrote is compared by the old settlement from its columns, which the
 *   digest only summarizes);
 * - the fence refuses a changed assignment under both, and the new settlement accepts a copy whose
 *   JSON differs only in form (a number written as 1.0), as the old one does;
 * - the old lifecycle (offline), lease expiry and publication act on what the new functions wrote,
 *   and the new routing on what the old publication wrote.
 *
 * After each case both releases' invariant checkers find the registry healthy, and every stored
 * assignment digest is the digest of the route's rebuilt record.
 */
import { beforeAll, expect, it } from "vitest";
import type { Registry } from "../../src/registry/registry.js";
import type { RouteAssignment } from "../../src/schemas.js";
import { binding, connectorType, hostPrincipal, instance, registerReplica, replica, requestId, version } from "../../fixtures/records.js";
import { refusal } from "../support/assertions.js";
import { useTestDatabase } from "../support/database.js";
import { expectHealthy } from "../support/invariants.js";
import { installPreviousRelease, previousRegistry } from "../support/previous-release.js";
import { previousReleaseUnavailable } from "../support/releases.js";

// The previous release's functions come from git history; a checkout without it skips, saying so.
const unavailable = previousReleaseUnavailable();
if (unavailable) console.warn(`previous-release tests skipped: ${unavailable}`);
import { counters, publishRoutingFleet, replicaState, type RoutingFleet } from "../support/routing-fleet.js";

const db = useTestDatabase();
let previous: Registry;
let fleet: RoutingFleet;

beforeAll(async () => {
  if (unavailable) return;
  await installPreviousRelease(db.owner);
  previous = previousRegistry(db.owner);
  fleet = await publishRoutingFleet(db.registry, {
    prefix: "mixed",
    tenant: "tenant-mixed",
    // Every scope kind the default policy leaves off too, and a retry budget: each counter path.
    policy: { max_global_in_flight: 100, max_connector_type_in_flight: 100, max_tenant_retry_in_flight: 10 },
    instances: [
      {
        name: "i",
        replicas: [
          { name: "a", capacity: 50 },
          { name: "b", capacity: 50 },
        ],
      },
    ],
  });
}, 60_000);

/** Both releases' invariant checkers, and every stored digest against its route's rebuilt record. */
async function expectConsistent(): Promise<void> {
  await expectHealthy(db.registry);
  await expectHealthy(previous);
  const { rows } = await db.owner.query<{ action_id: string }>(
    `SELECT action_id FROM aip_route_assignments a
     WHERE a.assignment_digest IS DISTINCT FROM aip_assignment_digest(aip_assignment_json(a)::jsonb) AND a.assignment_digest IS NOT NULL`,
  );
  expect(rows).toEqual([]);
}

async function fleetCountersAtZero(): Promise<void> {
  const all = await counters(db.owner);
  for (const [key, value] of Object.entries(all)) if (key.includes("mixed") || key === "global:fleet") expect(value, key).toBe(0);
  for (const id of Object.values(fleet.replica)) expect((await replicaState(db.owner, id)).active_assignments, id).toBe(0);
}

const digestOf = async (actionId: string) =>
  (await db.owner.query<{ d: Buffer | null }>("SELECT assignment_digest AS d FROM aip_route_assignments WHERE action_id = $1", [actionId])).rows[0]?.d ?? null;

it.runIf(!unavailable)("a route the previous release resolved is settled by this one, compared without a digest", async () => {
  const { assignment } = await previous.resolveRoute("act_mixed_old_1", fleet.tenant, fleet.capability);
  expect(await digestOf("act_mixed_old_1")).toBeNull();
  expect(await db.registry.settleRoute(assignment.action_id, fleet.tenant, assignment, "completed")).toMatchObject({ released: true });
  // Released once: the repeat is idempotent under either release.
  expect(await db.registry.settleRoute(assignment.action_id, fleet.tenant, assignment, "completed")).toMatchObject({ released: false });
  expect(await previous.settleRoute(assignment.action_id, fleet.tenant, assignment, "completed")).toMatchObject({ released: false });
  await fleetCountersAtZero();
  await expectConsistent();
});

it.runIf(!unavailable)("a route this release resolved is settled by the previous one", async () => {
  const { assignment } = await db.registry.resolveRoute("act_mixed_new_1", fleet.tenant, fleet.capability);
  expect(await digestOf("act_mixed_new_1")).not.toBeNull();
  expect(await previous.getRoute(assignment.action_id, fleet.tenant)).toMatchObject({ assignment, reserved: true });
  expect(await previous.settleRoute(assignment.action_id, fleet.tenant, assignment, "completed")).toMatchObject({ released: true });
  expect(await db.registry.settleRoute(assignment.action_id, fleet.tenant, assignment, "completed")).toMatchObject({ released: false });
  await fleetCountersAtZero();
  await expectConsistent();
});

it.runIf(!unavailable)("retries alternate between the releases on one pinned route, its retry budget held and released each time", async () => {
  const first = await db.registry.resolveRoute("act_mixed_retry", fleet.tenant, fleet.capability);
  const pinned = first.assignment;
  const attempts: [Registry, Registry][] = [
    [db.registry, previous],
    [previous, db.registry],
    [db.registry, db.registry],
    [previous, previous],
  ];
  await db.registry.settleRoute(pinned.action_id, fleet.tenant, pinned, "outcome_unknown");
  for (const [resolver, settler] of attempts) {
    const retry = await resolver.resolveRoute(pinned.action_id, fleet.tenant, fleet.capability);
    expect(retry).toEqual({ outcome: "reacquired", assignment: pinned });
    expect((await counters(db.owner))[`tenant_retry:${fleet.tenant}`]).toBe(1);
    expect(await settler.settleRoute(pinned.action_id, fleet.tenant, pinned, "cancelled")).toMatchObject({ released: true });
    expect((await counters(db.owner))[`tenant_retry:${fleet.tenant}`]).toBe(0);
  }
  // And a route the previous release created, retried by this one.
  const old = (await previous.resolveRoute("act_mixed_retry_old", fleet.tenant, fleet.capability)).assignment;
  await previous.settleRoute(old.action_id, fleet.tenant, old, "completed");
  expect(await db.registry.resolveRoute(old.action_id, fleet.tenant, fleet.capability)).toEqual({ outcome: "reacquired", assignment: old });
  expect(await db.registry.settleRoute(old.action_id, fleet.tenant, old, "completed")).toMatchObject({ released: true });
  await fleetCountersAtZero();
  await expectConsistent();
});

it.runIf(!unavailable)("the fence refuses a changed assignment under both releases, and this one accepts a copy that differs only in form", async () => {
  const { assignment } = await db.registry.resolveRoute("act_mixed_fence", fleet.tenant, fleet.capability);
  const forged: RouteAssignment = { ...assignment, fence_token: `${assignment.fence_token.slice(0, -1)}0` };
  if (forged.fence_token === assignment.fence_token) forged.fence_token = `${assignment.fence_token.slice(0, -1)}1`;
  expect((await refusal(db.registry.settleRoute(assignment.action_id, fleet.tenant, forged, "completed"))).code).toBe("fence-lost");
  expect((await refusal(previous.settleRoute(assignment.action_id, fleet.tenant, forged, "completed"))).code).toBe("fence-lost");
  // The same record with a number written as 1.0: another digest, the same jsonb value.
  const text = JSON.stringify(assignment).replace(`"catalog_revision":${assignment.catalog_revision}`, `"catalog_revision":${assignment.catalog_revision}.0`);
  expect(text).not.toBe(JSON.stringify(assignment));
  const { rows } = await db.owner.query<{ r: { released: boolean } }>("SELECT aip_settle_route($1, $2, $3::jsonb, 'completed') AS r", [
    assignment.action_id,
    fleet.tenant,
    text,
  ]);
  expect(rows[0]!.r.released).toBe(true);
  await fleetCountersAtZero();
  await expectConsistent();
});

it.runIf(!unavailable)("the previous release's offline transition and lease expiry release routes this release created", async () => {
  const replicaId = fleet.replica.a!;
  // Both replicas take routes (the resolver spreads them); then host a goes offline, old-style.
  const routes = [];
  for (let n = 0; n < 6; n++) routes.push((await db.registry.resolveRoute(`act_mixed_host_${n}`, fleet.tenant, fleet.capability)).assignment);
  const onA = routes.filter((a) => a.replica_id === replicaId);
  expect(onA.length).toBeGreaterThan(0);
  const { health_revision } = await replicaState(db.owner, replicaId);
  await previous.replicaLifecycle(replicaId, "offline", { request_id: requestId(), previous_sequence: health_revision }, hostPrincipal(replicaId));
  for (const a of onA)
    expect(await db.registry.settleRoute(a.action_id, fleet.tenant, a, "completed")).toEqual({
      action_id: a.action_id,
      released: false,
      last_settlement: "lease_expired",
    });
  await expectConsistent();
  // Host b's lease runs out; the previous release's maintenance expires it.
  const replicaB = fleet.replica.b!;
  await db.owner.query("UPDATE aip_connector_replicas SET lease_expires_at = now() WHERE replica_id = $1", [replicaB]);
  await previous.expireLeases(10);
  for (const a of routes.filter((r) => r.replica_id === replicaB)) {
    expect(await db.registry.settleRoute(a.action_id, fleet.tenant, a, "completed")).toMatchObject({ released: false, last_settlement: "lease_expired" });
  }
  await fleetCountersAtZero();
  await expectConsistent();
  await registerReplica(previous, replicaId);
  await registerReplica(db.registry, replicaB);
  await expectConsistent();
});

it.runIf(!unavailable)("this release routes through what the previous release published, and both route it alike", async () => {
  const typeId = "ctype_mixed_pub";
  const versionId = "cver_mixed_pub_1";
  const capability = "cap:mixed.pub";
  const tenant = "tenant-mixed-pub";
  await previous.publish([
    connectorType(typeId),
    await version(versionId, typeId, [capability]),
    instance("cinst_mixed_pub", typeId, versionId, tenant),
    binding(tenant, capability, "cinst_mixed_pub"),
    replica("crepl_mixed_pub", "cinst_mixed_pub", versionId, {}),
  ]);
  await registerReplica(previous, "crepl_mixed_pub");
  const created = (await db.registry.resolveRoute("act_mixed_pub_new", tenant, capability)).assignment;
  const createdOld = (await previous.resolveRoute("act_mixed_pub_old", tenant, capability)).assignment;
  // The same chain, replica and admission: the records differ only in what is the action's own.
  const own = ["action_id", "fence_token", "assigned_at"] as const;
  const strip = (a: RouteAssignment) => Object.fromEntries(Object.entries(a).filter(([k]) => !(own as readonly string[]).includes(k)));
  expect(strip(created)).toEqual(strip(createdOld));
  expect(await previous.settleRoute(created.action_id, tenant, created, "completed")).toMatchObject({ released: true });
  expect(await db.registry.settleRoute(createdOld.action_id, tenant, createdOld, "completed")).toMatchObject({ released: true });
  await expectConsistent();
});
