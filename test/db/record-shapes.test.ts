/**
 * The administrative and reader records as the real SQL functions build them (functions/10_records.sql,
 * 75_reader.sql, 85_admin.sql) against their strict schemas (src/schemas.ts: ADMIN_RECORDS,
 * BindingsPage, READER_RECORDS), which also describe them in the OpenAPI document. Every record
 * kind, in the states that make its nullable members null and not null, parses with its schema
 * (no member the schema lacks, none of another type), and the schema has no member the SQL never
 * returns (a member path of the schema that no record shows).
 */
import { beforeAll, describe, expect, it } from "vitest";
import { z } from "@hono/zod-openapi";
import { binding, connectorType, instance, policy, registerReplica, replica, version } from "../../fixtures/records.js";
import { KIND_NAMES, READER_KINDS } from "../../src/record-kinds.js";
import { ADMIN_RECORDS, BindingsPage, READER_RECORDS } from "../../src/schemas.js";
import { useTestDatabase } from "../support/database.js";

const db = useTestDatabase();
const TENANT = "tenant-shapes";
const everything = { tenantId: null, peerPrincipalId: null };

/** Per record kind, the IDs of records in different states. */
const RECORDS: Record<(typeof KIND_NAMES)[number], string[]> = {
  connector_type: ["ctype_shapes"],
  // A qualified version (no reason), and one whose qualification was revoked with a reason.
  version: ["cver_shapes", "cver_shapes_revoked"],
  instance: ["cinst_shapes"],
  // A registered replica (a lease) and one that never registered (no lease).
  replica: ["crepl_shapes_live", "crepl_shapes_idle"],
  // Limits set and unset.
  admission_policy: ["quota:shapes"],
};

beforeAll(async () => {
  await db.registry.publish([
    connectorType("ctype_shapes"),
    await version("cver_shapes", "ctype_shapes", ["cap:shapes.a", "cap:shapes.b"], { profiles: ["aip.native.http.v1", "aip.shapes.v1"] }),
    await version("cver_shapes_revoked", "ctype_shapes", ["cap:shapes.a"]),
    instance("cinst_shapes", "ctype_shapes", "cver_shapes", TENANT),
    policy("quota:shapes"),
    // One binding with every reference, one with none.
    binding(TENANT, "cap:shapes.a", "cinst_shapes", { quota_policy_ref: "quota:shapes" }),
    binding(TENANT, "cap:shapes.b", "cinst_shapes", { credential_revision_ref: null }),
    replica("crepl_shapes_live", "cinst_shapes", "cver_shapes"),
    replica("crepl_shapes_idle", "cinst_shapes", "cver_shapes"),
  ]);
  await db.registry.publish([{ op: "set_version_qualification", id: "cver_shapes_revoked", supply_chain_qualified: false, reason: "scanner finding" }]);
  await registerReplica(db.registry, "crepl_shapes_live");
});

/** Every member path of a schema ("topology.region", "capabilities[].id"); stored documents (z.record) are leaves. */
function schemaPaths(schema: z.ZodType, prefix = ""): string[] {
  if (schema instanceof z.ZodNullable || schema instanceof z.ZodOptional) return schemaPaths(schema.unwrap() as z.ZodType, prefix);
  if (schema instanceof z.ZodArray) return schemaPaths(schema.element as z.ZodType, `${prefix}[]`);
  if (schema instanceof z.ZodUnion) return (schema.options as z.ZodType[]).flatMap((option) => schemaPaths(option, prefix));
  if (schema instanceof z.ZodObject)
    return Object.entries(schema.shape as Record<string, z.ZodType>).flatMap(([key, member]) => {
      const path = prefix ? `${prefix}.${key}` : key;
      return [path, ...schemaPaths(member, path)];
    });
  return [];
}

/** Every member path a JSON value shows, the same way; `leaves` are paths not walked into (stored documents). */
function valuePaths(value: unknown, leaves: ReadonlySet<string>, prefix = ""): string[] {
  if (leaves.has(prefix)) return [];
  if (Array.isArray(value)) return value.flatMap((element) => valuePaths(element, leaves, `${prefix}[]`));
  if (value === null || typeof value !== "object") return [];
  return Object.entries(value).flatMap(([key, member]) => {
    const path = prefix ? `${prefix}.${key}` : key;
    return [path, ...valuePaths(member, leaves, path)];
  });
}

