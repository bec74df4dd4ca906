/**
 * Routing under real contention: every request below runs on its own pooled connection, fired
 * together with Promise.all after the pool is warm, so the database sees them concurrently.
 *
 * Claims: duplicate resolves converge on one route; admission is exact (min(N, C) against a
 * replica capacity or a counter, never overbooked); a noisy tenant cannot block another; retries
 * are bounded by the tenant retry budget; and a mixed storm of resolves, settlements, host
 * transitions and lease expiry never deadlocks or breaks the bookkeeping.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type pg from "pg";
import { RegistryError } from "../../src/registry/errors.js";
import type { Registry } from "../../src/registry/registry.js";
import type { RouteAssignment } from "../../src/schemas.js";
import { createPgPool } from "../../src/db/pg.js";
import { useTestDatabase } from "../support/database.js";
import { createTestApi } from "../support/http.js";
import { expectHealthy } from "../support/invariants.js";
import { counters, publishRoutingFleet, replicaState, replicaTransition, routeCount } from "../support/routing-fleet.js";

const PARALLEL = 50;

const db = useTestDatabase();
let registry: Registry;
let pool: pg.Pool;
/** Owner connections for the storm's direct reads (the shared owner pool has four). */
let owner: pg.Pool;

beforeAll(async () => {
  ({
    registry,
    pools: [pool],
  } = db.registryWithPool(PARALLEL) as { registry: Registry; pools: [pg.Pool] });
  owner = createPgPool(db.ownerUrl, { max: 10 });
});
afterAll(async () => {
  await owner?.end();
});
afterEach(() => expectHealthy(db.registry));

/**
 * Open every connection of the pool and run the resolver once on each (a refused new route:
 * compiles the function and plans its statements), so the requests that follow really run at
 * once instead of being staggered by each session's first-call cost.
 */
async function warm(): Promise<void> {
  const clients = await Promise.all(Array.from({ length: PARALLEL }, () => pool.connect()));
  await Promise.all(clients.map((client) => client.query("SELECT aip_resolve_route('act_warm', 'tenant-warm', 'cap:warm') AS r").catch(() => undefined)));
  for (const client of clients) client.release();
}

type Outcome = { ok: true; outcome: string; assignment: RouteAssignment } | { ok: false; code: string; extensions: Record<string, unknown> };

async function attempt(op: Promise<{ outcome: string; assignment: RouteAssignment }>): Promise<Outcome> {
  try {
    const result = await op;
    return { ok: true, ...result };
  } catch (error) {
    if (error instanceof RegistryError) return { ok: false, code: error.code, extensions: error.extensions };
    throw error;
  }
}

const refusedCode = async (op: Promise<unknown>) =>
  op.then(
    () => "admitted",
    (error: RegistryError) => error.code,
  );

const tally = (outcomes: Outcome[]) =>
  outcomes.reduce<Record<string, number>>((acc, o) => {
    const key = o.ok ? o.outcome : o.code === "storage" ? `storage ${String(o.extensions.sqlstate)}` : o.code;
    acc[key] = (acc[key] ?? 0) + 1;
    return acc;
  }, {});

async function settleAll(outcomes: Outcome[]) {
  await Promise.all(outcomes.map((o) => (o.ok ? registry.settleRoute(o.assignment.action_id, o.assignment.tenant_id, o.assignment, "cancelled") : undefined)));
}

it("50 concurrent resolves of one action create one route and all get it", async () => {
  const fleet = await publishRoutingFleet(db.registry, {
    prefix: "dup",
    tenant: "tenant-dup",
    instances: [{ name: "i", replicas: ["r1", "r2", "r3", "r4"].map((name) => ({ name, capacity: 100 })) }],
  });
  await warm();
  const outcomes = await Promise.all(
    Array.from({ length: PARALLEL }, (_, i) => attempt(registry.resolveRoute("act_dup_0001", fleet.tenant, fleet.capability, { zone: `z${i % 7}` }))),
  );
  expect(tally(outcomes)).toEqual({ created: 1, existing: PARALLEL - 1 });
  const bodies = new Set(outcomes.map((o) => (o.ok ? JSON.stringify(o.assignment) : o.code)));
  expect(bodies.size).toBe(1);
  expect(await routeCount(db.owner, fleet.tenant)).toBe(1);
  const held = await counters(db.owner);
  expect(held[`tenant:${fleet.tenant}`]).toBe(1);
  const active = await Promise.all(Object.values(fleet.replica).map(async (id) => (await replicaState(db.owner, id)).active_assignments));
  expect(active.reduce((a, b) => a + b, 0)).toBe(1);
});

