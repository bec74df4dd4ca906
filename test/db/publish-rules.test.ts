/**
 * The specification's "Know what may change" table, record by record: every accepted change and
 * every refused one, called as the control role. A refusal must leave the database untouched
 * (every registry table and the catalog revision compared before and after).
 */
import { beforeAll, describe, expect, it } from "vitest";
import type { ProblemCode } from "../../src/registry/errors.js";
import { useTestDatabase } from "../support/database.js";
import { attestation, binding, connectorType, instance, policy, registerReplica, replica, version } from "../../fixtures/records.js";
import { registryState } from "../support/registry-state.js";
import { catalogRevision, refusal } from "../support/assertions.js";

const db = useTestDatabase();

type Change = Record<string, unknown>;

async function accept(changes: Change[], outcomes?: string[]) {
  const result = await db.registry.publish(changes);
  if (outcomes) expect(result.results.map((r) => r.outcome)).toEqual(outcomes);
  return result;
}

/** Publishing `changes` is refused with `code` and changes nothing at all. */
async function refuse(changes: Change[], code: ProblemCode, message?: RegExp) {
  const before = await registryState(db.owner);
  const error = await refusal(db.registry.publish(changes));
  expect(error.code, error.message).toBe(code);
  if (message) expect(error.message).toMatch(message);
  expect(error.extensions.change_index).toBe(changes.length - 1);
  expect(await registryState(db.owner)).toEqual(before);
  return error;
}

const record = async (kind: "connector_type" | "version" | "instance" | "replica" | "admission_policy", id: string) =>
  (await db.registry.adminGet(kind, id)) as Record<string, unknown>;

describe("connector type: id, name and owner are fixed; enabled is mutable", () => {
  const type = connectorType("ctype_rules_type");

  it("creates a type once; an identical re-put changes nothing and does not advance the revision", async () => {
    const created = await accept([type], ["created"]);
    const again = await accept([type], ["unchanged"]);
    expect(again.catalog_revision).toBe(created.catalog_revision);
    expect(again.changed).toBe(0);
    expect(await record("connector_type", type.id)).toMatchObject({ id: type.id, name: type.name, owner: type.owner, enabled: true });
  });

  it("refuses another name or another owner under the same id, naming the field", async () => {
    expect((await refuse([{ ...type, name: "Renamed" }], "conflict", /ctype_rules_type/)).extensions).toMatchObject({ field: "name" });
    expect((await refuse([{ ...type, owner: "org:other" }], "conflict")).extensions).toMatchObject({ field: "owner" });
  });

  it("moves enabled with set_connector_type_enabled, once per actual change", async () => {
    const before = await catalogRevision(db.owner);
    await accept([{ op: "set_connector_type_enabled", id: type.id, enabled: false }], ["updated"]);
    expect(await catalogRevision(db.owner)).toBe(before + 1);
    await accept([{ op: "set_connector_type_enabled", id: type.id, enabled: false }], ["unchanged"]);
    expect(await catalogRevision(db.owner)).toBe(before + 1);
    expect(await record("connector_type", type.id)).toMatchObject({ enabled: false });
  });

  it("refuses a re-put that states another enabled flag (only set_connector_type_enabled moves it)", async () => {
    expect(await record("connector_type", type.id)).toMatchObject({ enabled: false });
    const error = await refuse([{ ...type, enabled: true }], "conflict", /set_connector_type_enabled/);
    expect(error.extensions).toMatchObject({ connector_type_id: type.id, field: "enabled" });
    // A re-put that states no flag, or the stored one, is exactly as stored.
    const { enabled: _absent, ...withoutFlag } = type;
    await accept([withoutFlag], ["unchanged"]);
    await accept([{ ...type, enabled: null }], ["unchanged"]);
    await accept([{ ...type, enabled: false }], ["unchanged"]);
    expect(await record("connector_type", type.id)).toMatchObject({ enabled: false });
    await accept([{ op: "set_connector_type_enabled", id: type.id, enabled: true }], ["updated"]);
    await accept([type], ["unchanged"]);
  });

  it("refuses to enable or disable a type that does not exist", async () => {
    await refuse([{ op: "set_connector_type_enabled", id: "ctype_rules_missing", enabled: true }], "not-found");
  });
});

