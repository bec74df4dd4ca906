/**
 * Contention is never answered as a storage failure. Whatever the resolver finds busy (every
 * eligible replica row, a tenant's admission counter, the pinned replica of a retry, the catalog
 * during a publication, the action itself), the gateway gets replica-unavailable or
 * capacity-exceeded with retry guidance, never `storage` ("the database failed"), and nothing
 * changes. A new route waits for a busy replica row without holding the catalog lock, so a
 * publisher never queues behind it.
 *
 * Each case holds the contended lock from a second session (the owner's) and releases it after.
 */
import type pg from "pg";
import { beforeAll, describe, expect, it } from "vitest";
import { RETRY_AFTER_MS } from "../../src/registry/errors.js";
import { useTestDatabase } from "../support/database.js";
import { connectorType, replica } from "../../fixtures/records.js";
import { expectHealthy } from "../support/invariants.js";
import { registryState } from "../support/registry-state.js";
import { lifecycle, provisionFleet, replicaRow, waitForLeaseEnd } from "../support/replicas.js";
import { publishRoutingFleet, type RoutingFleet } from "../support/routing-fleet.js";
import { refusal } from "../support/assertions.js";
import { catalogPage } from "../../fixtures/catalog-reads.js";

const db = useTestDatabase();
let fleet: RoutingFleet;

beforeAll(async () => {
  fleet = await publishRoutingFleet(db.registry, {
    prefix: "busy",
    tenant: "tenant-busy",
    instances: [
      {
        name: "main",
        replicas: [
          { name: "a", capacity: 8 },
          { name: "b", capacity: 8 },
        ],
      },
    ],
  });
});

/** Runs `body` while another session holds what `lock` takes, in an open transaction. */
async function whileHeld<T>(lock: (holder: pg.PoolClient) => Promise<unknown>, body: () => Promise<T>): Promise<T> {
  const holder = await db.owner.connect();
  try {
    await holder.query("BEGIN");
    await lock(holder);
    return await body();
  } finally {
    await holder.query("ROLLBACK");
    holder.release();
  }
}

const replicaIds = () => Object.values(fleet.replica);

