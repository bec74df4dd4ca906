/**
 * GET /v1/fleet/status and POST /v1/fleet/lease-expiry in-process: the fixed-size aggregate with
 * no identifiers, scopes, and the bounded expiry batch.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { useTestDatabase } from "../support/database.js";
import { createTestApi, type TestApi } from "../support/http.js";
import { lifecycle, provisionFleet, replicaRow, shortenLeases, waitForLeaseEnd } from "../support/replicas.js";

const db = useTestDatabase();
let api: TestApi;
let fleet: Awaited<ReturnType<typeof provisionFleet>>;
beforeAll(async () => {
  api = createTestApi(db.registry);
  fleet = await provisionFleet(db.registry, { prefix: "hf", tenants: ["tenant-hf"], replicasPerTenant: 3 });
  for (const id of fleet.replicas) await lifecycle(db.registry, id, "register", { lease_ttl_ms: 60_000 });
  await db.registry.resolveRoute("act_hf_1", "tenant-hf", fleet.capability);
  await shortenLeases(db, fleet.replicas);
});

const FIELDS = [
  "active_assignments",
  "active_versions",
  "catalog_revision",
  "connector_types",
  "draining_replicas",
  "enabled_instances",
  "expired_leases",
  "observed_at",
  "offline_replicas",
  "open_circuits",
  "ready_capacity",
  "ready_replicas",
  "replicas",
];

describe("GET /v1/fleet/status", () => {
  it("returns only the fixed-size aggregate: exactly its fields, numbers and a time, no identifiers", async () => {
    const response = await api.call("GET", "/v1/fleet/status", { token: await api.token({ scopes: ["fleet:read"] }) });
    expect(response.status).toBe(200);
    const text = await response.text();
    const body = JSON.parse(text) as Record<string, unknown>;
    expect(Object.keys(body).sort()).toEqual(FIELDS);
    for (const field of FIELDS.filter((f) => f !== "observed_at")) expect(Number.isInteger(body[field])).toBe(true);
    expect(body.observed_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    expect(body).toMatchObject({ replicas: 3, active_assignments: 1, connector_types: 1, enabled_instances: 1 });
    for (const identifier of ["crepl_", "cinst_", "ctype_", "cver_", "tenant-hf", "act_hf", "cap:hf"]) expect(text).not.toContain(identifier);
  });

  it("needs fleet:read or registry:admin", async () => {
    expect((await api.call("GET", "/v1/fleet/status", { token: await api.token({ scopes: ["registry:admin"] }) })).status).toBe(200);
    expect((await api.call("GET", "/v1/fleet/status")).status).toBe(401);
    for (const scopes of [["replicas:write"], ["routes:read", "catalog:read"]] as const) {
      const response = await api.call("GET", "/v1/fleet/status", { token: await api.token({ scopes: [...scopes] }) });
      expect(response.status).toBe(403);
      expect(await response.json()).toMatchObject({ code: "forbidden" });
    }
  });
});

describe("GET /v1/fleet/regions", () => {
  // A page size: clamped to [1, 1000] like every page size (docs/reliability.md, "Limits and
  // defaults"); until issue 16 a limit outside that range was a 400.
  it("clamps `limit` to [1, 1000] and refuses only a non-integer", async () => {
    const token = await api.token({ scopes: ["fleet:read"] });
    const regions = async (query: string) => {
      const response = await api.call("GET", `/v1/fleet/regions${query}`, { token });
      expect(response.status).toBe(200);
      return ((await response.json()) as { regions: { region: string }[] }).regions.map((r) => r.region);
    };
    const all = await regions("");
    expect(all.length).toBeGreaterThan(0);
    expect(await regions("?limit=0")).toEqual(all.slice(0, 1));
    expect(await regions("?limit=-5")).toEqual(all.slice(0, 1));
    for (const limit of ["1000", "10000", "99999999999"]) expect(await regions(`?limit=${limit}`)).toEqual(all);
    for (const limit of ["2.5", "many"]) {
      const response = await api.call("GET", `/v1/fleet/regions?limit=${limit}`, { token });
      expect(response.status).toBe(400);
      expect(await response.json()).toMatchObject({ code: "invalid", errors: [expect.objectContaining({ field: "limit" })] });
    }
  });
});

describe("POST /v1/fleet/lease-expiry", () => {
  it("needs registry:admin; fleet:read is not enough", async () => {
    expect((await api.call("POST", "/v1/fleet/lease-expiry")).status).toBe(401);
    for (const scopes of [["fleet:read"], ["replicas:write"]] as const) {
      const response = await api.call("POST", "/v1/fleet/lease-expiry", { token: await api.token({ scopes: [...scopes] }) });
      expect(response.status).toBe(403);
    }
  });

  it("refuses a limit outside [1, 10000]", async () => {
    const token = await api.token({ scopes: ["registry:admin"] });
    for (const limit of ["0", "10001", "-3", "2.5", "many"]) {
      const response = await api.call("POST", `/v1/fleet/lease-expiry?limit=${limit}`, { token });
      expect(response.status).toBe(400);
      expect(await response.json()).toMatchObject({ code: "invalid", errors: [expect.objectContaining({ field: "limit" })] });
    }
  });

  it("expires at most `limit` replicas per call and releases their routes", async () => {
    const token = await api.token({ scopes: ["registry:admin"] });
    await waitForLeaseEnd(db, fleet.replicas);
    const expire = async (query: string) => {
      const response = await api.call("POST", `/v1/fleet/lease-expiry${query}`, { token });
      expect(response.status).toBe(200);
      return response.json();
    };
    const batches = [await expire("?limit=1"), await expire("?limit=1"), await expire("")] as { expired: number; released: number }[];
    expect(batches.map((b) => b.expired)).toEqual([1, 1, 1]);
    // The one route was released exactly once, by whichever batch took its replica.
    expect(batches.reduce((sum, b) => sum + b.released, 0)).toBe(1);
    expect(await expire("")).toEqual({ expired: 0, released: 0, next_deadline: null });
    for (const id of fleet.replicas) expect(await replicaRow(db, id)).toMatchObject({ status: "offline", active_assignments: 0 });
    const status = await (await api.call("GET", "/v1/fleet/status", { token })).json();
    expect(status).toMatchObject({ offline_replicas: 3, expired_leases: 0, active_assignments: 0, ready_capacity: 0 });
  });
});
