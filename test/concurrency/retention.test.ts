/**
 * Route retention beside retries of the very routes it removes, on real parallel connections.
 *
 * Each round: routes of `act_` + UUIDv7 actions, released and settled about 40 days ago, so all
 * of them are due. Retention workers remove them in small batches while retry workers resolve random ones
 * again (a reacquisition that reserves the route anew) and settle them, and a sampler runs the
 * invariant checker throughout. Every retry must end in one of two ways: it reacquired the very
 * route (same fence token: never rerouted), which from then on is reserved or freshly settled and
 * must survive; or it was refused `route-expired`, and that route is gone. A route reserved by a
 * retry is never removed (the checker would see its replica slot and counters outlive it), no
 * action is routed afresh, and when everything stops no counter or replica slot is held.
 */
import { beforeAll, expect, it } from "vitest";
import type { Registry } from "../../src/registry/registry.js";
import type { RouteAssignment } from "../../src/schemas.js";
import { useTestDatabase } from "../support/database.js";
import { expectHealthy } from "../support/invariants.js";
import { actionMintedAt, DAY_MS, settledDaysAgo, stored } from "../support/retention.js";
import { counters, publishRoutingFleet, replicaState, type RoutingFleet } from "../support/routing-fleet.js";

const db = useTestDatabase();
let fleet: RoutingFleet;
beforeAll(async () => {
  fleet = await publishRoutingFleet(db.registry, {
    prefix: "cret",
    tenant: "tenant-cret",
    policy: { max_tenant_in_flight: 10_000, max_instance_in_flight: 10_000, max_binding_in_flight: 10_000, max_tenant_retry_in_flight: 10_000 },
    instances: [
      {
        name: "i",
        replicas: [
          { name: "a", capacity: 5000 },
          { name: "b", capacity: 5000 },
        ],
      },
    ],
  });
  await db.owner.query("UPDATE aip_connector_replicas SET lease_expires_at = now() + interval '1 hour'");
});

const ROUNDS = 4;
const ROUTES = 240;
const RETRIERS = 8;
const REMOVERS = 3;
const BATCH = 3;

interface Outcomes {
  reacquired: Set<string>;
  expired: Set<string>;
  busy: number;
  unexpected: string[];
  removed: number;
  checks: number;
  violations: unknown[];
}

async function round(registry: Registry, r: number): Promise<void> {
  // Each round's routes are three hours younger than the last one's: its actions are minted after
  // the last round's removals (plus the hour of allowance) and a minute before their own routes
  // were settled, so that once removed they are refused.
  const ageDays = 40 - (r * 3) / 24;
  const minted = Date.now() - ageDays * DAY_MS - 60_000;
  const routes = new Map<string, RouteAssignment>();
  for (let i = 0; i < ROUTES; i++) {
    const { assignment } = await registry.resolveRoute(actionMintedAt(minted), fleet.tenant, fleet.capability);
    await registry.settleRoute(assignment.action_id, fleet.tenant, assignment, "completed");
    routes.set(assignment.action_id, assignment);
  }
  const ids = [...routes.keys()];
  await settledDaysAgo(db.owner, ids, ageDays);

  const out: Outcomes = { reacquired: new Set(), expired: new Set(), busy: 0, unexpected: [], removed: 0, checks: 0, violations: [] };
  let stopped = false;
  // Each retrier owns its share of the actions: retries race retention, not each other.
  const retrier = async (n: number) => {
    const mine = ids.filter((_, k) => k % RETRIERS === n);
    for (let i = 0; !stopped; i++) {
      const actionId = mine[(i * 7919) % mine.length] as string;
      try {
        const retry = await registry.resolveRoute(actionId, fleet.tenant, fleet.capability);
        if (retry.assignment.fence_token !== routes.get(actionId)?.fence_token) out.unexpected.push(`${actionId} was routed afresh (${retry.outcome})`);
        if (retry.outcome !== "reacquired") out.unexpected.push(`${actionId}: ${retry.outcome}`);
        if (retry.outcome === "reacquired") out.reacquired.add(actionId);
        if (out.expired.has(actionId)) out.unexpected.push(`${actionId} answered after route-expired`);
        const settled = await registry.settleRoute(actionId, fleet.tenant, retry.assignment, "completed");
        if (retry.outcome === "reacquired" && !settled.released) out.unexpected.push(`${actionId}: its reacquisition was released by someone else`);
      } catch (error) {
        const code = (error as { code?: string }).code;
        if (code === "route-expired") out.expired.add(actionId);
        else if (code === "replica-unavailable") out.busy++;
        else out.unexpected.push(`${actionId}: ${code ?? String(error)}`);
      }
    }
  };
  const remover = async () => {
    while (!stopped) {
      const batch = await registry.removeSettledRoutes(30, false, BATCH);
      out.removed += batch.removed;
      if (batch.removed === 0) stopped = true;
    }
  };
  const sampler = async () => {
    while (!stopped) {
      const report = await registry.checkInvariants();
      out.checks++;
      out.violations.push(...report.violations);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  };
  await Promise.all([...Array.from({ length: RETRIERS }, (_, n) => retrier(n)), ...Array.from({ length: REMOVERS }, () => remover()), sampler()]);

  expect(out.unexpected).toEqual([]);
  expect(out.violations).toEqual([]);
  const left = await stored(db.owner, ids);
  // Whatever a retry reserved again survived; whatever was refused is gone; all else was removed.
  for (const id of out.reacquired) expect(left.has(id), `${id} was reacquired, then removed`).toBe(true);
  for (const id of out.expired) expect(left.has(id), `${id} was refused route-expired, but its route is there`).toBe(false);
  expect(out.removed).toBe(ids.length - left.size);
  const { rows } = await db.owner.query<{ action_id: string; fence_token: string; reserved: boolean }>(
    "SELECT action_id, fence_token, reserved FROM aip_route_assignments WHERE action_id = ANY($1)",
    [ids],
  );
  for (const row of rows) {
    expect(row.fence_token).toBe(routes.get(row.action_id)?.fence_token);
    expect(row.reserved).toBe(false);
  }
  // The race was run: both endings happened, and retention removed most of the routes.
  expect(out.reacquired.size).toBeGreaterThan(0);
  expect(out.expired.size).toBeGreaterThan(0);
  expect(out.removed).toBeGreaterThan(ROUTES / 2);
  expect(out.checks).toBeGreaterThan(0);
}

it(`retention removes only released routes while ${RETRIERS} clients retry them, over ${ROUNDS} rounds`, async () => {
  const { registry } = db.registryWithPool(RETRIERS + REMOVERS + 2);
  for (let r = 0; r < ROUNDS; r++) await round(registry, r);
  await expectHealthy(db.registry);
  expect(Object.values(await counters(db.owner)).every((active) => active === 0)).toBe(true);
  for (const replicaId of Object.values(fleet.replica)) expect((await replicaState(db.owner, replicaId)).active_assignments).toBe(0);
}, 240_000);