describe("connector version: content is immutable; status moves admitted <-> active, to revoked, never back", () => {
  const typeId = "ctype_rules_ver";
  let v1: Awaited<ReturnType<typeof version>>;

  beforeAll(async () => {
    v1 = await version("cver_rules_1", typeId, ["cap:rules.ver.a"]);
    await accept([connectorType(typeId), v1]);
  });

  it("treats an identical re-admission as unchanged", async () => {
    const before = await catalogRevision(db.owner);
    await accept([v1], ["unchanged"]);
    expect(await catalogRevision(db.owner)).toBe(before);
  });

  it("refuses any other content under the same version id, naming the first field that differs", async () => {
    const field = async (change: Change, name: string) =>
      expect((await refuse([change], "conflict", /immutable/)).extensions).toMatchObject({ version_id: v1.id, field: name });
    const otherManifest = await version(v1.id, typeId, [{ id: "cap:rules.ver.a", description: "changed" }], { attestation: v1.attestation });
    await field(otherManifest, "manifest_digest");
    await field({ ...v1, attestation: { ...v1.attestation, signer_identity: "someone-else@acme.example" } }, "attestation.signer_identity");
    await field({ ...v1, attestation: { ...attestation(), schema_bundle_digest: v1.attestation.schema_bundle_digest } }, "attestation.artifact_digest");
    await field({ ...v1, implementation_support: { "cap:rules.ver.a": { invocation: true, retry: true } } }, "implementation_support.cap:rules.ver.a");
    await field({ ...v1, version: "9.9.9" }, "version");
    await accept([connectorType("ctype_rules_ver_other")]);
    await field({ ...v1, connector_type_id: "ctype_rules_ver_other" }, "connector_type_id");
  });

  it("refuses a re-admission that states another status: status moves only through set_version_status", async () => {
    const before = await catalogRevision(db.owner);
    const error = await refuse([{ ...v1, status: "admitted" }], "conflict", /set_version_status/);
    expect(error.extensions).toMatchObject({ version_id: v1.id, field: "status" });
    expect((await record("version", v1.id)).status).toBe("active");
    // Without a status, or with the stored one, a re-admission is exactly as stored.
    const { status: _s, ...withoutStatus } = v1;
    await accept([withoutStatus], ["unchanged"]);
    await accept([{ ...v1, status: "active" }], ["unchanged"]);
    expect(await catalogRevision(db.owner)).toBe(before);
  });

  it("moves status admitted <-> active, any -> revoked, and never back from revoked", async () => {
    const status = async () => (await record("version", v1.id)).status;
    const set = (s: string) => ({ op: "set_version_status", id: v1.id, status: s });
    expect(await status()).toBe("active");
    const before = await catalogRevision(db.owner);
    await accept([set("admitted")], ["updated"]);
    expect(await catalogRevision(db.owner)).toBe(before + 1);
    await accept([set("admitted")], ["unchanged"]);
    expect(await catalogRevision(db.owner)).toBe(before + 1);
    await accept([set("active")], ["updated"]);
    await refuse([set("candidate")], "invalid", /candidate/);
    await accept([set("revoked")], ["updated"]);
    expect(await status()).toBe("revoked");
    await accept([set("revoked")], ["unchanged"]);
    await refuse([set("active")], "conflict", /revoked/);
    await refuse([set("admitted")], "conflict", /revoked/);
    await refuse([set("candidate")], "invalid");
    // Re-admitting the original content with its original (active) status does not reactivate it.
    expect((await refuse([v1], "conflict", /set_version_status/)).extensions).toMatchObject({ field: "status" });
    expect(await status()).toBe("revoked");
  });

  it("admits a version with any initial status but candidate, then moves it with set_version_status only", async () => {
    const v2 = await version("cver_rules_2", typeId, ["cap:rules.ver.a"], { status: "admitted" });
    await accept([v2], ["created"]);
    await refuse([{ ...v2, status: "active" }], "conflict", /set_version_status/);
    await accept([{ op: "set_version_status", id: v2.id, status: "active" }], ["updated"]);
    const { status: _s, ...withoutStatus } = v2;
    await accept([withoutStatus], ["unchanged"]);
    expect((await record("version", v2.id)).status).toBe("active");
    await accept([{ op: "set_version_status", id: v2.id, status: "revoked" }], ["updated"]);
    const v3 = await version("cver_rules_3", typeId, ["cap:rules.ver.a"], { status: "admitted" });
    await accept([v3, { op: "set_version_status", id: v3.id, status: "revoked" }], ["created", "updated"]);
    const v4 = await version("cver_rules_4", typeId, ["cap:rules.ver.a"], { status: "revoked" });
    await accept([v4], ["created"]);
    expect((await record("version", v4.id)).status).toBe("revoked");
  });

  it("refuses to admit a version as a candidate", async () => {
    const candidate = await version("cver_rules_candidate", typeId, ["cap:rules.ver.a"], { status: "candidate" });
    await refuse([candidate], "admission", /candidate/);
  });

  it("refuses a status change of a version that does not exist", async () => {
    await refuse([{ op: "set_version_status", id: "cver_rules_missing", status: "active" }], "not-found");
  });
});

