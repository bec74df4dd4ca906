/**
 * Refusals below the app, on a real started server over raw sockets: malformed HTTP, oversized
 * headers and a bad Host are answered with problem+json; a malformed body or a client that
 * leaves mid-request is logged and counted with its own code, never as an `internal` 500.
 */
import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { mintToken } from "../../src/http/tokens.js";
import { startServer, type RunningServer } from "../../src/entry/node.js";
import { useTestDatabase } from "../support/database.js";
import { publishSimpleFleet } from "../../fixtures/records.js";
import { TEST_SECRET } from "../support/http.js";

const db = useTestDatabase();
let server: RunningServer;
const logged: string[] = [];
const errors: string[] = [];

beforeAll(async () => {
  vi.spyOn(console, "log").mockImplementation((line: unknown) => void logged.push(String(line)));
  vi.spyOn(console, "error").mockImplementation((line: unknown) => void errors.push(String(line)));
  server = await startServer(
    {
      DATABASE_URL: db.dataUrl,
      CONTROL_DATABASE_URL: db.controlUrl,
      AUTH_HS256_SECRET: TEST_SECRET,
      PORT: "0",
      MIGRATE_ON_START: "false",
      LEASE_MAINTENANCE_INTERVAL_MS: "0",
    },
    () => {},
  );
  await publishSimpleFleet(db.registry, { prefix: "pipe", tenants: ["tenant-pipe"], capacity: 50 });
});
afterAll(async () => {
  await server?.close();
  vi.restoreAllMocks();
});

/** Writes `parts` (one write each, a tick apart) and returns everything the server sent until it closed. */
function exchange(parts: string[], options: { end?: boolean } = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(server.port, "127.0.0.1");
    let received = "";
    socket.on("data", (chunk: Buffer) => (received += chunk.toString("latin1")));
    socket.on("error", reject);
    socket.on("close", () => resolve(received));
    socket.on("connect", async () => {
      for (const part of parts) {
        socket.write(part);
        await new Promise((r) => setTimeout(r, 20));
      }
      if (options.end) socket.end();
    });
  });
}

interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: Record<string, unknown>;
}

/** Every response on the connection, in order (each framed by its Content-Length). */
function parseAll(raw: string): RawAnswer[] {
  const answers: RawAnswer[] = [];
  let rest = raw;
  while (rest.length > 0) {
    const end = rest.indexOf("\r\n\r\n");
    expect(end, `a complete header section in ${JSON.stringify(rest.slice(0, 200))}`).toBeGreaterThan(0);
    const [statusLine = "", ...lines] = rest.slice(0, end).split("\r\n");
    const headers = Object.fromEntries(lines.map((line) => [line.slice(0, line.indexOf(":")).toLowerCase(), line.slice(line.indexOf(":") + 1).trim()]));
    const length = Number(headers["content-length"] ?? 0);
    const text = rest.slice(end + 4, end + 4 + length);
    answers.push({ status: Number(statusLine.split(" ")[1]), headers, body: text ? (JSON.parse(text) as Record<string, unknown>) : {} });
    rest = rest.slice(end + 4 + length);
  }
  return answers;
}

function parse(raw: string): { status: number; headers: Record<string, string>; body: Record<string, unknown> } {
  const [head = "", body = ""] = raw.split("\r\n\r\n");
  const [statusLine = "", ...lines] = head.split("\r\n");
  const headers = Object.fromEntries(lines.map((line) => [line.slice(0, line.indexOf(":")).toLowerCase(), line.slice(line.indexOf(":") + 1).trim()]));
  return { status: Number(statusLine.split(" ")[1]), headers, body: JSON.parse(body) as Record<string, unknown> };
}

const accessLines = () =>
  logged
    .map((line) => {
      try {
        return JSON.parse(line) as Record<string, unknown>;
      } catch {
        return {};
      }
    })
    .filter((entry) => entry.msg === "request");

/** Waits for a condition on the access log (the app writes a line after its response, so it can trail the client's read). */
async function waitFor<T>(found: () => T | undefined): Promise<T | undefined> {
  for (const deadline = Date.now() + 20_000; found() === undefined && Date.now() < deadline; ) await new Promise((r) => setTimeout(r, 20));
  return found();
}

const waitForLine = (requestId: unknown) => waitFor(() => accessLines().find((e) => e.request_id === requestId));

it("answers a malformed chunked body with problem+json and logs a 400 malformed-request, not a 500", async () => {
  const token = await mintToken(TEST_SECRET, { subject: "ops", scopes: ["registry:admin"] });
  const raw = await exchange([
    `POST /v1/fleet/lease-expiry HTTP/1.1\r\nHost: registry\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n`,
    "zz\r\n{}\r\n0\r\n\r\n",
  ]);
  const answer = parse(raw);
  expect(answer.status).toBe(400);
  expect(answer.headers["content-type"]).toBe("application/problem+json");
  expect(answer.headers.connection).toBe("close");
  expect(answer.body).toMatchObject({ status: 400, code: "malformed-request", type: "https://aip.dev/problems/malformed-request" });
  expect(answer.body.detail).toContain("HPE_INVALID_CHUNK_SIZE");
  expect(answer.headers["x-request-id"]).toBe(answer.body.request_id);

  // The request the app was serving is logged once, with the id the client was given.
  const line = await waitForLine(answer.body.request_id);
  expect(line).toMatchObject({ method: "POST", route: "/v1/fleet/lease-expiry", status: 400, code: "malformed-request", level: "info" });
  expect(errors.join("\n")).not.toContain("unhandled error");
  expect(accessLines().filter((e) => e.status === 500)).toEqual([]);
});

