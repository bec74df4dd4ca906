import { describe, expect, it } from "vitest";
import { createPgPool, pgExecutor } from "../../src/db/pg.js";
import { backoff, MAX_BACKOFF_MS, planNextCycle, runLeaseMaintenance, type MaintenanceCycle } from "../../src/maintenance/cycle.js";
import { createMaintenanceTimer, jittered } from "../../src/maintenance/timer.js";
import { RegistryError } from "../../src/registry/errors.js";
import { Registry } from "../../src/registry/registry.js";
import { useTestDatabase } from "../support/database.js";
import { useWiredRegistries } from "../support/wired.js";
import { counters, lifecycle, provisionFleet, replicaRow, shortenLeases, waitForLeaseEnd } from "../support/replicas.js";
import { MINUTE, SimulatedClock } from "../support/simulated-clock.js";

const db = useTestDatabase();
const wired = useWiredRegistries(db);
/** The real registry, recording what each aip_expire_leases call expired. */
function recording(calls: number[]): Registry {
  return {
    async expireLeases(limit: number) {
      const result = await db.registry.expireLeases(limit);
      calls.push(result.expired);
      return result;
    },
  } as Registry;
}

/** Provisions and registers `n` replicas with 1 s leases and waits until they have ended. */
async function expiredReplicas(prefix: string, n: number): Promise<string[]> {
  const fleet = await provisionFleet(db.registry, { prefix, replicasPerTenant: n });
  for (const id of fleet.replicas) await lifecycle(db.registry, id, "register", { lease_ttl_ms: 1000 });
  await waitForLeaseEnd(db, fleet.replicas);
  return fleet.replicas;
}

describe("runLeaseMaintenance", () => {
  it("stops at the first short batch, and after maxBatches full ones, reporting the last batch's deadline", async () => {
    // Both backlogs share one lease wait; they are drained one after the other.
    const replicas = await expiredReplicas("cyc", 12);

    const calls: number[] = [];
    const first = await runLeaseMaintenance(recording(calls), { batchSize: 3, maxBatches: 2 });
    expect(first).toMatchObject({ expired: 6, released: 0, batches: 2 });
    // A backlog remains: the earliest live deadline is in the past.
    expect(Date.parse(first.next_deadline as string)).toBeLessThan(Date.now());
    expect(calls).toEqual([3, 3]);
    expect((await db.registry.fleetStatus()).expired_leases).toBe(6);

    calls.length = 0;
    expect(await runLeaseMaintenance(recording(calls), { batchSize: 4, maxBatches: 10 })).toEqual({ expired: 6, released: 0, batches: 2, next_deadline: null });
    expect(calls).toEqual([4, 2]);

    calls.length = 0;
    expect(await runLeaseMaintenance(recording(calls), { batchSize: 4, maxBatches: 10 })).toEqual({ expired: 0, released: 0, batches: 1, next_deadline: null });
    expect(calls).toEqual([0]);
    for (const id of replicas) expect((await replicaRow(db, id)).status).toBe("offline");
  });

  it("counts released routes and refuses bounds the database would refuse", async () => {
    const fleet = await provisionFleet(db.registry, { prefix: "rel" });
    const id = fleet.replicas[0]!;
    await lifecycle(db.registry, id, "register", { lease_ttl_ms: 60_000 });
    for (let n = 0; n < 2; n++) await db.registry.resolveRoute(`act_rel_${n}`, fleet.tenants[0]!.tenant, fleet.capability);
    await shortenLeases(db, [id]);
    await waitForLeaseEnd(db, [id]);
    expect(await runLeaseMaintenance(db.registry)).toEqual({ expired: 1, released: 2, batches: 1, next_deadline: null });

    for (const bounds of [
      { batchSize: 0, maxBatches: 1 },
      { batchSize: 10_001, maxBatches: 1 },
      { batchSize: 1.5, maxBatches: 1 },
      { batchSize: 1, maxBatches: 0 },
    ]) {
      await expect(runLeaseMaintenance(db.registry, bounds)).rejects.toThrow(RangeError);
    }
  });
});