describe("capability definition: one contract per capability id, shared by the versions that carry it", () => {
  const typeId = "ctype_rules_cap";
  const shared = { id: "cap:rules.cap.shared", description: "the shared contract" };

  beforeAll(async () => {
    await accept([connectorType(typeId), await version("cver_rules_cap_1", typeId, [shared, "cap:rules.cap.only1"])]);
  });

  it("shares an identical definition between versions", async () => {
    await accept([await version("cver_rules_cap_2", typeId, [shared])], ["created"]);
    const { rows } = await db.owner.query("SELECT version_id FROM aip_version_capabilities WHERE capability_id = $1 ORDER BY version_id", [shared.id]);
    expect(rows.map((r) => r.version_id)).toEqual(["cver_rules_cap_1", "cver_rules_cap_2"]);
    const { rows: definitions } = await db.owner.query("SELECT count(*)::int AS n FROM aip_capability_definitions WHERE capability_id = $1", [shared.id]);
    expect(definitions[0].n).toBe(1);
  });

  it("refuses another contract under an existing capability id", async () => {
    await refuse([await version("cver_rules_cap_3", typeId, [{ ...shared, description: "another contract" }])], "conflict", /cap:rules\.cap\.shared/);
    await refuse([await version("cver_rules_cap_4", typeId, [{ ...shared, input_schema: { type: "object" } }])], "conflict");
    await refuse([await version("cver_rules_cap_5", typeId, [{ ...shared, output_schema: { type: "array" } }])], "conflict");
  });

  it("refuses two contracts for one new capability id within one batch", async () => {
    const fresh = { id: "cap:rules.cap.fresh" };
    await refuse([await version("cver_rules_cap_6", typeId, [fresh]), await version("cver_rules_cap_7", typeId, [{ ...fresh, name: "renamed" }])], "conflict");
    const { rows } = await db.owner.query("SELECT 1 FROM aip_capability_definitions WHERE capability_id = $1", [fresh.id]);
    expect(rows).toHaveLength(0);
  });

  it("refuses a manifest that lists one capability twice", async () => {
    await refuse([await version("cver_rules_cap_8", typeId, ["cap:rules.cap.twice", "cap:rules.cap.twice"])], "invalid", /twice/);
  });
});