describe("admission is exact under contention", () => {
  it("N new actions against replica capacity C admit exactly min(N, C), round after round", async () => {
    const fleet = await publishRoutingFleet(db.registry, {
      prefix: "cap",
      tenant: "tenant-cap",
      instances: [
        {
          name: "i1",
          priority: 1,
          replicas: [
            { name: "a", capacity: 4 },
            { name: "b", capacity: 5, zone: "zb" },
          ],
        },
        { name: "i2", priority: 2, replicas: [{ name: "c", capacity: 6, region: "us-east" }] },
      ],
    });
    const capacity = 15;
    for (const [round, n] of [
      [1, PARALLEL],
      [2, 40],
      [3, 12],
    ] as const) {
      await warm();
      const outcomes = await Promise.all(
        Array.from({ length: n }, (_, i) =>
          attempt(registry.resolveRoute(`act_cap_${round}_${i}`, fleet.tenant, fleet.capability, i % 2 ? { region: "us-east" } : { zone: "zb" })),
        ),
      );
      const admitted = Math.min(n, capacity);
      // Only two answers are possible: a route, or no replica. No deadlock, no lock timeout.
      expect(tally(outcomes)).toEqual(n > capacity ? { created: admitted, "replica-unavailable": n - admitted } : { created: admitted });
      const load = await Promise.all(["a", "b", "c"].map(async (name) => (await replicaState(db.owner, fleet.replica[name]!)).active_assignments));
      if (n > capacity) expect(load).toEqual([4, 5, 6]);
      await expectHealthy(db.registry);
      await settleAll(outcomes);
    }
  });

  for (const [scope, limitField] of [
    ["tenant", "max_tenant_in_flight"],
    ["instance", "max_instance_in_flight"],
  ] as const) {
    it(`N new actions against a ${scope} limit C admit exactly min(N, C) and never overbook the counter`, async () => {
      const limit = 11;
      const fleet = await publishRoutingFleet(db.registry, {
        prefix: `lim${scope}`,
        tenant: `tenant-lim${scope}`,
        policy: { max_tenant_in_flight: 1000, max_instance_in_flight: 1000, [limitField]: limit },
        instances: [
          {
            name: "i",
            replicas: [
              { name: "a", capacity: 100 },
              { name: "b", capacity: 100 },
            ],
          },
        ],
      });
      await warm();
      const outcomes = await Promise.all(
        Array.from({ length: PARALLEL }, (_, i) => attempt(registry.resolveRoute(`act_lim${scope}_${i}`, fleet.tenant, fleet.capability))),
      );
      expect(tally(outcomes)).toEqual({ created: limit, "capacity-exceeded": PARALLEL - limit });
      for (const o of outcomes) if (!o.ok) expect(o.extensions).toMatchObject({ scope, limit, retry_after_ms: 100 });
      const key = scope === "tenant" ? fleet.tenant : fleet.instance.i;
      expect((await counters(db.owner))[`${scope}:${key}`]).toBe(limit);
      expect(await routeCount(db.owner, fleet.tenant)).toBe(limit);
      await settleAll(outcomes);
      expect((await counters(db.owner))[`${scope}:${key}`]).toBe(0);
    });
  }
});

