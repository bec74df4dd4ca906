/**
 * Structured access logs: one JSON object per request with request ID, route template, status,
 * latency and problem code, and nothing from headers, paths, queries or bodies: no bearer
 * tokens, no credential or secret references, no action identifiers.
 */
import { beforeAll, expect, it } from "vitest";
import { createApp, type AccessLogEntry } from "../../src/app.js";
import { MemoryCatalogCache } from "../../src/catalog/cache.js";
import { createAuthenticator } from "../../src/http/auth.js";
import { jsonLines } from "../../src/observability/access-log.js";
import { useTestDatabase } from "../support/database.js";
import { binding, publishSimpleFleet } from "../../fixtures/records.js";
import { createTestApi, TEST_SECRET, type TestApi } from "../support/http.js";

const db = useTestDatabase();
let api: TestApi;
const entries: AccessLogEntry[] = [];
let app: ReturnType<typeof createApp>;

beforeAll(async () => {
  api = createTestApi(db.registry);
  app = createApp({ registry: db.registry, authenticator: createAuthenticator({ hs256Secret: TEST_SECRET }), log: (entry) => entries.push(entry) });
  await publishSimpleFleet(db.registry, { prefix: "log" });
});

it("logs request ID, route template, status, latency, tenant and problem code, and never a credential", async () => {
  const tenantToken = await api.tenantToken("tenant-a");
  const adminToken = await api.adminToken();
  const secretRef = "vault://tenants/tenant-a/very-secret-path";
  const credentialRef = "credential-revision-super-secret";
  const send = (method: string, path: string, token: string | undefined, body?: unknown, headers: Record<string, string> = {}) =>
    app.request(path, {
      method,
      headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...(body ? { "content-type": "application/json" } : {}), ...headers },
      ...(body ? { body: JSON.stringify(body) } : {}),
    });

  const created = await send(
    "PUT",
    "/v1/routes/act_log_secretive_1",
    tenantToken,
    { capability_id: "cap:log.search" },
    { "x-request-id": "req-from-gateway-1" },
  );
  expect(created.status).toBe(201);
  const assignment = (await created.json()) as Record<string, unknown>;
  await send("POST", "/v1/routes/act_log_secretive_1/settlement", tenantToken, {
    assignment: { ...assignment, credential_revision_ref: credentialRef },
    outcome: "completed",
  });
  await send("POST", "/v1/admin/publications", adminToken, {
    changes: [binding("tenant-a", "cap:log.search", "cinst_log_tenant-a", { policy_revision: 2, credential_revision_ref: credentialRef })],
  });
  await send("GET", `/v1/admin/bindings?tenant_id=tenant-a&cursor=${encodeURIComponent(secretRef)}`, adminToken);
  await send("GET", "/v1/fleet/status", "not-a-valid-token");
  await send("GET", "/nowhere", undefined);

  expect(entries).toHaveLength(6);
  const [resolve, settle, publish, bindings, badToken, notFound] = entries;
  expect(resolve).toEqual({
    request_id: "req-from-gateway-1",
    trace_id: expect.stringMatching(/^[0-9a-f]{32}$/),
    span_id: expect.stringMatching(/^[0-9a-f]{16}$/),
    method: "PUT",
    route: "/v1/routes/:action_id",
    status: 201,
    latency_ms: expect.any(Number),
    tenant_id: "tenant-a",
  });
  expect(created.headers.get("x-request-id")).toBe("req-from-gateway-1");
  expect(settle).toMatchObject({ route: "/v1/routes/:action_id/settlement", status: 409, code: "fence-lost", tenant_id: "tenant-a" });
  expect(publish).toMatchObject({ route: "/v1/admin/publications", status: 200 });
  expect(publish).not.toHaveProperty("tenant_id");
  expect(bindings).toMatchObject({ route: "/v1/admin/bindings", status: 400, code: "invalid" });
  expect(badToken).toMatchObject({ route: "/v1/fleet/status", status: 401, code: "unauthorized" });
  expect(notFound).toMatchObject({ route: "unmatched", status: 404, code: "not-found" });
  for (const entry of entries) {
    expect(entry.request_id).toMatch(/\S/);
    expect(entry.latency_ms).toBeGreaterThanOrEqual(0);
  }
  // Each request without a traceparent starts a trace of its own.
  expect(new Set(entries.map((e) => e.trace_id)).size).toBe(entries.length);

  const logged = entries.map((e) => JSON.stringify(e)).join("\n");
  for (const secret of [tenantToken, adminToken, "not-a-valid-token", secretRef, credentialRef, "very-secret", "act_log_secretive", "Bearer"]) {
    expect(logged).not.toContain(secret);
  }
});

it("says how a catalog answer was produced (the Worker's count of cache outcomes), and nothing of the kind elsewhere", async () => {
  const logged: AccessLogEntry[] = [];
  const cached = createApp({
    registry: db.registry,
    authenticator: createAuthenticator({ hs256Secret: TEST_SECRET }),
    catalog: { cache: new MemoryCatalogCache(1024 * 1024) },
    log: (entry) => logged.push(entry),
  });
  const token = await api.tenantToken("tenant-a");
  for (const path of ["/v1/catalog/capabilities", "/v1/catalog/capabilities", "/v1/catalog/capabilities/cap%3Alog.search", "/healthz"]) {
    await cached.request(path, { headers: { authorization: `Bearer ${token}` } });
  }
  expect(logged.map((e) => [e.route, e.catalog_cache])).toEqual([
    ["/v1/catalog/capabilities", "miss"],
    ["/v1/catalog/capabilities", "revalidated"],
    ["/v1/catalog/capabilities/:capability_id", "miss"],
    ["/healthz", undefined],
  ]);
});

it("writes JSON lines with time and level (error for 5xx)", () => {
  const lines: string[] = [];
  const sink = jsonLines((line) => lines.push(line));
  sink({ request_id: "r1", method: "GET", route: "/readyz", status: 503, latency_ms: 1.5, code: "storage" });
  sink({ request_id: "r2", method: "GET", route: "/healthz", status: 200, latency_ms: 0.2 });
  const [failed, ok] = lines.map((line) => JSON.parse(line));
  expect(failed).toMatchObject({ level: "error", msg: "request", request_id: "r1", status: 503, code: "storage" });
  expect(ok).toMatchObject({ level: "info", msg: "request", route: "/healthz" });
  expect(new Date(ok.time).toISOString()).toBe(ok.time);
});

it("serves the request even when the log sink throws", async () => {
  const broken = createApp({
    registry: db.registry,
    authenticator: createAuthenticator({ hs256Secret: TEST_SECRET }),
    log: () => {
      throw new Error("disk full");
    },
  });
  const response = await broken.request("/healthz");
  expect(response.status).toBe(200);
});