describe("connector instance: id, type and tenant fixed; the rest only with a newer config_revision", () => {
  const typeId = "ctype_rules_inst";
  const otherTypeId = "ctype_rules_inst_other";
  const base = instance("cinst_rules", typeId, "cver_rules_inst_ab", "tenant-inst", 5);

  beforeAll(async () => {
    await accept([
      connectorType(typeId),
      connectorType(otherTypeId),
      await version("cver_rules_inst_ab", typeId, ["cap:rules.inst.a", "cap:rules.inst.b"]),
      await version("cver_rules_inst_a", typeId, ["cap:rules.inst.a"]),
      await version("cver_rules_inst_other", otherTypeId, ["cap:rules.inst.a"]),
      base,
    ]);
  });

  it("treats an identical re-put as unchanged", async () => {
    await accept([base], ["unchanged"]);
  });

  it("refuses another connector type or tenant, even with a newer config revision", async () => {
    await refuse([{ ...base, connector_type_id: otherTypeId, version_id: "cver_rules_inst_other", config_revision: 6 }], "conflict", /type or tenant/);
    await refuse([{ ...base, tenant_id: "tenant-other", config_revision: 6 }], "conflict", /type or tenant/);
  });

  it("refuses any other change without a newer config revision", async () => {
    await refuse([{ ...base, secret_provider_ref: "vault://rotated" }], "conflict", /newer config revision/);
    await refuse([{ ...base, status: "disabled" }], "conflict", /newer config revision/);
    await refuse([{ ...base, version_id: "cver_rules_inst_a", config_revision: 4 }], "conflict", /newer config revision/);
    await refuse([{ ...base, config_revision: 4 }], "conflict", /newer config revision/);
  });

  it("accepts version, status and secret reference changes with a newer config revision, advancing the revision", async () => {
    const before = await catalogRevision(db.owner);
    await accept([{ ...base, secret_provider_ref: "vault://rotated", status: "disabled", config_revision: 6 }], ["updated"]);
    expect(await catalogRevision(db.owner)).toBe(before + 1);
    expect(await record("instance", base.id)).toMatchObject({ secret_provider_ref: "vault://rotated", status: "disabled", config_revision: 6 });
    await accept([{ ...base, config_revision: 7 }], ["updated"]);
  });

  it("refuses a rollout that drops the capability of an enabled binding; a disabled binding does not block it", async () => {
    const bound = binding("tenant-inst", "cap:rules.inst.b", base.id);
    await accept([bound], ["created"]);
    await refuse([{ ...base, version_id: "cver_rules_inst_a", config_revision: 8 }], "conflict", /cap:rules\.inst\.b/);
    await accept([{ ...bound, enabled: false, policy_revision: 2 }], ["updated"]);
    await accept([{ ...base, version_id: "cver_rules_inst_a", config_revision: 8 }], ["updated"]);
    expect(await record("instance", base.id)).toMatchObject({ version_id: "cver_rules_inst_a", config_revision: 8 });
  });

  it("refuses a version of another type, and unknown versions or types", async () => {
    await refuse([instance("cinst_rules_new", typeId, "cver_rules_inst_other", "tenant-inst")], "invalid", /version_id/);
    await refuse([instance("cinst_rules_new", typeId, "cver_rules_missing", "tenant-inst")], "not-found");
    await refuse([instance("cinst_rules_new", "ctype_rules_missing", "cver_rules_inst_a", "tenant-inst")], "not-found");
  });
});

describe("capability binding: the key is fixed; the rest only with a newer policy_revision", () => {
  const typeId = "ctype_rules_bind";
  const inst = instance("cinst_rules_bind", typeId, "cver_rules_bind", "tenant-bind");
  const bound = binding("tenant-bind", "cap:rules.bind.x", inst.id, { policy_revision: 3 });

  beforeAll(async () => {
    await accept([
      connectorType(typeId),
      await version("cver_rules_bind", typeId, ["cap:rules.bind.x", "cap:rules.bind.y"]),
      await version("cver_rules_bind_z", typeId, ["cap:rules.bind.z"]),
      inst,
      instance("cinst_rules_bind_other", typeId, "cver_rules_bind", "tenant-other"),
      policy("quota:rules-bind"),
      bound,
    ]);
  });

  it("treats an identical re-put as unchanged", async () => {
    await accept([bound], ["unchanged"]);
  });

  it("refuses any change without a newer policy revision", async () => {
    await refuse([{ ...bound, priority: 1 }], "conflict", /newer policy revision/);
    await refuse([{ ...bound, enabled: false }], "conflict");
    await refuse([{ ...bound, credential_revision_ref: "credential-revision-2" }], "conflict");
    await refuse([{ ...bound, quota_policy_ref: "quota:rules-bind" }], "conflict");
    await refuse([{ ...bound, priority: 1, policy_revision: 2 }], "conflict");
  });

  it("accepts priority, credential, quota and enabled changes with a newer policy revision", async () => {
    const before = await catalogRevision(db.owner);
    const changed = {
      ...bound,
      priority: 1,
      credential_revision_ref: "credential-revision-2",
      quota_policy_ref: "quota:rules-bind",
      enabled: false,
      policy_revision: 4,
    };
    await accept([changed], ["updated"]);
    expect(await catalogRevision(db.owner)).toBe(before + 1);
    const page = await db.registry.adminBindings("tenant-bind");
    expect(page.bindings).toEqual([
      expect.objectContaining({
        capability_id: "cap:rules.bind.x",
        priority: 1,
        policy_revision: 4,
        credential_revision_ref: "credential-revision-2",
        quota_policy_ref: "quota:rules-bind",
        enabled: false,
      }),
    ]);
  });

  it("refuses a tenant that does not own the instance", async () => {
    await refuse([binding("tenant-bind", "cap:rules.bind.x", "cinst_rules_bind_other")], "invalid", /tenant_id/);
  });

  it("refuses a capability the instance's version does not implement", async () => {
    await refuse([binding("tenant-bind", "cap:rules.bind.z", inst.id)], "invalid", /capability_id/);
  });

  it("refuses unknown capabilities, instances and admission policies", async () => {
    await refuse([binding("tenant-bind", "cap:rules.bind.missing", inst.id)], "not-found");
    await refuse([binding("tenant-bind", "cap:rules.bind.y", "cinst_rules_missing")], "not-found");
    await refuse([binding("tenant-bind", "cap:rules.bind.y", inst.id, { quota_policy_ref: "quota:missing" })], "not-found", /quota:missing/);
  });
});

