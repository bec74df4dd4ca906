/**
 * The registry reader over HTTP (scope registry:read): identity and state of versions, instances
 * and replicas; tenant- and host-scoped tokens see only their own records; never a secret
 * reference.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { hostPrincipal } from "../../fixtures/records.js";
import { type Api, expectProblem, publishFleet, smallFleet, type SmallFleet } from "./target.js";

export function readerConformance(api: Api): void {
  describe("registry reader", () => {
    let fleet: SmallFleet;
    let tenantA: string;
    let tenantB: string;
    const read = async (kind: string, id: string, token: string) => api.call("GET", `/v1/registry/${kind}/${encodeURIComponent(id)}`, { token });
    const reader = (claims: { tenantId?: string; peerPrincipalId?: string } = {}) =>
      api.target.mintToken({ subject: "conformance-ingress", scopes: ["registry:read"], ...claims });

    beforeAll(async () => {
      tenantA = `${api.prefix}-rd-a`;
      tenantB = `${api.prefix}-rd-b`;
      fleet = await smallFleet(`${api.prefix}_rd`, { tenants: [tenantA, tenantB] });
      await publishFleet(api, fleet);
    });

    it("reads a version, an instance and a replica: identity and state, no secret reference", async () => {
      const token = await reader();
      const version = await read("versions", fleet.versionId, token);
      expect(version.status, JSON.stringify(version.body)).toBe(200);
      expect(version.body).toMatchObject({ id: fleet.versionId, connector_type_id: fleet.typeId, status: "active", supply_chain_qualified: true });
      expect(version.body).not.toHaveProperty("manifest");
      const instance = await read("instances", fleet.instances[tenantA]!, token);
      expect(instance.body).toMatchObject({ id: fleet.instances[tenantA], tenant_id: tenantA, version_id: fleet.versionId, status: "enabled" });
      expect(instance.body).not.toHaveProperty("secret_provider_ref");
      const replica = await read("replicas", fleet.replicas[tenantA]!, token);
      expect(replica.body).toMatchObject({
        id: fleet.replicas[tenantA],
        instance_id: fleet.instances[tenantA],
        status: "ready",
        peer_principal_id: hostPrincipal(fleet.replicas[tenantA]!),
      });
    });

    it("a tenant-scoped token sees only its tenant's records; another tenant's are 404", async () => {
      const token = await reader({ tenantId: tenantA });
      expect((await read("instances", fleet.instances[tenantA]!, token)).status).toBe(200);
      expect((await read("replicas", fleet.replicas[tenantA]!, token)).status).toBe(200);
      expect((await read("versions", fleet.versionId, token)).status).toBe(200);
      expectProblem(await read("instances", fleet.instances[tenantB]!, token), 404, "not-found");
      expectProblem(await read("replicas", fleet.replicas[tenantB]!, token), 404, "not-found");
      const stranger = await reader({ tenantId: `${api.prefix}-rd-nobody` });
      expectProblem(await read("versions", fleet.versionId, stranger), 404, "not-found");
    });

    it("a host token sees only its own replicas, their instances and versions", async () => {
      const token = await reader({ peerPrincipalId: hostPrincipal(fleet.replicas[tenantA]!) });
      expect((await read("replicas", fleet.replicas[tenantA]!, token)).status).toBe(200);
      expect((await read("instances", fleet.instances[tenantA]!, token)).status).toBe(200);
      expectProblem(await read("replicas", fleet.replicas[tenantB]!, token), 404, "not-found");
    });

    it("refusals: 401 without a token, 403 without registry:read, 404 for an unknown record or kind", async () => {
      expectProblem(await api.call("GET", `/v1/registry/versions/${fleet.versionId}`), 401, "unauthorized");
      expectProblem(await read("versions", fleet.versionId, await api.admin()), 403, "forbidden");
      expectProblem(await read("versions", fleet.versionId, await api.tenant(tenantA)), 403, "forbidden");
      expectProblem(await read("replicas", `crepl_${api.prefix}_rd_ghost`, await reader()), 404, "not-found");
      expectProblem(await read("bindings", "x", await reader()), 404, "not-found");
    });
  });
}
