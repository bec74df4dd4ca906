/**
 * Trace context in, through and out, on real PostgreSQL:
 * - a caller's `traceparent` names the request in the access log and, in a sqlcommenter comment,
 *   in pg_stat_activity while its statement runs (a statement held behind a lock, as a slow one
 *   would be); one statement still; a request without one gets a trace of its own;
 * - with LOG_LEVEL=debug every statement is logged with the request's trace;
 * - the Node server, given only the standard OTEL_* variables and a local OTLP/HTTP receiver,
 *   exports spans of the caller's trace in both encodings (http/json, http/protobuf): the
 *   request's SERVER span with its semantic-convention attributes, problem code and tenant, and a
 *   CLIENT span per statement named by its SQL function; the sampler and service name are
 *   honoured; with no OTEL_* variables nothing is exported and no OpenTelemetry module is loaded.
 */
import { FUNCTION_SET } from "../../src/db/schema-version.js";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { createApp, type AccessLogEntry } from "../../src/app.js";
import { startServer, type RunningServer } from "../../src/entry/node.js";
import { createAuthenticator } from "../../src/http/auth.js";
import { mintToken } from "../../src/http/tokens.js";
import { log } from "../../src/telemetry/log.js";
import { publishSimpleFleet } from "../../fixtures/records.js";
import { useTestDatabase } from "../support/database.js";
import { TEST_SECRET } from "../support/http.js";
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from "../support/otlp-receiver.js";

vi.setConfig({ testTimeout: 60_000 });

const db = useTestDatabase();
const TRACE = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN = "00f067aa0ba902b7";
const TRACEPARENT = `00-${TRACE}-${CALLER_SPAN}-01`;
const ROOT = fileURLToPath(new URL("../../", import.meta.url));

let receiver: OtlpReceiver;
let tenantToken: string;

beforeAll(async () => {
  receiver = await startOtlpReceiver();
  await publishSimpleFleet(db.registry, { prefix: "trc", tenants: ["tenant-a"], capacity: 50 });
  tenantToken = await mintToken(TEST_SECRET, { subject: "gw", tenantId: "tenant-a", scopes: ["catalog:read", "routes:write", "routes:read"] });
});
afterAll(() => receiver?.close());

const resolve = (fetcher: (path: string, init: RequestInit) => Promise<Response>, action: string, headers: Record<string, string> = {}) =>
  fetcher(`/v1/routes/${action}`, {
    method: "PUT",
    headers: { authorization: `Bearer ${tenantToken}`, "content-type": "application/json", ...headers },
    body: JSON.stringify({ capability_id: "cap:trc.search" }),
  });

