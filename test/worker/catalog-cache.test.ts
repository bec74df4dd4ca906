/**
 * The Worker's catalog cache in workerd: the location's Cache API behind an in-isolate memory
 * cache, counted at the wire by the local Neon proxy. One statement per catalog request when no
 * staleness is allowed (a warm answer only confirms its revision), none within an allowed
 * staleness, and never another tenant's answer or an answer older than a cursor.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { conformancePrefix } from "../conformance/index.js";
import { Api, type ApiResponse } from "../conformance/target.js";
import { binding, connectorType, instance, policy, version } from "../../fixtures/records.js";
import { proxyStats, workerEnv, workerTarget } from "./support.js";

const statements = async () => (await proxyStats()).statements;

/**
 * An API over a Worker configuration of its own (its own isolate runtime and confirmed revision),
 * past its once-per-runtime schema check.
 */
async function workerApi(prefix: string, overrides: Record<string, string> = {}) {
  const api = new Api(workerTarget(workerEnv({ NEON_TRANSPORT: "http", ...overrides }), prefix));
  expect((await api.call("GET", "/v1/catalog/capabilities/cap%3Anone", { token: await api.tenant(`${prefix}-nobody`) })).status).toBe(404);
  return api;
}

async function measured(call: () => Promise<ApiResponse>) {
  const before = await statements();
  const response = await call();
  return { response, statements: (await statements()) - before };
}

const p = conformancePrefix("cc");
const caps = [`cap:${p}.a`, `cap:${p}.b`, `cap:${p}.c`];
const tenantA = `${p}-a`;
const tenantB = `${p}-b`;
let setup: Api;

beforeAll(async () => {
  setup = await workerApi(p);
  await setup.publish([
    connectorType(`ctype_${p}`),
    await version(`cver_${p}`, `ctype_${p}`, caps),
    instance(`cinst_${p}_a`, `ctype_${p}`, `cver_${p}`, tenantA),
    instance(`cinst_${p}_b`, `ctype_${p}`, `cver_${p}`, tenantB),
    ...caps.map((cap) => binding(tenantA, cap, `cinst_${p}_a`)),
    binding(tenantB, caps[1]!, `cinst_${p}_b`),
  ]);
});

const ids = (page: ApiResponse) => (page.body.capabilities as { capability: { id: string } }[]).map((d) => d.capability.id);

