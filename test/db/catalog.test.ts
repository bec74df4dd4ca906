/**
 * The tenant catalog through the SQL functions, under the runtime roles: who sees what (the
 * complete visibility chain, tenant isolation, internal reads) and the filters.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { ANY_REVISION } from "../../src/registry/registry.js";
import { useTestDatabase } from "../support/database.js";
import { idsOf } from "../support/catalog.js";
import { binding, connectorType, instance, version, type CapabilitySpec } from "../../fixtures/records.js";
import { catalogRevision, expectRefusal } from "../support/assertions.js";
import { catalogGet, catalogPage } from "../../fixtures/catalog-reads.js";

const db = useTestDatabase();

interface Chain {
  tenant: string;
  caps: string[];
  typeId: string;
  versionId: string;
  instanceId: string;
}

/** One type, one active version implementing `caps`, one instance of `tenant` bound to each. */
async function chain(prefix: string, options: { caps?: (string | CapabilitySpec)[]; tenant?: string; profiles?: string[] } = {}): Promise<Chain> {
  const tenant = options.tenant ?? `tenant-${prefix}`;
  const specs = options.caps ?? [`cap:${prefix}.a`, `cap:${prefix}.b`];
  const caps = specs.map((spec) => (typeof spec === "string" ? spec : spec.id));
  const typeId = `ctype_${prefix}`;
  const versionId = `cver_${prefix}_1`;
  const instanceId = `cinst_${prefix}`;
  await db.registry.publish([
    connectorType(typeId),
    await version(versionId, typeId, specs, options.profiles ? { profiles: options.profiles } : {}),
    instance(instanceId, typeId, versionId, tenant),
    ...caps.map((cap) => binding(tenant, cap, instanceId)),
  ]);
  return { tenant, caps, typeId, versionId, instanceId };
}

/** What the tenant sees: its page (IDs and total) and, per capability asked, the single read. */
async function view(tenant: string | null, caps: string[] = [], query: Record<string, unknown> = {}) {
  const page = await catalogPage(db.registry, tenant, query);
  const gets: Record<string, boolean> = {};
  for (const cap of caps) {
    const entry = await catalogGet(db.registry, tenant, cap);
    expect(entry.catalog_revision).toBe(page.catalog_revision);
    gets[cap] = entry.definition !== null;
  }
  return { ids: idsOf(page), total: page.total, gets, revision: page.catalog_revision };
}

const all = (caps: string[], value: boolean) => Object.fromEntries(caps.map((cap) => [cap, value]));

/**
 * A link no publication can break, broken by editing the row as the owner. The live chains are
 * derived state that publication re-evaluates for what it touched: re-evaluate them all, as a
 * publication touching this chain would, so the read shows what the chain rule says.
 */
async function editBehindPublication(sql: string, params: unknown[]): Promise<void> {
  await db.owner.query(sql, params);
  await db.owner.query("SELECT aip_rebuild_catalog_entries()");
}

