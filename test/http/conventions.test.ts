/**
 * HTTP conventions every route shares, checked on the app without a database (each refusal
 * happens before any SQL): 405 with Allow for a known path asked with another method, RFC 6750
 * bearer challenges on 401 and 403, unknown body keys named at their own path, and integer query
 * parameters that say so.
 */
import { describe, expect, it } from "vitest";
import { createApp } from "../../src/app.js";
import { createAuthenticator } from "../../src/http/auth.js";
import { mintToken } from "../../src/http/tokens.js";
import { Registry } from "../../src/registry/registry.js";
import { TEST_SECRET } from "../support/http.js";

// No control connection: publications are refused with 403 by the registry, not by the token.
const registry = new Registry({ data: { query: () => Promise.reject(new Error("no database in this test")) } });
const app = createApp({ registry, authenticator: createAuthenticator({ hs256Secret: TEST_SECRET }), metrics: {} });

const token = (scopes: string[], claims: { tenantId?: string; ttlSeconds?: number } = {}) => mintToken(TEST_SECRET, { subject: "t", scopes, ...claims });
const gateway = () => token(["catalog:read", "routes:write", "routes:read"], { tenantId: "tenant-a" });

async function call(method: string, path: string, { bearer, body }: { bearer?: string; body?: unknown } = {}) {
  const response = await app.request(path, {
    method,
    headers: { ...(bearer ? { authorization: `Bearer ${bearer}` } : {}), ...(body !== undefined ? { "content-type": "application/json" } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await response.text();
  return { status: response.status, headers: response.headers, body: text ? (JSON.parse(text) as Record<string, unknown>) : {} };
}

describe("a known path with another method", () => {
  it.each([
    ["DELETE", "/v1/routes/act_1", "GET, HEAD, PUT"],
    ["PATCH", "/v1/routes/act_1/settlement", "POST"],
    ["GET", "/v1/replicas/crepl_1/heartbeat", "POST"],
    ["PUT", "/v1/catalog/capabilities", "GET, HEAD"],
    ["POST", "/v1/admin/connector-types/ctype_1", "GET, HEAD"],
    ["GET", "/v1/admin/publications", "POST"],
    ["POST", "/healthz", "GET, HEAD"],
    ["DELETE", "/openapi.json", "GET, HEAD"],
    ["POST", "/docs", "GET, HEAD"],
    ["PUT", "/metrics", "GET, HEAD"],
  ])("%s %s is 405 with Allow: %s", async (method, path, allow) => {
    const response = await call(method, path, {
      bearer: await token(["registry:admin", "fleet:read", "routes:write", "replicas:write", "catalog:read"], { tenantId: "tenant-a" }),
    });
    expect(response.status).toBe(405);
    expect(response.headers.get("allow")).toBe(allow);
    expect(response.headers.get("content-type")).toMatch(/^application\/problem\+json/);
    expect(response.body).toMatchObject({ status: 405, code: "method-not-allowed", title: "Method not allowed" });
    expect(response.body.detail).toBe(`${method} is not allowed on ${path}; it serves ${allow}`);
  });

  it("is still 404 for a path nothing serves", async () => {
    for (const path of ["/v1/routes", "/v1/routes/act_1/other", "/v1/nothing", "/nothing"]) {
      const response = await call("GET", path, { bearer: await gateway() });
      expect({ path, status: response.status, allow: response.headers.get("allow") }).toEqual({ path, status: 404, allow: null });
    }
  });

  it("asks for a token first under /v1 (authentication runs before routing)", async () => {
    const response = await call("DELETE", "/v1/routes/act_1");
    expect(response.status).toBe(401);
  });
});

describe("bearer challenges (RFC 6750)", () => {
  it("401 without a token: a challenge without an error code", async () => {
    const response = await call("GET", "/v1/catalog/capabilities");
    expect(response.status).toBe(401);
    expect(response.headers.get("www-authenticate")).toBe('Bearer realm="aip-registry"');
  });

  it.each([
    ["a malformed token", async () => "not.a.token"],
    ["a token signed with another secret", () => mintToken("another-secret-another-secret-0123456789", { subject: "t", scopes: ["catalog:read"] })],
    ["an expired token", () => token(["catalog:read"], { ttlSeconds: -60 })],
  ])('401 for %s: error="invalid_token" with a description', async (_, make) => {
    const response = await call("GET", "/v1/catalog/capabilities", { bearer: await make() });
    expect(response.status).toBe(401);
    const challenge = response.headers.get("www-authenticate") ?? "";
    expect(challenge).toMatch(/^Bearer realm="aip-registry", error="invalid_token", error_description="invalid bearer token: [\x20\x21\x23-\x5b\x5d-\x7e]+"$/);
  });

  it('403 for a missing scope: error="insufficient_scope" naming the scope that would do', async () => {
    const response = await call("PUT", "/v1/routes/act_1", {
      bearer: await token(["catalog:read"], { tenantId: "tenant-a" }),
      body: { capability_id: "cap:x" },
    });
    expect(response.status).toBe(403);
    expect(response.headers.get("www-authenticate")).toBe(
      'Bearer realm="aip-registry", error="insufficient_scope", error_description="this operation needs the routes:write scope", scope="routes:write"',
    );
    const either = await call("GET", "/v1/fleet/status", { bearer: await token(["catalog:read"]) });
    expect(either.headers.get("www-authenticate")).toContain(
      'error="insufficient_scope", error_description="this operation needs the fleet:read or registry:admin scope", scope="fleet:read"',
    );
  });

  it("403 for a token without the tenant routing needs: insufficient_scope", async () => {
    const response = await call("PUT", "/v1/routes/act_1", { bearer: await token(["routes:write"]), body: { capability_id: "cap:x" } });
    expect(response.status).toBe(403);
    expect(response.headers.get("www-authenticate")).toMatch(
      /^Bearer realm="aip-registry", error="insufficient_scope", error_description="the token carries no tenant_id/,
    );
  });

  it("403 for a host token without its peer principal: insufficient_scope", async () => {
    const response = await call("POST", "/v1/replicas/crepl_1/heartbeat", {
      bearer: await token(["replicas:write"]),
      body: { request_id: "msg_1", previous_sequence: 1 },
    });
    expect(response.status).toBe(403);
    expect(response.headers.get("www-authenticate")).toMatch(
      /error="insufficient_scope", error_description="a connector-host token must carry peer_principal_id/,
    );
  });

  it("no challenge on a 403 that is not about the token (a data-plane-only process asked for the control plane)", async () => {
    const response = await call("GET", "/v1/admin/connector-types/ctype_1", { bearer: await token(["registry:admin"]) });
    expect(response.status).toBe(403);
    expect(response.headers.get("www-authenticate")).toBeNull();
  });
});

describe("validation errors name each field", () => {
  it("reports an unknown key at its own path", async () => {
    const response = await call("PUT", "/v1/routes/act_1", {
      bearer: await gateway(),
      body: { capability_id: "cap:x", topology: { region: "eu-west", regoin: "eu" } },
    });
    expect(response.status).toBe(400);
    expect(response.body.errors).toEqual([{ field: "topology.regoin", message: "is not a known field" }]);
    expect(response.body.detail).toBe("request validation failed: topology.regoin: is not a known field");
  });

  it("reports several unknown keys one by one, beside other errors", async () => {
    const response = await call("PUT", "/v1/routes/act_1", { bearer: await gateway(), body: { capability_id: 7, extra: 1, another: 2 } });
    expect(response.status).toBe(400);
    expect(response.body.errors).toEqual(
      expect.arrayContaining([
        { field: "extra", message: "is not a known field" },
        { field: "another", message: "is not a known field" },
        expect.objectContaining({ field: "capability_id" }),
      ]),
    );
  });

  it.each([
    ["/v1/catalog/capabilities?limit=abc", "limit"],
    ["/v1/catalog/capabilities?limit=1.5", "limit"],
    ["/v1/catalog/capabilities?max_bytes=lots", "max_bytes"],
    ["/v1/admin/bindings?tenant_id=tenant-a&limit=ten", "limit"],
    ["/v1/fleet/lease-expiry?limit=NaN", "limit"],
  ])("%s: %s must be an integer", async (path, field) => {
    const method = path.startsWith("/v1/fleet/lease-expiry") ? "POST" : "GET";
    const response = await call(method, path, { bearer: await token(["catalog:read", "registry:admin"], { tenantId: "tenant-a" }) });
    expect(response.status).toBe(400);
    expect(response.body.errors).toEqual([{ field, message: "must be an integer" }]);
  });
});