describe("trace context without OpenTelemetry", () => {
  const entries: AccessLogEntry[] = [];
  let app: ReturnType<typeof createApp>;
  beforeAll(() => {
    app = createApp({ registry: db.registry, authenticator: createAuthenticator({ hs256Secret: TEST_SECRET }), log: (entry) => entries.push(entry) });
  });
  const request = async (path: string, init: RequestInit) => app.request(path, init);

  it("names the caller's trace in the access log and in pg_stat_activity while the statement runs", async () => {
    // The owner holds the route table: the resolve's statement waits, visible, as a slow one would.
    const holder = await db.owner.connect();
    let answer: Promise<Response> | undefined;
    try {
      await holder.query("BEGIN");
      await holder.query("LOCK TABLE aip_route_assignments IN ACCESS EXCLUSIVE MODE");
      answer = resolve(request, "act_trc_held", { traceparent: TRACEPARENT });
      let query: string | undefined;
      for (const deadline = Date.now() + 10_000; !query && Date.now() < deadline; ) {
        const { rows } = await db.owner.query<{ query: string }>(
          "SELECT query FROM pg_stat_activity WHERE datname = current_database() AND state = 'active' AND query LIKE '%aip_resolve_route(%' AND pid <> pg_backend_pid()",
        );
        query = rows[0]?.query;
        if (!query) await new Promise((r) => setTimeout(r, 20));
      }
      expect(query).toMatch(new RegExp(`^SELECT ${FUNCTION_SET}\\.aip_resolve_route\\(.*\\) AS result /\\*traceparent='00-${TRACE}-[0-9a-f]{16}-01'\\*/$`));
      await holder.query("ROLLBACK");
      expect((await answer).status).toBe(201);
      const entry = entries.at(-1) as AccessLogEntry;
      expect(entry).toMatchObject({ route: "/v1/routes/:action_id", status: 201, trace_id: TRACE });
      // The comment carries the request's own span: the access line's span_id, not the caller's.
      expect(query).toContain(`00-${TRACE}-${entry.span_id}-01`);
      expect(entry.span_id).not.toBe(CALLER_SPAN);
    } finally {
      await holder.query("ROLLBACK").catch(() => {});
      holder.release();
      await answer?.catch(() => {});
    }
  });

  it("starts a trace for a request without one, or with a malformed one", async () => {
    const cases: Record<string, string>[] = [
      {},
      { traceparent: `00-${TRACE}-${CALLER_SPAN}-01-junk` },
      { traceparent: "00-00000000000000000000000000000000-00f067aa0ba902b7-01" },
    ];
    for (const headers of cases) {
      const before = entries.length;
      expect((await request("/healthz", { headers })).status).toBe(200);
      const entry = entries[before] as AccessLogEntry;
      expect(entry.trace_id).toMatch(/^[0-9a-f]{32}$/);
      expect(entry.trace_id).not.toBe(TRACE);
      expect(entry.trace_id).not.toBe("00000000000000000000000000000000");
    }
  });

  it("logs every statement with the request's trace at LOG_LEVEL=debug, and none at info", async () => {
    const lines: string[] = [];
    const spy = vi.spyOn(console, "log").mockImplementation((line: unknown) => void lines.push(String(line)));
    try {
      log.setLevel("debug");
      expect((await resolve(request, "act_trc_debug", { traceparent: TRACEPARENT })).status).toBe(201);
      log.setLevel("info");
      expect((await resolve(request, "act_trc_quiet", { traceparent: TRACEPARENT })).status).toBe(201);
    } finally {
      log.setLevel("info");
      spy.mockRestore();
    }
    const statements = lines.map((line) => JSON.parse(line)).filter((e) => e.msg === "statement");
    expect(statements).toEqual([
      {
        time: expect.any(String),
        level: "debug",
        msg: "statement",
        trace_id: TRACE,
        span_id: entries.at(-2)?.span_id,
        operation: "aip_resolve_route",
        duration_ms: expect.any(Number),
      },
    ]);
  });
});