it("a noisy tenant at its limit never blocks another tenant", async () => {
  const noisy = await publishRoutingFleet(db.registry, {
    prefix: "noisy",
    tenant: "tenant-noisy",
    policy: { max_tenant_in_flight: 5 },
    instances: [{ name: "i", replicas: [{ name: "a", capacity: 100 }] }],
  });
  const quiet = await publishRoutingFleet(db.registry, {
    prefix: "quiet",
    tenant: "tenant-quiet",
    policy: { max_tenant_in_flight: 100 },
    instances: [{ name: "i", replicas: [{ name: "a", capacity: 100 }] }],
  });
  // Through the HTTP API (in process, on the parallel pool): statuses, problem members, headers.
  const api = createTestApi(registry);
  const [noisyToken, quietToken] = await Promise.all([api.tenantToken(noisy.tenant), api.tenantToken(quiet.tenant)]);
  const put = async (token: string, actionId: string, capability: string) => {
    const response = await api.call("PUT", `/v1/routes/${actionId}`, { token, body: { capability_id: capability } });
    return { status: response.status, retryAfter: response.headers.get("retry-after"), body: (await response.json()) as Record<string, any> };
  };
  await warm();
  const noisyCount = 40;
  const quietCount = PARALLEL - noisyCount;
  const [noisyAnswers, quietAnswers] = await Promise.all([
    Promise.all(Array.from({ length: noisyCount }, (_, i) => put(noisyToken, `act_noisy_${i}`, noisy.capability))),
    Promise.all(Array.from({ length: quietCount }, (_, i) => put(quietToken, `act_quiet_${i}`, quiet.capability))),
  ]);
  const statuses = (answers: { status: number }[]) =>
    answers.reduce<Record<number, number>>((acc, a) => {
      acc[a.status] = (acc[a.status] ?? 0) + 1;
      return acc;
    }, {});
  expect(statuses(noisyAnswers)).toEqual({ 201: 5, 429: noisyCount - 5 });
  for (const a of noisyAnswers.filter((x) => x.status === 429)) {
    expect(a.body).toMatchObject({ code: "capacity-exceeded", scope: "tenant", retry_after_ms: 100 });
    expect(a.retryAfter).toBe("1");
  }
  expect(statuses(quietAnswers)).toEqual({ 201: quietCount });
  const asOutcomes = (answers: { status: number; body: Record<string, any> }[]): Outcome[] =>
    answers.filter((a) => a.status === 201).map((a) => ({ ok: true, outcome: "created", assignment: a.body as RouteAssignment }));
  const [noisyOutcomes, quietOutcomes] = [asOutcomes(noisyAnswers), asOutcomes(quietAnswers)];

  // Stronger: hold every row the noisy tenant's routing touches (its counters, then also its
  // replica) locked in an open transaction. The quiet tenant still resolves and settles, and the
  // noisy tenant, at its limit, is refused at once instead of queueing on its busy rows.
  const blocker = await db.owner.connect();
  try {
    await blocker.query("BEGIN");
    await blocker.query("SELECT 1 FROM aip_admission_counters WHERE scope_key IN ($1, $2) FOR UPDATE", [noisy.tenant, noisy.instance.i]);
    expect(await refusedCode(registry.resolveRoute("act_noisy_locked_1", noisy.tenant, noisy.capability))).toBe("capacity-exceeded");
    await blocker.query("SELECT 1 FROM aip_connector_replicas WHERE replica_id = $1 FOR UPDATE", [noisy.replica.a]);
    expect(await refusedCode(registry.resolveRoute("act_noisy_locked_2", noisy.tenant, noisy.capability))).toBe("capacity-exceeded");
    const quietMore = await Promise.all(
      Array.from({ length: 5 }, (_, i) => attempt(registry.resolveRoute(`act_quiet_more_${i}`, quiet.tenant, quiet.capability))),
    );
    expect(tally(quietMore)).toEqual({ created: 5 });
    await settleAll(quietMore);
    await blocker.query("ROLLBACK");
  } finally {
    blocker.release();
  }
  await settleAll([...noisyOutcomes, ...quietOutcomes]);
});

it("a retry storm is bounded by the tenant retry budget", async () => {
  const budget = 6;
  const fleet = await publishRoutingFleet(db.registry, {
    prefix: "storm",
    tenant: "tenant-storm",
    policy: { max_tenant_retry_in_flight: budget },
    instances: [
      {
        name: "i",
        replicas: [
          { name: "a", capacity: 100 },
          { name: "b", capacity: 100 },
        ],
      },
    ],
  });
  await warm();
  const routes = (await Promise.all(Array.from({ length: PARALLEL }, (_, i) => registry.resolveRoute(`act_storm_${i}`, fleet.tenant, fleet.capability)))).map(
    (r) => r.assignment,
  );
  await Promise.all(routes.map((a) => registry.settleRoute(a.action_id, a.tenant_id, a, "cancelled")));

  await warm();
  const outcomes = await Promise.all(routes.map((a) => attempt(registry.resolveRoute(a.action_id, fleet.tenant, fleet.capability))));
  expect(tally(outcomes)).toEqual({ reacquired: budget, "capacity-exceeded": PARALLEL - budget });
  for (const o of outcomes) {
    if (o.ok) expect(JSON.stringify(o.assignment)).toBe(JSON.stringify(routes.find((a) => a.action_id === o.assignment.action_id)));
    else expect(o.extensions).toMatchObject({ scope: "tenant_retry", limit: budget, retry_after_ms: 100 });
  }
  expect((await counters(db.owner))[`tenant_retry:${fleet.tenant}`]).toBe(budget);
  await settleAll(outcomes);
  expect((await counters(db.owner))[`tenant_retry:${fleet.tenant}`]).toBe(0);
});

