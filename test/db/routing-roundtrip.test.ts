/**
 * Resolve and settle cost exactly one database round trip, whatever path they take (created,
 * existing, reacquired, refused; released, repeated, fenced off). Counted twice:
 * - at the driver: an executor that counts `query` calls;
 * - on the wire: the real Neon driver (HTTP `neon()` and WebSocket `Pool`) through the local Neon
 *   proxy, whose stats count the requests and the SQL statements that actually crossed it.
 */
import { Pool as NeonPool, neon, neonConfig } from "@neondatabase/serverless";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { SqlExecutor } from "../../src/db/executor.js";
import { pgExecutor } from "../../src/db/pg.js";
import { configureNeonForLocalProxy, startNeonProxy, type NeonProxy } from "../../dev/neon-proxy.js";
import { Registry } from "../../src/registry/registry.js";
import type { RouteAssignment } from "../../src/schemas.js";
import { useTestDatabase } from "../support/database.js";
import { expectHealthy } from "../support/invariants.js";
import { publishRoutingFleet, type RoutingFleet } from "../support/routing-fleet.js";
import { LOGIN_ROLES, TEST_ROLE_PASSWORD } from "../support/server.js";
import { refusal } from "../support/assertions.js";

const db = useTestDatabase();
let proxy: NeonProxy;
let wsPool: NeonPool;
let fleet: RoutingFleet;

beforeAll(async () => {
  const target = new URL(db.server.adminUrl);
  proxy = await startNeonProxy({ pgHost: target.hostname, pgPort: Number(target.port || 5432) });
  configureNeonForLocalProxy(neonConfig, proxy);
  fleet = await publishRoutingFleet(db.registry, {
    prefix: "trip",
    tenant: "tenant-trip",
    policy: { max_tenant_in_flight: 4, circuit_failure_threshold: 1, circuit_open_ms: 100 },
    instances: [
      {
        name: "i",
        replicas: [
          { name: "a", zone: "za", capacity: 50 },
          { name: "b", zone: "zb", capacity: 50 },
        ],
      },
    ],
  });
});
afterAll(async () => {
  await wsPool?.end();
  await proxy?.close();
});
afterEach(() => expectHealthy(db.registry));

/** The data role's URL the way a Worker has it: a Neon-style host the proxy never resolves. */
function neonUrl(): string {
  const login = Object.keys(LOGIN_ROLES).find((name) => LOGIN_ROLES[name as keyof typeof LOGIN_ROLES] === "data")!;
  return `postgres://${login}:${TEST_ROLE_PASSWORD}@db.localtest.me:5432/${db.name}`;
}

let actionCounter = 0;
const newAction = () => `act_trip_${(++actionCounter).toString().padStart(5, "0")}`;

/**
 * Every route operation the data plane performs, each followed by `count()`: the number of
 * round trips it took as seen by the observer under test.
 */
