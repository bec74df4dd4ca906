/**
 * Fault injection, one fault at a time, each aimed at a statement that is demonstrably in the
 * middle of its work: the victim runs on its own connection and is blocked on a row or advisory
 * lock held by an owner transaction, after it has already written (counters incremented, a
 * replica slot taken, a binding inserted...). Then its backend is terminated, its connection cut,
 * or its statement timed out.
 *
 * For every fault: the client gets `storage` (retryable, 503 problem+json with Retry-After over
 * HTTP), the database holds exactly what it held before (a fingerprint of every table), the
 * invariant checker is empty, and the retried operation applies exactly once: the same route, or
 * the route created once if the first attempt never committed.
 */
import { afterEach, describe, expect, inject, it } from "vitest";
import { createPgPool, pgExecutor } from "../../src/db/pg.js";
import { RegistryError } from "../../src/registry/errors.js";
import { Registry } from "../../src/registry/registry.js";
import type { RouteAssignment } from "../../src/schemas.js";
import { useTestDatabase } from "../support/database.js";
import { droppableVictim, holdLocks, limitedDataRole, terminateBackend, victim, waitForBackendExit, waitForLockWaiter } from "../support/faults.js";
import { binding, instance, policy, hostPrincipal } from "../../fixtures/records.js";
import { createTestApi } from "../support/http.js";
import { expectHealthy } from "../support/invariants.js";
import { registryState } from "../support/registry-state.js";
import { publishRoutingFleet, replicaState, routeCount, type RoutingFleet } from "../support/routing-fleet.js";
import { catalogGet, catalogPage } from "../../fixtures/catalog-reads.js";

const db = useTestDatabase();
afterEach(() => expectHealthy(db.registry));

const urls = () => ({ dataUrl: db.dataUrl, controlUrl: db.controlUrl });

/** One tenant, one instance with two replicas, under a policy with tenant, instance and binding counters. */
async function fleet(prefix: string): Promise<RoutingFleet & { bindingKey: string }> {
  const f = await publishRoutingFleet(db.registry, {
    prefix,
    tenant: `tenant-${prefix}`,
    instances: [
      {
        name: "i",
        replicas: [
          { name: "a", capacity: 10 },
          { name: "b", capacity: 10, zone: "zb" },
        ],
      },
    ],
  });
  // Every counter exists after a first route: later resolves update rows a test can lock.
  const warm = await db.registry.resolveRoute(`act_${prefix}_warm`, f.tenant, f.capability);
  await db.registry.settleRoute(warm.assignment.action_id, f.tenant, warm.assignment, "completed");
  const { rows } = await db.owner.query<{ key: string }>("SELECT aip_binding_scope_key($1, $2, $3) AS key", [f.tenant, f.capability, f.instance.i]);
  return { ...f, bindingKey: rows[0]!.key };
}

/** The binding counter is the last lock a resolve, settlement or release takes: holding it stops them after every other write. */
const bindingCounterLock = (f: { bindingKey: string }): [string, unknown[]] => [
  "SELECT 1 FROM aip_admission_counters WHERE scope_kind = 'binding' AND scope_key = $1 FOR UPDATE",
  [f.bindingKey],
];

async function refusalOf(promise: Promise<unknown>): Promise<RegistryError> {
  const outcome = await promise.then(
    (value) => ({ value }),
    (error: unknown) => ({ error }),
  );
  if ("value" in outcome) throw new Error(`expected a refusal, got ${JSON.stringify(outcome.value)}`);
  expect(outcome.error).toBeInstanceOf(RegistryError);
  return outcome.error as RegistryError;
}

function expectRetryableStorage(error: RegistryError, sqlstate?: string) {
  expect({ code: error.code, retryable: error.retryable, status: error.status }).toEqual({ code: "storage", retryable: true, status: 503 });
  if (sqlstate) expect(error.extensions.sqlstate).toBe(sqlstate);
}

