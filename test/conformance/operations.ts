/**
 * Operations endpoints and the cross-cutting HTTP contract: request ids, auth, problem+json for
 * every refusal (unknown route, malformed JSON, oversize body).
 */
import { describe, expect, it } from "vitest";
import { type Api, expectProblem } from "./target.js";

/** Every path of design.md section 6 (OpenAPI path syntax). */
const API_PATHS = [
  "/healthz",
  "/readyz",
  "/v1/catalog/capabilities",
  "/v1/catalog/capabilities/{capability_id}",
  "/v1/routes/{action_id}",
  "/v1/routes/{action_id}/settlement",
  "/v1/replicas/{replica_id}/{operation}",
  "/v1/admin/publications",
  "/v1/admin/{kind}/{id}",
  "/v1/admin/bindings",
  "/v1/admin/catalog/capabilities",
  "/v1/admin/invariants",
  "/v1/fleet/status",
  "/v1/fleet/lease-expiry",
];

export function operationsConformance(api: Api): void {
  describe("operations", () => {
    it("GET /healthz is alive without a database round trip or a token", async () => {
      const response = await api.call("GET", "/healthz");
      expect(response.status).toBe(200);
      expect(response.body).toEqual({ status: "ok" });
      expect(response.headers.get("x-request-id")).toBeTruthy();
    });

    it("GET /readyz reports the verified schema and the catalog revision", async () => {
      const response = await api.call("GET", "/readyz");
      expect(response.status).toBe(200);
      expect(response.body).toMatchObject({
        status: "ready",
        schema_version: expect.any(Number),
        functions_checksum: expect.any(String),
        catalog_revision: expect.any(Number),
        tables_intact: true,
      });
    });

    it("GET /openapi.json documents every route of the API", async () => {
      const response = await api.call("GET", "/openapi.json");
      expect(response.status).toBe(200);
      expect(response.body.openapi).toBe("3.1.0");
      expect(Object.keys(response.body.paths)).toEqual(expect.arrayContaining(API_PATHS));
    });

    it("echoes a caller's X-Request-Id", async () => {
      const response = await api.call("GET", "/healthz", { headers: { "x-request-id": `${api.prefix}-trace-1` } });
      expect(response.headers.get("x-request-id")).toBe(`${api.prefix}-trace-1`);
    });
  });

  describe("auth and refusals", () => {
    it("401 unauthorized without a bearer token, with a challenge", async () => {
      const response = await api.call("GET", "/v1/catalog/capabilities");
      expectProblem(response, 401, "unauthorized");
      expect(response.headers.get("www-authenticate")).toMatch(/^Bearer/);
    });

    it("401 unauthorized for a token signed with another key, with an invalid_token challenge", async () => {
      const token = await api.tenant(`${api.prefix}-tenant-x`);
      const [header, payload] = token.split(".");
      const forged = `${header}.${payload}.${"A".repeat(43)}`;
      const response = await api.call("GET", "/v1/catalog/capabilities", { token: forged });
      expectProblem(response, 401, "unauthorized");
      expect(response.headers.get("www-authenticate")).toMatch(
        /^Bearer realm="aip-registry", error="invalid_token", error_description="invalid bearer token: /,
      );
    });

    it("403 forbidden when the token lacks the scope, with an insufficient_scope challenge", async () => {
      const tenantToken = await api.tenant(`${api.prefix}-tenant-x`);
      const publication = await api.call("POST", "/v1/admin/publications", { token: tenantToken, body: { changes: [] } });
      expectProblem(publication, 403, "forbidden");
      expect(publication.headers.get("www-authenticate")).toMatch(/error="insufficient_scope", .*scope="registry:admin"$/);
      expectProblem(await api.call("GET", "/v1/fleet/status", { token: tenantToken }), 403, "forbidden");
      const catalogOnly = await api.tenant(`${api.prefix}-tenant-x`, ["catalog:read"]);
      expectProblem(await api.call("PUT", "/v1/routes/act_x", { token: catalogOnly, body: { capability_id: "cap:x" } }), 403, "forbidden");
    });

    it("404 not-found problem for an unknown route", async () => {
      expectProblem(await api.call("GET", "/v1/nothing-here", { token: await api.admin() }), 404, "not-found");
    });

    it("405 method-not-allowed with Allow for a known path asked with another method", async () => {
      const response = await api.call("DELETE", "/v1/routes/act_x", { token: await api.tenant(`${api.prefix}-tenant-x`) });
      expectProblem(response, 405, "method-not-allowed");
      expect(response.headers.get("allow")).toBe("GET, HEAD, PUT");
      const health = await api.call("POST", "/healthz");
      expectProblem(health, 405, "method-not-allowed");
      expect(health.headers.get("allow")).toBe("GET, HEAD");
    });

    it("400 invalid for malformed JSON and for fields the schema does not know, each at its own path", async () => {
      const token = await api.tenant(`${api.prefix}-tenant-x`);
      expectProblem(await api.call("PUT", "/v1/routes/act_x", { token, body: "{not json" }), 400, "invalid");
      const unknown = await api.call("PUT", "/v1/routes/act_x", {
        token,
        body: { capability_id: "cap:x", tenant_id: "someone-else", topology: { regoin: "eu" } },
      });
      expectProblem(unknown, 400, "invalid");
      expect(unknown.body.errors).toHaveLength(2);
      expect(unknown.body.errors).toEqual(
        expect.arrayContaining([
          { field: "tenant_id", message: "is not a known field" },
          { field: "topology.regoin", message: "is not a known field" },
        ]),
      );
    });

    it("400 invalid for a query integer that is not one", async () => {
      const response = await api.call("GET", "/v1/catalog/capabilities?limit=abc", { token: await api.tenant(`${api.prefix}-tenant-x`) });
      expectProblem(response, 400, "invalid");
      expect(response.body.errors).toEqual([{ field: "limit", message: "must be an integer" }]);
    });

    it("413 payload-too-large for a data-plane body over the limit", async () => {
      const token = await api.tenant(`${api.prefix}-tenant-x`);
      const body = JSON.stringify({ capability_id: "x".repeat(300 * 1024) });
      expectProblem(await api.call("PUT", "/v1/routes/act_x", { token, body }), 413, "payload-too-large");
    });
  });
}