describe("tenant isolation", () => {
  it("a tenant sees only its own chains; another tenant and a tenant-less read see nothing of them", async () => {
    const a = await chain("iso_a");
    const b = await chain("iso_b");
    // Tenant c implements a's capabilities too, through its own instance of a's version.
    await db.registry.publish([instance("cinst_iso_c", a.typeId, a.versionId, "tenant-iso-c"), binding("tenant-iso-c", a.caps[0]!, "cinst_iso_c")]);

    expect(await view(a.tenant, [...a.caps, ...b.caps])).toMatchObject({ ids: a.caps, total: 2, gets: { ...all(a.caps, true), ...all(b.caps, false) } });
    expect(await view(b.tenant, [...a.caps, ...b.caps])).toMatchObject({ ids: b.caps, total: 2, gets: { ...all(a.caps, false), ...all(b.caps, true) } });
    expect(await view("tenant-iso-c", a.caps)).toMatchObject({ ids: [a.caps[0]], total: 1, gets: { [a.caps[0]!]: true, [a.caps[1]!]: false } });
    expect(await view("tenant-iso-nobody", a.caps)).toMatchObject({ ids: [], total: 0, gets: all(a.caps, false) });

    // Disabling a's binding leaves c's binding of the same capability alone.
    await db.registry.publish([binding(a.tenant, a.caps[0]!, a.instanceId, { enabled: false, policy_revision: 2 })]);
    expect((await view(a.tenant)).ids).toEqual([a.caps[1]]);
    expect((await view("tenant-iso-c")).ids).toEqual([a.caps[0]]);
  });

  it("a read without a verified tenant returns an empty page at revision 0 (it never changes) and no single definition", async () => {
    const a = await chain("iso_none");
    const revision = await catalogRevision(db.owner);
    for (const tenant of [null, "", "   "]) {
      const page = await catalogPage(db.registry, tenant, {});
      expect(page).toEqual({ catalog_revision: 0, capabilities: [], next_cursor: null, total: 0, page_bytes: 0 });
      expect(await catalogGet(db.registry, tenant, a.caps[0]!)).toEqual({ catalog_revision: 0, definition: null });
    }
    // It still checks the cursor it is given.
    await expectRefusal(catalogPage(db.registry, null, { cursor: "nonsense" }), "invalid");
    await expectRefusal(catalogPage(db.registry, null, { cursor: `${revision + 1}:0:0000000000000000:cap:x` }), "stale-cursor");
  });

  it("the publication refuses a binding to another tenant's instance", async () => {
    const a = await chain("iso_cross");
    await expectRefusal(db.registry.publish([binding("tenant-iso-intruder", a.caps[0]!, a.instanceId)]), "invalid");
    expect((await view("tenant-iso-intruder", a.caps)).gets).toEqual(all(a.caps, false));
  });
});

