/**
 * The control-plane HTTP surface: publication (and its dry run) and the administrative readers,
 * including identifiers that need percent-encoding in a path.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { useTestDatabase } from "../support/database.js";
import { attestation, binding, connectorType, instance, policy, replica, version } from "../../fixtures/records.js";
import { createTestApi, type TestApi } from "../support/http.js";
import { registryState } from "../support/registry-state.js";

const db = useTestDatabase();
let api: TestApi;
let admin: string;

// Identifiers with characters that must be percent-encoded in a path segment (or merely look odd).
const TYPE = "ctype_admin";
const VERSION = "cver_admin:1.0/stable";
const INSTANCE = "cinst_admin/eu:1";
const REPLICA = "crepl_admin:eu/1";
const POLICY = "quota:acme/gold plan";
const TENANT = "tenant-admin";
const CAPABILITIES = ["cap:admin/a", "cap:admin:b", "cap:admin.c", "cap:admin d", "cap:admin%e"];

beforeAll(async () => {
  api = createTestApi(db.registry);
  admin = await api.adminToken();
  const response = await api.call("POST", "/v1/admin/publications", {
    token: admin,
    body: {
      changes: [
        connectorType(TYPE),
        await version(VERSION, TYPE, CAPABILITIES),
        policy(POLICY),
        instance(INSTANCE, TYPE, VERSION, TENANT),
        instance("cinst_admin_other", TYPE, VERSION, "tenant-admin-other"),
        ...CAPABILITIES.map((cap) => binding(TENANT, cap, INSTANCE, { quota_policy_ref: POLICY })),
        binding("tenant-admin-other", "cap:admin/a", "cinst_admin_other"),
        replica(REPLICA, INSTANCE, VERSION),
      ],
    },
  });
  expect(response.status, await response.clone().text()).toBe(200);
});

const get = (path: string, token = admin) => api.call("GET", path, { token });

describe("GET /v1/admin/{kind}/{id}", () => {
  it.each([
    ["connector-types", TYPE, { id: TYPE, owner: "org:acme", enabled: true }],
    ["versions", VERSION, { id: VERSION, connector_type_id: TYPE, status: "active", supply_chain_qualified: true }],
    ["instances", INSTANCE, { id: INSTANCE, tenant_id: TENANT, version_id: VERSION, config_revision: 1 }],
    ["replicas", REPLICA, { id: REPLICA, instance_id: INSTANCE, status: "offline", health_revision: 0 }],
    ["admission-policies", POLICY, { policy_ref: POLICY, revision: 1 }],
  ])("reads one %s record by its percent-encoded id", async (kind, id, expected) => {
    const response = await get(`/v1/admin/${kind}/${encodeURIComponent(id)}`);
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toMatch(/^application\/json/);
    expect(await response.json()).toMatchObject(expected);
  });

  it("returns the version's capabilities with their digests and its profiles", async () => {
    const record = (await (await get(`/v1/admin/versions/${encodeURIComponent(VERSION)}`)).json()) as Record<string, unknown>;
    expect((record.capabilities as { id: string }[]).map((c) => c.id)).toEqual([...CAPABILITIES].sort());
    expect(record.capabilities).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ contract_digest: expect.stringMatching(/^sha256:[0-9a-f]{64}$/), schema_digest: expect.stringMatching(/^sha256:/) }),
      ]),
    );
    expect(record.profiles).toEqual(["aip.native.http.v1"]);
    expect(record.admitted_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  });

  it.each(["connector-types", "versions", "instances", "replicas", "admission-policies"])("answers 404 not-found for an unknown %s", async (kind) => {
    const response = await get(`/v1/admin/${kind}/${encodeURIComponent("missing:x/y")}`);
    expect(response.status).toBe(404);
    expect(response.headers.get("content-type")).toMatch(/^application\/problem\+json/);
    expect(await response.json()).toMatchObject({ code: "not-found", detail: expect.stringContaining("missing:x/y") });
  });

  it("does not confuse a record of one kind with another kind's id", async () => {
    expect((await get(`/v1/admin/instances/${TYPE}`)).status).toBe(404);
    expect((await get(`/v1/admin/connector-types/${encodeURIComponent(INSTANCE)}`)).status).toBe(404);
  });

  it("needs the registry:admin scope", async () => {
    const response = await get(`/v1/admin/connector-types/${TYPE}`, await api.tenantToken(TENANT));
    expect(response.status).toBe(403);
    expect(await response.json()).toMatchObject({ code: "forbidden" });
  });
});

describe("GET /v1/admin/bindings", () => {
  it("lists a tenant's bindings in (capability, instance) order and no one else's", async () => {
    const response = await get(`/v1/admin/bindings?tenant_id=${TENANT}`);
    expect(response.status).toBe(200);
    const page = (await response.json()) as { tenant_id: string; bindings: Record<string, unknown>[]; next_cursor: string | null };
    expect(page.tenant_id).toBe(TENANT);
    expect(page.next_cursor).toBeNull();
    expect(page.bindings.map((b) => b.capability_id)).toEqual([...CAPABILITIES].sort());
    expect(page.bindings.every((b) => b.tenant_id === TENANT && b.instance_id === INSTANCE && b.quota_policy_ref === POLICY)).toBe(true);
  });

  it("paginates with a cursor until every binding was returned exactly once", async () => {
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const query = new URLSearchParams({ tenant_id: TENANT, limit: "2", ...(cursor ? { cursor } : {}) });
      const response = await get(`/v1/admin/bindings?${query}`);
      expect(response.status).toBe(200);
      const page = (await response.json()) as { bindings: { capability_id: string }[]; next_cursor: string | null };
      expect(page.bindings.length).toBeLessThanOrEqual(2);
      seen.push(...page.bindings.map((b) => b.capability_id));
      cursor = page.next_cursor;
      pages++;
    } while (cursor && pages < 10);
    expect(pages).toBe(3);
    expect(seen).toEqual([...CAPABILITIES].sort());
  });

  it("clamps the page size to [1, 1000]", async () => {
    const smallest = (await (await get(`/v1/admin/bindings?tenant_id=${TENANT}&limit=0`)).json()) as { bindings: unknown[]; next_cursor: string | null };
    expect(smallest.bindings).toHaveLength(1);
    expect(smallest.next_cursor).not.toBeNull();
    const largest = (await (await get(`/v1/admin/bindings?tenant_id=${TENANT}&limit=99999999999`)).json()) as {
      bindings: unknown[];
      next_cursor: string | null;
    };
    expect(largest).toMatchObject({ bindings: expect.any(Array), next_cursor: null });
    expect(largest.bindings).toHaveLength(CAPABILITIES.length);
  });

  it("answers an empty page for a tenant without bindings", async () => {
    const response = await get("/v1/admin/bindings?tenant_id=tenant-nobody");
    expect(await response.json()).toEqual({ tenant_id: "tenant-nobody", bindings: [], next_cursor: null });
  });

  it("refuses a missing tenant or a malformed cursor with 400 invalid", async () => {
    for (const path of [
      "/v1/admin/bindings",
      "/v1/admin/bindings?tenant_id=",
      `/v1/admin/bindings?tenant_id=${TENANT}&cursor=nope`,
      `/v1/admin/bindings?tenant_id=${TENANT}&cursor=%5B1%2C2%5D`,
      `/v1/admin/bindings?tenant_id=${TENANT}&limit=two`,
    ]) {
      const response = await get(path);
      expect(response.status, path).toBe(400);
      expect(await response.json()).toMatchObject({ code: "invalid" });
    }
  });
});

describe("capability ids in paths", () => {
  it.each(CAPABILITIES)("resolve %s percent-encoded in the tenant catalog path", async (capability) => {
    const response = await get(`/v1/catalog/capabilities/${encodeURIComponent(capability)}`, await api.tenantToken(TENANT));
    expect(response.status).toBe(200);
    expect(await response.json()).toMatchObject({ definition: { capability: { id: capability } } });
  });
});

describe("POST /v1/admin/publications", () => {
  it("answers the revision and each change's outcome", async () => {
    const before = await registryState(db.owner);
    const response = await api.call("POST", "/v1/admin/publications", {
      token: admin,
      body: { changes: [policy(POLICY, { revision: 2, max_tenant_in_flight: 5 })] },
    });
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({
      catalog_revision: before.catalog_revision + 1,
      changed: 1,
      dry_run: false,
      results: [{ op: "put_admission_policy", outcome: "updated", policy_ref: POLICY }],
    });
  });

  it("with ?dry_run=true reports the would-be revision and outcomes and changes nothing", async () => {
    const before = await registryState(db.owner);
    const changes = [replica("crepl_admin_dry", INSTANCE, VERSION), binding(TENANT, "cap:admin.c", INSTANCE, { policy_revision: 2, enabled: false })];
    const response = await api.call("POST", "/v1/admin/publications?dry_run=true", { token: admin, body: { changes } });
    expect(response.status).toBe(200);
    expect(await response.json()).toMatchObject({
      catalog_revision: before.catalog_revision + 1,
      changed: 2,
      dry_run: true,
      results: [{ outcome: "created" }, { outcome: "updated" }],
    });
    expect(await registryState(db.owner)).toEqual(before);
    expect((await get(`/v1/admin/replicas/crepl_admin_dry`)).status).toBe(404);
  });

  it("answers a refused change as a problem naming the change", async () => {
    const before = await registryState(db.owner);
    const response = await api.call("POST", "/v1/admin/publications", {
      token: admin,
      body: { changes: [replica("crepl_admin_ok", INSTANCE, VERSION), instance(INSTANCE, TYPE, VERSION, "tenant-thief", 9)] },
    });
    expect(response.status).toBe(409);
    expect(await response.json()).toMatchObject({ code: "conflict", change_index: 1, instance_id: INSTANCE, detail: expect.stringMatching(/^changes\[1\]: /) });
    expect(await registryState(db.owner)).toEqual(before);
  });

  it("maps admission refusals to 422 and unknown references to 404", async () => {
    const refused = await api.call("POST", "/v1/admin/publications", {
      token: admin,
      body: { changes: [{ ...(await version("cver_admin_bad", TYPE, ["cap:admin/a"])), manifest_digest: `sha256:${"0".repeat(64)}` }] },
    });
    expect(refused.status).toBe(422);
    expect(await refused.json()).toMatchObject({ code: "admission", status: 422, change_index: 0 });
    const failed = await api.call("POST", "/v1/admin/publications", {
      token: admin,
      body: {
        changes: [await version("cver_admin_failed", TYPE, ["cap:admin/a"], { attestation: attestation("org:acme", { license_policy_status: "failed" }) })],
      },
    });
    // The function's extension members never replace the problem's own (status stays the HTTP status).
    expect(await failed.json()).toMatchObject({ code: "admission", status: 422, field: "attestation.license_policy_status", check_status: "failed" });
    const missing = await api.call("POST", "/v1/admin/publications", {
      token: admin,
      body: { changes: [instance("cinst_admin_x", TYPE, "cver_missing", TENANT)] },
    });
    expect(missing.status).toBe(404);
    expect(await missing.json()).toMatchObject({ code: "not-found", version_id: "cver_missing" });
  });
});