describe("planNextCycle", () => {
  const now = Date.parse("2026-12-01T10:00:00.000Z");
  const at = (ms: number) => new Date(now + ms).toISOString();

  it("plans nothing when no lease is live, and the deadline itself when it lies ahead", () => {
    expect(planNextCycle({ expired: 3, next_deadline: null }, now, 1000, 4)).toEqual({ at: null, stalled: 0 });
    expect(planNextCycle({ expired: 0, next_deadline: at(42_000) }, now, 1000, 0)).toEqual({ at: now + 42_000, stalled: 0 });
  });

  it("never plans sooner than the minimum interval", () => {
    expect(planNextCycle({ expired: 0, next_deadline: at(200) }, now, 1000, 0)).toEqual({ at: now + 1000, stalled: 0 });
  });

  it("continues a backlog after the interval while cycles make progress, and backs off while one is stuck", () => {
    expect(planNextCycle({ expired: 4000, next_deadline: at(-5000) }, now, 1000, 3)).toEqual({ at: now + 1000, stalled: 0 });
    const stuck: number[] = [];
    let stalled = 0;
    for (let n = 0; n < 7; n++) {
      const next = planNextCycle({ expired: 0, next_deadline: at(-10) }, now, 1000, stalled);
      stalled = next.stalled;
      stuck.push((next.at as number) - now);
    }
    expect(stuck).toEqual([2000, 4000, 8000, 16_000, 30_000, 30_000, 30_000]);
  });

  it("backs off doubling from the interval, capped at 30 s but never below the interval", () => {
    expect([1, 2, 3, 4, 5, 6, 60].map((n) => backoff(1000, n))).toEqual([2000, 4000, 8000, 16_000, 30_000, 30_000, 30_000]);
    expect(MAX_BACKOFF_MS).toBe(30_000);
    expect(backoff(60_000, 3)).toBe(60_000);
  });

  it("jitters delays uniformly within ±20%", () => {
    expect(jittered(1000, () => 0)).toBe(800);
    expect(jittered(1000, () => 0.5)).toBe(1000);
    expect(jittered(1000, () => 0.999999)).toBeCloseTo(1200, 2);
    for (let n = 0; n < 1000; n++) {
      const d = jittered(1000);
      expect(d).toBeGreaterThanOrEqual(800);
      expect(d).toBeLessThanOrEqual(1200);
    }
  });
});

