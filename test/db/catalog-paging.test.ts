/**
 * Catalog pagination through the SQL functions: walks, limits, byte bounds, the cursor and what
 * does (publication) and does not (replica churn, routing) invalidate it.
 */
import canonicalize from "canonicalize";
import { beforeAll, describe, expect, it } from "vitest";
import { useTestDatabase } from "../support/database.js";
import { idsOf, tenantWalk } from "../support/catalog.js";
import {
  binding,
  connectorType,
  instance,
  policy,
  publishSimpleFleet,
  registerReplica,
  replica,
  requestId,
  version,
  hostPrincipal,
} from "../../fixtures/records.js";
import type { CatalogPage } from "../../src/schemas.js";
import { catalogRevision, expectRefusal } from "../support/assertions.js";
import { catalogPage } from "../../fixtures/catalog-reads.js";

const db = useTestDatabase();
const WALK_TENANT = "tenant-walk";
const walkCaps = Array.from({ length: 300 }, (_, n) => `cap:walk.${String(n).padStart(4, "0")}`);

beforeAll(async () => {
  // 300 capabilities (one version may hold 512), all bound for one tenant, plus a neighbour
  // tenant bound to a few of them, whose bindings the walk must never show.
  await db.registry.publish([
    connectorType("ctype_walk"),
    await version("cver_walk", "ctype_walk", walkCaps),
    instance("cinst_walk", "ctype_walk", "cver_walk", WALK_TENANT),
    instance("cinst_walk_other", "ctype_walk", "cver_walk", "tenant-walk-other"),
    ...walkCaps.map((cap) => binding(WALK_TENANT, cap, "cinst_walk")),
    ...walkCaps.filter((_, n) => n % 7 === 0).map((cap) => binding("tenant-walk-other", cap, "cinst_walk_other")),
  ]);
});

const canonicalBytes = (page: CatalogPage) => page.capabilities.reduce((sum, definition) => sum + Buffer.byteLength(canonicalize(definition)!, "utf8"), 0);

describe("walking the catalog", () => {
  it("returns every capability exactly once, in order, at one revision, with the same total on every page", async () => {
    const revision = await catalogRevision(db.owner);
    const walk = await tenantWalk(db.registry, WALK_TENANT, { limit: 7 });
    expect(walk.pages).toHaveLength(Math.ceil(300 / 7));
    expect(walk.ids).toEqual(walkCaps);
    for (const page of walk.pages) {
      expect(page.catalog_revision).toBe(revision);
      expect(page.total).toBe(300);
      expect(page.capabilities.length).toBeLessThanOrEqual(7);
      expect(page.page_bytes).toBe(canonicalBytes(page));
    }
    expect(walk.pages.at(-1)!.next_cursor).toBeNull();
    expect(walk.pages.slice(0, -1).every((page) => page.capabilities.length === 7 && page.next_cursor)).toBe(true);
  });

  it("a filtered walk counts and returns only the matches", async () => {
    const walk = await tenantWalk(db.registry, WALK_TENANT, { q: "WALK.01", limit: 30 });
    expect(walk.ids).toEqual(walkCaps.slice(100, 200));
    expect(walk.pages.map((page) => page.total)).toEqual([100, 100, 100, 100]);
  });

  it("clamps limit to [1, 200] with a default of 100", async () => {
    const size = async (limit?: number) => (await catalogPage(db.registry, WALK_TENANT, limit === undefined ? {} : { limit })).capabilities.length;
    expect(await size()).toBe(100);
    expect(await size(0)).toBe(1);
    expect(await size(-5)).toBe(1);
    expect(await size(1)).toBe(1);
    expect(await size(200)).toBe(200);
    expect(await size(201)).toBe(200);
    expect(await size(1_000_000_000_000)).toBe(200);
    await expectRefusal(catalogPage(db.registry, WALK_TENANT, { limit: 1.5 }), "invalid");
  });

  it("refuses a cursor that comes back with other filters or from another tenant: it is bound to its walk", async () => {
    const first = await catalogPage(db.registry, WALK_TENANT, { limit: 10 });
    const cursor = first.next_cursor!;
    const filtered = await expectRefusal(catalogPage(db.registry, WALK_TENANT, { limit: 10, q: "walk.02", cursor }), "invalid");
    expect(filtered.extensions).toMatchObject({ errors: [{ field: "cursor", message: expect.stringMatching(/not issued for this walk/) }] });
    await expectRefusal(catalogPage(db.registry, "tenant-walk-other", { limit: 3, cursor }), "invalid");
    // Its own walk continues, the page size free to change.
    const next = await catalogPage(db.registry, WALK_TENANT, { limit: 3, cursor });
    expect(next.total).toBe(300);
    expect(idsOf(next)).toEqual(walkCaps.slice(10, 13));
  });
});

