/**
 * Supply-chain qualification as a stored outcome: admission sets it from the evidence, an
 * operator revokes it (set_version_qualification), and a version that is not qualified is in no
 * catalog, takes no new route, serves no retry and registers no replica, whatever its status.
 * Restoring it re-checks the stored evidence against today's rules.
 */
import { afterEach, describe, expect, it } from "vitest";
import type { RouteAssignment } from "../../src/schemas.js";
import { useTestDatabase } from "../support/database.js";
import { connectorType, hostPrincipal, registrationEvidence, replica, requestId, version } from "../../fixtures/records.js";
import { expectHealthy } from "../support/invariants.js";
import { registryState } from "../support/registry-state.js";
import { publishRoutingFleet, type RoutingFleet } from "../support/routing-fleet.js";
import { catalogRevision, refusal } from "../support/assertions.js";
import { catalogGet, catalogPage } from "../../fixtures/catalog-reads.js";

const db = useTestDatabase();
afterEach(() => expectHealthy(db.registry));

const qualify = (id: string, qualified: boolean, reason?: string) => ({
  op: "set_version_qualification",
  id,
  supply_chain_qualified: qualified,
  ...(reason ? { reason } : {}),
});

let actionCounter = 0;
const newAction = () => `act_qual_${(++actionCounter).toString().padStart(5, "0")}`;
const resolve = (fleet: RoutingFleet, actionId: string) => db.registry.resolveRoute(actionId, fleet.tenant, fleet.capability);
const settle = (a: RouteAssignment) => db.registry.settleRoute(a.action_id, a.tenant_id, a, "completed");
const visible = async (fleet: RoutingFleet) => (await catalogPage(db.registry, fleet.tenant, {})).capabilities.map((d) => d.capability.id);

describe("admission", () => {
  it("stores qualification as the outcome of the evidence checks", async () => {
    await db.registry.publish([connectorType("ctype_qual_adm"), await version("cver_qual_adm", "ctype_qual_adm", ["cap:qual.adm"])]);
    expect(await db.registry.adminGet("version", "cver_qual_adm")).toMatchObject({ supply_chain_qualified: true, qualification_reason: null });
  });
});

describe("revoking qualification", () => {
  it("hides the version from the catalog, refuses new routes and pinned retries, and moves the revision once", async () => {
    const fleet = await publishRoutingFleet(db.registry, { prefix: "qrev", tenant: "tenant-qrev", instances: [{ name: "i", replicas: [{ name: "r" }] }] });
    const pinned = await resolve(fleet, newAction());
    await settle(pinned.assignment);
    const activeBefore = (await db.registry.fleetStatus()).active_versions;
    expect(await visible(fleet)).toEqual([fleet.capability]);

    const before = await catalogRevision(db.owner);
    const revoked = await db.registry.publish([qualify(fleet.versionId, false, "CVE-2026-0001 in the vulnerability report")]);
    expect(revoked.results).toEqual([{ op: "set_version_qualification", outcome: "updated", id: fleet.versionId }]);
    expect(revoked.catalog_revision).toBe(before + 1);
    expect(await db.registry.adminGet("version", fleet.versionId)).toMatchObject({
      status: "active",
      supply_chain_qualified: false,
      qualification_reason: "CVE-2026-0001 in the vulnerability report",
    });

    expect(await visible(fleet)).toEqual([]);
    expect((await catalogGet(db.registry, fleet.tenant, fleet.capability)).definition).toBeNull();
    expect((await refusal(resolve(fleet, newAction()))).code).toBe("binding-unavailable");
    expect((await refusal(resolve(fleet, pinned.assignment.action_id))).code).toBe("replica-unavailable");
    expect((await db.registry.fleetStatus()).active_versions).toBe(activeBefore - 1);

    // The same flag again changes nothing and leaves the revision alone.
    const again = await db.registry.publish([qualify(fleet.versionId, false, "another reason")]);
    expect(again.results[0]?.outcome).toBe("unchanged");
    expect(again.catalog_revision).toBe(revoked.catalog_revision);
  });

  it("refuses to activate a version that is not qualified", async () => {
    await db.registry.publish([connectorType("ctype_qual_act"), await version("cver_qual_act", "ctype_qual_act", ["cap:qual.act"], { status: "admitted" })]);
    await db.registry.publish([qualify("cver_qual_act", false)]);
    const before = await registryState(db.owner);
    const error = await refusal(db.registry.publish([{ op: "set_version_status", id: "cver_qual_act", status: "active" }]));
    expect(error.code).toBe("admission");
    expect(error.message).toMatch(/not supply-chain qualified/);
    expect(await registryState(db.owner)).toEqual(before);
  });

  it("refuses a registration of a replica of an unqualified version", async () => {
    const fleet = await publishRoutingFleet(db.registry, {
      prefix: "qreg",
      tenant: "tenant-qreg",
      instances: [{ name: "i", replicas: [{ name: "r", register: false }] }],
    });
    await db.registry.publish([qualify(fleet.versionId, false)]);
    const evidence = await registrationEvidence(db.registry, fleet.replica.r!);
    const error = await refusal(
      db.registry.replicaLifecycle(fleet.replica.r!, "register", { request_id: requestId(), ...evidence }, hostPrincipal(fleet.replica.r!)),
    );
    expect(error.code).toBe("admission");
  });

  it("refuses an unknown version and a missing flag, changing nothing", async () => {
    const before = await registryState(db.owner);
    expect((await refusal(db.registry.publish([qualify("cver_qual_missing", false)]))).code).toBe("not-found");
    expect((await refusal(db.registry.publish([{ op: "set_version_qualification", id: "cver_qual_adm" }]))).code).toBe("invalid");
    expect((await refusal(db.registry.publish([{ ...qualify("cver_qual_adm", false), reason: " " }]))).code).toBe("invalid");
    expect(await registryState(db.owner)).toEqual(before);
  });
});

