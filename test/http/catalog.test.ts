/**
 * The catalog over HTTP: tokens and scopes, the tenant from the token only, query validation,
 * problem codes, ETag revalidation, and the internal admin read.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { useTestDatabase } from "../support/database.js";
import { binding, connectorType, instance, policy, publishSimpleFleet, requestId, version, hostPrincipal } from "../../fixtures/records.js";
import { createTestApi, type TestApi } from "../support/http.js";

const db = useTestDatabase();
let api: TestApi;
let tokenA: string;
let tokenB: string;
const capsA = ["cap:h.alpha", "cap:h.beta", "cap:h.gamma"];
let replicaA: string;

beforeAll(async () => {
  api = createTestApi(db.registry);
  const fleet = await publishSimpleFleet(db.registry, { prefix: "h", tenants: ["tenant-ha"], capabilities: capsA });
  replicaA = fleet.replicas[0]!;
  await db.registry.publish([
    connectorType("ctype_hb"),
    await version("cver_hb", "ctype_hb", ["cap:hb.one", "cap:hb.50%_off"]),
    instance("cinst_hb", "ctype_hb", "cver_hb", "tenant-hb"),
    binding("tenant-hb", "cap:hb.one", "cinst_hb"),
    binding("tenant-hb", "cap:hb.50%_off", "cinst_hb"),
  ]);
  tokenA = await api.tenantToken("tenant-ha");
  tokenB = await api.tenantToken("tenant-hb");
});

const get = (path: string, token?: string, headers: Record<string, string> = {}) => api.call("GET", path, { ...(token ? { token } : {}), headers });
// Response bodies are checked field by field; the shapes are the API's, not this file's.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Body = any;
const body = async (response: Response | Promise<Response>): Promise<Body> => (await response).json();
const ids = (page: Body): string[] => page.capabilities.map((d: Body) => d.capability.id);
const enc = encodeURIComponent;

let touches = 0;
/** A publication that reaches tenant-ha: its binding of cap:h.gamma disabled, then enabled again (two revisions). */
async function reachTenantA(): Promise<number> {
  let revision = 0;
  for (const enabled of [false, true]) {
    touches++;
    revision = (await db.registry.publish([binding("tenant-ha", "cap:h.gamma", "cinst_h_tenant-ha", { enabled, policy_revision: 1 + touches })]))
      .catalog_revision;
  }
  return revision;
}
/** Publications that reach other tenants only: an admission policy, and a binding of tenant-hb. */
let elsewhere = 0;
async function publishElsewhere(): Promise<void> {
  elsewhere++;
  await db.registry.publish([policy(`quota:http-elsewhere-${elsewhere}`)]);
  await db.registry.publish([binding("tenant-hb", "cap:hb.one", "cinst_hb", { priority: elsewhere, policy_revision: 1 + elsewhere })]);
}

describe("tenant scope", () => {
  it("serves each tenant its own catalog, from the token's tenant_id only", async () => {
    const a = await get("/v1/catalog/capabilities", tokenA);
    expect(a.status).toBe(200);
    const pageA = await body(a);
    expect(ids(pageA)).toEqual(capsA);
    expect(pageA).toMatchObject({ total: 3, next_cursor: null });
    expect(pageA.page_bytes).toBeGreaterThan(0);
    expect(ids(await body(get("/v1/catalog/capabilities", tokenB)))).toEqual(["cap:hb.50%_off", "cap:hb.one"].sort());
    // A tenant_id in the query is not a way in.
    const smuggled = await body(get("/v1/catalog/capabilities?tenant_id=tenant-hb", tokenA));
    expect(ids(smuggled)).toEqual(capsA);

    const single = await get(`/v1/catalog/capabilities/${enc("cap:h.beta")}`, tokenA);
    expect(single.status).toBe(200);
    expect(await body(single)).toMatchObject({ catalog_revision: pageA.catalog_revision, definition: { capability: { id: "cap:h.beta" } } });
    // Each answer names its own tenant's catalog revision.
    const revisionB = (await body(get("/v1/catalog/capabilities", tokenB))).catalog_revision;
    expect(revisionB).toBeGreaterThan(pageA.catalog_revision);
    for (const [path, token, revision] of [
      [`/v1/catalog/capabilities/${enc("cap:h.beta")}`, tokenB, revisionB],
      [`/v1/catalog/capabilities/${enc("cap:h.none")}`, tokenA, pageA.catalog_revision],
    ] as const) {
      const missing = await get(path, token);
      expect(missing.status).toBe(404);
      expect(await body(missing)).toMatchObject({ code: "not-found", catalog_revision: revision });
    }
  });

  it("gives a token without tenant_id an empty catalog and 404 on every capability", async () => {
    const token = await api.token({ scopes: ["catalog:read"] });
    const page = await get("/v1/catalog/capabilities", token);
    expect(page.status).toBe(200);
    expect(await body(page)).toMatchObject({ capabilities: [], total: 0, next_cursor: null, page_bytes: 0 });
    expect((await get(`/v1/catalog/capabilities/${enc("cap:h.alpha")}`, token)).status).toBe(404);
  });

  it("needs a token with catalog:read", async () => {
    expect((await get("/v1/catalog/capabilities")).status).toBe(401);
    const routesOnly = await api.tenantToken("tenant-ha", ["routes:write"]);
    const refused = await get("/v1/catalog/capabilities", routesOnly);
    expect(refused.status).toBe(403);
    expect((await body(refused)).code).toBe("forbidden");
    expect((await get(`/v1/catalog/capabilities/${enc("cap:h.alpha")}`, routesOnly)).status).toBe(403);
  });
});