describe("each broken link of the chain hides the capability", () => {
  it("binding disabled", async () => {
    const c = await chain("link_binding");
    const [x, y] = c.caps as [string, string];
    await db.registry.publish([binding(c.tenant, x, c.instanceId, { enabled: false, policy_revision: 2 })]);
    expect(await view(c.tenant, c.caps)).toMatchObject({ ids: [y], total: 1, gets: { [x]: false, [y]: true } });
    await db.registry.publish([binding(c.tenant, x, c.instanceId, { enabled: true, policy_revision: 3 })]);
    expect(await view(c.tenant, c.caps)).toMatchObject({ ids: [x, y], total: 2, gets: all(c.caps, true) });
  });

  it("instance disabled", async () => {
    const c = await chain("link_instance");
    await db.registry.publish([instance(c.instanceId, c.typeId, c.versionId, c.tenant, 2, { status: "disabled" })]);
    expect(await view(c.tenant, c.caps)).toMatchObject({ ids: [], total: 0, gets: all(c.caps, false) });
    await db.registry.publish([instance(c.instanceId, c.typeId, c.versionId, c.tenant, 3)]);
    expect(await view(c.tenant, c.caps)).toMatchObject({ ids: c.caps, total: 2, gets: all(c.caps, true) });
  });

  it("instance owned by another tenant (unreachable through publication: shown by editing the row)", async () => {
    const c = await chain("link_owner");
    await editBehindPublication("UPDATE aip_connector_instances SET tenant_id = 'tenant-link-elsewhere' WHERE instance_id = $1", [c.instanceId]);
    expect(await view(c.tenant, c.caps)).toMatchObject({ ids: [], total: 0, gets: all(c.caps, false) });
    expect(await view("tenant-link-elsewhere", c.caps)).toMatchObject({ ids: [], gets: all(c.caps, false) });
    await editBehindPublication("UPDATE aip_connector_instances SET tenant_id = $2 WHERE instance_id = $1", [c.instanceId, c.tenant]);
    expect(await view(c.tenant, c.caps)).toMatchObject({ ids: c.caps, total: 2, gets: all(c.caps, true) });
  });

  it("version admitted (not active), then active again", async () => {
    const c = await chain("link_admitted");
    await db.registry.publish([{ op: "set_version_status", id: c.versionId, status: "admitted" }]);
    expect(await view(c.tenant, c.caps)).toMatchObject({ ids: [], total: 0, gets: all(c.caps, false) });
    await db.registry.publish([{ op: "set_version_status", id: c.versionId, status: "active" }]);
    expect(await view(c.tenant, c.caps)).toMatchObject({ ids: c.caps, total: 2, gets: all(c.caps, true) });
  });

  it("version revoked, for good", async () => {
    const c = await chain("link_revoked");
    await db.registry.publish([{ op: "set_version_status", id: c.versionId, status: "revoked" }]);
    expect(await view(c.tenant, c.caps)).toMatchObject({ ids: [], total: 0, gets: all(c.caps, false) });
    await expectRefusal(db.registry.publish([{ op: "set_version_status", id: c.versionId, status: "active" }]), "conflict");
    expect((await view(c.tenant)).ids).toEqual([]);
  });

  it("version not supply-chain qualified (unreachable through publication: shown by editing the row)", async () => {
    const c = await chain("link_qualified");
    await editBehindPublication("UPDATE aip_connector_versions SET supply_chain_qualified = false WHERE version_id = $1", [c.versionId]);
    expect(await view(c.tenant, c.caps)).toMatchObject({ ids: [], total: 0, gets: all(c.caps, false) });
    await editBehindPublication("UPDATE aip_connector_versions SET supply_chain_qualified = true WHERE version_id = $1", [c.versionId]);
    expect((await view(c.tenant)).ids).toEqual(c.caps);
  });

  it("connector type disabled", async () => {
    const c = await chain("link_type");
    await db.registry.publish([{ op: "set_connector_type_enabled", id: c.typeId, enabled: false }]);
    expect(await view(c.tenant, c.caps)).toMatchObject({ ids: [], total: 0, gets: all(c.caps, false) });
    await db.registry.publish([{ op: "set_connector_type_enabled", id: c.typeId, enabled: true }]);
    expect((await view(c.tenant)).ids).toEqual(c.caps);
  });

  it("the instance's version no longer implements the capability (rollout while the binding was disabled)", async () => {
    const c = await chain("link_impl");
    const [x, y] = c.caps as [string, string];
    await db.registry.publish([await version("cver_link_impl_2", c.typeId, [y]), binding(c.tenant, x, c.instanceId, { enabled: false, policy_revision: 2 })]);
    // The rollout is allowed because x's binding is disabled; re-enabling it is then refused.
    await db.registry.publish([instance(c.instanceId, c.typeId, "cver_link_impl_2", c.tenant, 2)]);
    await expectRefusal(db.registry.publish([binding(c.tenant, x, c.instanceId, { enabled: true, policy_revision: 3 })]), "invalid");
    expect(await view(c.tenant, c.caps)).toMatchObject({ ids: [y], total: 1, gets: { [x]: false, [y]: true } });

    // Enabled behind the publication's back, the binding is still hidden: only the version link is
    // broken now, and restoring that link alone makes x visible again.
    await editBehindPublication("UPDATE aip_capability_bindings SET enabled = true WHERE tenant_id = $1 AND capability_id = $2", [c.tenant, x]);
    expect(await view(c.tenant, c.caps)).toMatchObject({ ids: [y], total: 1, gets: { [x]: false, [y]: true } });
    await editBehindPublication("INSERT INTO aip_version_capabilities (version_id, capability_id) VALUES ('cver_link_impl_2', $1)", [x]);
    expect(await view(c.tenant, c.caps)).toMatchObject({ ids: [x, y], total: 2, gets: all(c.caps, true) });
  });

  it("profile filter: only versions declaring the profile; the single read has no profile filter", async () => {
    const c = await chain("link_profile", { profiles: ["aip.native.http.v1"] });
    const d = await chain("link_profile_mcp", { tenant: c.tenant, caps: ["cap:link_profile_mcp.z"], profiles: ["aip.native.http.v1", "aip.mcp.v1"] });
    const every = [...c.caps, ...d.caps];
    expect(await view(c.tenant, [], { profile: "aip.native.http.v1" })).toMatchObject({ ids: every, total: 3 });
    expect(await view(c.tenant, every, { profile: "aip.mcp.v1" })).toMatchObject({ ids: d.caps, total: 1, gets: all(every, true) });
    expect(await view(c.tenant, [], { profile: "aip.grpc.v9" })).toMatchObject({ ids: [], total: 0 });
  });

  it("a capability bound through several instances is listed once and stays visible while one chain holds", async () => {
    const c = await chain("link_multi", { caps: ["cap:link_multi.x"] });
    await db.registry.publish([
      instance("cinst_link_multi_2", c.typeId, c.versionId, c.tenant),
      binding(c.tenant, "cap:link_multi.x", "cinst_link_multi_2", { priority: 5 }),
    ]);
    expect(await view(c.tenant, c.caps)).toMatchObject({ ids: c.caps, total: 1, gets: all(c.caps, true) });
    await db.registry.publish([binding(c.tenant, "cap:link_multi.x", c.instanceId, { enabled: false, policy_revision: 2 })]);
    expect(await view(c.tenant, c.caps)).toMatchObject({ ids: c.caps, total: 1, gets: all(c.caps, true) });
    await db.registry.publish([instance("cinst_link_multi_2", c.typeId, c.versionId, c.tenant, 2, { status: "disabled" })]);
    expect(await view(c.tenant, c.caps)).toMatchObject({ ids: [], total: 0, gets: all(c.caps, false) });
  });
});