describe("byte-bounded pages", () => {
  const tenant = "tenant-bytes";
  // Descriptions of distinct lengths give definitions of distinct, known sizes.
  const specs = [300, 1500, 700, 2500].map((length, n) => ({ id: `cap:bytes.${n}`, description: "d".repeat(length) }));
  let sizes: number[];
  beforeAll(async () => {
    await db.registry.publish([
      connectorType("ctype_bytes"),
      await version("cver_bytes", "ctype_bytes", specs),
      instance("cinst_bytes", "ctype_bytes", "cver_bytes", tenant),
      ...specs.map((spec) => binding(tenant, spec.id, "cinst_bytes")),
    ]);
    const { rows } = await db.owner.query<{ definition_bytes: number }>(
      "SELECT definition_bytes FROM aip_capability_definitions WHERE capability_id = ANY($1) ORDER BY capability_id",
      [specs.map((spec) => spec.id)],
    );
    sizes = rows.map((row) => row.definition_bytes);
  });

  it("measures each definition by its canonical JSON, as the page reports it", async () => {
    const page = await catalogPage(db.registry, tenant, {});
    expect(page.capabilities.map((d) => Buffer.byteLength(canonicalize(d)!, "utf8"))).toEqual(sizes);
    expect(page.page_bytes).toBe(sizes.reduce((a, b) => a + b, 0));
  });

  it("stops a page before the next definition would exceed max_bytes", async () => {
    const [a, b, c] = sizes as [number, number, number, number];
    const exact = await catalogPage(db.registry, tenant, { max_bytes: a + b });
    expect(exact).toMatchObject({ page_bytes: a + b, total: 4 });
    expect(idsOf(exact)).toEqual(["cap:bytes.0", "cap:bytes.1"]);
    const short = await catalogPage(db.registry, tenant, { max_bytes: a + b - 1 });
    expect(idsOf(short)).toEqual(["cap:bytes.0"]);
    expect(short.page_bytes).toBe(a);
    // The walk continues where the byte bound stopped it, with the same budget.
    const next = await catalogPage(db.registry, tenant, { max_bytes: a + b - 1, cursor: short.next_cursor! });
    expect(idsOf(next)).toEqual(["cap:bytes.1"]);
    const rest = await catalogPage(db.registry, tenant, { max_bytes: c + 2600, cursor: next.next_cursor! });
    expect(idsOf(rest)).toEqual(["cap:bytes.2"]);
  });

  it("refuses a max_bytes smaller than the next definition, and a non-positive one; clamps a huge one to 4 MiB", async () => {
    const error = await expectRefusal(catalogPage(db.registry, tenant, { max_bytes: sizes[0]! - 1 }), "invalid");
    expect(error.extensions.errors).toEqual([expect.objectContaining({ field: "max_bytes" })]);
    const first = await catalogPage(db.registry, tenant, { limit: 1 });
    await expectRefusal(catalogPage(db.registry, tenant, { max_bytes: sizes[1]! - 1, cursor: first.next_cursor! }), "invalid");
    await expectRefusal(catalogPage(db.registry, tenant, { max_bytes: 0 }), "invalid");
    expect((await catalogPage(db.registry, tenant, { max_bytes: 2 ** 50 })).capabilities).toHaveLength(4);
  });

  it("refuses at admission a definition larger than 256 KiB, to the byte", async () => {
    // Canonical size of the definition as a function of the description length.
    const definitionBytes = async (length: number) => {
      const { rows } = await db.owner.query<{ bytes: number }>(
        `SELECT octet_length(aip_canonical_json(jsonb_build_object('capability', $1::jsonb,
           'contract_digest', 'sha256:' || repeat('0', 64), 'schema_digest', 'sha256:' || repeat('0', 64)))) AS bytes`,
        [JSON.stringify(capabilityWith(length))],
      );
      return rows[0]!.bytes;
    };
    const capabilityWith = (length: number) => ({
      id: "cap:bytes.huge",
      name: "bytes.huge",
      description: "h".repeat(length),
      kind: "tool",
      input_schema: { type: "object", properties: { q: { type: "string" } } },
      output_schema: { type: "object" },
    });
    const fits = 262_144 - (await definitionBytes(0));
    expect(await definitionBytes(fits)).toBe(262_144);
    await db.registry.publish([connectorType("ctype_huge")]);
    const refused = await expectRefusal(
      db.registry.publish([await version("cver_huge_1", "ctype_huge", [{ id: "cap:bytes.huge", description: "h".repeat(fits + 1) }])]),
      "admission",
    );
    expect(refused.extensions).toMatchObject({ capability_id: "cap:bytes.huge" });
    await db.registry.publish([await version("cver_huge_2", "ctype_huge", [{ id: "cap:bytes.huge", description: "h".repeat(fits) }])]);
  });
});

