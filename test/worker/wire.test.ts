/**
 * One statement per API call, on the wire: the local Neon proxy counts what the Worker sends it
 * (POST /sql requests and their statements on the HTTP path; WebSocket connections and their
 * Query/Parse messages on the WebSocket path) around every API operation.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { conformancePrefix } from "../conformance/index.js";
import { Api, type ApiResponse, lifecycleRequestId, publishFleet, smallFleet, type SmallFleet } from "../conformance/target.js";
import { connectorType } from "../../fixtures/records.js";
import { TRANSPORTS, proxyStats, workerEnv, workerTarget, type ProxyStats, type Transport } from "./support.js";

interface Traffic {
  sqlRequests: number;
  sqlStatements: number;
  socketsOpened: number;
  socketStatements: number;
}

function traffic(before: ProxyStats, after: ProxyStats): Traffic {
  return {
    sqlRequests: after.http.requests - before.http.requests,
    sqlStatements: after.http.statements - before.http.statements,
    socketsOpened: after.ws.opened - before.ws.opened,
    socketStatements: after.ws.queries + after.ws.parses - (before.ws.queries + before.ws.parses),
  };
}

/** What one SQL statement looks like on each transport. */
const ONE_STATEMENT: Record<Transport, Traffic> = {
  http: { sqlRequests: 1, sqlStatements: 1, socketsOpened: 0, socketStatements: 0 },
  websocket: { sqlRequests: 0, sqlStatements: 0, socketsOpened: 1, socketStatements: 1 },
};
const NO_STATEMENT: Traffic = { sqlRequests: 0, sqlStatements: 0, socketsOpened: 0, socketStatements: 0 };