async function expectStorageProblem(response: Response, sqlstate: string) {
  expect(response.status).toBe(503);
  expect(response.headers.get("content-type")).toMatch(/^application\/problem\+json/);
  expect(Number(response.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
  const body = (await response.json()) as Record<string, unknown>;
  expect(body).toMatchObject({ status: 503, code: "storage", sqlstate });
  // Nothing about the database leaks: no message, no stack.
  expect(JSON.stringify(body)).not.toMatch(/terminat|timeout|canceling|SELECT|aip_/i);
}

// -------------------------------------------------------------------------------------------------
interface MidStatementCase {
  name: string;
  /** What the victim is in the middle of when it is stopped. */
  state: string;
  prepare(f: Awaited<ReturnType<typeof fleet>>): Promise<{ route?: RouteAssignment; sequence?: number }>;
  locks(f: Awaited<ReturnType<typeof fleet>>): [string, unknown[]][];
  call(registry: Registry, f: Awaited<ReturnType<typeof fleet>>, ctx: { route?: RouteAssignment; sequence?: number }): Promise<unknown>;
  /** Retries the operation and checks it applied exactly once. */
  retry(registry: Registry, f: Awaited<ReturnType<typeof fleet>>, ctx: { route?: RouteAssignment; sequence?: number }): Promise<void>;
}

/** A reserved route on replica b (zone zb), or on replica a (zone eu-west-1a). */
const reservedRoute = async (f: RoutingFleet, action: string, zone = "zb") => {
  const { assignment } = await db.registry.resolveRoute(`act_${f.prefix}_${action}`, f.tenant, f.capability, { zone });
  expect(assignment.replica_id).toBe(zone === "zb" ? f.replica.b : f.replica.a);
  return assignment;
};

const CASES: MidStatementCase[] = [
  {
    name: "resolve",
    state: "tenant and instance counters incremented, replica row locked",
    prepare: async () => ({}),
    locks: (f) => [bindingCounterLock(f)],
    call: (registry, f) => registry.resolveRoute(`act_${f.prefix}_victim`, f.tenant, f.capability),
    retry: async (registry, f) => {
      const retried = await registry.resolveRoute(`act_${f.prefix}_victim`, f.tenant, f.capability);
      expect(retried.outcome).toBe("created");
      const again = await registry.resolveRoute(`act_${f.prefix}_victim`, f.tenant, f.capability);
      expect({ outcome: again.outcome, json: JSON.stringify(again.assignment) }).toEqual({ outcome: "existing", json: JSON.stringify(retried.assignment) });
      expect(await routeCount(db.owner, f.tenant)).toBe(2);
    },
  },
  {
    name: "settlement",
    state: "replica slot and tenant and instance counters released",
    prepare: async (f) => ({ route: await reservedRoute(f, "settle") }),
    locks: (f) => [bindingCounterLock(f)],
    call: (registry, f, { route }) => registry.settleRoute(route!.action_id, f.tenant, route, "completed"),
    retry: async (registry, f, { route }) => {
      expect(await registry.settleRoute(route!.action_id, f.tenant, route, "completed")).toMatchObject({ released: true, last_settlement: "completed" });
      expect(await registry.settleRoute(route!.action_id, f.tenant, route, "completed")).toMatchObject({ released: false });
      expect((await replicaState(db.owner, route!.replica_id)).active_assignments).toBe(0);
    },
  },
  {
    name: "publication",
    state: "exclusive publication lock held, a policy inserted and a binding updated",
    prepare: async () => ({}),
    locks: (f) => [["SELECT 1 FROM aip_connector_instances WHERE instance_id = $1 FOR UPDATE", [f.instance.i]]],
    call: (registry, f) =>
      registry.publish([
        policy(`quota:${f.prefix}:more`, { max_tenant_in_flight: 7 }),
        binding(f.tenant, f.capability, f.instance.i!, { priority: 3, policy_revision: 2, quota_policy_ref: `quota:${f.prefix}:more` }),
        instance(f.instance.i!, f.typeId, f.versionId, f.tenant, 2),
      ]),
    retry: async (registry, f) => {
      const before = Number((await db.owner.query("SELECT revision FROM aip_catalog_revision")).rows[0].revision);
      const result = await registry.publish([
        policy(`quota:${f.prefix}:more`, { max_tenant_in_flight: 7 }),
        binding(f.tenant, f.capability, f.instance.i!, { priority: 3, policy_revision: 2, quota_policy_ref: `quota:${f.prefix}:more` }),
        instance(f.instance.i!, f.typeId, f.versionId, f.tenant, 2),
      ]);
      expect({ changed: result.changed, catalog_revision: result.catalog_revision }).toEqual({ changed: 3, catalog_revision: before + 1 });
    },
  },
  {
    name: "offline transition",
    state: "the replica's reserved route released from the replica and two counters",
    prepare: async (f) => {
      const route = await reservedRoute(f, "offline");
      return { route, sequence: (await replicaState(db.owner, route.replica_id)).health_revision };
    },
    locks: (f) => [bindingCounterLock(f)],
    call: (registry, f, { route, sequence }) =>
      registry.replicaLifecycle(
        route!.replica_id,
        "offline",
        { request_id: `msg_${f.prefix}_offline`, previous_sequence: sequence! },
        hostPrincipal(route!.replica_id),
      ),
    retry: async (registry, f, { route, sequence }) => {
      const request = { request_id: `msg_${f.prefix}_offline`, previous_sequence: sequence! };
      const answer = await registry.replicaLifecycle(route!.replica_id, "offline", request, hostPrincipal(route!.replica_id));
      expect(answer).toMatchObject({ status: "offline", sequence: sequence! + 1 });
      // Applied once: a replay of the same request answers the same and moves nothing.
      expect(await registry.replicaLifecycle(route!.replica_id, "offline", request, hostPrincipal(route!.replica_id))).toEqual(answer);
      expect(await registry.getRoute(route!.action_id, f.tenant)).toMatchObject({ reserved: false, last_settlement: "lease_expired" });
    },
  },
  {
    name: "lease expiry",
    state: "an expired replica's route released from two counters",
    prepare: async (f) => {
      const route = await reservedRoute(f, "expire");
      await db.owner.query("UPDATE aip_connector_replicas SET lease_expires_at = clock_timestamp() WHERE replica_id = $1", [route.replica_id]);
      return { route };
    },
    locks: (f) => [bindingCounterLock(f)],
    call: (registry) => registry.expireLeases(10),
    retry: async (registry, f, { route }) => {
      expect(await registry.expireLeases(10)).toMatchObject({ expired: 1, released: 1 });
      expect(await registry.expireLeases(10)).toMatchObject({ expired: 0, released: 0 });
      expect(await registry.getRoute(route!.action_id, f.tenant)).toMatchObject({ reserved: false, last_settlement: "lease_expired" });
    },
  },
];

describe("a backend terminated in the middle of a statement", () => {
  CASES.forEach((c, n) => {
    it(`${c.name} (${c.state}): storage, nothing half done, and the retry applies once`, async () => {
      const f = await fleet(`kill${n}`);
      const ctx = await c.prepare(f);
      const v = victim(urls());
      try {
        const before = await registryState(db.owner);
        const held = await holdLocks(db.owner, c.locks(f));
        let error!: RegistryError;
        try {
          const pending = refusalOf(c.call(v.registry, f, ctx));
          await terminateBackend(db.owner, await waitForLockWaiter(db.owner, v.applicationName));
          error = await pending;
        } finally {
          await held.release();
        }
        expectRetryableStorage(error, "57P01");
        expect(await registryState(db.owner)).toEqual(before);
        await expectHealthy(db.registry);
        // The victim's pool replaces the dead session on its own.
        await c.retry(v.registry, f, ctx);
      } finally {
        await v.close();
      }
    });
  });

  it("over HTTP, a resolve whose backend is terminated is a 503 storage problem with Retry-After", async () => {
    const f = await fleet("killhttp");
    const v = victim(urls());
    const api = createTestApi(v.registry);
    try {
      const before = await registryState(db.owner);
      const held = await holdLocks(db.owner, [bindingCounterLock(f)]);
      let response!: Response;
      try {
        const token = await api.tenantToken(f.tenant);
        const pending = api.call("PUT", "/v1/routes/act_killhttp_victim", { token, body: { capability_id: f.capability } });
        await terminateBackend(db.owner, await waitForLockWaiter(db.owner, v.applicationName));
        response = await pending;
      } finally {
        await held.release();
      }
      await expectStorageProblem(response, "57P01");
      expect(await registryState(db.owner)).toEqual(before);
      const retried = await api.call("PUT", "/v1/routes/act_killhttp_victim", {
        token: await api.tenantToken(f.tenant),
        body: { capability_id: f.capability },
      });
      expect(retried.status).toBe(201);
    } finally {
      await v.close();
    }
  });
});

describe("a connection dropped in the middle of a resolve", () => {
  // The statement outlives its client: PostgreSQL runs it to the end (the request was received
  // whole) and commits. The client cannot know; the retry finds the committed route.
  it("the orphaned statement commits, and the retry returns that very route", async () => {
    const f = await fleet("drop1");
    const v = await droppableVictim(db.dataUrl);
    try {
      const held = await holdLocks(db.owner, [bindingCounterLock(f)]);
      let error!: RegistryError;
      let pid!: number;
      try {
        const pending = refusalOf(v.registry.resolveRoute("act_drop1_victim", f.tenant, f.capability));
        pid = await waitForLockWaiter(db.owner, v.applicationName);
        v.drop();
        error = await pending;
        // The server has not noticed: the orphan still waits for the counter.
        expect((await db.owner.query("SELECT 1 FROM pg_stat_activity WHERE pid = $1", [pid])).rows).toHaveLength(1);
      } finally {
        await held.release();
      }
      expectRetryableStorage(error);
      await waitForBackendExit(db.owner, pid);
      const retried = await db.registry.resolveRoute("act_drop1_victim", f.tenant, f.capability);
      expect(retried.outcome).toBe("existing");
      expect(JSON.stringify((await db.registry.getRoute("act_drop1_victim", f.tenant))!.assignment)).toBe(JSON.stringify(retried.assignment));
      expect(await routeCount(db.owner, f.tenant)).toBe(2);
    } finally {
      await v.close();
    }
  });

  // With client_connection_check_interval the server polls the socket while the statement waits
  // and aborts it: nothing commits, and the retry creates the route, once.
  it("with client_connection_check_interval the server aborts the orphan, and the retry creates the route once", async () => {
    const f = await fleet("drop2");
    const v = await droppableVictim(db.dataUrl, { settings: "-c client_connection_check_interval=100" });
    try {
      const before = await registryState(db.owner);
      const held = await holdLocks(db.owner, [bindingCounterLock(f)]);
      let error!: RegistryError;
      try {
        const pending = refusalOf(v.registry.resolveRoute("act_drop2_victim", f.tenant, f.capability));
        const pid = await waitForLockWaiter(db.owner, v.applicationName);
        v.drop();
        error = await pending;
        // Gone while the lock it waited for is still held: it never got to commit.
        await waitForBackendExit(db.owner, pid);
      } finally {
        await held.release();
      }
      expectRetryableStorage(error);
      expect(await registryState(db.owner)).toEqual(before);
      const retried = await db.registry.resolveRoute("act_drop2_victim", f.tenant, f.capability);
      expect(retried.outcome).toBe("created");
      expect(await routeCount(db.owner, f.tenant)).toBe(2);
    } finally {
      await v.close();
    }
  });
});

describe("statement_timeout", () => {
  it("every operation that waits past the session's statement_timeout fails as retryable storage, changes nothing, and succeeds once the lock is gone", async () => {
    const f = await fleet("stmt");
    const settleRoute = await reservedRoute(f, "settle");
    const expiring = await reservedRoute(f, "expire", "eu-west-1a");
    await db.owner.query("UPDATE aip_connector_replicas SET lease_expires_at = clock_timestamp() WHERE replica_id = $1", [f.replica.a]);
    const heartbeatSequence = (await replicaState(db.owner, f.replica.b!)).health_revision;
    const v = victim(urls(), { statementTimeoutMs: 300 });
    const api = createTestApi(v.registry);
    const operations: [string, () => Promise<unknown>][] = [
      ["resolve (shared publication lock)", () => v.registry.resolveRoute("act_stmt_new", f.tenant, f.capability)],
      ["settle (action lock)", () => v.registry.settleRoute(settleRoute.action_id, f.tenant, settleRoute, "completed")],
      ["publish (exclusive publication lock)", () => v.registry.publish([policy(`quota:${f.prefix}:late`)])],
      ["catalog page (shared publication lock)", () => catalogPage(v.registry, f.tenant, {})],
      ["catalog get (shared publication lock)", () => catalogGet(v.registry, f.tenant, f.capability)],
      [
        "heartbeat (replica row)",
        () =>
          v.registry.replicaLifecycle(
            f.replica.b!,
            "heartbeat",
            { request_id: "msg_stmt_hb", previous_sequence: heartbeatSequence },
            hostPrincipal(f.replica.b!),
          ),
      ],
      ["lease expiry (counter row)", () => v.registry.expireLeases(10)],
    ];
    try {
      const before = await registryState(db.owner);
      const held = await holdLocks(db.owner, [
        ["SELECT pg_advisory_xact_lock(hashtext(current_database()), 1095323715)"],
        ["SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", [settleRoute.action_id]],
        ["SELECT 1 FROM aip_connector_replicas WHERE replica_id = $1 FOR UPDATE", [f.replica.b]],
        bindingCounterLock(f),
      ]);
      try {
        for (const [name, operation] of operations) {
          const error = await refusalOf(operation());
          expect({ name, code: error.code, retryable: error.retryable, sqlstate: error.extensions.sqlstate }).toEqual({
            name,
            code: "storage",
            retryable: true,
            sqlstate: "57014",
          });
        }
        const response = await api.call("PUT", "/v1/routes/act_stmt_http", { token: await api.tenantToken(f.tenant), body: { capability_id: f.capability } });
        await expectStorageProblem(response, "57014");
      } finally {
        await held.release();
      }
      expect(await registryState(db.owner)).toEqual(before);
      await expectHealthy(db.registry);
      // The same sessions (a timeout does not end them), once nothing blocks them.
      for (const [name, operation] of operations) await expect(operation(), name).resolves.toBeDefined();
      expect((await db.registry.getRoute(expiring.action_id, f.tenant))!.last_settlement).toBe("lease_expired");
    } finally {
      await v.close();
    }
  });
});

describe("lock_timeout", () => {
  // With no statement_timeout at all (a Worker whose role sets none), every entry point that
  // waits for a lock still gives up by itself: each function sets its own lock_timeout, and every
  // wait it gives up is answered as contention (test/db/contention.test.ts), never storage.
  it("every entry point that waits on a lock gives up after its own lock_timeout, as contention", async () => {
    const f = await fleet("lockto");
    const settleRoute = await reservedRoute(f, "settle");
    await reservedRoute(f, "expire", "eu-west-1a");
    await db.owner.query("UPDATE aip_connector_replicas SET lease_expires_at = clock_timestamp() WHERE replica_id = $1", [f.replica.a]);
    const sequence = (await replicaState(db.owner, f.replica.b!)).health_revision;
    const pool = createPgPool(db.dataUrl, { max: 8, statementTimeoutMs: 0 });
    const control = createPgPool(db.controlUrl, { max: 2, statementTimeoutMs: 0 });
    const registry = new Registry({ data: pgExecutor(pool), control: pgExecutor(control) });
    const operations: [string, () => Promise<unknown>][] = [
      ["aip_resolve_route", () => registry.resolveRoute("act_lockto_new", f.tenant, f.capability)],
      ["aip_settle_route", () => registry.settleRoute(settleRoute.action_id, f.tenant, settleRoute, "completed")],
      ["aip_publish", () => registry.publish([policy(`quota:${f.prefix}:late`)])],
      ["aip_catalog_page", () => catalogPage(registry, f.tenant, {})],
      ["aip_catalog_get", () => catalogGet(registry, f.tenant, f.capability)],
      ["aip_admin_catalog_page", () => registry.adminCatalogPage(null, true, {})],
      [
        "aip_host_replica_lifecycle",
        () => registry.replicaLifecycle(f.replica.b!, "heartbeat", { request_id: "msg_lockto_hb", previous_sequence: sequence }, hostPrincipal(f.replica.b!)),
      ],
      ["aip_expire_leases", () => registry.expireLeases(10)],
    ];
    try {
      const before = await registryState(db.owner);
      const held = await holdLocks(db.owner, [
        ["SELECT pg_advisory_xact_lock(hashtext(current_database()), 1095323715)"],
        ["SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", [settleRoute.action_id]],
        ["SELECT 1 FROM aip_connector_replicas WHERE replica_id = $1 FOR UPDATE", [f.replica.b]],
        bindingCounterLock(f),
      ]);
      let outcomes!: { name: string; code: string; sqlstate: unknown }[];
      try {
        outcomes = await Promise.all(
          operations.map(async ([name, operation]) => {
            const error = await refusalOf(operation());
            return { name, code: error.code, sqlstate: error.extensions.sqlstate };
          }),
        );
      } finally {
        await held.release();
      }
      // Contention, never storage: the resolver's own answer, `busy` from the entry points that
      // name what they waited for, and `busy` mapped from the lock timeout for the reads.
      const waitsNamed = new Set(["aip_settle_route", "aip_publish", "aip_host_replica_lifecycle", "aip_expire_leases"]);
      expect(outcomes).toEqual(
        operations.map(([name]) =>
          name === "aip_resolve_route"
            ? { name, code: "replica-unavailable", sqlstate: undefined }
            : { name, code: "busy", sqlstate: waitsNamed.has(name) ? undefined : "55P03" },
        ),
      );
      expect(await registryState(db.owner)).toEqual(before);
    } finally {
      await Promise.all([pool.end(), control.end()]);
    }
  });

  // The read-only entry points take only ACCESS SHARE locks, but those wait behind any ACCESS
  // EXCLUSIVE lock (a migration's ALTER TABLE, VACUUM FULL, REINDEX without CONCURRENTLY, LOCK
  // TABLE): without a lock_timeout of their own only a statement_timeout would end the wait, and
  // a Worker whose role sets none would wait as long as the lock is held.
  it("read-only entry points also give up after a lock_timeout when a table is locked exclusively", async () => {
    const f = await fleet("readlock");
    const route = await reservedRoute(f, "read");
    // The statement_timeout only keeps a failing run short: the lock_timeout must fire first.
    const pool = createPgPool(db.dataUrl, { max: 6, statementTimeoutMs: 6_000 });
    const control = createPgPool(db.controlUrl, { max: 3, statementTimeoutMs: 6_000 });
    const registry = new Registry({ data: pgExecutor(pool), control: pgExecutor(control) });
    const dataOnly = new Registry({ data: pgExecutor(pool) });
    const operations: [string, () => Promise<unknown>][] = [
      ["aip_get_route", () => registry.getRoute(route.action_id, f.tenant)],
      ["aip_fleet_status", () => registry.fleetStatus()],
      ["aip_fleet_regions", () => registry.fleetRegions()],
      ["aip_check_invariants", () => dataOnly.checkInvariants()],
      ["aip_schema_status", () => registry.schemaStatus()],
      ["aip_admin_get", () => registry.adminGet("replica", f.replica.a!)],
      ["aip_admin_bindings", () => registry.adminBindings(f.tenant)],
    ];
    try {
      const held = await holdLocks(db.owner, [
        ["LOCK TABLE aip_route_assignments, aip_connector_replicas, aip_capability_bindings, aip_schema_applied IN ACCESS EXCLUSIVE MODE"],
      ]);
      let outcomes!: { name: string; code: string; sqlstate: unknown }[];
      try {
        outcomes = await Promise.all(
          operations.map(async ([name, operation]) => {
            const error = await refusalOf(operation());
            return { name, code: error.code, sqlstate: error.extensions.sqlstate };
          }),
        );
      } finally {
        await held.release();
      }
      expect(outcomes).toEqual(operations.map(([name]) => ({ name, code: "busy", sqlstate: "55P03" })));
    } finally {
      await Promise.all([pool.end(), control.end()]);
    }
  });

  // The rule for entry points added later: every function a runtime role may execute bounds its
  // own lock waits.
  it("every function granted to a runtime role sets lock_timeout", async () => {
    const { rows } = await db.owner.query<{ f: string; lock_timeout: string | null }>(
      `SELECT p.oid::regprocedure::text AS f,
              (SELECT c FROM unnest(p.proconfig) c WHERE c LIKE 'lock\\_timeout=%') AS lock_timeout
       FROM pg_proc p
       WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'aip\\_%'
         AND (has_function_privilege($1, p.oid, 'EXECUTE') OR has_function_privilege($2, p.oid, 'EXECUTE'))
       ORDER BY 1`,
      [inject("pgServer").roles!.data, inject("pgServer").roles!.control],
    );
    expect(rows.length).toBeGreaterThan(10);
    expect(rows.filter((r) => r.lock_timeout === null).map((r) => r.f)).toEqual([]);
  });
});

describe("connection slots exhausted", () => {
  it("calls beyond a role's connection limit fail as retryable storage, change nothing, and apply once when retried", async () => {
    const f = await fleet("slots");
    const limited = await limitedDataRole(db.server.adminUrl, db.dataUrl, 2, inject("pgServer").roles!.data);
    // Two sessions of the role occupy both slots.
    const occupants = [createPgPool(limited.url, { max: 1 }), createPgPool(limited.url, { max: 1 })];
    const pool = createPgPool(limited.url, { max: 6, connectionTimeoutMs: 60_000 });
    const registry = new Registry({ data: pgExecutor(pool) });
    const api = createTestApi(registry);
    try {
      await Promise.all(occupants.map((o) => o.query("SELECT 1")));
      const before = await registryState(db.owner);
      const actions = Array.from({ length: 6 }, (_, n) => `act_slots_${n}`);
      const refusals = await Promise.all(actions.map((a) => refusalOf(registry.resolveRoute(a, f.tenant, f.capability))));
      for (const error of refusals) expectRetryableStorage(error, "53300");
      await expectStorageProblem(
        await api.call("PUT", "/v1/routes/act_slots_http", { token: await api.tenantToken(f.tenant), body: { capability_id: f.capability } }),
        "53300",
      );
      expect(await registryState(db.owner)).toEqual(before);

      // Slots come back one at a time while a burst keeps retrying: every answer is a route or a
      // retryable refusal, and each action is created exactly once.
      await occupants[0]!.end();
      const outcomes = await Promise.all(
        actions.map(async (a) => {
          const refused: string[] = [];
          for (let attempt = 0; attempt < 200; attempt++) {
            try {
              const result = await registry.resolveRoute(a, f.tenant, f.capability);
              return { outcome: result.outcome, refused };
            } catch (error) {
              if (!(error instanceof RegistryError && error.code === "storage" && error.retryable)) throw error;
              refused.push(String(error.extensions.sqlstate));
              if (attempt === 20) await occupants[1]!.end().catch(() => {});
              await new Promise((resolve) => setTimeout(resolve, 20));
            }
          }
          throw new Error(`${a} never got a connection`);
        }),
      );
      expect(outcomes.map((o) => o.outcome)).toEqual(actions.map(() => "created"));
      for (const o of outcomes) for (const sqlstate of o.refused) expect(sqlstate).toBe("53300");
      expect(await routeCount(db.owner, f.tenant)).toBe(actions.length + 1);
    } finally {
      await Promise.all([pool.end(), ...occupants.map((o) => o.end().catch(() => {}))]);
      await limited.drop();
    }
  });
});
