/**
 * Lease maintenance under real concurrency: several aip_expire_leases runs on separate
 * connections race each other and the gateways' settlements and retries, the hosts' offline
 * transitions and takeover registrations. Nothing may be expired or released twice: every
 * replica moves exactly as often as it should, every counter equals the reservations holding it,
 * and after the last settlement every counter is back at zero.
 */
import { afterAll, expect, it } from "vitest";
import type pg from "pg";
import { createPgPool, pgExecutor } from "../../src/db/pg.js";
import type { RegistryError } from "../../src/registry/errors.js";
import { Registry } from "../../src/registry/registry.js";
import type { RouteAssignment } from "../../src/schemas.js";
import { useTestDatabase } from "../support/database.js";
import { counters, lifecycle, provisionFleet, replicaRow, waitForLeaseEnd } from "../support/replicas.js";

const db = useTestDatabase();
const pools: pg.Pool[] = [];
afterAll(async () => {
  await Promise.all(pools.map((p) => p.end()));
});

const TENANTS = ["tenant-c0", "tenant-c1", "tenant-c2", "tenant-c3"];
const ROUTES_PER_TENANT = 60;
const MAINTENANCE_RUNS = 8;

const codeOf = (e: unknown) => (e as RegistryError).code ?? String(e);

it("parallel maintenance runs never double-expire or double-release, whatever races them", async () => {
  // Our own pool: its queue may hold a hundred requests, which on a busy machine can wait longer
  // than the default 5 s connection timeout.
  const pool = createPgPool(db.dataUrl, { max: 24, connectionTimeoutMs: 60_000 });
  pools.push(pool);
  const registry = new Registry({ data: pgExecutor(pool) });
  const fleet = await provisionFleet(db.registry, { prefix: "cc", tenants: TENANTS, replicasPerTenant: 10, capacity: 20 });
  await Promise.all(fleet.replicas.map((id) => lifecycle(registry, id, "register", { lease_ttl_ms: 60_000 })));

  const routes: RouteAssignment[] = await Promise.all(
    TENANTS.flatMap((tenant) =>
      Array.from({ length: ROUTES_PER_TENANT }, async (_, n) => (await registry.resolveRoute(`act_${tenant}_${n}`, tenant, fleet.capability)).assignment),
    ),
  );
  const total = routes.length;
  // Every 6th route was already completed before the leases end.
  const preSettled = routes.filter((_, n) => n % 6 === 0);
  await Promise.all(preSettled.map((r) => registry.settleRoute(r.action_id, r.tenant_id, r, "completed")));
  const reserved = routes.filter((_, n) => n % 6 !== 0);
  const toSettle = reserved.filter((_, n) => n % 5 === 0);
  const toRetry = reserved.filter((_, n) => n % 5 === 1);

  // Shorten every lease to 1 s (sequence 1 -> 2) and let them all end.
  await Promise.all(fleet.replicas.map((id) => lifecycle(registry, id, "heartbeat", { previous_sequence: 1, lease_ttl_ms: 1000 })));
  await waitForLeaseEnd(db, fleet.replicas);
  const goingOffline = fleet.replicas.filter((_, n) => n % 8 === 3);
  const takenOver = fleet.replicas.filter((_, n) => n % 8 === 5);

  const unexpected: string[] = [];
  const runs: { expired: number; released: number }[] = [];
  const maintain = async () => {
    for (;;) {
      const result = await registry.expireLeases(2).catch((e: unknown) => {
        unexpected.push(`expire: ${codeOf(e)} ${String(e)}`);
        return { expired: 0, released: 0 };
      });
      runs.push(result);
      if (result.expired === 0) return;
    }
  };
  const settledReleased: boolean[] = [];
  const settle = (r: RouteAssignment) => () =>
    registry.settleRoute(r.action_id, r.tenant_id, r, "completed").then(
      (s) => void settledReleased.push(s.released),
      (e: unknown) => void unexpected.push(`settle: ${codeOf(e)}`),
    );
  // A retry of a still-reserved route returns it; once maintenance released it, reacquiring an
  // expired replica is refused, unless a takeover made that same replica live again. Always the
  // same route: nothing else is acceptable.
  let reacquired = 0;
  const retry = (r: RouteAssignment) => () =>
    registry.resolveRoute(r.action_id, r.tenant_id, r.capability_id).then(
      (answer) => {
        const allowed = answer.outcome === "existing" || (answer.outcome === "reacquired" && takenOver.includes(r.replica_id));
        if (!allowed || JSON.stringify(answer.assignment) !== JSON.stringify(r)) unexpected.push(`retry: ${answer.outcome}`);
        if (answer.outcome === "reacquired") reacquired++;
      },
      (e: unknown) => {
        if (codeOf(e) !== "replica-unavailable") unexpected.push(`retry: ${codeOf(e)}`);
      },
    );
  const offlineWon = new Set<string>();
  const goOffline = (id: string) => () =>
    lifecycle(registry, id, "offline", { previous_sequence: 2 }).then(
      () => void offlineWon.add(id),
      (e: unknown) => void (codeOf(e) === "conflict" || unexpected.push(`offline: ${codeOf(e)}`)),
    );
  const takeOver = (id: string) => () =>
    lifecycle(registry, id, "register", { lease_ttl_ms: 60_000 }).then(
      () => undefined,
      (e: unknown) => void unexpected.push(`register: ${codeOf(e)}`),
    );
  // Issue everything in random order, so the pool's queue interleaves them differently each run.
  const tasks = [
    ...Array.from({ length: MAINTENANCE_RUNS }, () => maintain),
    ...toSettle.map(settle),
    ...toRetry.map(retry),
    ...goingOffline.map(goOffline),
    ...takenOver.map(takeOver),
  ];
  for (let n = tasks.length - 1; n > 0; n--) {
    const k = Math.floor(Math.random() * (n + 1));
    [tasks[n], tasks[k]] = [tasks[k]!, tasks[n]!];
  }
  await Promise.all(tasks.map((task) => task()));
  expect(unexpected).toEqual([]);
  // A run that saw an empty batch while others held the rest stopped early; nothing may remain.
  for (;;) {
    const result = await registry.expireLeases(100);
    runs.push(result);
    if (result.expired === 0) break;
  }

  // Every replica moved exactly as often as it should: expiry or offline once, never both, never
  // twice; a takeover registered once, after or instead of its expiry.
  const expiredByMaintenance = runs.reduce((sum, r) => sum + r.expired, 0);
  let expectedExpired = 0;
  for (const id of fleet.replicas) {
    const row = await replicaRow(db, id);
    const moves = row.health_revision - 2;
    if (takenOver.includes(id)) {
      expect(row.status).toBe("ready");
      expect([1, 2]).toContain(moves);
      expectedExpired += moves - 1;
    } else {
      expect(row.status).toBe("offline");
      expect(moves).toBe(1);
      expectedExpired += offlineWon.has(id) ? 0 : 1;
    }
  }
  expect(expiredByMaintenance).toBe(expectedExpired);

  // Counters equal the reservations still held, and each route was released by exactly one party.
  expect(await db.registry.checkInvariants()).toMatchObject({ healthy: true, violations: [] });
  const { rows } = await db.owner.query<{ last_settlement: string | null; reserved: boolean; n: number }>(
    "SELECT last_settlement, reserved, count(*)::int AS n FROM aip_route_assignments GROUP BY 1, 2",
  );
  const count = (settlement: string | null, isReserved: boolean) => rows.find((r) => r.last_settlement === settlement && r.reserved === isReserved)?.n ?? 0;
  const releasedBySettle = settledReleased.filter(Boolean).length;
  expect(settledReleased).toHaveLength(toSettle.length);
  const releasedByMaintenance = runs.reduce((sum, r) => sum + r.released, 0);
  expect(count("completed", false)).toBe(preSettled.length + releasedBySettle);
  // A released lease_expired route was released by the offline transition of its replica when that
  // won, otherwise by maintenance, which never touches a replica that went offline first. A route
  // maintenance released and a retry then reacquired on its taken-over replica is reserved again.
  const { rows: expiredRoutes } = await db.owner.query<{ replica_id: string; n: number }>(
    "SELECT replica_id, count(*)::int AS n FROM aip_route_assignments WHERE last_settlement = 'lease_expired' AND NOT reserved GROUP BY 1",
  );
  const releasedOutsideOffline = expiredRoutes.filter((r) => !offlineWon.has(r.replica_id)).reduce((sum, r) => sum + r.n, 0);
  expect(releasedOutsideOffline + reacquired).toBe(releasedByMaintenance);
  const stillReserved = await db.owner.query<{ action_id: string }>("SELECT action_id FROM aip_route_assignments WHERE reserved");
  expect(count("completed", false) + count("lease_expired", false) + stillReserved.rows.length).toBe(total);

  // What is still reserved (on taken-over replicas, or skipped while a retry held it) settles once.
  const byAction = new Map(routes.map((r) => [r.action_id, r]));
  const finals = await Promise.all(
    stillReserved.rows.map(({ action_id }) => {
      const r = byAction.get(action_id)!;
      return registry.settleRoute(r.action_id, r.tenant_id, r, "completed");
    }),
  );
  expect(finals.every((f) => f.released)).toBe(true);
  expect(Object.values(await counters(db)).every((n) => n === 0)).toBe(true);
  for (const id of fleet.replicas) expect((await replicaRow(db, id)).active_assignments).toBe(0);
  expect(await db.registry.checkInvariants()).toMatchObject({ healthy: true });
});
