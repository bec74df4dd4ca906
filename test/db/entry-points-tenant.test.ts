/**
 * Every data-plane entry point (every registry function the data role may execute, enumerated
 * from pg_proc, so a new grant is covered the day it is written) takes the tenant as an argument
 * (`p_tenant_id text`), or is on the allow-list below with the reason it does not. This is what
 * would let a distributed engine route each call to one tenant's node (docs/scaling.md, "Past one
 * primary: a Citus plan": create_distributed_function(..., distribution_arg_name =>
 * 'p_tenant_id')); the allow-listed ones are the plan's exceptions.
 */
import { beforeAll, describe, expect, inject, it } from "vitest";
import { useTestDatabase } from "../support/database.js";

const DATA_ROLE = inject("pgServer").roles!.data;

/** Data-plane entry points without a tenant argument, and why (docs/scaling.md lists them too). */
const NO_TENANT: Record<string, string> = {
  aip_catalog_revisions_now:
    "the revisions of several tenants at once (the shared revision check of warm catalog hits, one statement for every tenant waiting): a batch across tenants, sent to each node with its tenants",
  aip_trim_catalog_changes: "trims every tenant's catalog change history in bounded batches; distributed, one sweep per node",
  aip_host_replica_lifecycle:
    "a connector host drives its replicas by replica ID with its own principal; its token names no tenant, the tenant is the replica's instance's",
  aip_expire_leases: "lease maintenance sweeps every tenant's expired leases in bounded batches; distributed, one sweep per node",
  aip_remove_settled_routes: "route retention removes every tenant's old released routes in bounded batches; distributed, one sweep per node",
  aip_route_retention_policy:
    "the route retention policy is one for the whole registry (a server states its configuration at start-up); distributed, one per node",
  aip_fleet_status: "operator aggregates over the whole fleet (fleet:read, metrics)",
  aip_fleet_regions: "operator aggregates per region over the whole fleet",
  aip_check_invariants: "a diagnostic over every table (aip-registry doctor)",
  aip_schema_status: "which schema the database runs (/readyz): not tenant data",
};

interface EntryPoint {
  name: string;
  signature: string;
  args: { name: string; type: string }[];
}

const db = useTestDatabase();
let entryPoints: EntryPoint[];

beforeAll(async () => {
  const { rows } = await db.owner.query<{ name: string; signature: string; names: string[] | null; types: string[] }>(
    `SELECT p.proname AS name, p.oid::regprocedure::text AS signature, p.proargnames AS names,
            ARRAY(SELECT format_type(a.oid, NULL) FROM unnest(p.proargtypes) WITH ORDINALITY a(oid, n) ORDER BY a.n) AS types
     FROM pg_proc p
     WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'aip\\_%' AND has_function_privilege($1, p.oid, 'EXECUTE')
     ORDER BY 1`,
    [DATA_ROLE],
  );
  // proargnames lists OUT arguments too; proargtypes only the input ones, in the same order first.
  entryPoints = rows.map((r) => ({ name: r.name, signature: r.signature, args: r.types.map((type, n) => ({ name: r.names?.[n] ?? "", type })) }));
});

describe("data-plane entry points", () => {
  it("are found (the data role's grants)", () => {
    expect(entryPoints.map((e) => e.name)).toEqual(expect.arrayContaining(["aip_catalog_page", "aip_resolve_route", "aip_settle_route"]));
  });

  it("each take the tenant as `p_tenant_id text`, or are allowed not to, with the reason", () => {
    const missing = entryPoints
      .filter((e) => !e.args.some((a) => a.name === "p_tenant_id" && a.type === "text") && !(e.name in NO_TENANT))
      .map((e) => e.signature);
    expect(missing, "data-plane entry points without a tenant argument: add p_tenant_id, or allow-list them here and in docs/scaling.md").toEqual([]);
  });

  it("allow only what needs it: every allow-listed function is a data-plane entry point without a tenant argument", () => {
    for (const [name, reason] of Object.entries(NO_TENANT)) {
      const found = entryPoints.filter((e) => e.name === name);
      expect(found.length, `${name} is no data-plane entry point any more: remove it from the allow-list`).toBeGreaterThan(0);
      for (const entry of found) {
        expect(
          entry.args.some((a) => a.name === "p_tenant_id"),
          `${entry.signature} takes p_tenant_id now: remove it from the allow-list`,
        ).toBe(false);
      }
      expect(reason.length).toBeGreaterThan(20);
    }
  });

  it("name the same exceptions as the Citus plan in docs/scaling.md", async () => {
    const { readFile } = await import("node:fs/promises");
    const plan = await readFile(new URL("../../docs/scaling.md", import.meta.url), "utf8");
    for (const name of Object.keys(NO_TENANT)) expect(plan, name).toContain(`\`${name}\``);
  });
});
