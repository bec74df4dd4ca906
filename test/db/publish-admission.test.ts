/**
 * Version admission: the supply-chain and manifest checks that refuse a version (`admission`),
 * malformed evidence (`invalid`) and duplicates (`conflict`). Every refusal leaves the database
 * untouched.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { canonicalDigest, schemaBundleDigest } from "../../src/canonical-json.js";
import type { ProblemCode } from "../../src/registry/errors.js";
import { useTestDatabase } from "../support/database.js";
import { attestation, capability, connectorType, version } from "../../fixtures/records.js";
import { registryState } from "../support/registry-state.js";
import { refusal } from "../support/assertions.js";

const db = useTestDatabase();
const typeId = "ctype_adm";
const OWNER = "org:acme";

beforeAll(async () => {
  await db.registry.publish([connectorType(typeId, OWNER), { ...connectorType("ctype_adm_disabled", OWNER), enabled: false }]);
});

async function refuse(change: Record<string, unknown>, code: ProblemCode, message?: RegExp) {
  const before = await registryState(db.owner);
  const error = await refusal(db.registry.publish([change]));
  expect(error.code, error.message).toBe(code);
  if (message) expect(error.message).toMatch(message);
  expect(await registryState(db.owner)).toEqual(before);
  return error;
}

let counter = 0;
const fresh = (overrides: Parameters<typeof version>[3] = {}, capabilities: Parameters<typeof version>[2] = ["cap:adm.run"]) =>
  version(`cver_adm_${++counter}`, typeId, capabilities, overrides);

describe("supply-chain evidence", () => {
  it("admits a version whose manifest digest was computed by the TypeScript canonicalizer", async () => {
    const admitted = await db.registry.publish([await fresh()]);
    expect(admitted.results[0]?.outcome).toBe("created");
  });

  it("refuses a manifest digest that does not match the canonical manifest", async () => {
    const change = await fresh();
    await refuse({ ...change, manifest_digest: `sha256:${"0".repeat(64)}` }, "admission", /manifest digest/);
    // The digest of the manifest serialized as sent (not canonical) is refused too.
    const { createHash } = await import("node:crypto");
    const sent = `sha256:${createHash("sha256")
      .update(JSON.stringify(change.manifest, null, 2))
      .digest("hex")}`;
    await refuse({ ...change, manifest_digest: sent }, "admission", /manifest digest/);
  });

  it.each(["conformance_status", "vulnerability_policy_status", "license_policy_status", "revocation_status"])(
    "refuses evidence whose %s did not pass",
    async (field) => {
      for (const status of ["failed", "not_evaluated"]) {
        const error = await refuse(await fresh({ attestation: attestation(OWNER, { [field]: status }) }), "admission", new RegExp(field));
        expect(error.extensions).toMatchObject({ field: `attestation.${field}`, check_status: status });
      }
      await refuse(await fresh({ attestation: attestation(OWNER, { [field]: "PASSED" }) }), "invalid", new RegExp(field));
    },
  );

  it("refuses an artifact that does not declare AIP 1.0", async () => {
    await refuse(await fresh({ attestation: attestation(OWNER, { supported_aip_versions: ["0.9", "2.0"] }) }), "admission", /AIP 1\.0/);
    await refuse(await fresh({ attestation: attestation(OWNER, { supported_aip_versions: [] }) }), "admission", /AIP 1\.0/);
    await refuse(await fresh({ attestation: attestation(OWNER, { supported_aip_versions: "1.0" }) }), "invalid");
  });

  it("refuses an artifact owner other than the connector type's owner", async () => {
    await refuse(await fresh({ attestation: attestation("org:mallory") }), "admission", /owner/);
  });

  it("refuses admission under a disabled connector type, and under an unknown one", async () => {
    await refuse(await version("cver_adm_disabled", "ctype_adm_disabled", ["cap:adm.run"]), "admission", /disabled/);
    await refuse(await version("cver_adm_unknown", "ctype_adm_missing", ["cap:adm.run"]), "not-found");
  });

  it.each([
    "artifact_digest",
    "schema_bundle_digest",
    "sbom_digest",
    "provenance_digest",
    "conformance_report_digest",
    "vulnerability_report_digest",
    "license_report_digest",
  ])("refuses a malformed or missing %s as invalid, naming it", async (field) => {
    for (const digest of [`sha256:${"A".repeat(64)}`, `sha256:${"a".repeat(63)}`, "a".repeat(64), `sha512:${"a".repeat(64)}`, "", null]) {
      const error = await refuse(await fresh({ attestation: attestation(OWNER, { [field]: digest }) }), "invalid");
      expect(error.extensions.errors).toEqual([expect.objectContaining({ field: `attestation.${field}` })]);
    }
  });

  it.each(["signature_ref", "signer_identity", "owner", "sdk_version_requirement"])("refuses a missing or blank %s as invalid", async (field) => {
    for (const value of [undefined, " ", 7]) {
      const evidence = attestation(OWNER, { [field]: value });
      if (value === undefined) delete evidence[field];
      const error = await refuse(await fresh({ attestation: evidence }), "invalid");
      expect(error.extensions.errors).toEqual([expect.objectContaining({ field: `attestation.${field}` })]);
    }
  });
});

describe("SDK version requirement", () => {
  // This registry implements the 1.0.0 registry/SDK contracts (REGISTRY_SDK_VERSION, src/vocabulary.ts).
  it.each(["^1.0", "^1", "1.0.0", "=1.0.0", ">=1.0, <2.0", "~1.0", "1.*", "1.x", "*", ">=0.9.0", "<=1.0.0", ">0.9.9", " ^1.0.0 , <1.1 "])(
    "admits an artifact whose requirement %j includes 1.0.0",
    async (requirement) => {
      const admitted = await db.registry.publish([await fresh({ attestation: attestation(OWNER, { sdk_version_requirement: requirement }) })]);
      expect(admitted.results[0]?.outcome).toBe("created");
    },
  );

  it.each(["^2.0", "^0.9", ">1.0.0", "<1.0.0", "~1.1", "=1.0.1", "2.*", ">=1.0, <1.0.0", "^1.0.1", "=1.0.0-rc.1", "<1.0.0-rc.1"])(
    "refuses an artifact whose requirement %j excludes 1.0.0",
    async (requirement) => {
      const error = await refuse(
        await fresh({ attestation: attestation(OWNER, { sdk_version_requirement: requirement }) }),
        "admission",
        /does not include registry SDK `1\.0\.0`/,
      );
      expect(error.extensions).toMatchObject({ field: "attestation.sdk_version_requirement", registry_sdk_version: "1.0.0" });
    },
  );

  it.each(["latest", "1.0.0.0", "v1.0", ">= 1.*", "1.0,", "^01.0", "1.0.0+build", "1.0 || 2.0", "1.0 - 2.0", "*.1"])(
    "refuses an unparseable requirement %j as admission, naming the field",
    async (requirement) => {
      const error = await refuse(
        await fresh({ attestation: attestation(OWNER, { sdk_version_requirement: requirement }) }),
        "admission",
        /not a valid semver requirement/,
      );
      expect(error.extensions).toMatchObject({ field: "attestation.sdk_version_requirement" });
    },
  );
});

describe("schema bundle digest", () => {
  const capabilities = [
    { id: "cap:adm.bundle.b", output_schema: { type: "array" } },
    { id: "cap:adm.bundle.a", input_schema: { type: "object", properties: { x: { type: "number" } } }, output_schema: undefined },
  ];

  it("admits the digest of the canonical schemas in manifest order, a missing output schema as null", async () => {
    const change = await fresh({}, capabilities);
    const manifest = change.manifest as { capabilities: Record<string, unknown>[] };
    expect(JSON.parse(JSON.stringify(manifest.capabilities[1]))).not.toHaveProperty("output_schema");
    expect(change.attestation.schema_bundle_digest).toBe(await schemaBundleDigest(manifest.capabilities));
    const admitted = await db.registry.publish([change]);
    expect(admitted.results[0]?.outcome).toBe("created");
  });

  it("refuses a digest of anything else, with the one it computed", async () => {
    const change = await fresh({}, capabilities);
    const manifest = change.manifest as { capabilities: Record<string, unknown>[] };
    const computed = change.attestation.schema_bundle_digest;
    for (const wrong of [
      await schemaBundleDigest([...manifest.capabilities].reverse()), // another order
      await schemaBundleDigest(manifest.capabilities.slice(1)), // a schema left out
      await schemaBundleDigest(manifest.capabilities.map((c) => ({ ...c, output_schema: c.output_schema ?? {} }))), // missing output as {}
      await canonicalDigest(manifest), // the manifest digest
    ]) {
      const error = await refuse({ ...change, attestation: { ...change.attestation, schema_bundle_digest: wrong } }, "admission", /schema bundle digest/);
      expect(error.extensions).toMatchObject({ field: "attestation.schema_bundle_digest", computed });
    }
  });
});

describe("implementation claims", () => {
  const contract = {
    execution: { supports_sync: true, supports_cancel: true, supports_streaming: true, supports_retry: true },
    transaction: { supported_modes: ["execute", "reconcile"] },
    compensation: { mode: "supported", compensation_capability_id: "cap:adm.claims.undo" },
    approval: { required: true },
    credentials: { required: true },
  };
  const everything = {
    invocation: true,
    cancellation: true,
    streaming: true,
    retry: true,
    transaction: true,
    reconciliation: true,
    compensation: true,
    approval: true,
    credentials: true,
  };
  const claimed = (claims: Record<string, unknown>) => fresh({ implementation_support: { "cap:adm.claims": claims } }, [{ id: "cap:adm.claims", contract }]);

  it("admits a version whose claims support everything its contracts declare", async () => {
    const admitted = await db.registry.publish([await claimed(everything)]);
    expect(admitted.results[0]?.outcome).toBe("created");
  });

  it.each(Object.keys(everything))("refuses a contract declaring what the implementation does not claim: %s", async (claim) => {
    for (const value of [false, undefined]) {
      const claims: Record<string, unknown> = { ...everything, [claim]: value };
      if (value === undefined) delete claims[claim];
      const error = await refuse(await claimed(claims), "admission", new RegExp(`declares \`${claim}\``));
      expect(error.extensions).toMatchObject({ field: `implementation_support.cap:adm.claims.${claim}`, capability_id: "cap:adm.claims" });
    }
  });

  it("refuses a callable capability without a claim, and admits a resource without one", async () => {
    for (const kind of ["tool", undefined, "prompt"]) {
      const error = await refuse(await fresh({ implementation_support: {} }, [{ id: "cap:adm.unclaimed", kind }]), "admission", /no implementation claim/);
      expect(error.extensions).toMatchObject({ field: "implementation_support.cap:adm.unclaimed" });
    }
    const resource = await fresh({ implementation_support: {} }, [{ id: "cap:adm.resource", kind: "resource" }]);
    expect((await db.registry.publish([resource])).results[0]?.outcome).toBe("created");
  });

  it("refuses a claim for an undeclared capability or of an unknown kind as invalid", async () => {
    for (const support of [
      { "cap:adm.run": { invocation: true }, "cap:adm.other": { invocation: true } },
      { "cap:adm.run": { invocation: true, cancelation: true } },
      { "cap:adm.run": { invocation: "yes" } },
      { "cap:adm.run": true },
      [],
    ]) {
      const error = await refuse(await fresh({ implementation_support: support as Record<string, unknown> }), "invalid");
      expect(error.extensions.errors).toEqual([expect.objectContaining({ field: expect.stringMatching(/^implementation_support/) })]);
    }
  });

  it("keeps the claims as admitted: a re-put with other claims is a conflict", async () => {
    const change = await fresh({ implementation_support: { "cap:adm.run": { invocation: true } } });
    await db.registry.publish([change]);
    expect((await db.registry.publish([change])).results[0]?.outcome).toBe("unchanged");
    await refuse({ ...change, implementation_support: { "cap:adm.run": { invocation: true, streaming: true } } }, "conflict", /immutable/);
    const stored = await db.registry.adminGet("version", change.id);
    expect(stored?.implementation_support).toEqual({ "cap:adm.run": { invocation: true } });
  });
});

describe("the order of refusals", () => {
  it("refuses malformed evidence (invalid) before evidence that does not pass (admission)", async () => {
    const error = await refuse(
      await fresh({ status: "candidate", attestation: attestation(OWNER, { conformance_status: "failed", license_report_digest: "sha256:nope" }) }),
      "invalid",
    );
    expect(error.extensions.errors).toEqual([expect.objectContaining({ field: "attestation.license_report_digest" })]);
  });

  it("refuses in the reference's order: AIP version, SDK requirement, check statuses, schema bundle, claims", async () => {
    const broken = {
      supported_aip_versions: ["0.9"],
      sdk_version_requirement: "^2",
      vulnerability_policy_status: "failed",
      schema_bundle_digest: `sha256:${"9".repeat(64)}`,
    };
    const expected = [
      "attestation.supported_aip_versions",
      "attestation.sdk_version_requirement",
      "attestation.vulnerability_policy_status",
      "attestation.schema_bundle_digest",
    ];
    for (const [i, field] of expected.entries()) {
      const fixed = Object.fromEntries(Object.entries(broken).slice(i));
      const error = await refuse(await fresh({ attestation: attestation(OWNER, fixed), implementation_support: {} }), "admission");
      expect(error.extensions.field).toBe(field);
    }
    const error = await refuse(await fresh({ implementation_support: {} }), "admission");
    expect(error.extensions.field).toBe("implementation_support.cap:adm.run");
  });
});

describe("manifest digest", () => {
  it("refuses a malformed manifest digest as invalid", async () => {
    const change = await fresh();
    for (const digest of [String(change.manifest_digest).toUpperCase(), String(change.manifest_digest).slice(0, -1), "", 42]) {
      await refuse({ ...change, manifest_digest: digest }, "invalid", /manifest_digest/);
    }
  });
});

describe("manifest limits", () => {
  it("refuses more than 512 capabilities and admits exactly 512", async () => {
    const many = (n: number, prefix: string) => Array.from({ length: n }, (_, i) => ({ id: `cap:${prefix}.${String(i).padStart(4, "0")}` }));
    await refuse(await fresh({}, many(513, "adm.many513")), "admission", /513 capabilities; limit is 512/);
    const admitted = await db.registry.publish([await fresh({}, many(512, "adm.many512"))]);
    expect(admitted.results[0]?.outcome).toBe("created");
  });

  it("refuses a capability definition larger than 256 KiB", async () => {
    const big = { id: "cap:adm.big", description: "x".repeat(256 * 1024) };
    await refuse(await fresh({}, [big]), "admission", /cap:adm\.big.*limit is 262144/);
  });

  it("refuses a canonical manifest larger than 4 MiB", async () => {
    const change = await fresh();
    const manifest = { ...(change.manifest as Record<string, unknown>), extensions: { padding: "p".repeat(4 * 1024 * 1024) } };
    await refuse({ ...change, manifest, manifest_digest: await canonicalDigest(manifest) }, "admission", /limit is 4194304/);
  });

  it("refuses a manifest nested deeper than 128 levels as invalid", async () => {
    let deep: unknown = {};
    for (let i = 0; i < 130; i++) deep = [deep];
    const change = await fresh();
    const manifest = { ...(change.manifest as Record<string, unknown>), extensions: deep };
    await refuse({ ...change, manifest, manifest_digest: await canonicalDigest(manifest) }, "invalid", /128 levels/);
  });

  it("refuses malformed capabilities as invalid", async () => {
    for (const bad of [
      { ...capability({ id: "cap:adm.bad" }), input_schema: "string" },
      { ...capability({ id: "cap:adm.bad" }), output_schema: [] },
      { ...capability({ id: "cap:adm.bad" }), description: 7 },
      { ...capability({ id: "cap:adm.bad" }), name: "" },
      { ...capability({ id: "" }) },
    ]) {
      const change = await fresh();
      const manifest = { ...(change.manifest as Record<string, unknown>), capabilities: [bad] };
      await refuse({ ...change, manifest, manifest_digest: await canonicalDigest(manifest) }, "invalid");
    }
  });
});

describe("duplicates", () => {
  it("refuses a second version with an already admitted artifact digest", async () => {
    const first = await fresh();
    await db.registry.publish([first]);
    const second = await fresh({ attestation: first.attestation as Record<string, unknown> });
    await refuse(second, "conflict", /artifact digest/);
  });

  it("refuses a second version id for an existing (type, version) pair", async () => {
    const first = await fresh({ version: "1.2.3" });
    await db.registry.publish([first]);
    await refuse(await fresh({ version: "1.2.3" }), "conflict", /already has version `1\.2\.3`/);
  });
});