describe("filters are evaluated server-side", () => {
  it("search text is a trimmed, case-insensitive literal substring: % and _ are not wildcards", async () => {
    const caps = ["cap:lit.a_c", "cap:lit.abc", "cap:lit.a%c", "cap:lit.axxc", "cap:lit.a\\c"];
    const c = await chain("lit", { caps: [...caps, { id: "cap:lit.crm", name: "Contacts", description: "Finds CONTACTS in the CRM" }] });
    const search = async (q: string) => {
      const page = await catalogPage(db.registry, c.tenant, { q });
      expect(page.total).toBe(page.capabilities.length);
      return idsOf(page);
    };
    expect(await search("a_c")).toEqual(["cap:lit.a_c"]);
    expect(await search("A_C")).toEqual(["cap:lit.a_c"]);
    expect(await search("  a_c  ")).toEqual(["cap:lit.a_c"]);
    expect(await search("a%c")).toEqual(["cap:lit.a%c"]);
    expect(await search("%")).toEqual(["cap:lit.a%c"]);
    expect(await search("a\\c")).toEqual(["cap:lit.a\\c"]);
    expect(await search("contacts in the")).toEqual(["cap:lit.crm"]);
    expect(await search("lit.a")).toEqual(["cap:lit.a%c", "cap:lit.a\\c", "cap:lit.a_c", "cap:lit.abc", "cap:lit.axxc"].sort(byDatabase));
    expect(await search("   ")).toHaveLength(6);
    expect(await search("no such text")).toEqual([]);
    await expectRefusal(catalogPage(db.registry, c.tenant, { q: "x".repeat(513) }), "invalid");
  });

  it("exact capability_id: that one capability when visible, nothing otherwise", async () => {
    const c = await chain("exact");
    const other = await chain("exact_other");
    expect(await view(c.tenant, [], { capability_id: c.caps[1] })).toMatchObject({ ids: [c.caps[1]], total: 1 });
    expect(await view(c.tenant, [], { capability_id: other.caps[0] })).toMatchObject({ ids: [], total: 0 });
    expect(await view(c.tenant, [], { capability_id: "cap:exact.none" })).toMatchObject({ ids: [], total: 0 });
    // Combined with the other filters.
    expect(await view(c.tenant, [], { capability_id: c.caps[1], q: "exact.b" })).toMatchObject({ ids: [c.caps[1]], total: 1 });
    expect(await view(c.tenant, [], { capability_id: c.caps[1], q: "exact.a" })).toMatchObject({ ids: [], total: 0 });
  });
});