describe("the Node deadline timer, statements counted on the wire", () => {
  it("sends nothing for ten simulated minutes while no lease is live", async () => {
    const clock = new SimulatedClock(Date.now());
    const timer = createMaintenanceTimer(wired.registry(), { minIntervalMs: 1000, clock });
    wired.proxy.stats.reset();
    timer.start();
    await timer.settled();
    // The start-up cycle: one statement, which finds nothing live.
    expect(wired.proxy.stats.statements()).toBe(1);
    expect(wired.proxy.stats.log.map((s) => s.text)).toEqual([expect.stringContaining("aip_expire_leases")]);
    expect(timer.nextCycleAt).toBeNull();
    // 12 simulated minutes, one tick a second: the old loop ran ~720 cycles here.
    const start = clock.t;
    for (let tick = 1; tick <= 720; tick++) expect(await clock.advanceTo(start + tick * 1000, () => timer.settled())).toBe(0);
    expect(wired.proxy.stats.statements()).toBe(1);
    expect(clock.pending).toEqual([]);
    await timer.stop();
  });

  it("runs cycles only at or after lease deadlines, returns the capacity, then sends nothing again", async () => {
    const fleet = await provisionFleet(db.registry, { prefix: "idle", replicasPerTenant: 2 });
    const [early, late] = fleet.replicas as [string, string];
    const clock = new SimulatedClock(Date.now());
    const timer = createMaintenanceTimer(wired.registry(), { minIntervalMs: 100, clock });
    timer.start();
    await timer.settled();
    expect(timer.nextCycleAt).toBeNull();

    // Hosts register, a route is reserved, and the hosts' last heartbeats ask for 1 s and 2 s
    // leases (the timer learns every deadline as the server would, from the answers it serves).
    wired.proxy.stats.reset();
    for (const id of [early, late]) timer.note((await lifecycle(db.registry, id, "register", { lease_ttl_ms: 60_000 })).lease_expires_at as string);
    const route = await db.registry.resolveRoute("act_idle_1", fleet.tenants[0]!.tenant, fleet.capability);
    expect(route.assignment.replica_id).toBe(early);
    const first = await lifecycle(db.registry, early, "heartbeat", { previous_sequence: 1, lease_ttl_ms: 1000 });
    const second = await lifecycle(db.registry, late, "heartbeat", { previous_sequence: 1, lease_ttl_ms: 2000 });
    timer.note(first.lease_expires_at as string);
    timer.note(second.lease_expires_at as string);
    expect(timer.nextCycleAt).toBe(Date.parse(first.lease_expires_at as string));
    expect(wired.proxy.stats.statements()).toBe(0);

    // Time runs (the simulated clock follows the real one: the database's clock ends the leases).
    const lastDeadline = Date.parse(second.lease_expires_at as string);
    while ((await replicaRow(db, late)).status !== "offline" || (await replicaRow(db, early)).status !== "offline") {
      if (Date.now() > lastDeadline + 10_000) throw new Error("the leases were not expired");
      await clock.advanceTo(Date.now(), () => timer.settled());
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const log = wired.proxy.stats.log;
    expect(log.length).toBeGreaterThanOrEqual(1);
    expect(log.length).toBeLessThanOrEqual(3);
    for (const statement of log) {
      expect(statement.text).toContain("aip_expire_leases");
      expect(statement.at).toBeGreaterThanOrEqual(Date.parse(first.lease_expires_at as string));
    }
    // Capacity is back and counted: the route settled as lease_expired, nothing reserved.
    expect((await replicaRow(db, early)).active_assignments).toBe(0);
    expect(Object.values(await counters(db)).every((active) => active === 0)).toBe(true);
    expect((await db.registry.getRoute("act_idle_1", fleet.tenants[0]!.tenant))?.last_settlement).toBe("lease_expired");
    expect((await db.registry.fleetStatus()).expired_leases).toBe(0);

    // No lease is live: no timer, and ten more simulated minutes send nothing.
    expect(timer.nextCycleAt).toBeNull();
    const sent = wired.proxy.stats.statements();
    for (let minute = 1; minute <= 10; minute++) await clock.advanceTo(clock.t + minute * MINUTE, () => timer.settled());
    expect(wired.proxy.stats.statements()).toBe(sent);
    await timer.stop();
  });

  it("learns the database's earliest deadline at start-up, and a cycle that finds an extended lease moves to its new end", async () => {
    const fleet = await provisionFleet(db.registry, { prefix: "learn" });
    const id = fleet.replicas[0]!;
    const registered = await lifecycle(db.registry, id, "register", { lease_ttl_ms: 60_000 });
    const clock = new SimulatedClock(Date.now());
    // Another process served the register: this timer knows it only from the database.
    const timer = createMaintenanceTimer(wired.registry(), { minIntervalMs: 1000, clock });
    timer.start();
    await timer.settled();
    expect(timer.nextCycleAt).toBe(Date.parse(registered.lease_expires_at as string));

    // The host extends its lease (through the other process); the timer fires at the old end,
    // finds nothing to expire and follows the new end.
    const beat = await lifecycle(db.registry, id, "heartbeat", { previous_sequence: registered.sequence, lease_ttl_ms: 120_000 });
    wired.proxy.stats.reset();
    // Fire the due timer as if the old end had come (the database still holds a live lease).
    await clock.advanceTo(Date.parse(registered.lease_expires_at as string), () => timer.settled());
    expect(wired.proxy.stats.statements()).toBe(1);
    expect(timer.nextCycleAt).toBe(Date.parse(beat.lease_expires_at as string));
    expect((await replicaRow(db, id)).status).toBe("ready");
    await lifecycle(db.registry, id, "offline", { previous_sequence: beat.sequence });
    await timer.stop();
  });

  it("keeps a deadline learned while a cycle runs, even when the cycle saw nothing live", async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const held = {
      async expireLeases(limit: number) {
        const result = await db.registry.expireLeases(limit);
        await gate;
        return result;
      },
    } as Registry;
    const clock = new SimulatedClock(Date.now());
    const timer = createMaintenanceTimer(held, { minIntervalMs: 1000, clock });
    timer.start();
    const learned = clock.t + 5000;
    timer.note(learned);
    release();
    await timer.settled();
    expect(timer.nextCycleAt).toBe(learned);
    // An earlier deadline moves the timer forward; a later one leaves it.
    timer.note(learned - 2000);
    expect(timer.nextCycleAt).toBe(learned - 2000);
    timer.note(learned + 2000);
    expect(timer.nextCycleAt).toBe(learned - 2000);
    await timer.stop();
    expect(clock.pending).toEqual([]);
  });

  it("reports a failing database, backs off and recovers when it answers again", async () => {
    const replicas = await expiredReplicas("loop", 2);
    // The control role may not run lease expiry: a real refusal by the database.
    // createPgPool: its idle-client error listener keeps a connection the teardown's DROP DATABASE
    // terminates (pool.end() resolves before its clients have closed) from crashing the run.
    const controlPool = wired.track(createPgPool(db.controlUrl, { max: 1 }));
    const refused = new Registry({ data: pgExecutor(controlPool) });
    let attempts = 0;
    const flaky = {
      expireLeases: (limit: number) => (++attempts <= 2 ? refused : db.registry).expireLeases(limit),
    } as Registry;
    const errors: unknown[] = [];
    const cycles: MaintenanceCycle[] = [];
    const clock = new SimulatedClock(Date.now());
    const timer = createMaintenanceTimer(flaky, { minIntervalMs: 1000, clock, onError: (e) => errors.push(e), onCycle: (c) => cycles.push(c) });
    timer.start();
    await timer.settled();
    // Failed: retried after the backoff (2 s ±20 %), then 4 s ±20 %.
    const retry = timer.nextCycleAt as number;
    expect(retry - clock.t).toBeGreaterThanOrEqual(1600);
    expect(retry - clock.t).toBeLessThanOrEqual(2400);
    await clock.advanceTo(retry, () => timer.settled());
    expect((timer.nextCycleAt as number) - clock.t).toBeGreaterThanOrEqual(3200);
    await clock.advanceTo(clock.t + 10_000, () => timer.settled());
    expect(errors).toHaveLength(2);
    expect(errors.every((e) => e instanceof RegistryError && e.code === "forbidden")).toBe(true);
    expect(cycles).toEqual([{ expired: 2, released: 0, batches: 1, next_deadline: null }]);
    // What /metrics reports: every run, the failed ones, and what the good one did, when.
    const { lastSuccessAt, ...counts } = timer.stats;
    expect(counts).toEqual({ runs: 3, failures: 2, expired: 2, released: 0 });
    expect(lastSuccessAt).toBeGreaterThan(retry);
    expect(lastSuccessAt).toBeLessThanOrEqual(clock.t);
    for (const id of replicas) expect((await replicaRow(db, id)).status).toBe("offline");
    // Nothing live after the recovery: no timer; stopped means stopped.
    expect(timer.nextCycleAt).toBeNull();
    await timer.stop();
    timer.note(clock.t + 1000);
    expect(clock.pending).toEqual([]);
  });
});