describe("admission policy: policy_ref fixed; the rest only with a newer revision; limits validated", () => {
  const base = policy("quota:rules", { revision: 2 });

  beforeAll(async () => {
    await accept([base]);
  });

  it("treats an identical re-put as unchanged", async () => {
    await accept([base], ["unchanged"]);
  });

  it("refuses a change without a newer revision and accepts one with it", async () => {
    await refuse([{ ...base, max_tenant_in_flight: 7 }], "conflict", /newer revision/);
    await refuse([{ ...base, enabled: false, revision: 1 }], "conflict", /newer revision/);
    await refuse([{ ...base, revision: 1 }], "conflict");
    const before = await catalogRevision(db.owner);
    await accept([{ ...base, max_tenant_in_flight: 7, revision: 3 }], ["updated"]);
    expect(await catalogRevision(db.owner)).toBe(before + 1);
    expect(await record("admission_policy", base.policy_ref)).toMatchObject({ revision: 3, max_tenant_in_flight: 7 });
  });

  const limits = [
    "max_global_in_flight",
    "max_tenant_in_flight",
    "max_connector_type_in_flight",
    "max_instance_in_flight",
    "max_binding_in_flight",
    "max_tenant_retry_in_flight",
  ];

  it.each(limits)("refuses a zero, negative, fractional or non-numeric %s", async (field) => {
    for (const value of [0, -1, 1.5, "5"]) {
      const error = await refuse([policy(`quota:rules-${field}`, { [field]: value })], "invalid");
      expect(error.extensions.errors).toEqual([expect.objectContaining({ field })]);
    }
  });

  it("refuses a boolean limit and one beyond the 32-bit counter range", async () => {
    for (const value of [true, 2147483648]) {
      const field = "max_instance_in_flight";
      const error = await refuse([policy(`quota:rules-${field}`, { [field]: value })], "invalid");
      expect(error.extensions.errors).toEqual([expect.objectContaining({ field })]);
    }
  });

  it("stores a null or absent limit as unlimited", async () => {
    const { max_global_in_flight: _g, ...absent } = policy("quota:rules-unlimited-absent");
    await accept([policy("quota:rules-unlimited", { max_tenant_in_flight: null, max_binding_in_flight: null }), absent], ["created", "created"]);
    expect(await record("admission_policy", "quota:rules-unlimited")).toMatchObject({ max_tenant_in_flight: null, max_binding_in_flight: null });
    expect(await record("admission_policy", "quota:rules-unlimited-absent")).toMatchObject({ max_global_in_flight: null });
  });

  it("bounds circuit_open_ms to [100, 3600000] and requires a positive failure threshold and revision", async () => {
    await refuse([policy("quota:rules-open", { circuit_open_ms: 99 })], "invalid", /circuit_open_ms/);
    await refuse([policy("quota:rules-open", { circuit_open_ms: 3600001 })], "invalid", /circuit_open_ms/);
    await refuse([policy("quota:rules-open", { circuit_open_ms: 150.5 })], "invalid", /circuit_open_ms/);
    await refuse([policy("quota:rules-open", { circuit_failure_threshold: 0 })], "invalid", /circuit_failure_threshold/);
    await refuse([policy("quota:rules-open", { revision: 0 })], "invalid", /revision/);
    await accept(
      [policy("quota:rules-open-min", { circuit_open_ms: 100 }), policy("quota:rules-open-max", { circuit_open_ms: 3600000 })],
      ["created", "created"],
    );
  });
});