describe("a new route", () => {
  it("answers every eligible replica busy past lock_timeout as replica-unavailable, with retry guidance", async () => {
    const before = await registryState(db.owner);
    const error = await whileHeld(
      (holder) => holder.query("SELECT 1 FROM aip_connector_replicas WHERE replica_id = ANY ($1) FOR NO KEY UPDATE", [replicaIds()]),
      () => refusal(db.registry.resolveRoute("act_busy_rows", fleet.tenant, fleet.capability)),
    );
    expect(error.code).toBe("replica-unavailable");
    expect(error.extensions).toMatchObject({ instance_id: fleet.instance.main, retry_after_ms: expect.any(Number) });
    expect(await registryState(db.owner)).toEqual(before);
    // Free again, the same request succeeds.
    expect((await db.registry.resolveRoute("act_busy_rows", fleet.tenant, fleet.capability)).outcome).toBe("created");
  });

  it("never makes a publisher queue behind it while it waits for a busy replica row", async () => {
    const holder = await db.owner.connect();
    try {
      await holder.query("BEGIN");
      await holder.query("SELECT 1 FROM aip_connector_replicas WHERE replica_id = ANY ($1) FOR NO KEY UPDATE", [replicaIds()]);
      let resolved = false;
      const resolving = db.registry.resolveRoute("act_busy_pub", fleet.tenant, fleet.capability).finally(() => {
        resolved = true;
      });
      // Until the resolver is waiting for the row.
      for (;;) {
        const { rows } = await db.owner.query<{ n: number }>(
          "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%aip_resolve_route%'",
        );
        if (rows[0]!.n > 0) break;
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      // The publication needs the exclusive catalog lock: it is not held by the waiting resolver.
      const published = await db.registry.publish([{ op: "put_connector_type", id: "ctype_busy_pub", name: "pub", owner: "org:acme", enabled: true }]);
      expect(resolved).toBe(false);
      await holder.query("ROLLBACK");
      // The resolver chose before the publication: it chooses again, at the new revision.
      const route = await resolving;
      expect(route.outcome).toBe("created");
      expect(route.assignment.catalog_revision).toBe(published.catalog_revision);
    } finally {
      await holder.query("ROLLBACK").catch(() => {});
      holder.release();
    }
    await expectHealthy(db.registry);
  });

  it("answers a tenant counter busy past lock_timeout as capacity-exceeded for its scope", async () => {
    await db.registry.resolveRoute("act_busy_warm", fleet.tenant, fleet.capability); // the counters exist now
    const before = await registryState(db.owner);
    const error = await whileHeld(
      (holder) => holder.query("SELECT 1 FROM aip_admission_counters WHERE scope_kind = 'tenant' AND scope_key = $1 FOR UPDATE", [fleet.tenant]),
      () => refusal(db.registry.resolveRoute("act_busy_counter", fleet.tenant, fleet.capability)),
    );
    expect(error.code).toBe("capacity-exceeded");
    expect(error.extensions).toMatchObject({ scope: "tenant", retry_after_ms: expect.any(Number) });
    expect(await registryState(db.owner)).toEqual(before);
  });

  it("answers the catalog held by a publication past lock_timeout as replica-unavailable", async () => {
    const error = await whileHeld(
      (holder) => holder.query("SELECT pg_advisory_xact_lock(hashtext(current_database()), 1095323715)"),
      () => refusal(db.registry.resolveRoute("act_busy_catalog", fleet.tenant, fleet.capability)),
    );
    expect(error.code).toBe("replica-unavailable");
    expect(error.message).toMatch(/publication/);
    expect(error.extensions).toMatchObject({ retry_after_ms: expect.any(Number) });
  });
});

describe("refusal precedence while every eligible replica is busy", () => {
  // The reference tries to lock a replica first (33 attempts) and only then consults the policy
  // and the counters, so a tenant at its limit whose replicas stay busy hears replica-unavailable.
  // Here the refusals that do not depend on which replica serves come first, without waiting for
  // a busy row: the answer the reference gives once the row frees, given at once.
  it("answers a tenant at its limit capacity-exceeded and a disabled policy admission, without waiting", async () => {
    const limited = await publishRoutingFleet(db.registry, {
      prefix: "busylimit",
      tenant: "tenant-busylimit",
      policy: { max_tenant_in_flight: 1 },
      instances: [{ name: "main", replicas: [{ name: "a", capacity: 8 }] }],
    });
    await db.registry.resolveRoute("act_busylimit_held", limited.tenant, limited.capability);
    const holdReplica = (holder: pg.PoolClient) =>
      holder.query("SELECT 1 FROM aip_connector_replicas WHERE replica_id = $1 FOR NO KEY UPDATE", [limited.replica.a]);
    const before = await registryState(db.owner);
    const capacity = await whileHeld(holdReplica, () => refusal(db.registry.resolveRoute("act_busylimit_1", limited.tenant, limited.capability)));
    expect(capacity.code).toBe("capacity-exceeded");
    expect(capacity.extensions).toMatchObject({ scope: "tenant", limit: 1 });
    expect(await registryState(db.owner)).toEqual(before);

    await db.registry.publish([{ op: "put_admission_policy", policy_ref: limited.policyRef, revision: 2, enabled: false, max_tenant_in_flight: 100 }]);
    const admission = await whileHeld(holdReplica, () => refusal(db.registry.resolveRoute("act_busylimit_2", limited.tenant, limited.capability)));
    expect(admission.code).toBe("admission");
    expect(admission.extensions).toMatchObject({ policy_ref: limited.policyRef });
  });
});

describe("an existing route", () => {
  it("answers its action held by another request past lock_timeout as busy, with retry guidance: it says nothing about replicas", async () => {
    const { assignment } = await db.registry.resolveRoute("act_busy_action", fleet.tenant, fleet.capability);
    const before = await registryState(db.owner);
    const error = await whileHeld(
      (holder) => holder.query("SELECT pg_advisory_xact_lock(hashtextextended('act_busy_action', 0))"),
      () => refusal(db.registry.resolveRoute("act_busy_action", fleet.tenant, fleet.capability)),
    );
    expect(error).toMatchObject({ code: "busy", status: 503, retryable: true });
    expect(error.message).toMatch(/act_busy_action/);
    expect(error.extensions).toEqual({ action_id: "act_busy_action", retry_after_ms: RETRY_AFTER_MS.later });
    expect(await registryState(db.owner)).toEqual(before);
    // Free again, the retry gets its route.
    const retry = await db.registry.resolveRoute("act_busy_action", fleet.tenant, fleet.capability);
    expect(retry).toEqual({ outcome: "existing", assignment });
    await db.registry.settleRoute(assignment.action_id, fleet.tenant, assignment, "completed");
  });

  it("answers its pinned replica busy past lock_timeout as replica-unavailable for that replica", async () => {
    const { assignment } = await db.registry.resolveRoute("act_busy_pinned", fleet.tenant, fleet.capability);
    await db.registry.settleRoute(assignment.action_id, fleet.tenant, assignment, "completed");
    const before = await registryState(db.owner);
    const error = await whileHeld(
      (holder) => holder.query("SELECT 1 FROM aip_connector_replicas WHERE replica_id = $1 FOR NO KEY UPDATE", [assignment.replica_id]),
      () => refusal(db.registry.resolveRoute("act_busy_pinned", fleet.tenant, fleet.capability)),
    );
    expect(error.code).toBe("replica-unavailable");
    expect(error.extensions).toMatchObject({ replica_id: assignment.replica_id, retry_after_ms: expect.any(Number) });
    expect(await registryState(db.owner)).toEqual(before);
    expect((await db.registry.resolveRoute("act_busy_pinned", fleet.tenant, fleet.capability)).outcome).toBe("reacquired");
    await expectHealthy(db.registry);
  });
});

/**
 * The other entry points that wait for locks: settlement, replica lifecycle (host and operator),
 * lease expiry and publication answer a wait that outlasts their lock_timeout as `busy` (503) with
 * retry guidance, change nothing, and succeed once the lock is free. Any other statement that
 * gives up a lock wait is `busy` too (src/registry/errors.ts), never `storage`.
 */
describe("settlement, lifecycle, lease expiry and publication", () => {
  const holdReplica = (replicaId: string) => (holder: pg.PoolClient) =>
    holder.query("SELECT 1 FROM aip_connector_replicas WHERE replica_id = $1 FOR UPDATE", [replicaId]);
  const sequenceOf = async (replicaId: string) => (await replicaRow(db, replicaId)).health_revision;

  it("settlement: its replica row busy past lock_timeout is busy with retry guidance, and nothing is released", async () => {
    const { assignment } = await db.registry.resolveRoute("act_busy_settle", fleet.tenant, fleet.capability);
    const before = await registryState(db.owner);
    const error = await whileHeld(holdReplica(assignment.replica_id), () =>
      refusal(db.registry.settleRoute(assignment.action_id, fleet.tenant, assignment, "completed")),
    );
    expect(error.code).toBe("busy");
    expect(error.status).toBe(503);
    expect(error.message).toMatch(new RegExp(`replica \`${assignment.replica_id}\``));
    expect(error.extensions).toMatchObject({ action_id: assignment.action_id, retry_after_ms: RETRY_AFTER_MS.soon });
    expect(await registryState(db.owner)).toEqual(before);
    expect((await db.registry.settleRoute(assignment.action_id, fleet.tenant, assignment, "completed")).released).toBe(true);
    await expectHealthy(db.registry);
  });

  it("settlement: its action held by another request is busy too", async () => {
    const { assignment } = await db.registry.resolveRoute("act_busy_settle_action", fleet.tenant, fleet.capability);
    const error = await whileHeld(
      (holder) => holder.query("SELECT pg_advisory_xact_lock(hashtextextended('act_busy_settle_action', 0))"),
      () => refusal(db.registry.settleRoute(assignment.action_id, fleet.tenant, assignment, "completed")),
    );
    expect(error.code).toBe("busy");
    expect(error.message).toMatch(/another request for the same action/);
    expect((await db.registry.settleRoute(assignment.action_id, fleet.tenant, assignment, "completed")).released).toBe(true);
  });

  it("a host's heartbeat: its replica row busy is busy, and the same request succeeds once free", async () => {
    const replicaId = fleet.replica.a as string;
    const previous = await sequenceOf(replicaId);
    const request = { request_id: "msg_busy_heartbeat", previous_sequence: previous };
    const before = await registryState(db.owner);
    const error = await whileHeld(holdReplica(replicaId), () => refusal(lifecycle(db.registry, replicaId, "heartbeat", request)));
    expect(error.code).toBe("busy");
    expect(error.extensions).toMatchObject({ replica_id: replicaId, retry_after_ms: RETRY_AFTER_MS.soon });
    expect(await registryState(db.owner)).toEqual(before);
    expect((await lifecycle(db.registry, replicaId, "heartbeat", request)).sequence).toBe(previous + 1);
  });

  it("an operator's offline: the replica's reserved routes busy is busy, and nothing is settled", async () => {
    const replicas = await provisionFleet(db.registry, { prefix: "busyoff", replicasPerTenant: 1 });
    const [replicaId] = replicas.replicas as [string];
    await lifecycle(db.registry, replicaId, "register");
    const { assignment } = await db.registry.resolveRoute("act_busy_offline", replicas.tenants[0]!.tenant, replicas.capability);
    const sequence = await sequenceOf(replicaId);
    const before = await registryState(db.owner);
    const error = await whileHeld(
      (holder) => holder.query("SELECT 1 FROM aip_route_assignments WHERE action_id = $1 FOR UPDATE", [assignment.action_id]),
      () => refusal(db.registry.operatorReplicaLifecycle(replicaId, "offline", { request_id: "msg_busy_offline", previous_sequence: sequence })),
    );
    expect(error.code).toBe("busy");
    expect(error.message).toMatch(/reserved routes/);
    expect(await registryState(db.owner)).toEqual(before);
    const offline = await db.registry.operatorReplicaLifecycle(replicaId, "offline", { request_id: "msg_busy_offline", previous_sequence: sequence });
    expect(offline.status).toBe("offline");
    await expectHealthy(db.registry);
  });

  it("lease expiry: the routes of an expired replica busy is busy, and nothing is released", async () => {
    const replicas = await provisionFleet(db.registry, { prefix: "busyexp", replicasPerTenant: 1 });
    const [replicaId] = replicas.replicas as [string];
    await lifecycle(db.registry, replicaId, "register", { lease_ttl_ms: 1000 });
    const { assignment } = await db.registry.resolveRoute("act_busy_expiry", replicas.tenants[0]!.tenant, replicas.capability);
    await waitForLeaseEnd(db, [replicaId]);
    // Only this replica's lease has ended (the others were registered for a minute or more).
    const before = await registryState(db.owner);
    const error = await whileHeld(
      (holder) => holder.query("SELECT 1 FROM aip_route_assignments WHERE action_id = $1 FOR UPDATE", [assignment.action_id]),
      () => refusal(db.registry.expireLeases(500)),
    );
    expect(error.code).toBe("busy");
    expect(error.extensions).toMatchObject({ retry_after_ms: RETRY_AFTER_MS.soon });
    expect(await registryState(db.owner)).toEqual(before);
    expect(await db.registry.expireLeases(500)).toMatchObject({ expired: 1, released: 1 });
    await expectHealthy(db.registry);
  });

  it("publication: the publication lock held past lock_timeout is busy with retry guidance, and nothing is published", async () => {
    const before = await registryState(db.owner);
    const error = await whileHeld(
      (holder) => holder.query("SELECT pg_advisory_xact_lock_shared(hashtext(current_database()), 1095323715)"),
      () => refusal(db.registry.publish([connectorType("ctype_busy_publication")])),
    );
    expect(error.code).toBe("busy");
    expect(error.message).toMatch(/publication lock/);
    expect(error.extensions).toMatchObject({ retry_after_ms: RETRY_AFTER_MS.later });
    expect(await registryState(db.owner)).toEqual(before);
    expect((await db.registry.publish([connectorType("ctype_busy_publication")])).changed).toBe(1);
  });

  it("publication: a replica row held by routing past lock_timeout is busy, naming the change", async () => {
    const replicaId = fleet.replica.b as string;
    const stored = (await db.registry.adminGet("replica", replicaId)) as Record<string, unknown>;
    const change = { ...replica(replicaId, fleet.instance.main as string, fleet.versionId, { capacity: 9 }), ...pick(stored) };
    const error = await whileHeld(holdReplica(replicaId), () => refusal(db.registry.publish([connectorType("ctype_busy_publication"), change])));
    expect(error.code).toBe("busy");
    expect(error.extensions).toMatchObject({ change_index: 1, retry_after_ms: RETRY_AFTER_MS.later });
  });

  it("publication: a replica row held by another session is waited for before the catalog lock, so other tenants route and read meanwhile", async () => {
    const other = await publishRoutingFleet(db.registry, {
      prefix: "busyother",
      tenant: "tenant-busyother",
      instances: [{ name: "main", replicas: [{ name: "a", capacity: 8 }] }],
    });
    const replicaId = fleet.replica.b as string;
    const stored = (await db.registry.adminGet("replica", replicaId)) as Record<string, unknown>;
    const change = { ...replica(replicaId, fleet.instance.main as string, fleet.versionId, { capacity: 11 }), ...pick(stored) };
    const holder = await db.owner.connect();
    try {
      await holder.query("BEGIN");
      await holder.query("SELECT 1 FROM aip_connector_replicas WHERE replica_id = $1 FOR UPDATE", [replicaId]);
      let published = false;
      const publishing = db.registry.publish([connectorType("ctype_busy_waiting"), change]).finally(() => {
        published = true;
      });
      await waitForLockWait("aip_publish");
      // The waiting publication holds no catalog lock (the advisory lock's key, either mode).
      const { rows: catalogLocks } = await db.owner.query(
        "SELECT mode FROM pg_locks WHERE locktype = 'advisory' AND objid = 1095323715 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
      );
      expect(catalogLocks).toEqual([]);
      // Another tenant's new route, catalog page and a retry of this tenant's route go through
      // while the publication still waits.
      const route = await db.registry.resolveRoute("act_busy_other", other.tenant, other.capability);
      expect(route.outcome).toBe("created");
      expect((await catalogPage(db.registry, other.tenant, {})).capabilities.length).toBeGreaterThan(0);
      expect(published).toBe(false);
      await holder.query("ROLLBACK");
      const result = await publishing;
      expect(result.results.map((r) => r.outcome)).toEqual(["created", "updated"]);
      expect(((await db.registry.adminGet("replica", replicaId)) as { capacity: number }).capacity).toBe(11);
      await db.registry.settleRoute(route.assignment.action_id, other.tenant, route.assignment, "completed");
    } finally {
      await holder.query("ROLLBACK").catch(() => {});
      holder.release();
    }
    await expectHealthy(db.registry);
  });

  it("publication: under the catalog lock it waits for no row; one still held is busy at once", async () => {
    // A tenant's catalog revision row is written under the lock (the feed's trimming also writes
    // it, without the catalog lock): held by another session, the publication gives up at once
    // instead of holding every reader and resolver behind it for its 5 s lock_timeout.
    const revised = await publishRoutingFleet(db.registry, {
      prefix: "busyrev",
      tenant: "tenant-busyrev",
      instances: [{ name: "main", replicas: [{ name: "a", capacity: 8 }] }],
    });
    const before = await registryState(db.owner);
    const started = Date.now();
    const error = await whileHeld(
      (holder) => holder.query("SELECT 1 FROM aip_tenant_catalog_revisions WHERE tenant_id = $1 FOR UPDATE", [revised.tenant]),
      () => refusal(db.registry.publish([{ op: "set_connector_type_enabled", id: revised.typeId, enabled: false }])),
    );
    expect(error.code).toBe("busy");
    expect(error.message).toMatch(/does not wait for rows/);
    expect(Date.now() - started).toBeLessThan(2000);
    expect(await registryState(db.owner)).toEqual(before);
  });

  it("any other lock wait that runs out (a catalog read behind a publication) is busy, not storage", async () => {
    const error = await whileHeld(
      (holder) => holder.query("SELECT pg_advisory_xact_lock(hashtext(current_database()), 1095323715)"),
      () => refusal(catalogPage(db.registry, fleet.tenant, {})),
    );
    expect(error.code).toBe("busy");
    expect(error.extensions).toMatchObject({ sqlstate: "55P03", retry_after_ms: RETRY_AFTER_MS.later });
    expect(error.retryable).toBe(true);
  });
});

/** Until a session waits on a lock in a statement that calls `fn`. */
async function waitForLockWait(fn: string): Promise<void> {
  for (let i = 0; i < 400; i++) {
    const { rows } = await db.owner.query(
      "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()",
      [fn],
    );
    if (rows.length > 0) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`no statement calling ${fn} waited for a lock`);
}

/** The provisioning fields of a stored replica, as put_replica states them. */
function pick(stored: Record<string, unknown>) {
  const { endpoint, peer_principal_id, peer_principal_kind, peer_did, trust_domain, transport_profile, topology } = stored;
  return { endpoint, peer_principal_id, peer_principal_kind, peer_did, trust_domain, transport_profile, topology };
}
