/**
 * POST /v1/replicas/{replica_id}/{operation} in-process: scope, problem codes and members, and
 * byte-identical replay.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { useTestDatabase } from "../support/database.js";
import { instance, registrationEvidence, requestId, WELL_FORMED_EVIDENCE } from "../../fixtures/records.js";
import { createTestApi, type TestApi } from "../support/http.js";
import { provisionFleet, replicaRow } from "../support/replicas.js";

const db = useTestDatabase();
let api: TestApi;
let replicas: string[];
beforeAll(async () => {
  api = createTestApi(db.registry);
  replicas = (await provisionFleet(db.registry, { prefix: "h", replicasPerTenant: 4 })).replicas;
});

/**
 * Posts as the host the replica was provisioned for, unless another token is given. A register
 * body without evidence gets the replica's own (what its host runs), as every host sends it.
 */
const post = async (replicaId: string, operation: string, body: unknown, token?: string) => {
  const evidence =
    operation === "register" && body !== null && typeof body === "object" && !("artifact_digest" in body)
      ? await registrationEvidence(db.registry, replicaId).catch(() => WELL_FORMED_EVIDENCE)
      : {};
  return api.call("POST", `/v1/replicas/${replicaId}/${operation}`, {
    token: token ?? (await api.hostTokenFor(replicaId)),
    body: typeof body === "object" && body !== null ? { ...evidence, ...body } : body,
  });
};

async function problem(response: Response, status: number, code: string) {
  expect(response.status).toBe(status);
  expect(response.headers.get("content-type")).toBe("application/problem+json");
  const body = (await response.json()) as Record<string, unknown>;
  expect(body).toMatchObject({ status, code });
  return body;
}

describe("authorization", () => {
  it("needs a token with replicas:write (bound to a peer principal) or registry:admin", async () => {
    await problem(await post(replicas[0]!, "register", { request_id: requestId() }, ""), 401, "unauthorized");
    for (const scopes of [["fleet:read"], ["routes:write"], ["replicas:write"]] as const) {
      const token = await api.token({ scopes: [...scopes] });
      await problem(await post(replicas[0]!, "register", { request_id: requestId() }, token), 403, "forbidden");
    }
    expect((await replicaRow(db, replicas[0]!)).health_revision).toBe(0);
  });

  it("lets a host drive only the replicas provisioned for its peer principal", async () => {
    const { replicas: own } = await provisionFleet(db.registry, { prefix: "hbind", replicasPerTenant: 2 });
    const [mine, theirs] = [own[0]!, own[1]!];
    // Another host's replica is indistinguishable from one that was never provisioned.
    const foreign = await problem(await post(theirs, "register", { request_id: requestId() }, await api.hostTokenFor(mine)), 404, "not-found");
    const never = await problem(await post("crepl_never", "register", { request_id: requestId() }, await api.hostTokenFor(mine)), 404, "not-found");
    expect(foreign.detail).toBe(String(never.detail).replace("crepl_never", theirs));
    expect((await replicaRow(db, theirs)).health_revision).toBe(0);
    expect((await post(mine, "register", { request_id: requestId() })).status).toBe(200);
    // An operator may drive any replica, e.g. to take it offline.
    const operator = await api.adminToken();
    expect((await post(mine, "offline", { request_id: requestId(), previous_sequence: 1 }, operator)).status).toBe(200);
    expect((await replicaRow(db, mine)).status).toBe("offline");
  });
});

describe("lifecycle", () => {
  it("registers, heartbeats, drains and goes offline, each answer carrying the next sequence", async () => {
    const id = replicas[0]!;
    const registered = await post(id, "register", { request_id: requestId(), lease_ttl_ms: 10_000 });
    expect(registered.status).toBe(200);
    expect(registered.headers.get("content-type")).toMatch(/^application\/json/);
    expect(await registered.json()).toEqual({ replica_id: id, status: "ready", sequence: 1, lease_expires_at: expect.any(String) });
    expect(await (await post(id, "heartbeat", { request_id: requestId(), previous_sequence: 1 })).json()).toMatchObject({ status: "ready", sequence: 2 });
    expect(await (await post(id, "drain", { request_id: requestId(), previous_sequence: 2 })).json()).toMatchObject({ status: "draining", sequence: 3 });
    expect(await (await post(id, "offline", { request_id: requestId(), previous_sequence: 3 })).json()).toMatchObject({ status: "offline", sequence: 4 });
  });

  it("answers 404 for a replica nobody provisioned", async () => {
    const body = await problem(await post("crepl_unknown", "register", { request_id: requestId() }), 404, "not-found");
    expect(body.detail).toContain("crepl_unknown");
  });

  it("answers 409 with the current sequence when previous_sequence is stale", async () => {
    const id = replicas[1]!;
    await post(id, "register", { request_id: requestId() });
    const body = await problem(await post(id, "heartbeat", { request_id: requestId(), previous_sequence: 7 }), 409, "conflict");
    expect(body).toMatchObject({ replica_id: id, sequence: 1 });
    const live = await problem(await post(id, "register", { request_id: requestId() }), 409, "conflict");
    expect(live).toMatchObject({ replica_id: id, lease_expires_at: expect.any(String) });
  });

  it("answers 400 for out-of-range leases, a missing previous_sequence, unknown members or operations", async () => {
    const id = replicas[2]!;
    for (const lease_ttl_ms of [999, 300_001, 2.5, "30000"]) {
      const body = await problem(await post(id, "register", { request_id: requestId(), lease_ttl_ms }), 400, "invalid");
      expect(body.errors).toEqual([expect.objectContaining({ field: "lease_ttl_ms" })]);
    }
    for (const request_id of ["", "   ", "x".repeat(257)]) {
      await problem(await post(id, "register", { request_id }), 400, "invalid");
    }
    await problem(await post(id, "register", { request_id: requestId(), replica_id: "crepl_other" }), 400, "invalid");
    await problem(await post(id, "register", { request_id: requestId(), previous_sequence: -1 }), 400, "invalid");
    await problem(await post(id, "reboot", { request_id: requestId() }), 400, "invalid");
    await post(id, "register", { request_id: requestId() });
    const missing = await problem(await post(id, "heartbeat", { request_id: requestId() }), 400, "invalid");
    expect(missing.errors).toEqual([expect.objectContaining({ field: "previous_sequence" })]);
    expect((await replicaRow(db, id)).health_revision).toBe(1);
  });

  it("answers 422 when the replica's version is no longer active", async () => {
    const fleet = await provisionFleet(db.registry, { prefix: "h422" });
    await db.registry.publish([{ op: "set_version_status", id: fleet.versionId, status: "revoked" }]);
    await problem(await post(fleet.replicas[0]!, "register", { request_id: requestId() }), 422, "admission");
  });
});