it("answers oversized headers with a 431 problem, logged and counted", async () => {
  const raw = await exchange([`GET /healthz HTTP/1.1\r\nHost: registry\r\nX-Padding: ${"a".repeat(20_000)}\r\n\r\n`]);
  const answer = parse(raw);
  expect(answer.status).toBe(431);
  expect(answer.headers["content-type"]).toBe("application/problem+json");
  expect(answer.body).toMatchObject({ status: 431, code: "header-fields-too-large", title: "Request header fields too large" });
  expect(await waitForLine(answer.body.request_id)).toMatchObject({ status: 431, code: "header-fields-too-large", route: "unmatched" });
});

it("answers a request line Node cannot parse and a Host it cannot use with 400 problems", async () => {
  const garbage = parse(await exchange(["GET /healthz HTTP/1.1\r\nHost registry\r\n\r\n"]));
  expect(garbage.status).toBe(400);
  expect(garbage.body).toMatchObject({ code: "malformed-request" });
  const host = parse(await exchange(["GET /healthz HTTP/1.1\r\nHost: a b\r\nConnection: close\r\n\r\n"]));
  expect(host.status).toBe(400);
  expect(host.headers["content-type"]).toBe("application/problem+json");
  expect(host.body).toMatchObject({ code: "malformed-request" });
});

it("logs a client that leaves in the middle of its body as client-closed (499), not as a 500", async () => {
  const token = await mintToken(TEST_SECRET, { subject: "ops", scopes: ["registry:admin"] });
  const before = accessLines().length;
  for (const framing of ['Transfer-Encoding: chunked\r\n\r\n5\r\n{"a":', 'Content-Length: 100\r\n\r\n{"a":']) {
    const raw = await exchange(
      [`POST /v1/admin/publications HTTP/1.1\r\nHost: registry\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/json\r\n${framing}`],
      { end: true },
    );
    expect(raw).toBe("");
  }
  await waitFor(() => (accessLines().length >= before + 2 ? true : undefined));
  const lines = accessLines().slice(before);
  expect(lines.map((e) => [e.route, e.status, e.code])).toEqual([
    ["/v1/admin/publications", 499, "client-closed"],
    ["/v1/admin/publications", 499, "client-closed"],
  ]);
  expect(errors.join("\n")).not.toContain("unhandled error");
});

it("counts transport refusals in /metrics and records no 500", async () => {
  const token = await mintToken(TEST_SECRET, { subject: "prometheus", scopes: ["fleet:read"] });
  const text = await (await fetch(`${server.url}/metrics`, { headers: { authorization: `Bearer ${token}` } })).text();
  expect(text).toMatch(/^aip_http_transport_refusals_total\{code="header-fields-too-large"\} 1$/m);
  expect(text).toMatch(/^aip_http_transport_refusals_total\{code="malformed-request"\} [1-9]\d*$/m);
  expect(text).toMatch(/^aip_http_request_duration_seconds_count\{method="POST",route="\/v1\/fleet\/lease-expiry",status="400"\} 1$/m);
  expect(text).toMatch(/^aip_http_request_duration_seconds_count\{method="POST",route="\/v1\/admin\/publications",status="499"\} 2$/m);
  expect(text).not.toMatch(/status="500"/);
});