describe("restoring qualification", () => {
  it("re-checks the stored evidence and makes the version routable again", async () => {
    const fleet = await publishRoutingFleet(db.registry, { prefix: "qres", tenant: "tenant-qres", instances: [{ name: "i", replicas: [{ name: "r" }] }] });
    await db.registry.publish([qualify(fleet.versionId, false, "report under review")]);
    const restored = await db.registry.publish([qualify(fleet.versionId, true)]);
    expect(restored.results[0]?.outcome).toBe("updated");
    expect(await db.registry.adminGet("version", fleet.versionId)).toMatchObject({ supply_chain_qualified: true, qualification_reason: null });
    expect(await visible(fleet)).toEqual([fleet.capability]);
    expect((await resolve(fleet, newAction())).outcome).toBe("created");
  });

  it("refuses evidence that no longer passes, naming the field, and changes nothing", async () => {
    await db.registry.publish([connectorType("ctype_qual_old"), await version("cver_qual_old", "ctype_qual_old", ["cap:qual.old"])]);
    await db.registry.publish([qualify("cver_qual_old", false)]);
    // A version admitted before the registry checked the SDK requirement and the schema bundle.
    await db.owner.query(
      "UPDATE aip_connector_versions SET attestation = attestation - 'sdk_version_requirement' - 'schema_bundle_digest' WHERE version_id = 'cver_qual_old'",
    );
    const before = await registryState(db.owner);
    const error = await refusal(db.registry.publish([qualify("cver_qual_old", true)]));
    expect(error.code).toBe("admission");
    expect(error.message).toMatch(/cannot be qualified again/);
    expect(error.extensions).toMatchObject({ version_id: "cver_qual_old", field: "attestation.schema_bundle_digest", change_index: 0 });
    expect(await registryState(db.owner)).toEqual(before);

    // Evidence that is well-formed but does not include this registry's SDK version.
    await db.owner.query(
      `UPDATE aip_connector_versions v
       SET attestation = attestation || jsonb_build_object('sdk_version_requirement', '^2.0',
                                                          'schema_bundle_digest', aip_schema_bundle_digest(m.manifest -> 'capabilities', aip_canonical_schemas(m.manifest -> 'capabilities')))
       FROM aip_manifests m
       WHERE v.version_id = 'cver_qual_old' AND m.manifest_digest = v.manifest_digest`,
    );
    const sdk = await refusal(db.registry.publish([qualify("cver_qual_old", true)]));
    expect(sdk.extensions).toMatchObject({ field: "attestation.sdk_version_requirement" });
    await db.owner.query(
      "UPDATE aip_connector_versions SET attestation = jsonb_set(attestation, '{sdk_version_requirement}', '\"^1.0\"') WHERE version_id = 'cver_qual_old'",
    );
    expect((await db.registry.publish([qualify("cver_qual_old", true)])).results[0]?.outcome).toBe("updated");
  });

  it("a dry run reports the change and keeps the version unqualified", async () => {
    await db.registry.publish([connectorType("ctype_qual_dry"), await version("cver_qual_dry", "ctype_qual_dry", ["cap:qual.dry"])]);
    await db.registry.publish([qualify("cver_qual_dry", false)]);
    const dry = await db.registry.publish([qualify("cver_qual_dry", true)], { dryRun: true });
    expect(dry.results[0]?.outcome).toBe("updated");
    expect(await db.registry.adminGet("version", "cver_qual_dry")).toMatchObject({ supply_chain_qualified: false });
  });
});

// A replica of the qualified version stays provisionable while its version is unqualified: only
// routing and registration look at qualification.
it("provisioning a replica does not depend on qualification", async () => {
  const fleet = await publishRoutingFleet(db.registry, { prefix: "qprov", tenant: "tenant-qprov", instances: [{ name: "i", replicas: [] }] });
  await db.registry.publish([qualify(fleet.versionId, false)]);
  const created = await db.registry.publish([replica("crepl_qprov_late", fleet.instance.i!, fleet.versionId)]);
  expect(created.results[0]?.outcome).toBe("created");
});
