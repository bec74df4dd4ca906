/**
 * Every member of CatalogQuery (src/schemas.ts) reaches what tells two catalog requests apart: the
 * Node and Worker caches' key and the ETag (src/catalog/serve.ts, pageKey), and the SQL cursor's
 * fingerprint (functions/30_catalog.sql), which binds a cursor to its walk: another filter's cursor
 * is refused, and within the walk its carried total applies.
 * The members are enumerated from the schema, so a member added to it is checked here too: a key or
 * fingerprint written by hand that leaves it out fails.
 */
import { beforeAll, describe, expect, it } from "vitest";
import type { z } from "@hono/zod-openapi";
import { binding, connectorType, instance, version } from "../../fixtures/records.js";
import { catalogPage } from "../../fixtures/catalog-reads.js";
import { keyDigest, pageKey } from "../../src/catalog/serve.js";
import type { CatalogQuery as Query } from "../../src/registry/registry.js";
import { CATALOG_PAGING_MEMBERS, CatalogQuery } from "../../src/schemas.js";
import type { RegistryError } from "../../src/registry/errors.js";
import { useTestDatabase } from "../support/database.js";

const MEMBERS = Object.keys(CatalogQuery.shape) as (keyof Query)[];
const PAGING: readonly string[] = CATALOG_PAGING_MEMBERS;

/** A value the member accepts (as a query parameter), as the route hands it on: its parsed output. */
function sample(member: keyof Query): unknown {
  const schema = CatalogQuery.shape[member] as z.ZodTypeAny;
  for (const raw of ["100000", "true", "x"]) {
    const parsed = schema.safeParse(raw);
    if (parsed.success && parsed.data !== undefined) return parsed.data;
  }
  throw new Error(`no sample value for CatalogQuery.${member}: add one above`);
}

describe("the cache key and the ETag", () => {
  it("change with every member of CatalogQuery, and tell members apart", () => {
    const base = pageKey("tenant-a", {});
    const keys = MEMBERS.map((member) => pageKey("tenant-a", { [member]: sample(member) } as Query));
    for (const [n, member] of MEMBERS.entries()) expect([member, keys[n] !== base]).toEqual([member, true]);
    expect(new Set(keys).size).toBe(MEMBERS.length);
    expect(new Set([base, ...keys].map(keyDigest)).size).toBe(MEMBERS.length + 1);
    // The same value in two members is two requests.
    expect(pageKey("tenant-a", { q: "x" })).not.toBe(pageKey("tenant-a", { profile: "x" }));
  });

  it("name the members in the previous release's order (its ETags stay valid while the members are the same)", () => {
    // 0.1.0's pageKey named q, capability_id, profile, limit, max_bytes, cursor, in this order.
    const previous = ["q", "capability_id", "profile", "limit", "max_bytes", "cursor"];
    expect(MEMBERS.filter((member) => previous.includes(member))).toEqual(previous);
    const query: Query = { q: "crm", capability_id: "cap:a", profile: "p", limit: 5, max_bytes: 1000, cursor: "7:3:00:cap:a" };
    expect(pageKey("tenant-a", query)).toBe(JSON.stringify(["page", "tenant-a", ...MEMBERS.map((member) => query[member] ?? null)]));
  });
});

describe("the SQL cursor fingerprint", () => {
  const db = useTestDatabase();
  const TENANT = "tenant-members";
  const caps = Array.from({ length: 6 }, (_, n) => `cap:members.${n}`);
  /** A second page's cursor whose carried total is forged: a page answering it says whether it was carried. */
  let forged: string;
  const FORGED_TOTAL = 4242;

  beforeAll(async () => {
    await db.registry.publish([
      connectorType("ctype_members"),
      await version("cver_members", "ctype_members", caps),
      instance("cinst_members", "ctype_members", "cver_members", TENANT),
      ...caps.map((cap) => binding(TENANT, cap, "cinst_members")),
    ]);
    const first = await catalogPage(db.registry, TENANT, { limit: 2 });
    const [revision, , fingerprint, ...last] = first.next_cursor!.split(":");
    forged = [revision, FORGED_TOTAL, fingerprint, ...last].join(":");
  });

  it("carries the total when nothing but the paging members changes", async () => {
    expect((await catalogPage(db.registry, TENANT, { limit: 2, cursor: forged })).total).toBe(FORGED_TOTAL);
  });

  /** The page a cursor leads to with `query`, or the refusal's code and field. */
  const pageOrRefusal = (query: Query) =>
    catalogPage(db.registry, TENANT, query).then(
      (page) => ({ total: page.total }),
      (error: RegistryError) => ({ refused: error.code, field: (error.extensions.errors as { field: string }[] | undefined)?.[0]?.field }),
    );

  it("covers every member of CatalogQuery but the paging ones: a cursor is refused when one changes", async () => {
    const outcomes = await Promise.all(
      MEMBERS.filter((member) => member !== "cursor").map(async (member) => [
        member,
        await pageOrRefusal({ limit: 2, [member]: sample(member), cursor: forged } as Query),
      ]),
    );
    expect(outcomes).toEqual(
      MEMBERS.filter((member) => member !== "cursor").map((member) => [
        member,
        PAGING.includes(member) ? { total: FORGED_TOTAL } : { refused: "invalid", field: "cursor" },
      ]),
    );
  });

  it("covers a member the SQL functions do not read (one added to the schema before the SQL uses it)", async () => {
    const query = { limit: 2, cursor: forged, connector_type_id: "ctype_members" } as Query;
    expect(await pageOrRefusal(query)).toEqual({ refused: "invalid", field: "cursor" });
  });

  it("honours a cursor of the previous release (its fingerprint) only while its function set may still serve", async () => {
    // 0.1.0's fingerprint: mode, tenant, capability_id, q as matched, profile.
    const { rows } = await db.owner.query<{ fingerprint: string }>(
      "SELECT lpad(to_hex(hashtextextended(jsonb_build_array('tenant', $1::text, NULL::text, NULL::text, NULL::text)::text, 0)), 16, '0') AS fingerprint",
      [TENANT],
    );
    const [revision, , , ...last] = forged.split(":");
    const previous = [revision, FORGED_TOTAL, rows[0]!.fingerprint, ...last].join(":");
    expect(await pageOrRefusal({ limit: 2, cursor: previous } as Query)).toEqual({ refused: "invalid", field: "cursor" });
    // 0.1.0's set installed beside this build's (a rollout from it): its cursors continue the walk.
    await db.owner.query(
      "INSERT INTO aip_schema_sets (name, checksum, installed_digest, schema_version, release, legacy, installed_at) VALUES ('public', 'x', 'x', 10, '0.1.0', true, '-infinity')",
    );
    try {
      const page = await catalogPage(db.registry, TENANT, { limit: 2, cursor: previous });
      expect(page.total).toBe(FORGED_TOTAL);
      expect(page.capabilities.map((definition) => definition.capability.id)).toEqual(caps.slice(2, 4));
    } finally {
      await db.owner.query("DELETE FROM aip_schema_sets WHERE name = 'public'");
    }
  });
});