/** Spans of TRACE the receiver got for collection `name`, waiting up to 10 s for `until`. */
async function spansOf(name: string, until: (spans: ReceivedSpan[]) => boolean): Promise<ReceivedSpan[]> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const spans = receiver.spans(name).filter((s) => s.traceId === TRACE);
    if (until(spans) || Date.now() > deadline) return spans;
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe("OpenTelemetry on the Node server", () => {
  const servers: RunningServer[] = [];
  afterAll(async () => {
    for (const server of servers) await server.close();
  });
  const start = async (env: Record<string, string>) => {
    const server = await startServer(
      {
        DATABASE_URL: db.dataUrl,
        CONTROL_DATABASE_URL: db.controlUrl,
        AUTH_HS256_SECRET: TEST_SECRET,
        PORT: "0",
        MIGRATE_ON_START: "false",
        LEASE_MAINTENANCE_INTERVAL_MS: "0",
        ACCESS_LOG: "false",
        ...env,
      },
      () => {},
    );
    servers.push(server);
    return server;
  };

  for (const protocol of ["http/json", "http/protobuf"] as const) {
    it(`exports the caller's trace over OTLP ${protocol}: a server span per request, a client span per statement`, async () => {
      const name = protocol.replace("/", "-");
      const server = await start({
        OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint(name),
        OTEL_EXPORTER_OTLP_PROTOCOL: protocol,
        OTEL_SERVICE_NAME: "registry-under-test",
        OTEL_BSP_SCHEDULE_DELAY: "100",
      });
      const fetcher = (path: string, init: RequestInit) => fetch(`${server.url}${path}`, init);
      const headers = { authorization: `Bearer ${tenantToken}`, traceparent: TRACEPARENT, tracestate: "vendor=opaque" };
      expect((await fetcher("/v1/catalog/capabilities", { headers })).status).toBe(200);
      expect((await resolve(fetcher, `act_trc_${name}`, { traceparent: TRACEPARENT })).status).toBe(201);
      const refused = await fetcher("/v1/routes/act_trc_unknown", {
        method: "PUT",
        headers: { ...headers, "content-type": "application/json" },
        body: JSON.stringify({ capability_id: "cap:trc.nothing" }),
      });
      expect(refused.status).toBe(404);

      const spans = await spansOf(name, (s) => s.filter((x) => x.kind === 2).length >= 3 && s.filter((x) => x.kind === 3).length >= 3);
      const contentTypes = new Set(receiver.exports(name).map((e) => e.contentType));
      expect(contentTypes).toEqual(new Set([protocol === "http/json" ? "application/json" : "application/x-protobuf"]));
      const servers = spans.filter((s) => s.kind === 2);
      expect(servers.map((s) => s.name).sort()).toEqual(["GET /v1/catalog/capabilities", "PUT /v1/routes/:action_id", "PUT /v1/routes/:action_id"]);
      for (const span of servers) {
        expect(span.parentSpanId).toBe(CALLER_SPAN);
        expect(span.resource["service.name"]).toBe("registry-under-test");
        expect(span.attributes).toMatchObject({ "http.request.method": expect.any(String), "url.scheme": "http", "aip.tenant.id": "tenant-a" });
      }
      const catalog = servers.find((s) => s.name.startsWith("GET")) as ReceivedSpan;
      expect(catalog.attributes).toMatchObject({
        "http.route": "/v1/catalog/capabilities",
        "http.response.status_code": 200,
        "url.path": "/v1/catalog/capabilities",
        "aip.catalog.cache": "miss",
      });
      const refusal = servers.find((s) => s.attributes["http.response.status_code"] === 404) as ReceivedSpan;
      expect(refusal.attributes).toMatchObject({
        "http.route": "/v1/routes/:action_id",
        "aip.problem.code": "binding-unavailable",
        "url.path": "/v1/routes/act_trc_unknown",
      });
      const created = servers.find((s) => s.attributes["http.response.status_code"] === 201) as ReceivedSpan;
      expect(created.attributes["aip.route.outcome"]).toBe("created");

      const statements = spans.filter((s) => s.kind === 3);
      for (const statement of statements) {
        expect(servers.map((s) => s.spanId)).toContain(statement.parentSpanId);
        expect(statement.attributes).toMatchObject({ "db.system.name": "postgresql", "db.system": "postgresql", "db.operation.name": statement.name });
        expect(String(statement.attributes["db.query.text"])).not.toContain("traceparent");
      }
      expect(statements.map((s) => s.name).sort()).toEqual(["aip_catalog_page", "aip_resolve_route", "aip_resolve_route"]);
      // The refused resolve's statement failed with the registry's problem SQLSTATE.
      const failed = statements.find((s) => s.parentSpanId === refusal.spanId) as ReceivedSpan;
      expect(failed).toMatchObject({ statusCode: 2, attributes: { "db.response.status_code": "AR000" } });
    });
  }

  it("samples as OTEL_TRACES_SAMPLER says: always_off exports nothing", async () => {
    const server = await start({
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint("sampled-off"),
      OTEL_TRACES_SAMPLER: "always_off",
      OTEL_BSP_SCHEDULE_DELAY: "50",
    });
    expect((await resolve((p, i) => fetch(`${server.url}${p}`, i), "act_trc_off", { traceparent: TRACEPARENT })).status).toBe(201);
    await new Promise((r) => setTimeout(r, 500));
    expect(receiver.exports("sampled-off")).toEqual([]);
  });

  it("refuses to start on an OTEL_* value it cannot honour", async () => {
    await expect(start({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:4317", OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" })).rejects.toThrow(
      /OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" is not supported/,
    );
  });
});

/**
 * The built server (dist/, as `npm start` runs it) in a process of its own, with only the standard
 * variables, recording every module URL it resolves (test/support/record-loads.mjs).
 */