async function everyPath(registry: Registry, count: () => number): Promise<Record<string, number>> {
  // The previous walk's outcome_unknown opened a circuit for 100 ms; a walk started inside that
  // window could find both replicas' circuits open on a slow machine.
  await circuitsClosed();
  const seen: Record<string, number> = {};
  const measure = async <T>(label: string, op: () => Promise<T>): Promise<T> => {
    const before = count();
    try {
      return await op();
    } finally {
      seen[label] = count() - before;
    }
  };
  const { tenant, capability } = fleet;
  const actionId = newAction();
  const created = await measure("resolve created", () => registry.resolveRoute(actionId, tenant, capability, { zone: "za" }));
  expect(created.outcome).toBe("created");
  const a: RouteAssignment = created.assignment;
  expect((await measure("resolve existing", () => registry.resolveRoute(actionId, tenant, capability))).outcome).toBe("existing");
  expect((await measure("read", () => registry.getRoute(actionId, tenant)))?.assignment).toEqual(a);
  expect((await measure("settle released", () => registry.settleRoute(actionId, tenant, a, "completed"))).released).toBe(true);
  expect((await measure("settle repeated", () => registry.settleRoute(actionId, tenant, a, "completed"))).released).toBe(false);
  expect((await measure("resolve reacquired", () => registry.resolveRoute(actionId, tenant, capability))).outcome).toBe("reacquired");
  expect((await refusal(measure("settle fence-lost", () => registry.settleRoute(actionId, tenant, { ...a, fence_token: "route_x" }, "completed")))).code).toBe(
    "fence-lost",
  );
  expect((await refusal(measure("resolve conflict", () => registry.resolveRoute(actionId, tenant, "cap:other")))).code).toBe("conflict");
  expect((await refusal(measure("resolve binding-unavailable", () => registry.resolveRoute(newAction(), tenant, "cap:other")))).code).toBe(
    "binding-unavailable",
  );
  expect(
    (await refusal(measure("resolve replica-unavailable", () => registry.resolveRoute(newAction(), tenant, capability, { capacity_class: "none" })))).code,
  ).toBe("replica-unavailable");
  const held = [];
  for (let i = 0; i < 3; i++) held.push((await registry.resolveRoute(newAction(), tenant, capability, { zone: "zb" })).assignment);
  expect((await refusal(measure("resolve capacity-exceeded", () => registry.resolveRoute(newAction(), tenant, capability)))).code).toBe("capacity-exceeded");
  // outcome_unknown opens the circuit (threshold 1): the circuit update is part of the one statement.
  expect((await measure("settle outcome_unknown", () => registry.settleRoute(actionId, tenant, a, "outcome_unknown"))).released).toBe(true);
  for (const h of held) await registry.settleRoute(h.action_id, tenant, h, "cancelled");
  return seen;
}

async function circuitsClosed(): Promise<void> {
  const deadline = Date.now() + 5_000;
  while ((await db.registry.fleetStatus()).open_circuits > 0) {
    if (Date.now() > deadline) throw new Error("circuits still open after 5 s");
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const ONE_EACH = {
  "resolve created": 1,
  "resolve existing": 1,
  read: 1,
  "settle released": 1,
  "settle repeated": 1,
  "resolve reacquired": 1,
  "settle fence-lost": 1,
  "resolve conflict": 1,
  "resolve binding-unavailable": 1,
  "resolve replica-unavailable": 1,
  "resolve capacity-exceeded": 1,
  "settle outcome_unknown": 1,
};

describe("one round trip per operation", () => {
  it("at the driver: one query call", async () => {
    let calls = 0;
    const inner = pgExecutor(db.dataPool);
    const counting: SqlExecutor = {
      query: (text, params) => {
        calls += 1;
        return inner.query(text, params);
      },
    };
    expect(await everyPath(new Registry({ data: counting }), () => calls)).toEqual(ONE_EACH);
  });

  it("on the wire, Neon HTTP: one request carrying one statement", async () => {
    const registry = new Registry({ data: { query: async (text, params = []) => (await neon(neonUrl()).query(text, [...params])) as never } });
    const requests = await everyPath(registry, () => proxy.stats.http.requests);
    const statements = await everyPath(registry, () => proxy.stats.statements());
    expect(requests).toEqual(ONE_EACH);
    expect(statements).toEqual(ONE_EACH);
  });

  it("on the wire, Neon WebSocket: one Parse message per call on a warm connection", async () => {
    wsPool = new NeonPool({ connectionString: neonUrl(), max: 1 });
    wsPool.on("error", () => {});
    const registry = new Registry({ data: { query: async (text, params = []) => (await wsPool.query(text, [...params])).rows as never } });
    await registry.fleetStatus(); // open the connection: start-up messages are not statements anyway
    expect(await everyPath(registry, () => proxy.stats.ws.parses + proxy.stats.ws.queries)).toEqual(ONE_EACH);
  });
});
