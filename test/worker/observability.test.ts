/**
 * The Worker's observability, inside workerd:
 * - a caller's traceparent names its statements in the SQL the Neon driver sends (the local
 *   proxy's log), on both transports;
 * - with the standard OTEL_* bindings the OpenTelemetry packages run on workerd and export the
 *   same spans as on Node to a local OTLP/HTTP receiver (test/global-setup.ts), in JSON and in
 *   protobuf, after the response (waitUntil); without them nothing is exported;
 * - the ActivityHistory Durable Object keeps what every isolate served (GET /v1/fleet/activity),
 *   as the published OpenAPI document says;
 * - an Analytics Engine dataset bound as AIP_ANALYTICS gets one data point per request.
 */
import { beforeAll, describe, expect, inject, it } from "vitest";
import { conformancePrefix } from "../conformance/index.js";
import { Api, publishFleet, smallFleet, type SmallFleet } from "../conformance/target.js";
import { TRANSPORTS, registryStatements, resetProxyStats, workerEnv, workerTarget } from "./support.js";

const TRACE = "0af7651916cd43dd8448eb211c80319c";
const CALLER_SPAN = "b7ad6b7169203331";
const TRACEPARENT = `00-${TRACE}-${CALLER_SPAN}-01`;
const origin = inject("otlpOrigin");

interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
  attributes: Record<string, unknown>;
  resource: Record<string, unknown>;
}

async function received(collection: string): Promise<{ contentType: string; spans: ReceivedSpan[] }[]> {
  return (await (await fetch(`${origin}/__spans/${collection}`)).json()) as { contentType: string; spans: ReceivedSpan[] }[];
}

const baseApi = new Api(workerTarget(workerEnv(), conformancePrefix("obs")));
let fleet: SmallFleet;
let tenant: string;

beforeAll(async () => {
  fleet = await smallFleet(baseApi.prefix, { capacity: 50 });
  tenant = fleet.tenants[0] as string;
  await publishFleet(baseApi, fleet);
});

const resolveWith = async (api: Api, action: string, headers: Record<string, string> = {}) =>
  api.call("PUT", `/v1/routes/${action}`, { token: await api.tenant(tenant), body: { capability_id: fleet.capabilities[0] }, headers });

describe("trace context in SQL", () => {
  for (const transport of TRANSPORTS) {
    it(`names the caller's trace in the statements the Worker sends (${transport})`, async () => {
      const api = new Api(workerTarget(workerEnv({ NEON_TRANSPORT: transport }), baseApi.prefix));
      await resetProxyStats();
      const answer = await resolveWith(api, `act_${api.prefix}_sql_${transport}`, { traceparent: TRACEPARENT });
      expect(answer.status).toBe(201);
      const resolves = (await registryStatements()).filter((s) => s.text.includes("aip_resolve_route("));
      expect(resolves).toHaveLength(1);
      expect(resolves[0]?.text).toMatch(new RegExp(`/\\*traceparent='00-${TRACE}-[0-9a-f]{16}-01'\\*/$`));
    });
  }
});

