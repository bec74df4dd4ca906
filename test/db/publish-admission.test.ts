/**
 * Version admission: the supply-chain and manifest checks that refuse a version (`admission`),
 * malformed evidence (`invalid`) and duplicates (`conflict`). Every refusal leaves the database
 * untouched.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { canonicalDigest } from "../../src/canonical-json.js";
import type { ProblemCode } from "../../src/registry/errors.js";
import { createTestDatabase, type TestDatabase } from "../support/database.js";
import { attestation, capability, connectorType, version } from "../support/fleet.js";
import { refusal, registryState } from "../support/registry-state.js";

let db: TestDatabase;
const typeId = "ctype_adm";
const OWNER = "org:acme";

beforeAll(async () => {
  db = await createTestDatabase();
  await db.registry.publish([connectorType(typeId, OWNER), { ...connectorType("ctype_adm_disabled", OWNER), enabled: false }]);
});
afterAll(() => db?.close());

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
    const sent = `sha256:${createHash("sha256").update(JSON.stringify(change.manifest, null, 2)).digest("hex")}`;
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

  it.each(["artifact_digest", "sbom_digest", "provenance_digest"])("refuses a malformed %s as invalid", async (field) => {
    for (const digest of [`sha256:${"A".repeat(64)}`, `sha256:${"a".repeat(63)}`, "a".repeat(64), `sha512:${"a".repeat(64)}`, ""]) {
      const error = await refuse(await fresh({ attestation: attestation(OWNER, { [field]: digest }) }), "invalid");
      expect(error.extensions.errors).toEqual([expect.objectContaining({ field: expect.stringContaining(field) })]);
    }
  });

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