describe("pipelined requests: a refusal never takes the place of an earlier request's answer", () => {
  const resolve = async (actionId: string) => {
    const token = await mintToken(TEST_SECRET, { subject: "gw", tenantId: "tenant-pipe", scopes: ["routes:write", "routes:read"] });
    const body = JSON.stringify({ capability_id: "cap:pipe.search" });
    return {
      token,
      message: `PUT /v1/routes/${actionId} HTTP/1.1\r\nHost: registry\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
    };
  };

  it.each([
    ["a message Node cannot parse", "GARBAGE\r\n\r\n", 400, "malformed-request"],
    ["a header section over the limit", `GET /healthz HTTP/1.1\r\nHost: registry\r\nX-Padding: ${"a".repeat(20_000)}\r\n\r\n`, 431, "header-fields-too-large"],
  ])("answers a committed PUT first, then refuses %s, then closes", async (_, second, status, code) => {
    const actionId = `act_pipelined_${code}`;
    const { token, message } = await resolve(actionId);
    const answers = parseAll(await exchange([message + second]));
    expect(answers.map((a) => a.status)).toEqual([201, status]);
    expect(answers[0]?.body).toMatchObject({ action_id: actionId, capability_id: "cap:pipe.search" });
    expect(answers[1]?.body).toMatchObject({ code, status });
    expect(answers[1]?.headers.connection).toBe("close");
    expect(answers[1]?.headers["x-request-id"]).toBe(answers[1]?.body.request_id);
    // The route the client was told about is the one that is stored.
    const stored = await fetch(`${server.url}/v1/routes/${actionId}`, { headers: { authorization: `Bearer ${token}` } });
    expect(stored.status).toBe(200);
    expect(await stored.json()).toEqual(answers[0]?.body);
    expect(await waitForLine(answers[1]?.body.request_id)).toMatchObject({ status, code, route: "unmatched" });
  });

  it("answers every earlier pipelined request in order before the refusal", async () => {
    const first = await resolve("act_pipelined_first");
    const second = await resolve("act_pipelined_second");
    const answers = parseAll(await exchange([`${first.message}GET /healthz HTTP/1.1\r\nHost: registry\r\n\r\n${second.message}GARBAGE\r\n\r\n`]));
    expect(answers.map((a) => a.status)).toEqual([201, 200, 201, 400]);
    expect(answers.map((a) => a.body.action_id ?? a.body.code ?? a.body.status)).toEqual([
      "act_pipelined_first",
      "ok",
      "act_pipelined_second",
      "malformed-request",
    ]);
  });
});

/** aip_http_transport_refusals_total{code} as /metrics reports it now. */
async function refusalsCounted(code: string): Promise<number> {
  const token = await mintToken(TEST_SECRET, { subject: "prometheus", scopes: ["fleet:read"] });
  const text = await (await fetch(`${server.url}/metrics`, { headers: { authorization: `Bearer ${token}` } })).text();
  return Number(new RegExp(`^aip_http_transport_refusals_total\\{code="${code}"\\} (\\d+)$`, "m").exec(text)?.[1] ?? 0);
}

describe("messages refused before the app", () => {
  it("answers an HTTP/1.1 request without Host with a problem, a request id, a log line and a count", async () => {
    const before = await refusalsCounted("malformed-request");
    const answers = parseAll(await exchange(["GET /healthz HTTP/1.1\r\n\r\n"]));
    expect(answers).toHaveLength(1);
    const [answer] = answers as [RawAnswer];
    expect(answer.status).toBe(400);
    expect(answer.headers["content-type"]).toBe("application/problem+json");
    expect(answer.headers.connection).toBe("close");
    expect(answer.body).toMatchObject({ code: "malformed-request", status: 400 });
    expect(answer.body.detail).toContain("Host");
    expect(answer.headers["x-request-id"]).toBe(answer.body.request_id);
    expect(await waitForLine(answer.body.request_id)).toMatchObject({ method: "GET", status: 400, code: "malformed-request", route: "unmatched" });
    expect(await refusalsCounted("malformed-request")).toBe(before + 1);
    // HTTP/1.0 needs no Host: served.
    expect(parseAll(await exchange(["GET /healthz HTTP/1.0\r\n\r\n"])).map((a) => a.status)).toEqual([200]);
  });

  it("answers a request without Host in its turn behind a pipelined request", async () => {
    const answers = parseAll(await exchange(["GET /healthz HTTP/1.1\r\nHost: registry\r\n\r\nGET /healthz HTTP/1.1\r\n\r\n"]));
    expect(answers.map((a) => a.status)).toEqual([200, 400]);
  });

  it.each([
    ["GET", "Content-Length: 5\r\n\r\nhello"],
    ["GET", "Transfer-Encoding: chunked\r\n\r\n10\r\n0123456789abcdef\r\n"],
    ["HEAD", "Content-Length: 100000000\r\n\r\n0123456789"],
  ])("refuses a %s that declares a body (%#) with 413 and closes the connection without reading it", async (method, framing) => {
    const before = await refusalsCounted("payload-too-large");
    const raw = await exchange([`${method} /healthz HTTP/1.1\r\nHost: registry\r\n${framing}`]);
    const [statusLine = "", ...rest] = raw.split("\r\n");
    expect(statusLine).toBe("HTTP/1.1 413 Payload Too Large");
    const headers = rest.slice(0, rest.indexOf("")).map((line) => line.toLowerCase());
    expect(headers).toContain("connection: close");
    expect(headers).toContain("content-type: application/problem+json");
    const requestId = headers.find((h) => h.startsWith("x-request-id: "))?.slice("x-request-id: ".length);
    expect(await waitForLine(requestId)).toMatchObject({ method, status: 413, code: "payload-too-large", route: "unmatched" });
    if (method === "GET") expect(parseAll(raw)[0]?.body).toMatchObject({ code: "payload-too-large", request_id: requestId });
    expect(await refusalsCounted("payload-too-large")).toBe(before + 1);
  });

  it("still serves a GET with an empty body", async () => {
    expect(
      parseAll(await exchange(["GET /healthz HTTP/1.1\r\nHost: registry\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"])).map((a) => a.status),
    ).toEqual([200]);
  });
});
