/**
 * Control plane over HTTP: publication (all or nothing, idempotent re-puts, dry runs, refusals)
 * and every administrative reader.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { attestation, connectorType, version } from "../../fixtures/records.js";
import { type Api, expectProblem, publishFleet, smallFleet, type SmallFleet } from "./target.js";

export function publicationConformance(api: Api): void {
  describe("publication and admin reads", () => {
    let fleet: SmallFleet;
    let tenant: string;
    let admin: string;
    let firstRevision: number;

    beforeAll(async () => {
      admin = await api.admin();
      tenant = `${api.prefix}-pub-tenant`;
      fleet = await smallFleet(`${api.prefix}_pub`, {
        tenants: [tenant],
        capabilities: [`cap:${api.prefix}_pub.read`, `cap:${api.prefix}_pub.write`],
        policy: { max_tenant_in_flight: 50 },
      });
    });

    it("publishes a batch atomically and advances the revision once", async () => {
      const before = await api.catalogRevision();
      const result = await api.publish(fleet.changes);
      firstRevision = result.catalog_revision;
      expect(firstRevision).toBeGreaterThan(before);
      expect(result.changed).toBe(fleet.changes.length);
      expect(result.results.map((r) => r.outcome)).toEqual(fleet.changes.map(() => "created"));
      expect(result.results.map((r) => r.op)).toEqual(fleet.changes.map((c) => c.op));
    });

    it("an identical re-put changes nothing and keeps the revision", async () => {
      const result = await api.publish(fleet.changes);
      expect(result.changed).toBe(0);
      expect(result.results.every((r) => r.outcome === "unchanged")).toBe(true);
      expect(result.catalog_revision).toBe(firstRevision);
    });

    it("a dry run reports the outcome and applies nothing", async () => {
      const typeId = `ctype_${api.prefix}_dry`;
      const response = await api.call("POST", "/v1/admin/publications?dry_run=true", { token: admin, body: { changes: [connectorType(typeId)] } });
      expect(response.status).toBe(200);
      expect(response.body).toMatchObject({ dry_run: true, changed: 1, results: [{ op: "put_connector_type", outcome: "created", id: typeId }] });
      expectProblem(await api.call("GET", `/v1/admin/connector-types/${typeId}`, { token: admin }), 404, "not-found");
      expect(await api.catalogRevision()).toBe(firstRevision);
    });

    it("409 conflict for a changed immutable field, and the whole batch rolls back", async () => {
      const newTypeId = `ctype_${api.prefix}_rollback`;
      const response = await api.call("POST", "/v1/admin/publications", {
        token: admin,
        body: { changes: [connectorType(newTypeId), connectorType(fleet.typeId, "org:someone-else")] },
      });
      expectProblem(response, 409, "conflict");
      expect(response.body.change_index).toBe(1);
      expectProblem(await api.call("GET", `/v1/admin/connector-types/${newTypeId}`, { token: admin }), 404, "not-found");
      expect(await api.catalogRevision()).toBe(firstRevision);
    });

    it("409 conflict naming `status` or `enabled` for a re-put stating another lifecycle state: only their own ops move them", async () => {
      const admission = fleet.changes[1] as Record<string, unknown>;
      expect(admission.op).toBe("admit_version");
      const demote = await api.call("POST", "/v1/admin/publications", { token: admin, body: { changes: [{ ...admission, status: "admitted" }] } });
      expectProblem(demote, 409, "conflict");
      expect(demote.body).toMatchObject({ field: "status", version_id: fleet.versionId, change_index: 0 });
      const disable = await api.call("POST", "/v1/admin/publications", {
        token: admin,
        body: { changes: [{ ...connectorType(fleet.typeId), enabled: false }] },
      });
      expectProblem(disable, 409, "conflict");
      expect(disable.body).toMatchObject({ field: "enabled", connector_type_id: fleet.typeId });
      expect(await api.catalogRevision()).toBe(firstRevision);
      const version = await api.call("GET", `/v1/admin/versions/${fleet.versionId}`, { token: admin });
      expect(version.body).toMatchObject({ status: "active" });
    });

    it("422 admission for failing supply-chain evidence, naming the field", async () => {
      const refused = (options: Parameters<typeof version>[3]) =>
        version(`cver_${api.prefix}_pub_bad`, fleet.typeId, [`cap:${api.prefix}_pub.bad`], { version: "9.9.9", ...options });
      for (const [options, field] of [
        [{ attestation: attestation("org:acme", { conformance_status: "failed" }) }, "attestation.conformance_status"],
        [{ attestation: attestation("org:acme", { sdk_version_requirement: "^2.0" }) }, "attestation.sdk_version_requirement"],
        [{ attestation: attestation("org:acme", { schema_bundle_digest: `sha256:${"0".repeat(64)}` }) }, "attestation.schema_bundle_digest"],
        [{ implementation_support: {} }, `implementation_support.cap:${api.prefix}_pub.bad`],
      ] as const) {
        const response = await api.call("POST", "/v1/admin/publications", { token: admin, body: { changes: [await refused(options)] } });
        expectProblem(response, 422, "admission");
        expect(response.body.field).toBe(field);
      }
      const malformed = await refused({ attestation: attestation("org:acme", { license_report_digest: "sha256:x" }) });
      expectProblem(await api.call("POST", "/v1/admin/publications", { token: admin, body: { changes: [malformed] } }), 400, "invalid");
      expect(await api.catalogRevision()).toBe(firstRevision);
    });

    it("400 invalid for an unknown op or an empty batch", async () => {
      const unknownOp = await api.call("POST", "/v1/admin/publications", { token: admin, body: { changes: [{ op: "delete_everything", id: "x" }] } });
      expectProblem(unknownOp, 400, "invalid");
      expect(unknownOp.body.errors.length).toBeGreaterThan(0);
      expectProblem(await api.call("POST", "/v1/admin/publications", { token: admin, body: { changes: [] } }), 400, "invalid");
    });

    it("reads back every record kind", async () => {
      const get = (kind: string, id: string) => api.call("GET", `/v1/admin/${kind}/${encodeURIComponent(id)}`, { token: admin });
      const type = await get("connector-types", fleet.typeId);
      expect(type.status).toBe(200);
      expect(type.body).toMatchObject({ id: fleet.typeId, owner: "org:acme", enabled: true });
      const ver = await get("versions", fleet.versionId);
      expect(ver.body).toMatchObject({ id: fleet.versionId, connector_type_id: fleet.typeId, status: "active", supply_chain_qualified: true });
      expect(ver.body.capabilities.map((c: { id: string }) => c.id)).toEqual([...fleet.capabilities].sort());
      const inst = await get("instances", fleet.instances[tenant] as string);
      expect(inst.body).toMatchObject({ id: fleet.instances[tenant], tenant_id: tenant, version_id: fleet.versionId, status: "enabled" });
      const rep = await get("replicas", fleet.replicas[tenant] as string);
      expect(rep.body).toMatchObject({
        id: fleet.replicas[tenant],
        instance_id: fleet.instances[tenant],
        status: "offline",
        capacity: 10,
        active_assignments: 0,
      });
      const pol = await get("admission-policies", fleet.policyRef as string);
      expect(pol.body).toMatchObject({ policy_ref: fleet.policyRef, revision: 1, enabled: true, max_tenant_in_flight: 50 });
    });

    it("404 not-found for a record that does not exist; 400 for an unknown kind", async () => {
      expectProblem(await api.call("GET", `/v1/admin/versions/cver_${api.prefix}_missing`, { token: admin }), 404, "not-found");
      expectProblem(await api.call("GET", `/v1/admin/gizmos/x`, { token: admin }), 400, "invalid");
    });

    it("lists a tenant's bindings, paginated", async () => {
      const first = await api.call("GET", `/v1/admin/bindings?tenant_id=${encodeURIComponent(tenant)}&limit=1`, { token: admin });
      expect(first.status).toBe(200);
      expect(first.body.tenant_id).toBe(tenant);
      expect(first.body.bindings).toHaveLength(1);
      expect(first.body.next_cursor).toEqual(expect.any(String));
      const second = await api.call(
        "GET",
        `/v1/admin/bindings?tenant_id=${encodeURIComponent(tenant)}&limit=1&cursor=${encodeURIComponent(first.body.next_cursor)}`,
        { token: admin },
      );
      expect(second.body.bindings).toHaveLength(1);
      expect([first.body.bindings[0].capability_id, second.body.bindings[0].capability_id]).toEqual([...fleet.capabilities].sort());
      expect(second.body.next_cursor).toBeNull();
      expectProblem(await api.call("GET", "/v1/admin/bindings", { token: admin }), 400, "invalid");
    });

    it("shows the catalog as a tenant sees it, or every active definition", async () => {
      const asTenant = await api.call("GET", `/v1/admin/catalog/capabilities?tenant_id=${encodeURIComponent(tenant)}`, { token: admin });
      expect(asTenant.status).toBe(200);
      expect(asTenant.body.capabilities.map((d: { capability: { id: string } }) => d.capability.id)).toEqual([...fleet.capabilities].sort());
      const unbound = await api.call("GET", `/v1/admin/catalog/capabilities?unbound=true&q=${encodeURIComponent(`${api.prefix}_pub.`)}`, { token: admin });
      expect(unbound.status).toBe(200);
      expect(unbound.body.total).toBe(2);
    });

    it("set_version_qualification revokes a version from catalog and routing, and restores it", async () => {
      const own = await smallFleet(`${api.prefix}_qual`, { tenants: [`${api.prefix}-qual-tenant`] });
      await publishFleet(api, own);
      const gateway = await api.tenant(`${api.prefix}-qual-tenant`);
      const catalog = async () => (await api.call("GET", "/v1/catalog/capabilities", { token: gateway })).body.total as number;
      const route = (action: string) => api.call("PUT", `/v1/routes/${action}`, { token: gateway, body: { capability_id: own.capabilities[0] } });
      expect(await catalog()).toBe(1);
      const qualify = (qualified: boolean) => ({
        op: "set_version_qualification",
        id: own.versionId,
        supply_chain_qualified: qualified,
        reason: "vulnerability report changed",
      });
      const revoked = await api.publish([qualify(false)]);
      expect(revoked.results[0]).toMatchObject({ op: "set_version_qualification", outcome: "updated" });
      expect(await catalog()).toBe(0);
      expectProblem(await route(`act_${api.prefix}_qual_1`), 404, "binding-unavailable");
      const view = await api.call("GET", `/v1/admin/versions/${own.versionId}`, { token: admin });
      expect(view.body).toMatchObject({ supply_chain_qualified: false, qualification_reason: "vulnerability report changed" });
      await api.publish([qualify(true)]);
      expect(await catalog()).toBe(1);
      expect((await route(`act_${api.prefix}_qual_2`)).status).toBe(201);
    });

    it("replica provisioning alone does not advance the catalog revision", async () => {
      await publishFleet(api, await smallFleet(`${api.prefix}_pub2`, { tenants: [`${api.prefix}-pub2-tenant`] }));
      const revision = await api.catalogRevision();
      const extra = { ...fleet.changes.find((c) => c.op === "put_replica"), id: `crepl_${api.prefix}_pub_extra` };
      const result = await api.publish([extra]);
      expect(result.changed).toBe(1);
      expect(result.catalog_revision).toBe(revision);
    });
  });
}
