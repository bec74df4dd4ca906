/**
 * The catalog at fleet scale (100 tenants, 10,000 instances, 100,000 bindings, 1,000
 * capabilities): the plans PostgreSQL really executes inside the catalog functions use indexes,
 * never a sequential scan of bindings, instances or the live chains, and a page is a keyset range
 * of the live chains' primary key (aip_catalog_entries: tenant, capability). Plans are captured with auto_explain (every nested statement, as NOTICEs) under
 * both forced custom and forced generic plans, so whichever the plan cache picks is covered.
 */
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { useTestDatabase } from "../support/database.js";
import { capturePlans, fleetCapability, fleetTenant, fleetVisible, seedCatalogFleet, tenantWalk } from "../support/catalog.js";
import { catalogPage } from "../../fixtures/catalog-reads.js";

const db = useTestDatabase();
let session: pg.Client;
const tenant = fleetTenant(42);

beforeAll(async () => {
  await seedCatalogFleet(db.owner);
  session = new pg.Client({ connectionString: db.ownerUrl });
  await session.connect();
}, 120_000);
afterAll(async () => {
  await session?.end();
});

const FORBIDDEN = /Seq Scan on (aip_capability_bindings|aip_connector_instances|aip_catalog_entries)\b/;

describe("catalog query plans at fleet scale", () => {
  it("returns exactly what the chain allows at this scale", async () => {
    const counts = await db.owner.query<{ bindings: string; instances: string }>(
      "SELECT (SELECT count(*) FROM aip_capability_bindings) AS bindings, (SELECT count(*) FROM aip_connector_instances) AS instances",
    );
    expect(counts.rows[0]).toEqual({ bindings: "100000", instances: "10000" });
    const walk = await tenantWalk(db.registry, tenant, { limit: 200 });
    expect(walk.ids).toEqual(fleetVisible());
    expect(walk.pages.every((page) => page.total === 980)).toBe(true);
    expect((await tenantWalk(db.registry, tenant, { profile: "aip.mcp.v1", limit: 200 })).ids).toEqual(fleetVisible(undefined, "aip.mcp.v1"));
  });

  it("uses indexes for first and deep pages, with and without filters, and for single reads", async () => {
    const first = await catalogPage(db.registry, tenant, { limit: 50 });
    const deepCursor = (await catalogPage(db.registry, tenant, { limit: 50, cursor: first.next_cursor!.replace(/cap:fleet\.\d+$/, fleetCapability(900)) }))
      .next_cursor!;
    // A cursor continues only its own walk (its filters): the filtered deep page starts from one of its own.
    const filters = { q: "fleet", profile: "aip.mcp.v1" };
    const filteredFirst = await catalogPage(db.registry, tenant, { ...filters, limit: 50 });
    const deepFilteredCursor = filteredFirst.next_cursor!.replace(/cap:fleet\.\d+$/, fleetCapability(900));
    const calls: [string, string, unknown[]][] = [
      ["first page", "SELECT aip_catalog_page($1, $2)", [tenant, { limit: 50 }]],
      ["deep page", "SELECT aip_catalog_page($1, $2)", [tenant, { limit: 50, cursor: deepCursor }]],
      ["search", "SELECT aip_catalog_page($1, $2)", [tenant, { q: "number 12", limit: 50 }]],
      ["profile", "SELECT aip_catalog_page($1, $2)", [tenant, { profile: "aip.mcp.v1", limit: 50 }]],
      ["deep search + profile", "SELECT aip_catalog_page($1, $2)", [tenant, { ...filters, limit: 50, cursor: deepFilteredCursor }]],
      ["exact", "SELECT aip_catalog_page($1, $2)", [tenant, { capability_id: fleetCapability(123) }]],
      ["get", "SELECT aip_catalog_get($1, $2)", [tenant, fleetCapability(123)]],
      ["unbound first page", "SELECT aip_admin_catalog_page(NULL, true, $1)", [{ limit: 50 }]],
      ["tenant through admin", "SELECT aip_admin_catalog_page($1, true, $2)", [tenant, { limit: 50 }]],
    ];
    const seen = new Set<string>();
    for (const mode of ["force_custom_plan", "force_generic_plan"]) {
      await session.query(`SET plan_cache_mode = ${mode}`);
      for (const [label, sql, params] of calls) {
        const plans = await capturePlans(session, sql, params);
        const catalogPlans = plans.filter((plan) => /aip_capability_(bindings|definitions)|aip_catalog_entries/.test(plan));
        expect(catalogPlans.length, `${label} (${mode}): no plan captured`).toBeGreaterThan(0);
        for (const plan of catalogPlans) {
          expect(plan, `${label} (${mode})`).not.toMatch(FORBIDDEN);
          if (/LIMIT v_limit/.test(plan) && label.startsWith("unbound")) {
            // An internal page walks the definitions key, and stops at the page end.
            expect(plan, `${label} (${mode})`).toMatch(/Index (Only )?Scan using aip_capability_definitions_pkey[\s\S]*Index Cond: \(capability_id > /);
            seen.add("unbound page");
          } else if (/LIMIT v_limit/.test(plan)) {
            // The page statement reads the tenant's slice of the live chains' key from the cursor on
            // (a plain walk; with a search filter, possibly the same range as a bitmap).
            expect(plan, `${label} (${mode})`).toMatch(
              /(Index Scan using|Index Only Scan using|Bitmap Index Scan on) aip_catalog_entries_pkey[\s\S]*Index Cond: \(\(tenant_id = [^)]+\) AND \(capability_id > /,
            );
            seen.add("page");
          }
          if (/SELECT count\(/.test(plan)) seen.add("count");
        }
      }
    }
    // The assertions above ran on the statements that matter, not on nothing.
    expect([...seen].sort()).toEqual(["count", "page", "unbound page"]);
  });

  // Publication re-evaluates the live chains of the instances a change touched (a type's or a
  // version's instances, an instance, a binding's instance) on whatever plan PL/pgSQL caches: a
  // generic plan must read those instances' bindings by index too, not the fleet's 100,000.
  it("re-evaluates the live chains of touched instances through indexes", async () => {
    const instances = [0, 1, 2].map((i) => `cinst_fleet_042_${String(i * 10).padStart(3, "0")}`);
    const before = await db.owner.query("SELECT count(*)::int AS n FROM aip_catalog_entries WHERE instance_id = ANY ($1)", [instances]);
    expect(before.rows[0].n).toBeGreaterThan(0);
    for (const mode of ["force_custom_plan", "force_generic_plan"]) {
      await session.query(`SET plan_cache_mode = ${mode}`);
      const plans = (await capturePlans(session, "SELECT aip_refresh_catalog_entries($1, (SELECT revision FROM aip_catalog_revision))", [instances])).filter(
        (plan) => /aip_capability_bindings|aip_catalog_entries/.test(plan),
      );
      expect(plans.length, `${mode}: no plan captured`).toBeGreaterThan(0);
      for (const plan of plans) expect(plan, mode).not.toMatch(FORBIDDEN);
    }
    const after = await db.owner.query("SELECT count(*)::int AS n FROM aip_catalog_entries WHERE instance_id = ANY ($1)", [instances]);
    expect(after.rows[0].n).toBe(before.rows[0].n);
  });
});