async function runServer(env: Record<string, string>): Promise<{ lines: string[]; loaded: string[] }> {
  const dir = await mkdtemp(join(tmpdir(), "aip-trace-"));
  const loads = join(dir, "loads.txt");
  const child = spawn(process.execPath, ["--import", join(ROOT, "test/support/record-loads.mjs"), join(ROOT, "dist/entry/node.js")], {
    cwd: dir,
    env: {
      PATH: process.env.PATH ?? "",
      DATABASE_URL: db.dataUrl,
      CONTROL_DATABASE_URL: db.controlUrl,
      AUTH_HS256_SECRET: TEST_SECRET,
      PORT: "0",
      MIGRATE_ON_START: "false",
      LEASE_MAINTENANCE_INTERVAL_MS: "0",
      ACCESS_LOG: "true",
      AIP_RECORD_LOADS: loads,
      ...env,
    },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const lines: string[] = [];
  const reader = createInterface({ input: child.stdout });
  reader.on("line", (line) => lines.push(line));
  try {
    const deadline = Date.now() + 30_000;
    while (!lines.some((l) => l.includes("listening on")) && child.exitCode === null && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    const listening = JSON.parse(lines.find((l) => l.includes("listening on")) ?? "{}") as { url?: string };
    if (!listening.url) throw new Error(`the server did not start:\n${lines.join("\n")}`);
    const fetcher = (path: string, init: RequestInit) => fetch(`${listening.url}${path}`, init);
    expect((await fetcher("/v1/catalog/capabilities", { headers: { authorization: `Bearer ${tenantToken}`, traceparent: TRACEPARENT } })).status).toBe(200);
    expect((await resolve(fetcher, `act_trc_proc_${env.OTEL_SERVICE_NAME ?? "plain"}`, { traceparent: TRACEPARENT })).status).toBe(201);
    if (env.OTEL_EXPORTER_OTLP_ENDPOINT) await spansOf("process", (s) => s.some((x) => x.kind === 3) && s.filter((x) => x.kind === 2).length >= 2);
    else await new Promise((r) => setTimeout(r, 500));
    child.kill("SIGTERM");
    await once(child, "exit");
    const loaded = (await readFile(loads, "utf8").catch(() => "")).split("\n").filter(Boolean);
    return { lines, loaded };
  } finally {
    if (child.exitCode === null) child.kill("SIGKILL");
    await rm(dir, { recursive: true, force: true });
  }
}

describe("the server process, as a platform runs it", () => {
  it("with only the standard OTEL_* variables: spans of the caller's trace within 10 s, a database span among them, and the trace in the access log", async () => {
    const { lines, loaded } = await runServer({
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint("process"),
      OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
      OTEL_TRACES_EXPORTER: "otlp",
      OTEL_SERVICE_NAME: "registry-process",
      OTEL_BSP_SCHEDULE_DELAY: "200",
    });
    const spans = receiver.spans("process").filter((s) => s.traceId === TRACE);
    expect(spans.filter((s) => s.kind === 3 && s.attributes["db.system.name"] === "postgresql").length).toBeGreaterThan(0);
    expect(spans.every((s) => s.resource["service.name"] === "registry-process")).toBe(true);
    const access = lines.map((line) => JSON.parse(line)).filter((e) => e.msg === "request");
    expect(access.map((e) => [e.route, e.trace_id])).toEqual([
      ["/v1/catalog/capabilities", TRACE],
      ["/v1/routes/:action_id", TRACE],
    ]);
    expect(loaded.some((url) => url.includes("/@opentelemetry/sdk-trace/"))).toBe(true);
  });

  it("with no OTEL_* variables: nothing exported and no OpenTelemetry module loaded; every line JSON with time, level and msg", async () => {
    const before = receiver.exports("process").length;
    const { lines, loaded } = await runServer({});
    expect(receiver.exports("process").length).toBe(before);
    expect(loaded).toEqual([]);
    for (const line of lines) expect(JSON.parse(line), line).toMatchObject({ time: expect.any(String), level: expect.any(String), msg: expect.any(String) });
    expect(
      lines
        .map((l) => JSON.parse(l))
        .filter((e) => e.msg === "request")
        .every((e) => e.trace_id === TRACE),
    ).toBe(true);
  });
});