describe("the cursor", () => {
  it("stays valid across replica heartbeats, leases, capacity changes and routing; a publication makes it stale", async () => {
    const fleet = await publishSimpleFleet(db.registry, {
      prefix: "cur",
      tenants: ["tenant-cur"],
      capabilities: ["cap:cur.a", "cap:cur.b", "cap:cur.c", "cap:cur.d"],
    });
    const replicaId = fleet.replicas[0]!;
    const revision = await catalogRevision(db.owner);
    const first = await catalogPage(db.registry, "tenant-cur", { limit: 1 });
    expect(first.catalog_revision).toBe(revision);

    // Host churn: heartbeat with another TTL, drain, offline and register again (new leases), a
    // capacity change published by an operator, and a route resolved and settled.
    let sequence = (await db.registry.adminGet("replica", replicaId))!.health_revision as number;
    for (const operation of ["heartbeat", "drain", "offline"] as const) {
      sequence = (
        await db.registry.replicaLifecycle(
          replicaId,
          operation,
          { request_id: requestId(), previous_sequence: sequence, lease_ttl_ms: 90_000 },
          hostPrincipal(replicaId),
        )
      ).sequence;
    }
    await registerReplica(db.registry, replicaId, 20_000);
    const capacity = await db.registry.publish([replica(replicaId, `cinst_cur_tenant-cur`, fleet.versionId, { capacity: 25 })]);
    expect(capacity).toMatchObject({ catalog_revision: revision, changed: 1 });
    const route = await db.registry.resolveRoute("act_cursor", "tenant-cur", "cap:cur.b");
    await db.registry.settleRoute("act_cursor", "tenant-cur", route.assignment, "completed");
    // An identical re-put changes nothing either.
    await db.registry.publish([connectorType(fleet.typeId)]);
    expect(await catalogRevision(db.owner)).toBe(revision);

    const second = await catalogPage(db.registry, "tenant-cur", { limit: 1, cursor: first.next_cursor! });
    expect(second).toMatchObject({ catalog_revision: revision, total: 4 });
    expect(idsOf(second)).toEqual(["cap:cur.b"]);

    // Publications that do not reach this tenant move the global revision, not the tenant's: an
    // admission policy, and another tenant's binding.
    await db.registry.publish([policy("quota:cursor-test")]);
    await db.registry.publish([binding("tenant-walk-other", walkCaps[1]!, "cinst_walk_other")]);
    expect(await catalogRevision(db.owner)).toBe(revision + 2);
    const third = await catalogPage(db.registry, "tenant-cur", { limit: 1, cursor: second.next_cursor! });
    expect(third).toMatchObject({ catalog_revision: revision, total: 4 });
    expect(idsOf(third)).toEqual(["cap:cur.c"]);

    // A publication that reaches it through a shared record: revoking its version's qualification.
    await db.registry.publish([{ op: "set_version_qualification", id: fleet.versionId, supply_chain_qualified: false, reason: "test" }]);
    const stale = await expectRefusal(catalogPage(db.registry, "tenant-cur", { limit: 1, cursor: third.next_cursor! }), "stale-cursor");
    expect(stale.extensions).toEqual({ cursor_revision: revision, catalog_revision: revision + 3 });
    // Restarting from the first page works, at the tenant's new revision.
    expect(await catalogPage(db.registry, "tenant-cur", { limit: 1 })).toMatchObject({ catalog_revision: revision + 3, total: 0, capabilities: [] });
  });

  it("is valid from any revision since the tenant's last change, and stale from before it or from a revision not yet published", async () => {
    const good = (await catalogPage(db.registry, WALK_TENANT, { limit: 2 })).next_cursor!;
    const tenantRevision = Number(good.split(":")[0]);
    const global = await catalogRevision(db.owner);
    expect(global).toBeGreaterThan(tenantRevision);
    const rest = good.slice(good.indexOf(":") + 1);
    for (const from of [tenantRevision, tenantRevision + 1, global]) {
      expect(idsOf(await catalogPage(db.registry, WALK_TENANT, { limit: 1, cursor: `${from}:${rest}` }))).toEqual(["cap:walk.0002"]);
    }
    for (const from of [tenantRevision - 1, global + 1]) {
      expect((await expectRefusal(catalogPage(db.registry, WALK_TENANT, { cursor: `${from}:${rest}` }), "stale-cursor")).extensions).toEqual({
        cursor_revision: from,
        catalog_revision: tenantRevision,
      });
    }
  });

  it("refuses malformed cursors as invalid, and revisions outside the current content as stale", async () => {
    const good = (await catalogPage(db.registry, WALK_TENANT, { limit: 2 })).next_cursor!;
    const revision = Number(good.split(":")[0]);
    const [, total, fingerprint] = good.split(":");
    const malformed = [
      "",
      "   ",
      "abc",
      String(revision),
      `${revision}:`,
      `:${good}`,
      `-1:${good}`,
      `1.5:${good}`,
      `${revision}:cap:walk.0001`,
      `${revision}:${total}:${fingerprint}:`,
      `${revision}:${total}:${fingerprint!.toUpperCase()}:cap:walk.0001`,
      `${revision}:${total}:${fingerprint!.slice(1)}:cap:walk.0001`,
      `${revision}:x:${fingerprint}:cap:walk.0001`,
      `${revision}:${"1".repeat(16)}:${fingerprint}:cap:walk.0001`,
      `${"9".repeat(19)}:${total}:${fingerprint}:cap:walk.0001`,
      "x".repeat(1101),
    ];
    // Independent calls, in parallel: each refusal costs the pool its connection (see src/db/pg.ts).
    await Promise.all([
      ...malformed.map((cursor) => expectRefusal(catalogPage(db.registry, WALK_TENANT, { cursor }), "invalid")),
      ...[revision - 1, (await catalogRevision(db.owner)) + 1, 0].map((other) =>
        expectRefusal(catalogPage(db.registry, WALK_TENANT, { cursor: `${other}:${good.slice(good.indexOf(":") + 1)}` }), "stale-cursor"),
      ),
    ]);
    // Capability IDs may contain ':' themselves; everything after the third ':' is the ID.
    const page = await catalogPage(db.registry, WALK_TENANT, { limit: 2, cursor: `${revision}:${total}:${fingerprint}:cap:walk.0100` });
    expect(idsOf(page)).toEqual(["cap:walk.0101", "cap:walk.0102"]);
  });
});