describe("replica provisioning: identity, endpoint and topology fixed; capacity mutable", () => {
  const typeId = "ctype_rules_repl";
  const inst = instance("cinst_rules_repl", typeId, "cver_rules_repl_1", "tenant-repl");
  const base = replica("crepl_rules", inst.id, "cver_rules_repl_1", { capacity: 2 });

  beforeAll(async () => {
    await accept([
      connectorType(typeId),
      await version("cver_rules_repl_1", typeId, ["cap:rules.repl"]),
      await version("cver_rules_repl_2", typeId, ["cap:rules.repl"]),
      inst,
      instance("cinst_rules_repl_other", typeId, "cver_rules_repl_1", "tenant-repl"),
      binding("tenant-repl", "cap:rules.repl", inst.id),
    ]);
  });

  it("starts a new replica offline with no lease, without advancing the catalog revision", async () => {
    const before = await catalogRevision(db.owner);
    await accept([base], ["created"]);
    expect(await catalogRevision(db.owner)).toBe(before);
    expect(await record("replica", base.id)).toMatchObject({
      status: "offline",
      lease_expires_at: null,
      active_assignments: 0,
      health_revision: 0,
      capacity: 2,
      topology: base.topology,
    });
    await accept([base], ["unchanged"]);
  });

  it.each([
    ["endpoint", { endpoint: "https://elsewhere.hosts.example/aip" }],
    ["peer_principal_id", { peer_principal_id: "service:someone-else" }],
    ["peer_principal_kind", { peer_principal_kind: "workload" }],
    ["peer_did", { peer_did: "did:key:z6MkOther" }],
    ["trust_domain", { trust_domain: "other.example" }],
    ["transport_profile", { transport_profile: "aip.native.http.v2" }],
    ["topology.region", { topology: { ...base.topology, region: "us-east" } }],
    ["topology.zone", { topology: { ...base.topology, zone: "eu-west-1b" } }],
    ["topology.capacity_class", { topology: { ...base.topology, capacity_class: "gpu" } }],
    ["instance_id", { instance_id: "cinst_rules_repl_other" }],
    ["version_id", { version_id: "cver_rules_repl_2" }],
  ])("refuses a change of %s", async (_field, change) => {
    await refuse([{ ...base, ...change }], "conflict", /immutable/);
  });

  it("accepts a capacity change, which bumps the health revision but not the catalog revision", async () => {
    const before = await catalogRevision(db.owner);
    await accept([{ ...base, capacity: 3 }], ["updated"]);
    expect(await catalogRevision(db.owner)).toBe(before);
    expect(await record("replica", base.id)).toMatchObject({ capacity: 3, health_revision: 1 });
  });

  it("refuses a capacity below the replica's active assignments", async () => {
    await registerReplica(db.registry, base.id);
    await db.registry.resolveRoute("act_rules_repl_1", "tenant-repl", "cap:rules.repl");
    await db.registry.resolveRoute("act_rules_repl_2", "tenant-repl", "cap:rules.repl");
    expect(await record("replica", base.id)).toMatchObject({ active_assignments: 2 });
    await refuse([{ ...base, capacity: 1 }], "conflict", /active assignments/);
    await accept([{ ...base, capacity: 2 }], ["updated"]);
  });

  it("refuses a new replica whose version is not the instance's rollout version", async () => {
    await refuse([replica("crepl_rules_stale", inst.id, "cver_rules_repl_2")], "invalid", /version_id/);
    await refuse([replica("crepl_rules_orphan", "cinst_rules_missing", "cver_rules_repl_1")], "not-found");
  });

  it("refuses malformed endpoints and topology labels", async () => {
    await refuse([replica("crepl_rules_bad", inst.id, "cver_rules_repl_1", { endpoint: "ftp://host.example/x" })], "invalid", /endpoint/);
    await refuse([replica("crepl_rules_bad", inst.id, "cver_rules_repl_1", { endpoint: "https://user:pw@host.example/x" })], "invalid", /endpoint/);
    await refuse([replica("crepl_rules_bad", inst.id, "cver_rules_repl_1", { region: "eu west" })], "invalid", /topology\.region/);
    await refuse([{ ...replica("crepl_rules_bad", inst.id, "cver_rules_repl_1"), capacity: 0 }], "invalid", /capacity/);
  });
});