describe("OpenTelemetry on workerd", () => {
  for (const protocol of ["http/json", "http/protobuf"] as const) {
    it(`exports a server span and a statement span of the caller's trace over OTLP ${protocol}`, async () => {
      const collection = `workerd-${protocol.replace("/", "-")}`;
      const api = new Api(
        workerTarget(
          workerEnv({
            OTEL_EXPORTER_OTLP_ENDPOINT: `${origin}/${collection}`,
            OTEL_EXPORTER_OTLP_PROTOCOL: protocol,
            OTEL_SERVICE_NAME: "registry-worker",
          }),
          baseApi.prefix,
        ),
      );
      const answer = await resolveWith(api, `act_${api.prefix}_${collection}`, { traceparent: TRACEPARENT });
      expect(answer.status).toBe(201);
      // callWorker waited for waitUntil: the flush after the response has been answered.
      const exports = await received(collection);
      expect(new Set(exports.map((e) => e.contentType))).toEqual(new Set([protocol === "http/json" ? "application/json" : "application/x-protobuf"]));
      const spans = exports.flatMap((e) => e.spans).filter((s) => s.traceId === TRACE);
      const server = spans.find((s) => s.kind === 2);
      expect(server).toMatchObject({
        name: "PUT /v1/routes/:action_id",
        parentSpanId: CALLER_SPAN,
        attributes: {
          "http.request.method": "PUT",
          "http.route": "/v1/routes/:action_id",
          "http.response.status_code": 201,
          "url.path": `/v1/routes/act_${api.prefix}_${collection}`,
          "aip.tenant.id": tenant,
          "aip.route.outcome": "created",
        },
        resource: { "service.name": "registry-worker", "service.version": expect.any(String) },
      });
      const statement = spans.find((s) => s.kind === 3 && s.name === "aip_resolve_route");
      expect(statement).toMatchObject({
        parentSpanId: server?.spanId,
        attributes: { "db.system.name": "postgresql", "db.system": "postgresql", "db.operation.name": "aip_resolve_route" },
      });
    });
  }

  it("exports nothing without the OTEL_* bindings", async () => {
    const before = await received("default");
    expect((await resolveWith(baseApi, `act_${baseApi.prefix}_plain`, { traceparent: TRACEPARENT })).status).toBe(201);
    expect(await received("default")).toEqual(before);
  });
});

describe("activity history (Durable Object) and Analytics Engine", () => {
  it("reports what the deployment served, per minute and for one tenant", async () => {
    const api = new Api(workerTarget(workerEnv(), baseApi.prefix));
    for (let i = 0; i < 3; i++) expect((await resolveWith(api, `act_${api.prefix}_activity_${i}`)).status).toBe(201);
    const refused = await api.call("PUT", `/v1/routes/act_${api.prefix}_activity_refused`, {
      token: await api.tenant(tenant),
      body: { capability_id: "cap:obs.not-bound" },
    });
    expect(refused.status).toBe(404);
    const report = await api.call("GET", `/v1/fleet/activity?minutes=15&tenant_id=${encodeURIComponent(tenant)}`, { token: await api.fleetReader() });
    expect(report.status).toBe(200);
    expect(report.body).toMatchObject({ scope: "deployment", tenant_id: tenant, build: { runtime: "workers", schema_version: expect.any(Number) } });
    expect(report.body.series).toHaveLength(15);
    expect(report.body.totals.outcomes.resolve.created).toBeGreaterThanOrEqual(3);
    expect(report.body.totals.refusals["binding-unavailable"]).toBeGreaterThanOrEqual(1);
    const all = await api.call("GET", "/v1/fleet/activity", { token: await api.fleetReader() });
    expect(all.body.tenants.map((t: { tenant_id: string }) => t.tenant_id)).toContain(tenant);
    expect((await api.call("GET", "/v1/fleet/activity", { token: await api.tenant(tenant) })).status).toBe(403);
  });

  it("writes one Analytics Engine data point per request when AIP_ANALYTICS is bound", async () => {
    const points: { indexes?: string[]; blobs?: string[]; doubles?: number[] }[] = [];
    const dataset = { writeDataPoint: (point: (typeof points)[number]) => void points.push(point) };
    const api = new Api(workerTarget({ ...workerEnv(), AIP_ANALYTICS: dataset } as ReturnType<typeof workerEnv>, baseApi.prefix));
    expect((await resolveWith(api, `act_${api.prefix}_analytics`)).status).toBe(201);
    // Api.call also reads /openapi.json (to check the answer against it): a point of its own.
    expect(points.map((p) => p.blobs?.[2])).toContain("/openapi.json");
    expect(points.find((p) => p.blobs?.[0] === "resolve")).toEqual({
      indexes: [tenant],
      blobs: ["resolve", "created", "/v1/routes/:action_id", "PUT", "201", tenant],
      doubles: [expect.any(Number), 201, 0],
    });
  });
});
