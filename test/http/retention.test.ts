/**
 * Route retention over HTTP on both databases the app runs on, PostgreSQL (the runtime roles)
 * and the embedded PGlite: an operator's on-demand batch removes released routes past the window,
 * the export pages every tenant's released routes and records the export watermark (which
 * ROUTE_RETENTION_REQUIRE_EXPORT waits for), and a resolve of an `act_` + UUIDv7 action whose
 * route was removed is `410 route-expired`, problem+json, not a new route.
 */
import { FUNCTION_SET } from "../../src/db/schema-version.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { migrate } from "../../src/db/migrate.js";
import { openPglite, pgliteExecutor, pgliteSession } from "../../src/db/pglite.js";
import { Registry } from "../../src/registry/registry.js";
import { createTestDatabase } from "../support/database.js";
import { publishSimpleFleet } from "../../fixtures/records.js";
import { createTestApi, type TestApi } from "../support/http.js";
import { expectHealthy } from "../support/invariants.js";
import { actionMintedAt, DAY_MS } from "../support/retention.js";

/** A JSON body; `any` keeps the assertions terse. */
const body = async (response: Response): Promise<any> => response.json();

interface Backend {
  registry: Registry;
  /** The owner's SQL: moving settlements into the past. */
  ownerQuery(text: string, params: unknown[]): Promise<unknown>;
  close(): Promise<void>;
}

async function postgres(): Promise<Backend> {
  const db = await createTestDatabase();
  return { registry: db.registry, ownerQuery: (text, params) => db.owner.query(text, params), close: () => db.close() };
}

async function pglite(): Promise<Backend> {
  const db = await openPglite();
  await migrate(pgliteSession(db));
  const executor = pgliteExecutor(db);
  return { registry: new Registry({ data: executor, control: executor }), ownerQuery: (text, params) => db.query(text, params), close: () => db.close() };
}

