/**
 * RouteAssignment is described four times: the route table (drizzle/schema.ts, migrated into the
 * database), the new route aip_resolve_route inserts (aip_new_route), the record built by
 * aip_assignment_build (aip_assignment_json, resolve), and the
 * zod schema the API documents and validates with (src/schemas.ts). A change to one that the
 * others do not follow fails here, not in production as a missing member or a silently NULL
 * column.
 */
import { getTableConfig } from "drizzle-orm/pg-core";
import { beforeAll, expect, it } from "vitest";
import { routeAssignments } from "../../drizzle/schema.js";
import { AdmissionScope, AdmissionSnapshot, RouteAssignment, Topology } from "../../src/schemas.js";
import { useTestDatabase } from "../support/database.js";
import { publishRoutingFleet } from "../support/routing-fleet.js";

const db = useTestDatabase();
let record: Record<string, unknown>;
beforeAll(async () => {
  // The implicit default policy: every limit but global and type set, a retry scope, and no
  // quota_policy_ref or credential_revision_ref (nullable members must still be present).
  const fleet = await publishRoutingFleet(db.registry, {
    prefix: "shape",
    tenant: "tenant-shape",
    policy: null,
    instances: [{ name: "i", replicas: [{ name: "a" }] }],
  });
  await db.registry.resolveRoute("act_shape_1", fleet.tenant, fleet.capability);
  const { rows } = await db.owner.query<{ record: Record<string, unknown> }>(
    "SELECT aip_assignment_json(a) AS record FROM aip_route_assignments a WHERE action_id = 'act_shape_1'",
  );
  record = rows[0]!.record;
});

const sorted = (keys: Iterable<string>) => [...keys].sort();

/** Members the record joins from the replica and version rows (or builds), not route columns. */
const JOINED = [
  "admission",
  "endpoint",
  "manifest_digest",
  "peer_did",
  "peer_principal_id",
  "peer_principal_kind",
  "topology",
  "transport_profile",
  "trust_domain",
];
/** Route bookkeeping: columns that are not part of the record (the record's digest among them). */
const BOOKKEEPING = ["assignment_digest", "last_settlement", "reserved", "retry", "settled_at", "updated_at"];
/** Columns a new route leaves NULL (never settled). */
const NEW_ROUTE_NULLS = ["last_settlement", "settled_at"];

async function tableColumns(): Promise<{ name: string; notNull: boolean }[]> {
  const { rows } = await db.owner.query<{ name: string; nullable: string }>(
    "SELECT column_name AS name, is_nullable AS nullable FROM information_schema.columns WHERE table_name = 'aip_route_assignments' ORDER BY ordinal_position",
  );
  return rows.map((r) => ({ name: r.name, notNull: r.nullable === "NO" }));
}

it("aip_assignment_json builds exactly the members of the zod schema, nested ones included", () => {
  expect(sorted(Object.keys(record))).toEqual(sorted(Object.keys(RouteAssignment.shape)));
  expect(sorted(Object.keys(record.topology as object))).toEqual(sorted(Object.keys(Topology.shape)));
  const admission = record.admission as { scopes: object[]; retry_scope: object | null };
  expect(sorted(Object.keys(admission))).toEqual(sorted(Object.keys(AdmissionSnapshot.shape)));
  expect(admission.scopes.length).toBeGreaterThan(0);
  for (const scope of [...admission.scopes, admission.retry_scope!]) expect(sorted(Object.keys(scope))).toEqual(sorted(Object.keys(AdmissionScope.shape)));
  // And with the schema's types: strict, so no member the schema does not know.
  expect(RouteAssignment.strict().safeParse(record).error).toBeUndefined();
});

it("the drizzle route table is the migrated table, column for column", async () => {
  const drizzle = getTableConfig(routeAssignments).columns.map((c) => ({ name: c.name, notNull: c.notNull }));
  expect(sorted((await tableColumns()).map((c) => JSON.stringify(c)))).toEqual(sorted(drizzle.map((c) => JSON.stringify(c))));
});

it("the route's columns are the record's stored members, its pinned admission and bookkeeping", async () => {
  const columns = (await tableColumns()).map((c) => c.name);
  const stored = Object.keys(RouteAssignment.shape).filter((k) => !JOINED.includes(k));
  const admission = columns.filter((c) => c.startsWith("admission_"));
  expect(admission.length).toBeGreaterThan(0);
  expect(sorted(columns)).toEqual(sorted([...stored, ...admission, ...BOOKKEEPING]));
});

it("a new route sets every column but those a route leaves NULL until it is settled, and keeps its record's digest", async () => {
  const { rows } = await db.owner.query<{ src: string }>("SELECT prosrc AS src FROM pg_proc WHERE proname = 'aip_new_route'");
  const assigned = [...rows[0]!.src.matchAll(/^\s*a\.([a-z_]+) :=/gm)].map((m) => m[1]!);
  expect(new Set(assigned).size).toBe(assigned.length);
  const columns = (await tableColumns()).map((c) => c.name);
  // The digest is the resolver's to add, once it has built the record from the route.
  expect(sorted([...assigned, "assignment_digest"])).toEqual(sorted(columns.filter((c) => !NEW_ROUTE_NULLS.includes(c))));
  const { rows: route } = await db.owner.query<Record<string, unknown>>(
    `SELECT a.*, a.assignment_digest = aip_assignment_digest(aip_assignment_json(a)::jsonb) AS digest_matches
     FROM aip_route_assignments a WHERE action_id = 'act_shape_1'`,
  );
  expect(route[0]).toMatchObject({ last_settlement: null, settled_at: null, retry: false, reserved: true, digest_matches: true });
});
