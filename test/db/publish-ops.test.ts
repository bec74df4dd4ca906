/**
 * The publication ops, once: the wire schema's discriminated union (src/schemas.ts, Change), the
 * list the database checks `op` against (PUBLICATION_OPS, generated into aip_publication_ops())
 * and the one dispatch (aip_pub_op, functions/20_publish.sql) must name the same ops, and every
 * applied change reports its outcome with the members that name its record and nothing internal.
 */
import { expect, it } from "vitest";
import { fromDatabaseError } from "../../src/registry/errors.js";
import { Change } from "../../src/schemas.js";
import { PUBLICATION_OPS } from "../../src/vocabulary.js";
import { useTestDatabase } from "../support/database.js";
import { binding, connectorType, instance, policy, replica, version } from "../../fixtures/records.js";
import { catalogRevision } from "../support/assertions.js";

const db = useTestDatabase();

/** The first field aip_pub_prepare refuses in a change that names only its op. */
async function refusedField(change: Record<string, unknown>): Promise<string> {
  const error = await db.owner.query("SELECT aip_pub_prepare($1::jsonb)", [JSON.stringify(change)]).then(
    () => expect.unreachable(`${change.op} was prepared without its fields`),
    (e: unknown) => fromDatabaseError(e),
  );
  expect(error.code).toBe("invalid");
  return (error.extensions.errors as { field: string }[])[0]!.field;
}

it("the wire schema's ops are the database's", () => {
  const wire = Change._zod.def.options.map((option) => (option as unknown as { shape: { op: { value: string } } }).shape.op.value);
  expect(wire).toEqual([...PUBLICATION_OPS]);
});

it("every op reaches its own prepare, and any other is refused naming the list", async () => {
  for (const op of PUBLICATION_OPS) expect({ op, field: await refusedField({ op }) }).not.toEqual({ op, field: "op" });
  const error = await db.owner.query('SELECT aip_pub_prepare(\'{"op": "put_everything"}\'::jsonb)').catch((e: unknown) => fromDatabaseError(e));
  expect(error).toMatchObject({ code: "invalid", message: `op must be one of ${PUBLICATION_OPS.join(", ")}` });
});

it("every op reports op, outcome and the members naming its record; a dry run reports the same", async () => {
  const changes = [
    connectorType("ctype_ops"),
    { op: "set_connector_type_enabled", id: "ctype_ops", enabled: true },
    await version("cver_ops", "ctype_ops", ["cap:ops.run"], { status: "admitted" }),
    { op: "set_version_status", id: "cver_ops", status: "active" },
    { op: "set_version_qualification", id: "cver_ops", supply_chain_qualified: true },
    policy("quota:ops"),
    instance("cinst_ops", "ctype_ops", "cver_ops", "tenant-ops"),
    binding("tenant-ops", "cap:ops.run", "cinst_ops", { quota_policy_ref: "quota:ops" }),
    replica("crepl_ops", "cinst_ops", "cver_ops"),
  ];
  expect(changes.map((c) => c.op).sort()).toEqual([...PUBLICATION_OPS].sort());
  const expected = [
    { op: "put_connector_type", outcome: "created", id: "ctype_ops" },
    { op: "set_connector_type_enabled", outcome: "unchanged", id: "ctype_ops" },
    { op: "admit_version", outcome: "created", id: "cver_ops" },
    { op: "set_version_status", outcome: "updated", id: "cver_ops" },
    { op: "set_version_qualification", outcome: "unchanged", id: "cver_ops" },
    { op: "put_admission_policy", outcome: "created", policy_ref: "quota:ops" },
    { op: "put_instance", outcome: "created", id: "cinst_ops" },
    { op: "put_binding", outcome: "created", tenant_id: "tenant-ops", capability_id: "cap:ops.run", instance_id: "cinst_ops" },
    { op: "put_replica", outcome: "created", id: "crepl_ops" },
  ];
  const before = await catalogRevision(db.owner);
  const dry = await db.registry.publish(changes, { dryRun: true });
  expect(dry.results).toEqual(expected);
  const published = await db.registry.publish(changes);
  expect(published.results).toEqual(expected);
  // One revision for the batch, the same the dry run announced.
  expect({ changed: published.changed, revision: published.catalog_revision }).toEqual({ changed: 7, revision: before + 1 });
  expect(dry.catalog_revision).toBe(before + 1);
});
