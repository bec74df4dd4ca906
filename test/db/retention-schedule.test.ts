import { beforeAll, describe, expect, it } from "vitest";
import { createPgPool, pgExecutor } from "../../src/db/pg.js";
import { planNextCycle } from "../../src/maintenance/cycle.js";
import { createMaintenanceTimer } from "../../src/maintenance/timer.js";
import { ROUTE_RETENTION_PAUSE_MS } from "../../src/limits.js";
import { Registry } from "../../src/registry/registry.js";
import { RetentionSchedule, retentionSettings } from "../../src/maintenance/route-retention.js";
import { useTestDatabase } from "../support/database.js";
import { useWiredRegistries } from "../support/wired.js";
import { expectHealthy } from "../support/invariants.js";
import { DAY_MS, settledDaysAgo } from "../support/retention.js";
import { publishRoutingFleet, type RoutingFleet } from "../support/routing-fleet.js";
import { MINUTE, SimulatedClock } from "../support/simulated-clock.js";

const db = useTestDatabase();
const wired = useWiredRegistries(db);
let fleet: RoutingFleet;
beforeAll(async () => {
  fleet = await publishRoutingFleet(db.registry, {
    prefix: "rsch",
    tenant: "tenant-rsch",
    instances: [{ name: "i", replicas: [{ name: "r", capacity: 1000 }] }],
  });
});

let n = 0;
/** Released routes whose last settlement lies `days` in the past. */
async function released(count: number, days: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < count; i++) {
    const { assignment } = await db.registry.resolveRoute(`act_rsch_${++n}`, fleet.tenant, fleet.capability);
    await db.registry.settleRoute(assignment.action_id, fleet.tenant, assignment, "completed");
    ids.push(assignment.action_id);
  }
  await settledDaysAgo(db.owner, ids, days);
  return ids;
}

async function drain(): Promise<void> {
  while ((await db.registry.removeSettledRoutes(30, false, 10_000)).removed > 0);
}

const settings = { days: 30, requireExport: false, batchSize: 2, maxBatches: 2 };

