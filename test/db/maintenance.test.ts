/**
 * src/maintenance.ts against the real database: a cycle's bounds (it stops at the first short
 * batch and after maxBatches), the loop (it runs cycles, reports failures and recovers), and the
 * delay rules (interval, doubling backoff capped at 30 s, ±20% jitter).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runLeaseMaintenance, type MaintenanceCycle } from "../../src/maintenance.js";
import { jittered, MAX_BACKOFF_MS, nextDelay, startMaintenanceLoop } from "../../src/maintenance-loop.js";
import { pgExecutor } from "../../src/db/pg.js";
import { Registry } from "../../src/registry/registry.js";
import { RegistryError } from "../../src/registry/errors.js";
import { createTestDatabase, type TestDatabase } from "../support/database.js";
import { lifecycle, provisionFleet, replicaRow, waitForLeaseEnd } from "../support/replicas.js";
import pg from "pg";

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db?.close());

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
  it("stops at the first short batch, and after maxBatches full ones", async () => {
    // Both backlogs share one lease wait; they are drained one after the other.
    const replicas = await expiredReplicas("cyc", 12);

    const calls: number[] = [];
    expect(await runLeaseMaintenance(recording(calls), { batchSize: 3, maxBatches: 2 })).toEqual({ expired: 6, released: 0, batches: 2 });
    expect(calls).toEqual([3, 3]);
    expect((await db.registry.fleetStatus()).expired_leases).toBe(6);

    calls.length = 0;
    expect(await runLeaseMaintenance(recording(calls), { batchSize: 4, maxBatches: 10 })).toEqual({ expired: 6, released: 0, batches: 2 });
    expect(calls).toEqual([4, 2]);

    calls.length = 0;
    expect(await runLeaseMaintenance(recording(calls), { batchSize: 4, maxBatches: 10 })).toEqual({ expired: 0, released: 0, batches: 1 });
    expect(calls).toEqual([0]);
    for (const id of replicas) expect((await replicaRow(db, id)).status).toBe("offline");
  });

  it("counts released routes and refuses bounds the database would refuse", async () => {
    const fleet = await provisionFleet(db.registry, { prefix: "rel" });
    const id = fleet.replicas[0]!;
    await lifecycle(db.registry, id, "register", { lease_ttl_ms: 1000 });
    for (let n = 0; n < 2; n++) await db.registry.resolveRoute(`act_rel_${n}`, fleet.tenants[0]!.tenant, fleet.capability);
    await waitForLeaseEnd(db, [id]);
    expect(await runLeaseMaintenance(db.registry)).toEqual({ expired: 1, released: 2, batches: 1 });

    for (const bounds of [{ batchSize: 0, maxBatches: 1 }, { batchSize: 10_001, maxBatches: 1 }, { batchSize: 1.5, maxBatches: 1 }, { batchSize: 1, maxBatches: 0 }]) {
      await expect(runLeaseMaintenance(db.registry, bounds)).rejects.toThrow(RangeError);
    }
  });
});

describe("startMaintenanceLoop", () => {
  it("runs cycles, reports a failing database and recovers when it answers again", async () => {
    const replicas = await expiredReplicas("loop", 2);
    // The control role may not run lease expiry: a real refusal by the database.
    const controlPool = new pg.Pool({ connectionString: db.controlUrl, max: 1 });
    const refused = new Registry({ data: pgExecutor(controlPool) });
    let attempts = 0;
    const flaky = {
      expireLeases: (limit: number) => (++attempts <= 2 ? refused : db.registry).expireLeases(limit),
    } as Registry;
    const errors: unknown[] = [];
    const cycles: MaintenanceCycle[] = [];
    const loop = startMaintenanceLoop(flaky, { intervalMs: 10, onError: (e) => errors.push(e), onCycle: (c) => cycles.push(c) });
    try {
      const deadline = Date.now() + 5000;
      while (cycles.length < 2 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
    } finally {
      await loop.stop();
      await controlPool.end();
    }
    expect(errors).toHaveLength(2);
    expect(errors.every((e) => e instanceof RegistryError && e.code === "forbidden")).toBe(true);
    expect(cycles[0]).toEqual({ expired: 2, released: 0, batches: 1 });
    expect(cycles[1]).toEqual({ expired: 0, released: 0, batches: 1 });
    for (const id of replicas) expect((await replicaRow(db, id)).status).toBe("offline");
    // Stopped means stopped: no cycle runs afterwards.
    const seen = attempts;
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(attempts).toBe(seen);
  });

  it("waits the interval after a success and doubles after failures, capped at 30 s but never below the interval", () => {
    expect(nextDelay(1000, 1000, false)).toBe(1000);
    expect(nextDelay(1000, 16_000, false)).toBe(1000);
    const delays = [1000];
    for (let n = 0; n < 7; n++) delays.push(nextDelay(1000, delays.at(-1)!, true));
    expect(delays).toEqual([1000, 2000, 4000, 8000, 16_000, 30_000, 30_000, 30_000]);
    expect(MAX_BACKOFF_MS).toBe(30_000);
    expect(nextDelay(60_000, 60_000, true)).toBe(60_000);
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