it("a mixed storm of resolves, retries, settlements, host transitions and lease expiry never deadlocks", async () => {
  const names = ["a", "b", "c", "d", "e", "f"];
  const fleet = await publishRoutingFleet(db.registry, {
    prefix: "mixed",
    tenant: "tenant-mixed",
    policy: {
      max_global_in_flight: 40,
      max_tenant_in_flight: 30,
      max_connector_type_in_flight: 35,
      max_instance_in_flight: 25,
      max_tenant_retry_in_flight: 8,
      circuit_failure_threshold: 1000,
    },
    instances: [
      { name: "i1", priority: 1, replicas: names.slice(0, 3).map((name, i) => ({ name, capacity: 4, zone: `z${i}` })) },
      { name: "i2", priority: 1, replicas: names.slice(3).map((name, i) => ({ name, capacity: 4, zone: `z${i}` })) },
    ],
  });
  const unexpected: string[] = [];
  const known = new Map<string, RouteAssignment>();
  let next = 0;
  const worker = async (w: number) => {
    for (let step = 0; step < 6; step++) {
      const pick = (w * 31 + step * 17) % 10;
      let lifecycle = false;
      try {
        if (pick < 5 || known.size === 0) {
          const actionId = `act_mixed_${next++}`;
          const { assignment } = await registry.resolveRoute(actionId, fleet.tenant, fleet.capability, { zone: `z${step % 3}` });
          known.set(actionId, assignment);
        } else if (pick < 8) {
          const list = [...known.values()];
          const a = list[(w + step) % list.length]!;
          await registry.settleRoute(a.action_id, a.tenant_id, a, pick === 7 ? "outcome_unknown" : "completed");
        } else if (pick === 8) {
          const list = [...known.values()];
          const a = list[(w * step) % list.length]!;
          await registry.resolveRoute(a.action_id, fleet.tenant, fleet.capability);
        } else {
          lifecycle = true;
          const replicaId = fleet.replica[names[(w + step) % names.length]!]!;
          const state = await replicaState(owner, replicaId);
          if (w % 3 === 0) {
            // The host dies: its lease runs out and maintenance releases its routes.
            await owner.query("UPDATE aip_connector_replicas SET lease_expires_at = now() WHERE replica_id = $1 AND status <> 'offline'", [replicaId]);
            await registry.expireLeases(10);
          } else if (state.status === "offline") await replicaTransition(registry, owner, replicaId, "register");
          else await replicaTransition(registry, owner, replicaId, step % 2 ? "offline" : "drain");
        }
      } catch (error) {
        const code = error instanceof RegistryError ? error.code : String(error);
        // Contention may refuse (no replica, counters full; for host transitions, a sequence fence
        // that moved on). It may never fail on storage (deadlock, lock timeout) or anything else.
        const allowed = ["replica-unavailable", "capacity-exceeded", ...(lifecycle ? ["conflict"] : [])];
        if (!allowed.includes(code)) unexpected.push(`${code} ${JSON.stringify((error as RegistryError).extensions)}: ${(error as Error).message}`);
      }
    }
  };
  await warm();
  await Promise.all(Array.from({ length: 36 }, (_, w) => worker(w)));
  expect(unexpected).toEqual([]);
  await expectHealthy(db.registry);
  // Everything still reserved settles cleanly and returns every counter to zero.
  await Promise.all([...known.values()].map((a) => registry.settleRoute(a.action_id, a.tenant_id, a, "cancelled")));
  const all = await counters(db.owner);
  for (const [key, value] of Object.entries(all)) if (key.includes("mixed") || key === "global:fleet") expect(value, key).toBe(0);
});