describe("without staleness", () => {
  it("sends exactly one statement per request; a warm answer is only revalidated", async () => {
    const api = await workerApi(p, { CATALOG_MAX_STALENESS_MS: "0" });
    const token = await api.tenant(tenantA);
    const path = "/v1/catalog/capabilities?limit=2";
    const first = await measured(() => api.call("GET", path, { token }));
    expect(first.statements).toBe(1);
    expect(first.response.headers.get("aip-catalog-cache")).toBe("miss");
    const again = await measured(() => api.call("GET", path, { token }));
    expect(again.statements).toBe(1);
    expect(again.response.headers.get("aip-catalog-cache")).toBe("revalidated");
    expect(again.response.body).toEqual(first.response.body);
    const etag = first.response.headers.get("etag")!;
    const notModified = await measured(() => api.call("GET", path, { token, headers: { "if-none-match": etag } }));
    expect({ status: notModified.response.status, statements: notModified.statements }).toEqual({ status: 304, statements: 1 });
    // Another isolate of the location (another runtime: its memory cache is empty) finds the
    // answer in the location's Cache API: revalidated, not built again.
    const sibling = await workerApi(p, { CATALOG_MAX_STALENESS_MS: "1" });
    const shared = await measured(() => sibling.call("GET", path, { token }));
    expect({ cache: shared.response.headers.get("aip-catalog-cache"), statements: shared.statements }).toEqual({ cache: "revalidated", statements: 1 });
    expect(shared.response.body).toEqual(first.response.body);
    // Tenant b, same query, same validator: its own page.
    const tokenB = await api.tenant(tenantB);
    const other = await measured(() => api.call("GET", path, { token: tokenB, headers: { "if-none-match": etag } }));
    expect(other.response.status).toBe(200);
    expect(ids(other.response)).toEqual([caps[1]]);
  });

  it("sees a publication at once", async () => {
    const api = await workerApi(p, { CATALOG_MAX_STALENESS_MS: "0" });
    const token = await api.tenant(tenantB);
    const path = "/v1/catalog/capabilities";
    const before = await api.call("GET", path, { token });
    const published = await setup.publish([binding(tenantB, caps[2]!, `cinst_${p}_b`)]);
    const after = await api.call("GET", path, { token });
    expect(after.body.catalog_revision).toBe(published.catalog_revision);
    expect(after.body.catalog_revision).toBeGreaterThan(before.body.catalog_revision);
    expect(ids(after)).toEqual([caps[1], caps[2]]);
  });

  it("keeps the location's cached answers across other tenants' publications: keyed on the tenant's revision", async () => {
    const api = await workerApi(p, { CATALOG_MAX_STALENESS_MS: "0" });
    const token = await api.tenant(tenantA);
    const path = "/v1/catalog/capabilities?limit=2&q=cap";
    const first = await api.call("GET", path, { token });
    expect(first.headers.get("aip-catalog-cache")).toBe("miss");
    // Another tenant's binding and an admission policy move the global revision.
    await setup.publish([binding(tenantB, caps[0]!, `cinst_${p}_b`)]);
    await setup.publish([policy(`quota:${p}:elsewhere`)]);
    // A fresh isolate (empty memory cache) finds the Cache API entry still current: one statement.
    const sibling = await workerApi(p, { CATALOG_MAX_STALENESS_MS: "1" });
    const shared = await measured(() => sibling.call("GET", path, { token }));
    expect({ cache: shared.response.headers.get("aip-catalog-cache"), statements: shared.statements }).toEqual({ cache: "revalidated", statements: 1 });
    expect(shared.response.body).toEqual(first.body);
    const cursor = await sibling.call("GET", `/v1/catalog/capabilities?limit=2&q=cap&cursor=${encodeURIComponent(first.body.next_cursor)}`, { token });
    expect(cursor.status).toBe(200);
    expect(cursor.body.catalog_revision).toBe(first.body.catalog_revision);
    // A publication that reaches tenant a: built again, at the new revision.
    const reached = await setup.publish([binding(tenantA, caps[1]!, `cinst_${p}_a`, { enabled: false, policy_revision: 2 })]);
    const third = await workerApi(p, { CATALOG_MAX_STALENESS_MS: "2" });
    const rebuilt = await third.call("GET", path, { token });
    expect(rebuilt.headers.get("aip-catalog-cache")).toBe("miss");
    expect(rebuilt.body.catalog_revision).toBe(reached.catalog_revision);
    expect(ids(rebuilt)).toEqual([caps[0], caps[2]]);
  });
});

describe("with staleness allowed", () => {
  it("serves a confirmed answer without any statement, and never a cursor of an unseen revision from an older page", async () => {
    const api = await workerApi(p, { CATALOG_MAX_STALENESS_MS: "600000" });
    const token = await api.tenant(tenantA);
    const path = "/v1/catalog/capabilities?limit=1";
    const first = await api.call("GET", path, { token });
    const hit = await measured(() => api.call("GET", path, { token }));
    expect(hit.statements).toBe(0);
    expect(hit.response.headers.get("aip-catalog-cache")).toBe("hit");
    expect(hit.response.body).toEqual(first.body);

    // A newer revision of tenant a (its binding of b enabled again), served by another isolate
    // (another configuration) to another gateway.
    const reached = await setup.publish([binding(tenantA, caps[1]!, `cinst_${p}_a`, { enabled: true, policy_revision: 3 })]);
    const elsewhere = await workerApi(p, { CATALOG_MAX_STALENESS_MS: "0" });
    const newer = await elsewhere.call("GET", path, { token });
    expect(newer.body.catalog_revision).toBe(reached.catalog_revision);
    // Its cursor reaches the stale isolate: revalidated at its own revision, never answered from
    // the older cached page.
    const next = await measured(() => api.call("GET", `/v1/catalog/capabilities?limit=1&cursor=${encodeURIComponent(newer.body.next_cursor)}`, { token }));
    expect(next.statements).toBe(1);
    expect(next.response.body.catalog_revision).toBe(newer.body.catalog_revision);
    expect(ids(next.response)).toEqual([caps[1]]);
  });
});