describe("query parameters", () => {
  it("pages with limit and cursor and filters by q (literally), capability_id and profile", async () => {
    const first = await body(get("/v1/catalog/capabilities?limit=2", tokenA));
    expect(ids(first)).toEqual(["cap:h.alpha", "cap:h.beta"]);
    const second = await body(get(`/v1/catalog/capabilities?limit=2&cursor=${enc(first.next_cursor)}`, tokenA));
    expect(ids(second)).toEqual(["cap:h.gamma"]);
    expect(second).toMatchObject({ total: 3, next_cursor: null, catalog_revision: first.catalog_revision });

    expect(ids(await body(get(`/v1/catalog/capabilities?q=${enc("50%_")}`, tokenB)))).toEqual(["cap:hb.50%_off"]);
    expect(ids(await body(get(`/v1/catalog/capabilities?q=${enc("h.%")}`, tokenA)))).toEqual([]);
    expect(ids(await body(get(`/v1/catalog/capabilities?q=${enc("H.ALPHA")}`, tokenA)))).toEqual(["cap:h.alpha"]);
    expect(ids(await body(get(`/v1/catalog/capabilities?q=`, tokenA)))).toEqual(capsA);
    expect(ids(await body(get(`/v1/catalog/capabilities?capability_id=${enc("cap:h.gamma")}`, tokenA)))).toEqual(["cap:h.gamma"]);
    expect(ids(await body(get("/v1/catalog/capabilities?profile=aip.native.http.v1", tokenA)))).toEqual(capsA);
    expect(await body(get("/v1/catalog/capabilities?profile=aip.mcp.v1", tokenA))).toMatchObject({ capabilities: [], total: 0 });
    expect((await body(get("/v1/catalog/capabilities?limit=0", tokenA))).capabilities).toHaveLength(1);
    expect((await body(get("/v1/catalog/capabilities?limit=5000", tokenA))).capabilities).toHaveLength(3);
  });

  it("answers malformed input with 400 invalid and an old cursor with 409 stale-cursor", async () => {
    for (const query of [
      "limit=abc",
      "limit=2.5",
      "max_bytes=0",
      "max_bytes=-1",
      "max_bytes=x",
      "cursor=garbage",
      `cursor=${enc("x:1:2:3")}`,
      "capability_id=",
      `q=${"q".repeat(513)}`,
    ]) {
      const response = await get(`/v1/catalog/capabilities?${query}`, tokenA);
      expect(response.status, query).toBe(400);
      expect(response.headers.get("content-type")).toContain("application/problem+json");
      expect((await body(response)).code).toBe("invalid");
    }
    const first = await body(get("/v1/catalog/capabilities?limit=1", tokenA));
    const tooSmall = await get(`/v1/catalog/capabilities?max_bytes=${first.page_bytes - 1}`, tokenA);
    expect(tooSmall.status).toBe(400);
    expect(await body(tooSmall)).toMatchObject({ code: "invalid", errors: [{ field: "max_bytes" }] });

    // Other tenants' publications leave the cursor valid; one that reaches the tenant does not.
    await publishElsewhere();
    const next = await get(`/v1/catalog/capabilities?limit=1&cursor=${enc(first.next_cursor)}`, tokenA);
    expect(next.status).toBe(200);
    expect(await body(next)).toMatchObject({ catalog_revision: first.catalog_revision, capabilities: [{ capability: { id: "cap:h.beta" } }] });
    const reached = await reachTenantA();
    const stale = await get(`/v1/catalog/capabilities?limit=1&cursor=${enc(first.next_cursor)}`, tokenA);
    expect(stale.status).toBe(409);
    const problem = await body(stale);
    expect(problem).toMatchObject({ code: "stale-cursor", cursor_revision: first.catalog_revision });
    expect(problem.catalog_revision).toBe(reached);
  });
});