/** Members that may be absent: none, since every builder is a json_build_object of all its members. */
function optionalMembers(schema: z.ZodType, prefix = ""): string[] {
  if (schema instanceof z.ZodNullable) return optionalMembers(schema.unwrap() as z.ZodType, prefix);
  if (schema instanceof z.ZodArray) return optionalMembers(schema.element as z.ZodType, `${prefix}[]`);
  if (schema instanceof z.ZodObject)
    return Object.entries(schema.shape as Record<string, z.ZodType>).flatMap(([key, member]) => {
      const path = prefix ? `${prefix}.${key}` : key;
      return member instanceof z.ZodOptional ? [path] : optionalMembers(member, path);
    });
  return [];
}

/** Parses each record strictly and compares the schema's member paths with those the records show. */
function expectShape(name: string, schema: z.ZodType, records: unknown[]) {
  expect(records.length, name).toBeGreaterThan(0);
  for (const record of records) {
    const parsed = schema.safeParse(record);
    expect(parsed.success ? [] : parsed.error.issues.map((issue) => `${name} ${issue.path.join(".")}: ${issue.message}`)).toEqual([]);
  }
  const declared = schemaPaths(schema);
  const leaves = new Set(declared.filter((path) => !declared.some((other) => other.startsWith(`${path}.`) || other.startsWith(`${path}[]`))));
  const seen = new Set(records.flatMap((record) => valuePaths(record, leaves)));
  expect({ [name]: [...new Set(declared)].filter((path) => !seen.has(path)) }).toEqual({ [name]: [] });
  expect({ [name]: optionalMembers(schema) }).toEqual({ [name]: [] });
}

describe("administrative records (control role)", () => {
  it("cover every record kind", () => {
    expect(Object.keys(ADMIN_RECORDS).sort()).toEqual([...KIND_NAMES].sort());
    expect(Object.keys(RECORDS).sort()).toEqual([...KIND_NAMES].sort());
  });

  for (const kind of KIND_NAMES) {
    it(`${kind}: aip_admin_get's records parse with the strict schema, which has no member they lack`, async () => {
      const records = await Promise.all(RECORDS[kind].map((id) => db.registry.adminGet(kind, id)));
      expectShape(kind, ADMIN_RECORDS[kind], records);
    });
  }

  it("bindings: aip_admin_bindings' page is exactly BindingsPage, with BindingRecords", async () => {
    const first = await db.registry.adminBindings(TENANT, undefined, 1);
    expect(first.next_cursor).not.toBeNull();
    const last = await db.registry.adminBindings(TENANT, first.next_cursor!, 1);
    expect(last.next_cursor).toBeNull();
    expectShape("bindings page", BindingsPage, [first, last]);
  });

  it("the states above make every nullable member both null and not null somewhere", async () => {
    const replicas = await Promise.all(RECORDS.replica.map((id) => db.registry.adminGet("replica", id)));
    expect(replicas.map((r) => r?.lease_expires_at === null)).toEqual([false, true]);
    const versions = await Promise.all(RECORDS.version.map((id) => db.registry.adminGet("version", id)));
    expect(versions.map((v) => v?.qualification_reason)).toEqual([null, "scanner finding"]);
    const { bindings } = await db.registry.adminBindings(TENANT);
    expect(bindings.map((b) => [b.credential_revision_ref === null, b.quota_policy_ref === null])).toEqual([
      [false, false],
      [true, true],
    ]);
  });
});

describe("reader records (data role)", () => {
  it("cover every reader kind", () => {
    expect(Object.keys(READER_RECORDS).sort()).toEqual([...READER_KINDS].sort());
  });

  for (const kind of READER_KINDS) {
    it(`${kind}: aip_registry_read's records parse with the strict schema, which has no member they lack`, async () => {
      const records = await Promise.all(RECORDS[kind].map((id) => db.registry.registryRead(kind, id, everything)));
      expectShape(kind, READER_RECORDS[kind], records);
    });
  }
});
