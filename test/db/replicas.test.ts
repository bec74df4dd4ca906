/**
 * Connector-host lifecycle (aip_host_replica_lifecycle) through the data role: transitions, sequence
 * fences, database-clock leases, replay, takeover, the rollout-version rule, draining, offline
 * settlement, and independence from the catalog revision.
 */
import { describe, expect, it } from "vitest";
import { useTestDatabase } from "../support/database.js";
import {
  hostPrincipal,
  instance,
  publishSimpleFleet,
  registrationEvidence,
  replica,
  requestId,
  version,
  WELL_FORMED_EVIDENCE,
} from "../../fixtures/records.js";
import { counters, dbNowMs, lifecycle, provisionFleet, replicaRow, shortenLeases, waitForLeaseEnd } from "../support/replicas.js";
import { catalogRevision, expectRefusal } from "../support/assertions.js";
import { catalogPage } from "../../fixtures/catalog-reads.js";

const db = useTestDatabase();

describe("register", () => {
  it("accepts only provisioned replicas", async () => {
    const error = await expectRefusal(lifecycle(db.registry, "crepl_never_provisioned", "register", WELL_FORMED_EVIDENCE), "not-found");
    expect(error.message).toContain("crepl_never_provisioned");
  });

  it("starts a lease of lease_ttl_ms on the database clock and advances the sequence by one", async () => {
    const fleet = await provisionFleet(db.registry, { prefix: "reg" });
    const id = fleet.replicas[0]!;
    expect(await replicaRow(db, id)).toMatchObject({ status: "offline", health_revision: 0, lease_expires_at: null });
    const before = await dbNowMs(db);
    const answer = await lifecycle(db.registry, id, "register", { lease_ttl_ms: 45_000 });
    const after = await dbNowMs(db);
    expect(answer).toEqual({ replica_id: id, status: "ready", sequence: 1, lease_expires_at: expect.any(String) });
    const lease = Date.parse(answer.lease_expires_at!);
    expect(lease).toBeGreaterThanOrEqual(before + 45_000);
    expect(lease).toBeLessThanOrEqual(after + 45_000);
    expect(answer.lease_expires_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    expect(await replicaRow(db, id)).toMatchObject({ status: "ready", health_revision: 1, lease_expires_at: answer.lease_expires_at });
  });

  it("defaults the lease to 30 s and bounds lease_ttl_ms to [1000, 300000]", async () => {
    const fleet = await provisionFleet(db.registry, { prefix: "ttl" });
    const id = fleet.replicas[0]!;
    for (const bad of [999, 300_001, 0, -1, 1500.5]) {
      const error = await expectRefusal(lifecycle(db.registry, id, "register", { lease_ttl_ms: bad }), "invalid");
      expect(error.extensions.errors).toEqual([expect.objectContaining({ field: "lease_ttl_ms" })]);
    }
    expect((await replicaRow(db, id)).health_revision).toBe(0);
    // Each lease is the statement's clock plus the TTL: between the database clock read before
    // and after it, however slowly the statement ran. The shortest comes last, so that no step
    // depends on a 1 s lease still being live.
    const leased = async (call: () => ReturnType<typeof lifecycle>, ttl: number) => {
      const before = await dbNowMs(db);
      const answer = await call();
      const after = await dbNowMs(db);
      expect(Date.parse(answer.lease_expires_at!)).toBeGreaterThanOrEqual(before + ttl);
      expect(Date.parse(answer.lease_expires_at!)).toBeLessThanOrEqual(after + ttl);
      return answer;
    };
    const first = await leased(() => lifecycle(db.registry, id, "register"), 30_000);
    const high = await leased(() => lifecycle(db.registry, id, "heartbeat", { previous_sequence: first.sequence, lease_ttl_ms: 300_000 }), 300_000);
    await leased(() => lifecycle(db.registry, id, "heartbeat", { previous_sequence: high.sequence, lease_ttl_ms: 1000 }), 1000);
  });

  it("is refused when the replica's version is not its instance's active rollout version", async () => {
    const fleet = await provisionFleet(db.registry, { prefix: "roll" });
    const [oldReplica] = fleet.replicas as [string];
    const tenant = fleet.tenants[0]!;
    // The version is demoted: no replica of it may register.
    await db.registry.publish([{ op: "set_version_status", id: fleet.versionId, status: "admitted" }]);
    const demoted = await expectRefusal(lifecycle(db.registry, oldReplica, "register"), "admission");
    expect(demoted.extensions).toMatchObject({ replica_id: oldReplica, version_id: fleet.versionId });
    await db.registry.publish([{ op: "set_version_status", id: fleet.versionId, status: "active" }]);
    await lifecycle(db.registry, oldReplica, "register");
    const { sequence } = await lifecycle(db.registry, oldReplica, "offline", { previous_sequence: 1 });
    // The instance rolls forward to v2: v1's replica is no longer the rollout, even though v1 is active.
    await db.registry.publish([
      await version("cver_roll_2", fleet.typeId, [fleet.capability]),
      instance(tenant.instanceId, fleet.typeId, "cver_roll_2", tenant.tenant, 2),
    ]);
    await expectRefusal(lifecycle(db.registry, oldReplica, "register"), "admission");
    await expectRefusal(lifecycle(db.registry, oldReplica, "register", { previous_sequence: sequence }), "admission");
    expect(await replicaRow(db, oldReplica)).toMatchObject({ status: "offline", health_revision: sequence });
  });

  it("is refused, as resolve would refuse the chain, while the instance or the connector type is disabled", async () => {
    const fleet = await provisionFleet(db.registry, { prefix: "regoff" });
    const id = fleet.replicas[0]!;
    const tenant = fleet.tenants[0]!;
    await db.registry.publish([instance(tenant.instanceId, fleet.typeId, fleet.versionId, tenant.tenant, 2, { status: "disabled" })]);
    const disabledInstance = await expectRefusal(lifecycle(db.registry, id, "register"), "admission");
    expect(disabledInstance.message).toMatch(/instance .* is disabled/);
    expect(disabledInstance.extensions).toMatchObject({ replica_id: id, version_id: fleet.versionId });
    await db.registry.publish([instance(tenant.instanceId, fleet.typeId, fleet.versionId, tenant.tenant, 3)]);
    await db.registry.publish([{ op: "set_connector_type_enabled", id: fleet.typeId, enabled: false }]);
    expect((await expectRefusal(lifecycle(db.registry, id, "register"), "admission")).message).toMatch(/connector type .* is disabled/);
    // Refused registrations consume nothing and move nothing.
    expect(await replicaRow(db, id)).toMatchObject({ status: "offline", health_revision: 0 });
    await db.registry.publish([{ op: "set_connector_type_enabled", id: fleet.typeId, enabled: true }]);
    expect((await lifecycle(db.registry, id, "register")).status).toBe("ready");
  });
});

describe("transitions and fences", () => {
  it("heartbeat, drain and offline require previous_sequence", async () => {
    const fleet = await provisionFleet(db.registry, { prefix: "req" });
    const id = fleet.replicas[0]!;
    await lifecycle(db.registry, id, "register");
    for (const operation of ["heartbeat", "drain", "offline"] as const) {
      const error = await expectRefusal(lifecycle(db.registry, id, operation), "invalid");
      expect(error.extensions.errors).toEqual([expect.objectContaining({ field: "previous_sequence" })]);
    }
    expect(await replicaRow(db, id)).toMatchObject({ status: "ready", health_revision: 1 });
  });

  it("advance the sequence by exactly one and refuse a stale previous_sequence with the current one", async () => {
    const fleet = await provisionFleet(db.registry, { prefix: "fence" });
    const id = fleet.replicas[0]!;
    const registered = await lifecycle(db.registry, id, "register");
    expect(registered.sequence).toBe(1);

    const beat = await lifecycle(db.registry, id, "heartbeat", { previous_sequence: 1 });
    expect(beat).toMatchObject({ status: "ready", sequence: 2 });
    expect(Date.parse(beat.lease_expires_at!)).toBeGreaterThanOrEqual(Date.parse(registered.lease_expires_at!));

    for (const operation of ["heartbeat", "drain", "offline", "register"] as const) {
      for (const stale of [1, 3]) {
        const error = await expectRefusal(lifecycle(db.registry, id, operation, { previous_sequence: stale }), "conflict");
        expect(error.extensions).toMatchObject({ replica_id: id, sequence: 2 });
      }
    }
    expect(await replicaRow(db, id)).toMatchObject({ status: "ready", health_revision: 2 });

    const drained = await lifecycle(db.registry, id, "drain", { previous_sequence: 2 });
    expect(drained).toMatchObject({ status: "draining", sequence: 3 });
    // A heartbeat keeps a draining replica draining (the reference would flip it back to ready).
    const drainingBeat = await lifecycle(db.registry, id, "heartbeat", { previous_sequence: 3 });
    expect(drainingBeat).toMatchObject({ status: "draining", sequence: 4 });
    // Re-registering with the current sequence makes it ready again.
    expect(await lifecycle(db.registry, id, "register", { previous_sequence: 4 })).toMatchObject({ status: "ready", sequence: 5 });

    const before = await dbNowMs(db);
    const offline = await lifecycle(db.registry, id, "offline", { previous_sequence: 5 });
    expect(offline).toMatchObject({ status: "offline", sequence: 6 });
    expect(Date.parse(offline.lease_expires_at!)).toBeLessThanOrEqual(await dbNowMs(db));
    expect(Date.parse(offline.lease_expires_at!)).toBeGreaterThanOrEqual(before);
    expect(await replicaRow(db, id)).toMatchObject({ status: "offline", health_revision: 6, lease_expires_at: offline.lease_expires_at });

    // No live lease: heartbeat and drain are refused (carrying the sequence); register starts over.
    for (const operation of ["heartbeat", "drain"] as const) {
      const error = await expectRefusal(lifecycle(db.registry, id, operation, { previous_sequence: 6 }), "conflict");
      expect(error.extensions).toMatchObject({ replica_status: "offline", sequence: 6 });
    }
    expect(await lifecycle(db.registry, id, "register")).toMatchObject({ status: "ready", sequence: 7 });
  });
});

describe("replay", () => {
  it("returns the same answer for the same request_id and payload and changes nothing", async () => {
    const fleet = await provisionFleet(db.registry, { prefix: "replay" });
    const id = fleet.replicas[0]!;
    const steps = [
      { operation: "register", request: { lease_ttl_ms: 20_000, ...(await registrationEvidence(db.registry, id)) } },
      { operation: "heartbeat", request: { previous_sequence: 1, lease_ttl_ms: 20_000 } },
      { operation: "drain", request: { previous_sequence: 2 } },
      { operation: "offline", request: { previous_sequence: 3 } },
    ] as const;
    for (const step of steps) {
      const request = { request_id: requestId(), ...step.request };
      const answer = await db.registry.replicaLifecycle(id, step.operation, request, hostPrincipal(id));
      const { rows: before } = await db.owner.query("SELECT * FROM aip_connector_replicas WHERE replica_id = $1", [id]);
      await new Promise((resolve) => setTimeout(resolve, 5)); // a fresh transition would get a later clock
      const replayed = await db.registry.replicaLifecycle(id, step.operation, request, hostPrincipal(id));
      expect(JSON.stringify(replayed)).toBe(JSON.stringify(answer));
      const { rows: after } = await db.owner.query("SELECT * FROM aip_connector_replicas WHERE replica_id = $1", [id]);
      expect(after).toEqual(before);
    }
  });

  it("refuses the same request_id with another payload, whatever differs", async () => {
    const fleet = await provisionFleet(db.registry, { prefix: "reuse" });
    const id = fleet.replicas[0]!;
    const evidence = await registrationEvidence(db.registry, id);
    const register = { request_id: requestId(), lease_ttl_ms: 20_000, ...evidence };
    await db.registry.replicaLifecycle(id, "register", register, hostPrincipal(id));
    await expectRefusal(db.registry.replicaLifecycle(id, "register", { ...register, lease_ttl_ms: 25_000 }, hostPrincipal(id)), "conflict");
    await expectRefusal(db.registry.replicaLifecycle(id, "register", { ...register, previous_sequence: 1 }, hostPrincipal(id)), "conflict");
    // The evidence is part of the payload: the same request_id stating other evidence is a reuse.
    await expectRefusal(db.registry.replicaLifecycle(id, "register", { ...register, capability_count: 2 }, hostPrincipal(id)), "conflict");
    const asHeartbeat = await expectRefusal(
      db.registry.replicaLifecycle(id, "heartbeat", { request_id: register.request_id, lease_ttl_ms: 20_000, previous_sequence: 1 }, hostPrincipal(id)),
      "conflict",
    );
    expect(asHeartbeat.extensions).toEqual({ replica_id: id });
    expect(asHeartbeat.message).toContain(register.request_id);
    // An omitted lease_ttl_ms means the default: the same payload as sending 30000.
    const beat = { request_id: requestId(), previous_sequence: 1 };
    const first = await db.registry.replicaLifecycle(id, "heartbeat", beat, hostPrincipal(id));
    expect(await db.registry.replicaLifecycle(id, "heartbeat", { ...beat, lease_ttl_ms: 30_000 }, hostPrincipal(id))).toEqual(first);
    await expectRefusal(db.registry.replicaLifecycle(id, "heartbeat", { ...beat, lease_ttl_ms: 10_000 }, hostPrincipal(id)), "conflict");
    expect((await replicaRow(db, id)).health_revision).toBe(2);
  });
});

describe("replay after the replica moved for another reason", () => {
  it("never answers an exact replay with a state lease expiry has ended", async () => {
    const fleet = await provisionFleet(db.registry, { prefix: "replay_exp" });
    const id = fleet.replicas[0]!;
    const register = { request_id: requestId(), lease_ttl_ms: 1000, ...(await registrationEvidence(db.registry, id)) };
    const answer = await db.registry.replicaLifecycle(id, "register", register, hostPrincipal(id));
    expect(answer).toMatchObject({ status: "ready", sequence: 1 });
    await waitForLeaseEnd(db, [id]);
    // Other tests' leases in this database may have ended too (default 30 s): what matters is this replica.
    expect((await db.registry.expireLeases(100)).expired).toBeGreaterThanOrEqual(1);
    const expired = await replicaRow(db, id);
    expect(expired).toMatchObject({ status: "offline", health_revision: 2 });
    // The replay is no longer the replica's last request: the "ready" answer is never repeated.
    const replay = await expectRefusal(db.registry.replicaLifecycle(id, "register", register, hostPrincipal(id)), "conflict");
    expect(replay.extensions).toMatchObject({ replica_id: id, sequence: 2 });
    expect(await replicaRow(db, id)).toEqual(expired);
  });

  it("never answers an exact replay with the sequence a capacity change has moved past", async () => {
    const fleet = await provisionFleet(db.registry, { prefix: "replay_cap", capacity: 4 });
    const id = fleet.replicas[0]!;
    await lifecycle(db.registry, id, "register");
    const beat = { request_id: requestId(), previous_sequence: 1 };
    expect(await db.registry.replicaLifecycle(id, "heartbeat", beat, hostPrincipal(id))).toMatchObject({ sequence: 2 });
    await db.registry.publish([replica(id, fleet.tenants[0]!.instanceId, fleet.versionId, { capacity: 8 })]);
    expect(await replicaRow(db, id)).toMatchObject({ health_revision: 3, capacity: 8 });
    // The heartbeat's answer named sequence 2; replayed now it is fenced like any stale request.
    const replay = await expectRefusal(db.registry.replicaLifecycle(id, "heartbeat", beat, hostPrincipal(id)), "conflict");
    expect(replay.extensions).toMatchObject({ replica_id: id, sequence: 3 });
  });
});

describe("superseded register requests", () => {
  it("refuses a delayed duplicate of an older register instead of bringing an offline replica back", async () => {
    const fleet = await provisionFleet(db.registry, { prefix: "stale" });
    const id = fleet.replicas[0]!;
    const evidence = await registrationEvidence(db.registry, id);
    const register = { request_id: requestId(), lease_ttl_ms: 20_000, ...evidence };
    await db.registry.replicaLifecycle(id, "register", register, hostPrincipal(id));
    await db.registry.replicaLifecycle(id, "offline", { request_id: requestId(), previous_sequence: 1 }, hostPrincipal(id));
    const before = await replicaRow(db, id);
    expect(before).toMatchObject({ status: "offline", health_revision: 2 });

    // The first register arrives again (a retry delayed in the network): no longer the last request.
    const stale = await expectRefusal(db.registry.replicaLifecycle(id, "register", register, hostPrincipal(id)), "conflict");
    expect(stale.message).toContain("already consumed");
    expect(stale.extensions).toMatchObject({ replica_id: id, sequence: 2 });
    expect(await replicaRow(db, id)).toEqual(before);

    // The host registering anew uses a new request_id, and that one replays exactly.
    const again = { request_id: requestId(), lease_ttl_ms: 20_000, ...evidence };
    const answer = await db.registry.replicaLifecycle(id, "register", again, hostPrincipal(id));
    expect(answer).toMatchObject({ status: "ready", sequence: 3 });
    expect(await db.registry.replicaLifecycle(id, "register", again, hostPrincipal(id))).toEqual(answer);
  });

  it("scopes consumed register ids per replica, and a refused register consumes nothing", async () => {
    const fleet = await provisionFleet(db.registry, { prefix: "scope", replicasPerTenant: 2 });
    const [a, b] = fleet.replicas as [string, string];
    // Both replicas serve the same version and instance: the same evidence.
    const shared = { request_id: requestId(), lease_ttl_ms: 20_000, ...(await registrationEvidence(db.registry, a)) };
    await db.registry.replicaLifecycle(a, "register", shared, hostPrincipal(a));
    expect(await db.registry.replicaLifecycle(b, "register", shared, hostPrincipal(b))).toMatchObject({ replica_id: b, status: "ready" });

    // A register refused (live replica, no sequence) leaves its request_id unused: after the
    // replica goes offline the same request is a first registration.
    const refused = { ...shared, request_id: requestId() };
    await expectRefusal(db.registry.replicaLifecycle(a, "register", refused, hostPrincipal(a)), "conflict");
    await db.registry.replicaLifecycle(a, "offline", { request_id: requestId(), previous_sequence: 1 }, hostPrincipal(a));
    expect(await db.registry.replicaLifecycle(a, "register", refused, hostPrincipal(a))).toMatchObject({ status: "ready", sequence: 3 });
  });
});

describe("takeover", () => {
  it("refuses to re-register a live replica without its current sequence; allows it after a clean offline", async () => {
    const fleet = await provisionFleet(db.registry, { prefix: "live" });
    const id = fleet.replicas[0]!;
    const first = await lifecycle(db.registry, id, "register");
    const refused = await expectRefusal(lifecycle(db.registry, id, "register"), "conflict");
    expect(refused.extensions).toMatchObject({ replica_id: id, lease_expires_at: first.lease_expires_at });
    await expectRefusal(lifecycle(db.registry, id, "register", { previous_sequence: 0 }), "conflict");
    const draining = await lifecycle(db.registry, id, "drain", { previous_sequence: 1 });
    await expectRefusal(lifecycle(db.registry, id, "register"), "conflict");
    expect(await replicaRow(db, id)).toMatchObject({ status: "draining", health_revision: draining.sequence });
    await lifecycle(db.registry, id, "offline", { previous_sequence: draining.sequence });
    expect(await lifecycle(db.registry, id, "register")).toMatchObject({ status: "ready", sequence: draining.sequence + 2 });
  });
});

describe("routing effects", () => {
  it("offline settles the replica's reserved routes as lease_expired and releases their counters", async () => {
    const fleet = await provisionFleet(db.registry, { prefix: "off", tenants: ["tenant-off"], replicasPerTenant: 2 });
    const [a, b] = fleet.replicas as [string, string];
    const seqA = (await lifecycle(db.registry, a, "register")).sequence;
    await lifecycle(db.registry, b, "register");
    const routes = [];
    for (let n = 0; n < 6; n++) routes.push((await db.registry.resolveRoute(`act_off_${n}`, "tenant-off", fleet.capability)).assignment);
    const onA = routes.filter((r) => r.replica_id === a);
    const onB = routes.filter((r) => r.replica_id === b);
    expect(onA.length).toBeGreaterThan(0);
    expect(onB.length).toBeGreaterThan(0);
    // One of A's routes was already completed: offline must not release it again.
    await db.registry.settleRoute(onA[0]!.action_id, "tenant-off", onA[0]!, "completed");

    const offline = await lifecycle(db.registry, a, "offline", { previous_sequence: seqA });
    expect(offline).toMatchObject({ status: "offline", sequence: seqA + 1 });
    expect(await replicaRow(db, a)).toMatchObject({ status: "offline", active_assignments: 0 });
    expect(await replicaRow(db, b)).toMatchObject({ status: "ready", active_assignments: onB.length });
    const held = await counters(db);
    expect(held["tenant:tenant-off"]).toBe(onB.length);
    expect(held[`instance:${fleet.tenants[0]!.instanceId}`]).toBe(onB.length);

    expect((await db.registry.getRoute(onA[0]!.action_id, "tenant-off"))!.last_settlement).toBe("completed");
    for (const route of onA.slice(1)) {
      const state = await db.registry.getRoute(route.action_id, "tenant-off");
      expect(state).toMatchObject({ reserved: false, last_settlement: "lease_expired", assignment: route });
      expect(await db.registry.settleRoute(route.action_id, "tenant-off", route, "completed")).toEqual({
        action_id: route.action_id,
        released: false,
        last_settlement: "lease_expired",
      });
    }
    expect((await counters(db))["tenant:tenant-off"]).toBe(onB.length);
    expect(await db.registry.checkInvariants()).toMatchObject({ healthy: true });
  });
});

describe.concurrent("leases that end (shortened to 1 s once the test needs them no more, run side by side)", () => {
  it("after lease expiry succeeds and keeps the registry-owned active count; reserved routes stay settleable", async () => {
    const fleet = await provisionFleet(db.registry, { prefix: "take" });
    const id = fleet.replicas[0]!;
    const tenant = fleet.tenants[0]!.tenant;
    await lifecycle(db.registry, id, "register", { lease_ttl_ms: 60_000 });
    const routes = [];
    for (const action of ["act_take_1", "act_take_2"]) routes.push((await db.registry.resolveRoute(action, tenant, fleet.capability)).assignment);
    expect(await replicaRow(db, id)).toMatchObject({ active_assignments: 2 });
    await expectRefusal(lifecycle(db.registry, id, "register"), "conflict");
    const { sequence } = (await shortenLeases(db, [id]))[0]!;

    await waitForLeaseEnd(db, [id]);
    // An expired lease is never revived by heartbeat or drain, even with the right sequence.
    for (const operation of ["heartbeat", "drain"] as const) {
      await expectRefusal(lifecycle(db.registry, id, operation, { previous_sequence: sequence }), "conflict");
    }
    const taken = await lifecycle(db.registry, id, "register");
    expect(taken).toMatchObject({ status: "ready", sequence: sequence + 1 });
    expect(await replicaRow(db, id)).toMatchObject({ status: "ready", active_assignments: 2 });
    const held = await counters(db);
    expect(held[`tenant:${tenant}`]).toBe(2);
    for (const route of routes) {
      expect(await db.registry.getRoute(route.action_id, tenant)).toMatchObject({ reserved: true, assignment: route });
      expect(await db.registry.settleRoute(route.action_id, tenant, route, "completed")).toMatchObject({ released: true });
    }
    expect(await replicaRow(db, id)).toMatchObject({ active_assignments: 0 });
    expect(await counters(db)).toMatchObject({ [`tenant:${tenant}`]: 0, [`instance:${fleet.tenants[0]!.instanceId}`]: 0 });
  });
  it("draining takes no new routes but serves pinned retries while the lease lasts", async () => {
    const fleet = await provisionFleet(db.registry, { prefix: "drain", tenants: ["tenant-drain"] });
    const id = fleet.replicas[0]!;
    const { sequence } = await lifecycle(db.registry, id, "register", { lease_ttl_ms: 60_000 });
    const pinned = (await db.registry.resolveRoute("act_drain_pinned", "tenant-drain", fleet.capability)).assignment;
    await db.registry.settleRoute(pinned.action_id, "tenant-drain", pinned, "outcome_unknown");
    await lifecycle(db.registry, id, "drain", { previous_sequence: sequence, lease_ttl_ms: 60_000 });

    const refused = await expectRefusal(db.registry.resolveRoute("act_drain_new", "tenant-drain", fleet.capability), "replica-unavailable");
    expect(refused.extensions).toMatchObject({ instance_id: fleet.tenants[0]!.instanceId });
    const retry = await db.registry.resolveRoute("act_drain_pinned", "tenant-drain", fleet.capability);
    expect(retry).toEqual({ outcome: "reacquired", assignment: pinned });
    expect(await replicaRow(db, id)).toMatchObject({ status: "draining", active_assignments: 1 });
    await db.registry.settleRoute(pinned.action_id, "tenant-drain", pinned, "completed");

    // Once the draining lease ends the pinned retry is refused too, and no replacement is made
    // (a heartbeat keeps the replica draining while it shortens the lease).
    expect((await shortenLeases(db, [id]))[0]).toMatchObject({ status: "draining" });
    await waitForLeaseEnd(db, [id]);
    await expectRefusal(db.registry.resolveRoute("act_drain_pinned", "tenant-drain", fleet.capability), "replica-unavailable");
    expect(await db.registry.getRoute("act_drain_pinned", "tenant-drain")).toMatchObject({ reserved: false, assignment: pinned });
    expect(await replicaRow(db, id)).toMatchObject({ active_assignments: 0 });
  });
});

describe("catalog independence", () => {
  it("no lifecycle call or lease expiry moves the catalog revision, so a cursor stays valid between pages", async () => {
    const fleet = await publishSimpleFleet(db.registry, { prefix: "cur", tenants: ["tenant-cur"], capabilities: ["cap:cur.a", "cap:cur.b", "cap:cur.c"] });
    const id = fleet.replicas[0]!;
    const revision = await catalogRevision(db.owner);
    const first = await catalogPage(db.registry, "tenant-cur", { limit: 1 });
    expect(first.catalog_revision).toBe(revision);
    expect(first.next_cursor).not.toBeNull();

    const sequence = (await db.registry.adminGet("replica", id))!.health_revision as number;
    let s = (await lifecycle(db.registry, id, "heartbeat", { previous_sequence: sequence })).sequence;
    s = (await lifecycle(db.registry, id, "drain", { previous_sequence: s })).sequence;
    s = (await lifecycle(db.registry, id, "offline", { previous_sequence: s })).sequence;
    s = (await lifecycle(db.registry, id, "register", { lease_ttl_ms: 1000 })).sequence;
    const second = await catalogPage(db.registry, "tenant-cur", { limit: 1, cursor: first.next_cursor! });
    expect(second.capabilities.map((d) => d.capability.id)).toEqual(["cap:cur.b"]);

    await waitForLeaseEnd(db, [id]);
    await db.registry.expireLeases(100);
    expect(await catalogRevision(db.owner)).toBe(revision);
    const third = await catalogPage(db.registry, "tenant-cur", { limit: 1, cursor: second.next_cursor! });
    expect(third.capabilities.map((d) => d.capability.id)).toEqual(["cap:cur.c"]);

    // The same cursor does go stale when the catalog itself changes: the check above can fail.
    await db.registry.publish([{ op: "set_connector_type_enabled", id: fleet.typeId, enabled: false }]);
    await expectRefusal(catalogPage(db.registry, "tenant-cur", { limit: 1, cursor: second.next_cursor! }), "stale-cursor");
  });
});