describe("internal administrative reads", () => {
  it("unbound=true lists every active definition, bound or not; a tenant takes precedence; neither sees nothing", async () => {
    const bound = await chain("adm_bound");
    await db.registry.publish([
      connectorType("ctype_adm_free"),
      await version("cver_adm_free", "ctype_adm_free", ["cap:adm_free.a"], { profiles: ["aip.mcp.v1"] }),
      connectorType("ctype_adm_gone"),
      await version("cver_adm_gone", "ctype_adm_gone", ["cap:adm_gone.a"], { status: "revoked" }),
      connectorType("ctype_adm_off"),
      await version("cver_adm_off", "ctype_adm_off", ["cap:adm_off.a"]),
    ]);
    await db.registry.publish([{ op: "set_connector_type_enabled", id: "ctype_adm_off", enabled: false }]);

    const unbound = idsOf(await db.registry.adminCatalogPage(null, true, { q: "adm_", limit: 200 }));
    expect(unbound).toEqual([...bound.caps, "cap:adm_free.a"].sort(byDatabase));
    expect(idsOf(await db.registry.adminCatalogPage(null, true, { q: "adm_", profile: "aip.mcp.v1" }))).toEqual(["cap:adm_free.a"]);

    // What a tenant sees, through the control role; and the tenant wins over unbound.
    for (const flag of [false, true]) {
      const page = await db.registry.adminCatalogPage(bound.tenant, flag, {});
      expect(page).toEqual(await catalogPage(db.registry, bound.tenant, {}));
    }
    expect(await db.registry.adminCatalogPage(null, false, { q: "adm_" })).toMatchObject({ capabilities: [], total: 0 });
  });
});

/** The database's own order (its collation), which pages follow. */
let collationOrder: Map<string, number> | undefined;
function byDatabase(a: string, b: string): number {
  if (!collationOrder) throw new Error("collation order not loaded");
  return collationOrder.get(a)! - collationOrder.get(b)!;
}
beforeAll(async () => {
  const ids = ["cap:lit.a_c", "cap:lit.abc", "cap:lit.a%c", "cap:lit.axxc", "cap:lit.a\\c", "cap:adm_bound.a", "cap:adm_bound.b", "cap:adm_free.a"];
  const { rows } = await db.owner.query<{ id: string }>("SELECT unnest($1::text[]) AS id ORDER BY 1", [ids]);
  collationOrder = new Map(rows.map((row, index) => [row.id, index]));
});

describe("not modified: one rule for a page and a definition", () => {
  it("answers the same revision, and any revision (If-None-Match: *) for an answer that exists, without building it", async () => {
    const c = await chain("nm");
    const revision = await catalogRevision(db.owner);
    for (const ifRevision of [revision, ANY_REVISION]) {
      expect(await db.registry.catalogPageText(c.tenant, {}, ifRevision)).toEqual({ catalog_revision: revision, text: null, not_modified: true });
      expect(await db.registry.catalogGetText(c.tenant, c.caps[0]!, ifRevision)).toEqual({ catalog_revision: revision, text: null, not_modified: true });
    }
    // A definition the tenant does not see is no answer "any" can match (404, not 304); at the
    // same revision the validator is the caller's to hold, as for a page.
    // (A tenant that never saw anything, and a read without one, are at revision 0.)
    for (const [tenant, cap, at] of [
      [c.tenant, "cap:nm.nothing", revision],
      ["tenant-other", c.caps[0]!, 0],
      [null, c.caps[0]!, 0],
    ] as const) {
      expect(await db.registry.catalogGetText(tenant, cap, ANY_REVISION)).toEqual({ catalog_revision: at, text: null, not_modified: false });
    }
    // A page without a tenant is empty, and exists.
    expect((await db.registry.catalogPageText(null, {}, ANY_REVISION)).not_modified).toBe(true);
    // A revision before the tenant's last change, one not yet published, or none: the answer.
    for (const ifRevision of [revision - 1, revision + 1, null]) {
      const page = await db.registry.catalogPageText(c.tenant, {}, ifRevision);
      const definition = await db.registry.catalogGetText(c.tenant, c.caps[0]!, ifRevision);
      expect([page.not_modified, definition.not_modified]).toEqual([false, false]);
      expect(JSON.parse(page.text!).catalog_revision).toBe(revision);
      expect(JSON.parse(definition.text!).definition.capability.id).toBe(c.caps[0]);
    }
  });
});