for (const transport of TRANSPORTS) {
  describe(`Neon ${transport} transport: statements per API call`, () => {
    const api = new Api(workerTarget(workerEnv({ NEON_TRANSPORT: transport }), conformancePrefix(transport === "http" ? "sh" : "sw")));
    const p = api.prefix;
    let fleet: SmallFleet;
    let tenant: string;
    let replicaId: string;
    let sequence: number;
    let assignment: Record<string, unknown>;
    /** What the replica's host states at register, read before any measurement. */
    let evidence: Record<string, unknown>;
    const tokens: Record<string, string> = {};

    /** Runs `call` and returns its response and the traffic it caused at the proxy. */
    async function measure(call: () => Promise<ApiResponse>): Promise<{ response: ApiResponse; traffic: Traffic }> {
      const before = await proxyStats();
      const response = await call();
      return { response, traffic: traffic(before, await proxyStats()) };
    }

    beforeAll(async () => {
      tenant = `${p}-tenant`;
      fleet = await smallFleet(p, { tenants: [tenant], policy: { max_tenant_in_flight: 100 } });
      const published = await publishFleet(api, fleet);
      replicaId = fleet.replicas[tenant] as string;
      sequence = published.sequences[replicaId] as number;
      evidence = await api.registration(replicaId);
      tokens.admin = await api.admin();
      tokens.host = await api.host(replicaId);
      tokens.tenant = await api.tenant(tenant);
      tokens.reader = await api.fleetReader();
      // The isolate's schema check (once per configuration) is behind us.
      expect((await api.call("GET", "/readyz")).status).toBe(200);
    });

    const admin = (path: string) => () => api.call("GET", path, { token: tokens.admin });
    const operations: [string, () => () => Promise<ApiResponse>, number][] = [
      ["GET /readyz", () => () => api.call("GET", "/readyz"), 200],
      [
        "POST /v1/admin/publications",
        () => () => api.call("POST", "/v1/admin/publications", { token: tokens.admin, body: { changes: [connectorType(`ctype_${p}_wire`)] } }),
        200,
      ],
      [
        "POST /v1/admin/publications (refused: conflict)",
        () => () => api.call("POST", "/v1/admin/publications", { token: tokens.admin, body: { changes: [connectorType(`ctype_${p}_wire`, "org:other")] } }),
        409,
      ],
      ["GET /v1/admin/connector-types/{id}", () => admin(`/v1/admin/connector-types/${fleet.typeId}`), 200],
      ["GET /v1/admin/versions/{id}", () => admin(`/v1/admin/versions/${fleet.versionId}`), 200],
      ["GET /v1/admin/instances/{id}", () => admin(`/v1/admin/instances/${fleet.instances[tenant]}`), 200],
      ["GET /v1/admin/replicas/{id}", () => admin(`/v1/admin/replicas/${replicaId}`), 200],
      ["GET /v1/admin/admission-policies/{id}", () => admin(`/v1/admin/admission-policies/${encodeURIComponent(fleet.policyRef as string)}`), 200],
      ["GET /v1/admin/bindings", () => admin(`/v1/admin/bindings?tenant_id=${tenant}`), 200],
      ["GET /v1/admin/catalog/capabilities", () => admin(`/v1/admin/catalog/capabilities?tenant_id=${tenant}`), 200],
      ["GET /v1/admin/invariants", () => admin("/v1/admin/invariants"), 200],
      ["GET /v1/catalog/capabilities", () => () => api.call("GET", "/v1/catalog/capabilities", { token: tokens.tenant }), 200],
      [
        "GET /v1/catalog/capabilities/{id}",
        () => () => api.call("GET", `/v1/catalog/capabilities/${encodeURIComponent(fleet.capabilities[0] as string)}`, { token: tokens.tenant }),
        200,
      ],
      [
        "PUT /v1/routes/{id} (created)",
        () => () => api.call("PUT", `/v1/routes/act_${p}_1`, { token: tokens.tenant, body: { capability_id: fleet.capabilities[0] } }),
        201,
      ],
      [
        "PUT /v1/routes/{id} (existing)",
        () => () => api.call("PUT", `/v1/routes/act_${p}_1`, { token: tokens.tenant, body: { capability_id: fleet.capabilities[0] } }),
        200,
      ],
      [
        "PUT /v1/routes/{id} (refused: binding-unavailable)",
        () => () => api.call("PUT", `/v1/routes/act_${p}_2`, { token: tokens.tenant, body: { capability_id: `cap:${p}.none` } }),
        404,
      ],
      ["GET /v1/routes/{id}", () => () => api.call("GET", `/v1/routes/act_${p}_1`, { token: tokens.tenant }), 200],
      [
        "POST /v1/routes/{id}/settlement",
        () => () => api.call("POST", `/v1/routes/act_${p}_1/settlement`, { token: tokens.tenant, body: { assignment, outcome: "completed" } }),
        200,
      ],
      [
        "POST /v1/routes/{id}/settlement (repeat)",
        () => () => api.call("POST", `/v1/routes/act_${p}_1/settlement`, { token: tokens.tenant, body: { assignment, outcome: "completed" } }),
        200,
      ],
      [
        "PUT /v1/routes/{id} (reacquired)",
        () => () => api.call("PUT", `/v1/routes/act_${p}_1`, { token: tokens.tenant, body: { capability_id: fleet.capabilities[0] } }),
        200,
      ],
      [
        "POST /v1/replicas/{id}/heartbeat",
        () => () =>
          api.call("POST", `/v1/replicas/${replicaId}/heartbeat`, {
            token: tokens.host,
            body: { request_id: lifecycleRequestId(p), previous_sequence: sequence },
          }),
        200,
      ],
      [
        "POST /v1/replicas/{id}/drain",
        () => () =>
          api.call("POST", `/v1/replicas/${replicaId}/drain`, { token: tokens.host, body: { request_id: lifecycleRequestId(p), previous_sequence: sequence } }),
        200,
      ],
      [
        "POST /v1/replicas/{id}/offline",
        () => () =>
          api.call("POST", `/v1/replicas/${replicaId}/offline`, {
            token: tokens.host,
            body: { request_id: lifecycleRequestId(p), previous_sequence: sequence },
          }),
        200,
      ],
      [
        "POST /v1/replicas/{id}/register",
        () => () => api.call("POST", `/v1/replicas/${replicaId}/register`, { token: tokens.host, body: { request_id: lifecycleRequestId(p), ...evidence } }),
        200,
      ],
      ["GET /v1/fleet/status", () => () => api.call("GET", "/v1/fleet/status", { token: tokens.reader }), 200],
      ["POST /v1/fleet/lease-expiry", () => () => api.call("POST", "/v1/fleet/lease-expiry?limit=10", { token: tokens.admin }), 200],
      ["POST /v1/fleet/route-retention", () => () => api.call("POST", "/v1/fleet/route-retention?limit=10", { token: tokens.admin }), 200],
      ["GET /v1/admin/routes", () => admin(`/v1/admin/routes?settled_before=${encodeURIComponent(new Date().toISOString())}&limit=10`), 200],
      [
        "POST /v1/admin/route-exports",
        () => () =>
          api.call("POST", "/v1/admin/route-exports", { token: tokens.admin, body: { settled_before: new Date(Date.now() - 86_400_000).toISOString() } }),
        200,
      ],
    ];

    it("every database-backed operation is exactly one statement", async () => {
      const seen: Record<string, Traffic> = {};
      for (const [name, make, status] of operations) {
        const { response, traffic } = await measure(make());
        expect(response.status, `${name}: ${JSON.stringify(response.body)}`).toBe(status);
        seen[name] = traffic;
        // Carry what later operations need: the pinned route, the replica's sequence.
        if (name.startsWith("PUT /v1/routes/{id} (created)")) assignment = response.body;
        if (name.startsWith("POST /v1/replicas")) sequence = response.body.sequence;
      }
      expect(seen).toEqual(Object.fromEntries(operations.map(([name]) => [name, ONE_STATEMENT[transport]])));
    });

    it("refusals decided before the database send nothing", async () => {
      const calls: [string, () => Promise<ApiResponse>][] = [
        ["GET /healthz", () => api.call("GET", "/healthz")],
        ["GET /openapi.json", () => api.call("GET", "/openapi.json")],
        ["no token", () => api.call("GET", "/v1/catalog/capabilities")],
        ["missing scope", () => api.call("GET", "/v1/fleet/status", { token: tokens.tenant })],
        ["invalid body", () => api.call("PUT", `/v1/routes/act_${p}_9`, { token: tokens.tenant, body: { capability: "x" } })],
      ];
      for (const [name, call] of calls) {
        const { traffic } = await measure(call);
        expect({ name, traffic }).toEqual({ name, traffic: NO_STATEMENT });
      }
    });
  });
}