describe("registration evidence", () => {
  it("refuses a register stating no evidence, and a heartbeat stating some, as invalid naming the field", async () => {
    const {
      replicas: [id],
    } = await provisionFleet(db.registry, { prefix: "hev", replicasPerTenant: 1 });
    const token = await api.hostTokenFor(id!);
    const bare = await api.call("POST", `/v1/replicas/${id}/register`, { token, body: { request_id: requestId() } });
    expect((await problem(bare, 400, "invalid")).errors).toEqual([{ field: "artifact_digest", message: "is required" }]);
    const malformed = await post(id!, "register", { request_id: requestId(), manifest_digest: "sha256:ABC" });
    expect((await problem(malformed, 400, "invalid")).errors).toEqual([expect.objectContaining({ field: "manifest_digest" })]);
    expect((await replicaRow(db, id!)).health_revision).toBe(0);
  });

  it("refuses a register whose host runs another configuration revision than the instance's, and accepts the current one", async () => {
    const fleet = await provisionFleet(db.registry, { prefix: "hevcfg", replicasPerTenant: 1 });
    const id = fleet.replicas[0]!;
    const loaded = await registrationEvidence(db.registry, id);
    // The operator publishes a newer configuration: a host still running the old one may not register.
    const { instanceId, tenant } = fleet.tenants[0]!;
    await db.registry.publish([instance(instanceId, fleet.typeId, fleet.versionId, tenant, 2)]);
    const stale = await problem(await post(id, "register", { request_id: requestId(), ...loaded }), 422, "admission");
    expect(stale).toMatchObject({ field: "config_revision", expected: 2, replica_id: id, instance_id: instanceId });
    expect(stale.detail).toMatch(/configuration revision 2/);
    expect((await post(id, "register", { request_id: requestId(), ...loaded, config_revision: 2 })).status).toBe(200);
  });

  it("with ALLOW_REGISTRATION_WITHOUT_EVIDENCE, accepts a register stating none of it; one stating any must prove all", async () => {
    const lenient = createTestApi(db.registry, { allowRegistrationWithoutEvidence: true });
    const { replicas: ids } = await provisionFleet(db.registry, { prefix: "hevopt", replicasPerTenant: 3 });
    const [bare, partial, wrong] = ids as [string, string, string];
    const as = async (id: string, body: object) =>
      lenient.call("POST", `/v1/replicas/${id}/register`, { token: await api.hostTokenFor(id), body: { request_id: requestId(), ...body } });
    expect((await as(bare, {})).status).toBe(200);
    const evidence = await registrationEvidence(db.registry, partial);
    const { capability_count: _c, ...three } = evidence;
    expect((await problem(await as(partial, three), 400, "invalid")).errors).toEqual([expect.objectContaining({ field: "capability_count" })]);
    expect((await problem(await as(wrong, { ...evidence, capability_count: 7 }), 422, "admission")).field).toBe("capability_count");
    expect((await as(wrong, evidence)).status).toBe(200);
  });
});

describe("replay", () => {
  it("returns the byte-identical body for the same request and 409 for the same request_id with another payload", async () => {
    const id = replicas[3]!;
    const request = { request_id: requestId(), lease_ttl_ms: 20_000 };
    const first = await post(id, "register", request);
    const original = await first.text();
    await new Promise((resolve) => setTimeout(resolve, 5));
    const again = await post(id, "register", request);
    expect(again.status).toBe(200);
    expect(await again.text()).toBe(original);
    expect((await replicaRow(db, id)).health_revision).toBe(1);
    const body = await problem(await post(id, "register", { ...request, lease_ttl_ms: 20_001 }), 409, "conflict");
    // request_id stays the HTTP request's (X-Request-Id); the reused lifecycle id is named in detail.
    expect(body.request_id).not.toBe(request.request_id);
    expect(body.detail).toContain(request.request_id);
    await problem(await post(id, "drain", { ...request, previous_sequence: 1 }), 409, "conflict");
    expect((await replicaRow(db, id)).health_revision).toBe(1);
  });
});