describe.each([
  ["PostgreSQL", postgres],
  ["PGlite", pglite],
])("route retention over HTTP on %s", (_name, open) => {
  let backend: Backend;
  let api: TestApi;
  let admin: string;
  let gateway: string;
  let capability: string;
  const tenant = "tenant-hret";

  beforeAll(async () => {
    backend = await open();
    api = createTestApi(backend.registry);
    const fleet = await publishSimpleFleet(backend.registry, { prefix: "hret", tenants: [tenant], capacity: 100 });
    capability = fleet.capabilities[0] as string;
    admin = await api.adminToken();
    gateway = await api.tenantToken(tenant);
  });
  afterAll(() => backend?.close());

  /**
   * Routes of actions minted `days` ago, settled, and their settlement moved `days` into the past.
   * (Each test uses fewer days than the last: an action minted before an earlier removal could not
   * be routed at all.)
   */
  async function oldRoutes(count: number, days: number) {
    const assignments = [];
    for (let i = 0; i < count; i++) {
      const actionId = actionMintedAt(Date.now() - days * DAY_MS);
      const created = await api.call("PUT", `/v1/routes/${actionId}`, { token: gateway, body: { capability_id: capability } });
      expect(created.status).toBe(201);
      const assignment = await body(created);
      const settled = await api.call("POST", `/v1/routes/${actionId}/settlement`, { token: gateway, body: { assignment, outcome: "completed" } });
      expect(settled.status).toBe(200);
      assignments.push(assignment);
    }
    await backend.ownerQuery(
      "UPDATE aip_route_assignments SET settled_at = date_trunc('milliseconds', clock_timestamp()) - $2 * interval '1 day' WHERE action_id = ANY($1)",
      [assignments.map((a) => a.action_id), days],
    );
    return assignments;
  }

  it("exports released routes as pages, records the export, and retention then removes them", async () => {
    const routes = await oldRoutes(3, 40);
    const before = new Date(Date.now() - 35 * DAY_MS).toISOString();
    const page = await api.call("GET", `/v1/admin/routes?settled_before=${before}&limit=2`, { token: admin });
    expect(page.status).toBe(200);
    const first = await body(page);
    expect(first.settled_before).toBe(before);
    expect(first.routes).toHaveLength(2);
    const second = await body(
      await api.call("GET", `/v1/admin/routes?settled_before=${before}&limit=2&cursor=${encodeURIComponent(first.next_cursor)}`, { token: admin }),
    );
    expect(second.next_cursor).toBeNull();
    const exported = [...first.routes, ...second.routes];
    expect(exported.map((r) => r.assignment.action_id).sort()).toEqual(routes.map((r) => r.action_id).sort());
    for (const route of exported) expect(route).toMatchObject({ reserved: false, last_settlement: "completed", settled_at: expect.any(String) });

    const recorded = await api.call("POST", "/v1/admin/route-exports", { token: admin, body: { settled_before: before } });
    expect(recorded.status).toBe(200);
    expect((await body(recorded)).exported_before).toBe(before);

    // Only an operator may run retention; it removes the three.
    expect((await api.call("POST", "/v1/fleet/route-retention", { token: gateway })).status).toBe(403);
    const removed = await api.call("POST", "/v1/fleet/route-retention?limit=10", { token: admin });
    expect(removed.status).toBe(200);
    const result = await body(removed);
    expect(result.removed).toBe(3);
    expect(Date.parse(result.removed_before)).toBeGreaterThan(Date.now() - 41 * DAY_MS);
    for (const route of routes) expect((await api.call("GET", `/v1/routes/${route.action_id}`, { token: gateway })).status).toBe(404);
    await expectHealthy(backend.registry);
  });

  it("a resolve of an act_ + UUIDv7 action whose route was removed is 410 route-expired, and nothing is routed", async () => {
    const [route] = await oldRoutes(1, 39);
    expect((await body(await api.call("POST", "/v1/fleet/route-retention", { token: admin }))).removed).toBe(1);
    const retry = await api.call("PUT", `/v1/routes/${route.action_id}`, { token: gateway, body: { capability_id: capability } });
    expect(retry.status).toBe(410);
    expect(retry.headers.get("content-type")).toBe("application/problem+json");
    expect(retry.headers.get("retry-after")).toBeNull();
    const problem = await body(retry);
    expect(problem).toMatchObject({ status: 410, code: "route-expired", action_id: route.action_id, removed_before: expect.any(String) });
    expect((await api.call("GET", `/v1/routes/${route.action_id}`, { token: gateway })).status).toBe(404);
    // A new action is routed as usual.
    const fresh = await api.call("PUT", `/v1/routes/${actionMintedAt(Date.now())}`, { token: gateway, body: { capability_id: capability } });
    expect(fresh.status).toBe(201);
    const assignment = await body(fresh);
    await api.call("POST", `/v1/routes/${assignment.action_id}/settlement`, { token: gateway, body: { assignment, outcome: "completed" } });
    await expectHealthy(backend.registry);
  });

  it("with ROUTE_RETENTION_REQUIRE_EXPORT nothing past the export watermark goes, from then on; with retention off the batch is refused", async () => {
    const strict = createTestApi(backend.registry, { routeRetention: { days: 30, requireExport: true } });
    // The export watermark is the first test's, 35 days ago: a route settled 38 days ago may go.
    const routes = await oldRoutes(1, 38);
    expect((await body(await strict.call("POST", "/v1/fleet/route-retention", { token: admin }))).removed).toBe(1);
    const [newer] = await oldRoutes(1, 31);
    const kept = await body(await strict.call("POST", "/v1/fleet/route-retention", { token: admin }));
    expect(kept.removed).toBe(0);
    expect((await api.call("GET", `/v1/routes/${newer.action_id}`, { token: gateway })).status).toBe(200);
    expect(routes).toHaveLength(1);

    const off = createTestApi(backend.registry, { routeRetention: null });
    const refused = await off.call("POST", "/v1/fleet/route-retention", { token: admin });
    expect(refused.status).toBe(409);
    expect((await body(refused)).code).toBe("conflict");
    // The requirement is the database's now: a server configured without it cannot drop it...
    const plain = await body(await api.call("POST", "/v1/fleet/route-retention", { token: admin }));
    expect(plain).toMatchObject({ removed: 0, require_export: true });
    // ...only the owner can; then the window alone decides.
    await backend.ownerQuery(`SELECT ${FUNCTION_SET}.aip_set_route_retention_policy(NULL, false)`, []);
    expect((await body(await api.call("POST", "/v1/fleet/route-retention", { token: admin }))).removed).toBe(1);
  });

  it("refuses malformed times, cursors and bodies with 400, naming the field", async () => {
    const cases: [string, string, unknown, string][] = [
      ["GET", "/v1/admin/routes?settled_before=2026-13-01T00:00:00Z", undefined, "settled_before"],
      ["GET", "/v1/admin/routes?settled_before=2026-11-01T00:00:00Z&settled_after=last-week", undefined, "settled_after"],
      ["GET", "/v1/admin/routes?settled_before=2026-11-01T00:00:00Z&cursor=%5B1%5D", undefined, "cursor"],
      ["POST", "/v1/admin/route-exports", { settled_after: "2026-11-02T00:00:00Z", settled_before: "2026-11-01T00:00:00Z" }, "settled_after"],
      ["POST", "/v1/admin/route-exports", {}, "settled_before"],
      ["POST", "/v1/fleet/route-retention?limit=0", undefined, "limit"],
    ];
    for (const [method, path, request, field] of cases) {
      const response = await api.call(method, path, { token: admin, ...(request !== undefined ? { body: request } : {}) });
      const problem = await body(response);
      expect({ path, status: response.status, code: problem.code }).toEqual({ path, status: 400, code: "invalid" });
      expect(problem.errors.map((e: { field: string }) => e.field)).toContain(field);
    }
  });
});
