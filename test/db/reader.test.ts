/**
 * The registry reader (aip_registry_read, data role): identity and state of versions, instances
 * and replicas, scoped by the caller's verified tenant and peer principal, never a credential or
 * configuration reference. Called as the data role, as the HTTP route does.
 */
import { beforeAll, describe, expect, it } from "vitest";
import type { ReaderKind } from "../../src/registry/registry.js";
import { useTestDatabase } from "../support/database.js";
import { binding, connectorType, hostPrincipal, instance, registerReplica, replica, version } from "../../fixtures/records.js";
import { refusal } from "../support/assertions.js";

const db = useTestDatabase();
const TYPE = "ctype_rd";
const V1 = "cver_rd_1";
const V2 = "cver_rd_2";
const ONLY_B = "cver_rd_b";
const INSTANCE_A = "cinst_rd_a";
const INSTANCE_B = "cinst_rd_b";
const REPLICA_A = "crepl_rd_a";
const REPLICA_B = "crepl_rd_b";

beforeAll(async () => {
  await db.registry.publish([
    connectorType(TYPE),
    await version(V1, TYPE, ["cap:rd.run"]),
    await version(V2, TYPE, ["cap:rd.run"]),
    await version(ONLY_B, TYPE, ["cap:rd.run", "cap:rd.other"]),
    instance(INSTANCE_A, TYPE, V1, "tenant-rd-a"),
    instance(INSTANCE_B, TYPE, ONLY_B, "tenant-rd-b"),
    binding("tenant-rd-a", "cap:rd.run", INSTANCE_A),
    replica(REPLICA_A, INSTANCE_A, V1),
    replica(REPLICA_B, INSTANCE_B, ONLY_B),
  ]);
  await registerReplica(db.registry, REPLICA_A);
});

const read = (kind: ReaderKind, id: string, tenantId: string | null = null, peerPrincipalId: string | null = null) =>
  db.registry.registryRead(kind, id, { tenantId, peerPrincipalId });
const ids = async (scope: [string | null, string | null], reads: [ReaderKind, string][]) => {
  const seen: string[] = [];
  for (const [kind, id] of reads) if (await read(kind, id, ...scope)) seen.push(id);
  return seen;
};
const EVERYTHING: [ReaderKind, string][] = [
  ["version", V1],
  ["version", V2],
  ["version", ONLY_B],
  ["instance", INSTANCE_A],
  ["instance", INSTANCE_B],
  ["replica", REPLICA_A],
  ["replica", REPLICA_B],
];

describe("what each caller sees", () => {
  it("a caller without tenant or principal reads every record", async () => {
    expect(await ids([null, null], EVERYTHING)).toEqual([V1, V2, ONLY_B, INSTANCE_A, INSTANCE_B, REPLICA_A, REPLICA_B]);
  });

  it("a tenant reads its instances, their replicas and the versions they run, nothing else", async () => {
    expect(await ids(["tenant-rd-a", null], EVERYTHING)).toEqual([V1, INSTANCE_A, REPLICA_A]);
    expect(await ids(["tenant-rd-b", null], EVERYTHING)).toEqual([ONLY_B, INSTANCE_B, REPLICA_B]);
    expect(await ids(["tenant-rd-nobody", null], EVERYTHING)).toEqual([]);
  });

  it("a host reads its replicas, their instances and the versions they run, nothing else", async () => {
    expect(await ids([null, hostPrincipal(REPLICA_A)], EVERYTHING)).toEqual([V1, INSTANCE_A, REPLICA_A]);
    expect(await ids([null, "service:nobody"], EVERYTHING)).toEqual([]);
  });

  it("both claims restrict together", async () => {
    expect(await ids(["tenant-rd-a", hostPrincipal(REPLICA_A)], EVERYTHING)).toEqual([V1, INSTANCE_A, REPLICA_A]);
    expect(await ids(["tenant-rd-b", hostPrincipal(REPLICA_A)], EVERYTHING)).toEqual([]);
  });

  it("after a rollout, the old version stays readable through the replicas that still run it", async () => {
    await db.registry.publish([instance(INSTANCE_A, TYPE, V2, "tenant-rd-a", 2)]);
    expect(await ids(["tenant-rd-a", null], EVERYTHING)).toEqual([V1, V2, INSTANCE_A, REPLICA_A]);
    expect(await ids([null, hostPrincipal(REPLICA_A)], EVERYTHING)).toEqual([V1, V2, INSTANCE_A, REPLICA_A]);
  });

  it("an unknown record is null, an unknown kind invalid", async () => {
    expect(await read("replica", "crepl_rd_missing")).toBeNull();
    expect((await refusal(db.registry.registryRead("binding" as ReaderKind, INSTANCE_A, { tenantId: null, peerPrincipalId: null }))).code).toBe("invalid");
  });
});

describe("what a record says", () => {
  it("a version: status, qualification, digests, evidence and claims, capability digests; no manifest", async () => {
    const record = await read("version", ONLY_B);
    expect(Object.keys(record ?? {})).toEqual([
      "id",
      "connector_type_id",
      "version",
      "status",
      "supply_chain_qualified",
      "artifact_digest",
      "manifest_digest",
      "attestation",
      "implementation_support",
      "capabilities",
      "profiles",
      "admitted_at",
      "updated_at",
    ]);
    expect(record).toMatchObject({
      id: ONLY_B,
      connector_type_id: TYPE,
      status: "active",
      supply_chain_qualified: true,
      implementation_support: { "cap:rd.run": { invocation: true }, "cap:rd.other": { invocation: true } },
      capabilities: [
        { id: "cap:rd.other", contract_digest: expect.stringMatching(/^sha256:/), schema_digest: expect.stringMatching(/^sha256:/) },
        { id: "cap:rd.run", contract_digest: expect.stringMatching(/^sha256:/), schema_digest: expect.stringMatching(/^sha256:/) },
      ],
      profiles: ["aip.native.http.v1"],
    });
  });

  it("an instance: identity, rollout version, tenant, revision and status; never its secret reference", async () => {
    const record = await read("instance", INSTANCE_B);
    expect(record).toEqual({
      id: INSTANCE_B,
      connector_type_id: TYPE,
      version_id: ONLY_B,
      tenant_id: "tenant-rd-b",
      config_revision: 1,
      status: "enabled",
      updated_at: expect.any(String),
    });
    expect(JSON.stringify(record)).not.toContain("vault://");
  });

  it("a replica: identity, endpoint, topology, status, lease, load and sequence; no replay record", async () => {
    const record = await read("replica", REPLICA_A);
    expect(record).toMatchObject({
      id: REPLICA_A,
      instance_id: INSTANCE_A,
      version_id: V1,
      peer_principal_id: hostPrincipal(REPLICA_A),
      topology: { region: "eu-west", zone: "eu-west-1a", capacity_class: "standard" },
      status: "ready",
      lease_expires_at: expect.any(String),
      capacity: 10,
      active_assignments: 0,
      health_revision: 1,
    });
    expect(Object.keys(record ?? {})).not.toEqual(expect.arrayContaining(["last_request_id"]));
    expect(JSON.stringify(record)).not.toMatch(/msg_|last_request|circuit/);
  });
});