describe("ETag revalidation", () => {
  it("answers 304 while the revision is unchanged (replica churn included) and 200 after a publication", async () => {
    const first = await get("/v1/catalog/capabilities?limit=2", tokenA);
    const etag = first.headers.get("etag")!;
    const page = await body(first);
    // Strong: one revision and one tenant's request always give the same bytes.
    expect(etag).toMatch(/^"\d+-[0-9a-f]{16}"$/);
    expect(etag).toContain(`"${page.catalog_revision}-`);
    expect(first.headers.get("cache-control")).toBe("private, no-cache");
    expect(first.headers.get("vary")).toMatch(/authorization/i);

    const again = await get("/v1/catalog/capabilities?limit=2", tokenA, { "if-none-match": etag });
    expect(again.status).toBe(304);
    expect(again.headers.get("etag")).toBe(etag);
    expect(await again.text()).toBe("");
    // A weak-form copy of the tag in a list matches too (If-None-Match compares weakly).
    expect((await get("/v1/catalog/capabilities?limit=2", tokenA, { "if-none-match": `"x", W/${etag}` })).status).toBe(304);
    expect((await get("/v1/catalog/capabilities?limit=2", tokenA, { "if-none-match": "*" })).status).toBe(304);

    // Not a validator for another request or another tenant.
    expect((await get("/v1/catalog/capabilities?limit=3", tokenA, { "if-none-match": etag })).status).toBe(200);
    expect((await get("/v1/catalog/capabilities?limit=2", tokenB, { "if-none-match": etag })).status).toBe(200);

    // Host churn does not move the revision.
    const state = (await db.registry.adminGet("replica", replicaA))!;
    await db.registry.replicaLifecycle(
      replicaA,
      "heartbeat",
      { request_id: requestId(), previous_sequence: state.health_revision as number },
      hostPrincipal(replicaA),
    );
    expect((await get("/v1/catalog/capabilities?limit=2", tokenA, { "if-none-match": etag })).status).toBe(304);

    // Other tenants' publications neither.
    await publishElsewhere();
    expect((await get("/v1/catalog/capabilities?limit=2", tokenA, { "if-none-match": etag })).status).toBe(304);

    // A shared record that reaches the tenant: its version's qualification revoked.
    const qualify = (supply_chain_qualified: boolean) => ({ op: "set_version_qualification", id: "cver_h_1", supply_chain_qualified, reason: "test" });
    const revoked = await db.registry.publish([qualify(false)]);
    const changed = await get("/v1/catalog/capabilities?limit=2", tokenA, { "if-none-match": etag });
    expect(changed.status).toBe(200);
    expect(changed.headers.get("etag")).not.toBe(etag);
    expect(await body(changed)).toMatchObject({ catalog_revision: revoked.catalog_revision, capabilities: [], total: 0 });
    const restored = await db.registry.publish([qualify(true)]);
    expect(await body(get("/v1/catalog/capabilities?limit=2", tokenA))).toMatchObject({ catalog_revision: restored.catalog_revision, total: 3 });
  });

  it("revalidates a single definition the same way", async () => {
    const path = `/v1/catalog/capabilities/${enc("cap:h.alpha")}`;
    const first = await get(path, tokenA);
    const etag = first.headers.get("etag")!;
    expect((await get(path, tokenA, { "if-none-match": etag })).status).toBe(304);
    expect((await get(`/v1/catalog/capabilities/${enc("cap:h.beta")}`, tokenA, { "if-none-match": etag })).status).toBe(200);
    // `*` matches a definition the tenant sees, and no other: that one is still 404.
    expect((await get(path, tokenA, { "if-none-match": "*" })).status).toBe(304);
    expect((await get(`/v1/catalog/capabilities/${enc("cap:h.nothing")}`, tokenA, { "if-none-match": "*" })).status).toBe(404);
    await publishElsewhere();
    expect((await get(path, tokenA, { "if-none-match": etag })).status).toBe(304);
    await reachTenantA();
    expect((await get(path, tokenA, { "if-none-match": etag })).status).toBe(200);
  });
});

describe("internal admin read", () => {
  it("lists unbound active definitions, shows what a tenant sees, and lets the tenant win over unbound", async () => {
    await db.registry.publish([connectorType("ctype_hfree"), await version("cver_hfree", "ctype_hfree", ["cap:hfree.solo"])]);
    const admin = await api.adminToken();
    const unbound = await body(get("/v1/admin/catalog/capabilities?unbound=true&limit=200", admin));
    expect(ids(unbound)).toEqual(expect.arrayContaining([...capsA, "cap:hb.one", "cap:hfree.solo"]));
    expect(unbound.total).toBe(6);
    const tenant = await body(get("/v1/admin/catalog/capabilities?tenant_id=tenant-hb&unbound=true", admin));
    expect(ids(tenant)).toEqual(["cap:hb.50%_off", "cap:hb.one"].sort());
    expect(await body(get("/v1/admin/catalog/capabilities", admin))).toMatchObject({ capabilities: [], total: 0 });
    // The tenant route is not an admin route, and the admin route is not a tenant's.
    expect((await get("/v1/admin/catalog/capabilities?unbound=true", tokenA)).status).toBe(403);
  });
});