describe("the retention schedule", () => {
  it("runs when it does not know, then not before the pause, nor before the oldest route is due", async () => {
    await drain();
    const [halfDay] = await released(1, 29.5); // due in half a day
    const schedule = new RetentionSchedule(settings);
    let now = Date.now();
    const first = await schedule.runIfDue(db.registry, () => now);
    expect(first).toMatchObject({ removed: 0, batches: 1, backlog: false });
    // Half a day away is later than the 15-minute pause: that is when it is due.
    const due = Date.parse(first?.next_due as string);
    expect(schedule.nextRunAt).toBe(due);
    expect(due - now).toBeGreaterThan(0.45 * DAY_MS);
    now += ROUTE_RETENTION_PAUSE_MS + MINUTE;
    expect(await schedule.runIfDue(db.registry, () => now)).toBeUndefined();

    // Nothing released at all: again after the pause.
    await settledDaysAgo(db.owner, [halfDay as string], 31);
    await drain();
    const empty = new RetentionSchedule(settings);
    now = Date.now();
    expect(await empty.runIfDue(db.registry, () => now)).toMatchObject({ removed: 0, next_due: null });
    expect(empty.nextRunAt).toBe(now + ROUTE_RETENTION_PAUSE_MS);
  });

  it("removes at most maxBatches batches, reports a backlog, and is due again at once until it is drained", async () => {
    await drain();
    await released(7, 31);
    const schedule = new RetentionSchedule(settings);
    const now = Date.now();
    const first = await schedule.runIfDue(db.registry, () => now);
    expect(first).toMatchObject({ removed: 4, batches: 2, backlog: true });
    expect(schedule.nextRunAt).toBe(now);
    // A backlog brings the next maintenance cycle forward to the minimum interval.
    expect(planNextCycle({ expired: 0, next_deadline: null, retention: first! }, now, 1000, 0)).toEqual({ at: now + 1000, stalled: 0 });
    expect(planNextCycle({ expired: 0, next_deadline: new Date(now + 60_000).toISOString(), retention: first! }, now, 1000, 0)).toEqual({
      at: now + 1000,
      stalled: 0,
    });
    const second = await schedule.runIfDue(db.registry, () => now + 1000);
    expect(second).toMatchObject({ removed: 3, batches: 2, backlog: false });
    expect(schedule.nextRunAt).toBe(now + 1000 + ROUTE_RETENTION_PAUSE_MS);
    await expectHealthy(db.registry);
  });

  it("pauses after a failure, so lease maintenance goes on without it", async () => {
    // A role that may not call the retention function: the database refuses every run.
    const pool = wired.track(createPgPool(db.controlUrl, { max: 1 }));
    const control = new Registry({ data: pgExecutor(pool) });
    const schedule = new RetentionSchedule(settings);
    const now = Date.now();
    await expect(schedule.runIfDue(control, () => now)).rejects.toThrow(/route retention failed \(next attempt in 900 s\)/);
    expect(schedule.nextRunAt).toBe(now + ROUTE_RETENTION_PAUSE_MS);
    expect(await schedule.runIfDue(control, () => now + MINUTE)).toBeUndefined();
  });

  it("comes from the configuration", () => {
    expect(retentionSettings({ ROUTE_RETENTION_DAYS: 7, ROUTE_RETENTION_REQUIRE_EXPORT: true, LEASE_EXPIRY_MAX_BATCHES: 3 })).toEqual({
      days: 7,
      requireExport: true,
      batchSize: 500,
      maxBatches: 3,
    });
    expect(() => new RetentionSchedule({ ...settings, days: -1 })).toThrow(RangeError);
  });

  it("with ROUTE_RETENTION_DAYS=0 states the policy once, keeping every route, and never runs a batch", async () => {
    const kept = await released(1, 400);
    const schedule = new RetentionSchedule(retentionSettings({ ROUTE_RETENTION_DAYS: 0, ROUTE_RETENTION_REQUIRE_EXPORT: false, LEASE_EXPIRY_MAX_BATCHES: 8 }));
    const registry = wired.registry();
    wired.proxy.stats.reset();
    expect(await schedule.runIfDue(registry, Date.now)).toBeUndefined();
    expect(await schedule.runIfDue(registry, () => Date.now() + 365 * DAY_MS)).toBeUndefined();
    expect(wired.proxy.stats.log.map((s) => s.text)).toEqual([expect.stringContaining("aip_route_retention_policy")]);
    expect(schedule.nextRunAt).toBe(Number.POSITIVE_INFINITY);
    // The database keeps every route now, whoever asks for a batch; only the owner relaxes it.
    expect(await db.registry.removeSettledRoutes(30, false, 10)).toMatchObject({ removed: 0, retention_days: 0 });
    expect((await db.owner.query("SELECT 1 FROM aip_route_assignments WHERE action_id = $1", kept)).rowCount).toBe(1);
    await db.owner.query("SELECT aip_set_route_retention_policy(30, NULL)");
    await drain();
  });
});

describe("the Node deadline timer with route retention, statements counted on the wire", () => {
  it("runs retention in its start-up cycle, drains a backlog cycle after cycle, then sends nothing while idle", async () => {
    await drain();
    await released(5, 31);
    // No lease is live (the fleet's replica goes offline): only retention can schedule a cycle.
    await db.owner.query("UPDATE aip_connector_replicas SET lease_expires_at = aip_now() WHERE status <> 'offline'");
    expect((await db.registry.expireLeases(100)).next_deadline).toBeNull();
    const clock = new SimulatedClock(Date.now());
    const timer = createMaintenanceTimer(wired.registry(), { minIntervalMs: 1000, clock, retention: new RetentionSchedule(settings) });
    wired.proxy.stats.reset();
    timer.start();
    await timer.settled();
    // Lease expiry, then two full retention batches: a backlog, so a cycle is due after the interval.
    expect(wired.proxy.stats.log.map((s) => s.text)).toEqual([
      expect.stringContaining("aip_expire_leases"),
      expect.stringContaining("aip_remove_settled_routes"),
      expect.stringContaining("aip_remove_settled_routes"),
    ]);
    expect(timer.nextCycleAt).toBe(clock.t + 1000);
    wired.proxy.stats.reset();
    await clock.advanceTo(clock.t + 1000, () => timer.settled());
    // The rest: one short batch; caught up, and no lease is live: nothing is scheduled.
    expect(wired.proxy.stats.log.map((s) => s.text)).toEqual([
      expect.stringContaining("aip_expire_leases"),
      expect.stringContaining("aip_remove_settled_routes"),
    ]);
    expect(timer.nextCycleAt).toBeNull();
    wired.proxy.stats.reset();
    const start = clock.t;
    for (let minute = 1; minute <= 60; minute++) await clock.advanceTo(start + minute * MINUTE, () => timer.settled());
    expect(wired.proxy.stats.statements()).toBe(0);
    await timer.stop();
    await expectHealthy(db.registry);
  });
});
