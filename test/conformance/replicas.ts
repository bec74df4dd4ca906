/**
 * Connector-host lifecycle over HTTP: register, heartbeat, drain, offline, sequence fencing and
 * exact replay of a request id.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { type Api, expectProblem, lifecycleRequestId, smallFleet, type SmallFleet } from "./target.js";

export function replicaConformance(api: Api): void {
  describe("replica lifecycle", () => {
    let fleet: SmallFleet;
    let replicaId: string;
    let sequence: number;
    const newId = () => lifecycleRequestId(api.prefix);

    beforeAll(async () => {
      fleet = await smallFleet(`${api.prefix}_rep`, { tenants: [`${api.prefix}-rep-tenant`] });
      await api.publish(fleet.changes);
      replicaId = Object.values(fleet.replicas)[0] as string;
    });

    it("register: the host must prove what it runs; any other artifact, manifest, configuration or capability count is 422 admission naming the field", async () => {
      const evidence = await api.registration(replicaId);
      const wrongDigest = `sha256:${"0".repeat(64)}`;
      for (const [field, value] of [
        ["artifact_digest", wrongDigest],
        ["manifest_digest", wrongDigest],
        ["config_revision", (evidence.config_revision as number) + 1],
        ["capability_count", (evidence.capability_count as number) + 1],
      ] as const) {
        const refused = await api.lifecycle(replicaId, "register", { request_id: newId(), ...evidence, [field]: value });
        expectProblem(refused, 422, "admission");
        expect(refused.body).toMatchObject({ field, expected: evidence[field], replica_id: replicaId });
      }
      // Stating nothing is not proving anything: register requires it (unless the server allows
      // registrations without evidence for a migration); the other operations state none of it.
      const { artifact_digest: _a, ...partial } = evidence;
      for (const body of [
        { request_id: newId(), artifact_digest: undefined },
        { request_id: newId(), ...partial },
      ]) {
        const missing = await api.call("POST", `/v1/replicas/${replicaId}/register`, { token: await api.host(replicaId), body });
        expectProblem(missing, 400, "invalid");
        expect(missing.body.errors).toEqual([expect.objectContaining({ field: "artifact_digest" })]);
      }
      const view = await api.call("GET", `/v1/admin/replicas/${replicaId}`, { token: await api.admin() });
      expect(view.body).toMatchObject({ status: "offline", health_revision: 0 });
    });

    it("register: a provisioned replica becomes ready with a lease; an exact replay answers the same", async () => {
      const request = { request_id: newId(), lease_ttl_ms: 120_000 };
      const registered = await api.lifecycle(replicaId, "register", request);
      expect(registered.status, JSON.stringify(registered.body)).toBe(200);
      expect(registered.body).toEqual({ replica_id: replicaId, status: "ready", sequence: expect.any(Number), lease_expires_at: expect.stringMatching(/Z$/) });
      sequence = registered.body.sequence;
      const replay = await api.lifecycle(replicaId, "register", request);
      expect(replay.status).toBe(200);
      expect(replay.body).toEqual(registered.body);
      expectProblem(await api.lifecycle(replicaId, "register", { ...request, lease_ttl_ms: 20_000 }), 409, "conflict");
    });

    it("heartbeat extends the lease under the sequence fence; a stale sequence is a conflict", async () => {
      const beat = await api.lifecycle(replicaId, "heartbeat", { request_id: newId(), previous_sequence: sequence, lease_ttl_ms: 120_000 });
      expect(beat.status).toBe(200);
      expect(beat.body).toMatchObject({ status: "ready", sequence: sequence + 1 });
      expectProblem(await api.lifecycle(replicaId, "heartbeat", { request_id: newId(), previous_sequence: sequence }), 409, "conflict");
      sequence = beat.body.sequence;
      const evidence = await api.registration(replicaId);
      const stated = await api.lifecycle(replicaId, "heartbeat", { request_id: newId(), previous_sequence: sequence, ...evidence });
      expectProblem(stated, 400, "invalid");
      expect(stated.body.errors).toEqual([expect.objectContaining({ field: "artifact_digest" })]);
    });

    it("drain, then offline; the admin view follows", async () => {
      const drained = await api.lifecycle(replicaId, "drain", { request_id: newId(), previous_sequence: sequence });
      expect(drained.body).toMatchObject({ status: "draining", sequence: sequence + 1 });
      const offline = await api.lifecycle(replicaId, "offline", { request_id: newId(), previous_sequence: sequence + 1 });
      expect(offline.body).toMatchObject({ status: "offline", sequence: sequence + 2 });
      const view = await api.call("GET", `/v1/admin/replicas/${replicaId}`, { token: await api.admin() });
      expect(view.body).toMatchObject({ status: "offline", health_revision: sequence + 2 });
    });

    it("refusals: unknown replica 404, unknown operation 400, missing sequence 400, wrong scope 403", async () => {
      const evidence = await api.registration(replicaId);
      expectProblem(await api.lifecycle(`crepl_${api.prefix}_ghost`, "register", { request_id: newId(), ...evidence }), 404, "not-found");
      expectProblem(await api.lifecycle(replicaId, "explode", { request_id: newId() }), 400, "invalid");
      expectProblem(await api.lifecycle(replicaId, "heartbeat", { request_id: newId() }), 400, "invalid");
      const tenantToken = await api.tenant(`${api.prefix}-rep-tenant`);
      expectProblem(await api.call("POST", `/v1/replicas/${replicaId}/register`, { token: tenantToken, body: { request_id: newId() } }), 403, "forbidden");
    });
  });
}
