/**
 * The catalog revision and batch semantics of aip_publish: one advance per batch that changed the
 * catalog, none for an identical re-put or for replica provisioning alone, all or nothing on
 * failure (naming the failing change), and a dry run that reports without changing anything.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { useTestDatabase } from "../support/database.js";
import { binding, connectorType, instance, policy, replica, version } from "../../fixtures/records.js";
import { registryState } from "../support/registry-state.js";
import { catalogRevision, refusal } from "../support/assertions.js";

const db = useTestDatabase();

async function fleetBatch(prefix: string) {
  const typeId = `ctype_${prefix}`;
  const versionId = `cver_${prefix}`;
  const instanceId = `cinst_${prefix}`;
  return [
    connectorType(typeId),
    await version(versionId, typeId, [`cap:${prefix}.a`, `cap:${prefix}.b`]),
    policy(`quota:${prefix}`),
    instance(instanceId, typeId, versionId, `tenant-${prefix}`),
    binding(`tenant-${prefix}`, `cap:${prefix}.a`, instanceId, { quota_policy_ref: `quota:${prefix}` }),
    binding(`tenant-${prefix}`, `cap:${prefix}.b`, instanceId),
    replica(`crepl_${prefix}`, instanceId, versionId),
  ];
}

describe("catalog revision", () => {
  it("advances exactly once for a batch of many changes", async () => {
    const before = await catalogRevision(db.owner);
    const result = await db.registry.publish(await fleetBatch("rev1"));
    expect(result.catalog_revision).toBe(before + 1);
    expect(result.changed).toBe(7);
    expect(result.dry_run).toBe(false);
    expect(result.results.map((r) => r.outcome)).toEqual(Array(7).fill("created"));
    expect(await catalogRevision(db.owner)).toBe(before + 1);
  });

  it("does not advance, nor change anything, when a whole batch is re-put identically", async () => {
    const batch = await fleetBatch("rev2");
    const first = await db.registry.publish(batch);
    const before = await registryState(db.owner);
    const again = await db.registry.publish(batch);
    expect(again).toMatchObject({ catalog_revision: first.catalog_revision, changed: 0 });
    expect(again.results.map((r) => r.outcome)).toEqual(Array(batch.length).fill("unchanged"));
    expect(await registryState(db.owner)).toEqual(before);
  });

  it("does not advance for a batch that only provisions replicas, new or resized", async () => {
    const batch = await fleetBatch("rev3");
    const published = await db.registry.publish(batch.slice(0, -1));
    const provisioned = await db.registry.publish([replica("crepl_rev3_a", "cinst_rev3", "cver_rev3"), replica("crepl_rev3_b", "cinst_rev3", "cver_rev3")]);
    expect(provisioned).toMatchObject({ catalog_revision: published.catalog_revision, changed: 2 });
    const resized = await db.registry.publish([replica("crepl_rev3_a", "cinst_rev3", "cver_rev3", { capacity: 20 })]);
    expect(resized).toMatchObject({ catalog_revision: published.catalog_revision, changed: 1 });
    expect(await catalogRevision(db.owner)).toBe(published.catalog_revision);
  });

  it("advances once when a batch mixes provisioning with one catalog change", async () => {
    const before = await catalogRevision(db.owner);
    const result = await db.registry.publish([
      replica("crepl_rev3_c", "cinst_rev3", "cver_rev3"),
      binding("tenant-rev3", "cap:rev3.b", "cinst_rev3", { policy_revision: 2, priority: 1 }),
    ]);
    expect(result).toMatchObject({ catalog_revision: before + 1, changed: 2 });
  });

  it("names each change's outcome with its identity", async () => {
    const result = await db.registry.publish(await fleetBatch("rev4"));
    expect(result.results).toEqual([
      { op: "put_connector_type", outcome: "created", id: "ctype_rev4" },
      { op: "admit_version", outcome: "created", id: "cver_rev4" },
      { op: "put_admission_policy", outcome: "created", policy_ref: "quota:rev4" },
      { op: "put_instance", outcome: "created", id: "cinst_rev4" },
      { op: "put_binding", outcome: "created", tenant_id: "tenant-rev4", capability_id: "cap:rev4.a", instance_id: "cinst_rev4" },
      { op: "put_binding", outcome: "created", tenant_id: "tenant-rev4", capability_id: "cap:rev4.b", instance_id: "cinst_rev4" },
      { op: "put_replica", outcome: "created", id: "crepl_rev4" },
    ]);
  });
});

describe("all or nothing", () => {
  it.each([0, 3, 6])("rolls back every earlier change and the revision when change %i fails, and names it", async (failing) => {
    const batch: Record<string, unknown>[] = await fleetBatch(`aon${failing}`);
    // Break exactly one change: an unknown reference makes it not-found.
    const broken = { ...batch[failing], ...(failing === 0 ? { op: "set_connector_type_enabled", id: "ctype_missing", enabled: true } : {}) };
    if (failing === 3) Object.assign(broken, { version_id: "cver_missing" });
    if (failing === 6) Object.assign(broken, { instance_id: "cinst_missing" });
    batch[failing] = broken;
    const before = await registryState(db.owner);
    const error = await refusal(db.registry.publish(batch));
    expect(error.code).toBe("not-found");
    expect(error.extensions.change_index).toBe(failing);
    expect(error.message).toMatch(new RegExp(`^changes\\[${failing}\\]: `));
    expect(await registryState(db.owner)).toEqual(before);
  });

  it("rolls back a batch whose last change conflicts with an earlier change of the same batch", async () => {
    const batch = await fleetBatch("aon_self");
    const before = await registryState(db.owner);
    const error = await refusal(db.registry.publish([...batch, { ...batch[0], owner: "org:other" }]));
    expect(error).toMatchObject({ code: "conflict", extensions: expect.objectContaining({ change_index: batch.length }) });
    expect(await registryState(db.owner)).toEqual(before);
  });

  it("refuses an empty or non-array batch and a change that is not an object", async () => {
    const before = await registryState(db.owner);
    for (const changes of [[], {}, "x", null]) {
      expect((await refusal(db.registry.publish(changes as never))).code).toBe("invalid");
    }
    const error = await refusal(db.registry.publish([connectorType("ctype_aon_obj"), 42]));
    expect(error).toMatchObject({ code: "invalid", extensions: expect.objectContaining({ change_index: 1 }) });
    expect((await refusal(db.registry.publish([{ op: "delete_everything" }]))).code).toBe("invalid");
    expect(await registryState(db.owner)).toEqual(before);
  });
});

describe("dry run", () => {
  let batch: Record<string, unknown>[];
  beforeAll(async () => {
    batch = await fleetBatch("dry1");
  });

  it("reports the outcomes and the would-be revision and changes nothing", async () => {
    const before = await registryState(db.owner);
    const report = await db.registry.publish(batch, { dryRun: true });
    expect(report).toMatchObject({ catalog_revision: before.catalog_revision + 1, changed: batch.length, dry_run: true });
    expect(report.results.map((r) => r.outcome)).toEqual(Array(batch.length).fill("created"));
    expect(await registryState(db.owner)).toEqual(before);

    // The real publication then does exactly what the dry run said.
    const { dry_run: _d, ...published } = await db.registry.publish(batch);
    const { dry_run: _r, ...predicted } = report;
    expect(published).toEqual(predicted);
  });

  it("reports an unchanged batch at the current revision", async () => {
    const revision = await catalogRevision(db.owner);
    const report = await db.registry.publish(batch, { dryRun: true });
    expect(report).toMatchObject({ catalog_revision: revision, changed: 0, dry_run: true });
  });

  it("refuses a failing batch exactly like a real publication, naming the change", async () => {
    const fresh = await fleetBatch("dry2");
    const before = await registryState(db.owner);
    const error = await refusal(db.registry.publish([...fresh, { op: "set_version_status", id: "cver_dry2", status: "candidate" }], { dryRun: true }));
    expect(error).toMatchObject({ code: "invalid", extensions: expect.objectContaining({ change_index: fresh.length }) });
    expect(await registryState(db.owner)).toEqual(before);
  });
});
