/**
 * Bad input over HTTP: every refusal is an application/problem+json with the right status and
 * `code`, carries the request id, leaks no stack trace, and changes nothing in the database. No
 * request, however malformed, produces a 500.
 */
import { SignJWT } from "jose";
import { beforeAll, describe, expect, it } from "vitest";
import { mintToken } from "../../src/http/tokens.js";
import { useTestDatabase } from "../support/database.js";
import { connectorType, instance, publishSimpleFleet, version } from "../../fixtures/records.js";
import { createTestApi, TEST_SECRET, type TestApi } from "../support/http.js";
import { registryState, type RegistryState } from "../support/registry-state.js";

const db = useTestDatabase();
let api: TestApi;
let admin: string;
let before: RegistryState;

beforeAll(async () => {
  api = createTestApi(db.registry);
  admin = await api.adminToken();
  await publishSimpleFleet(db.registry);
  before = await registryState(db.owner);
});

const PUBLICATIONS = "/v1/admin/publications";

/** A refusal: problem+json, the expected status and code, the request id, no stack trace. */
async function expectProblem(response: Response, status: number, code: string) {
  const text = await response.text();
  expect(response.status, text).toBe(status);
  expect(response.headers.get("content-type")).toMatch(/^application\/problem\+json/);
  const body = JSON.parse(text) as Record<string, unknown>;
  expect(body).toMatchObject({ status, code, type: expect.stringContaining(code), title: expect.any(String), detail: expect.any(String) });
  expect(body.request_id).toEqual(expect.any(String));
  expect(body.request_id).toBe(response.headers.get("x-request-id"));
  expect(text).not.toMatch(/\bat .+:\d+:\d+|node_modules|\.ts:\d+|Error:/);
  return body;
}

function post(body: string | undefined, headers: Record<string, string> = { "content-type": "application/json" }, token: string | null = admin) {
  return api.app.request(PUBLICATIONS, {
    method: "POST",
    headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...headers },
    ...(body !== undefined ? { body } : {}),
  });
}

const validChange = connectorType("ctype_bad_input");

describe("POST /v1/admin/publications refuses", () => {
  it.each([
    ["truncated JSON", '{"changes": ['],
    ["an empty body", ""],
    ["JSON with a trailing comma", '{"changes": [],}'],
    ["a bare word", "changes"],
  ])("malformed JSON (%s) with 400 invalid", async (_what, body) => {
    await expectProblem(await post(body), 400, "invalid");
  });

  it.each([
    ["an array", "[]"],
    ["a string", '"changes"'],
    ["null", "null"],
    ["a number", "42"],
    ["an object without changes", "{}"],
    ["an empty batch", '{"changes": []}'],
    ["changes that are not an array", '{"changes": {"op": "put_connector_type"}}'],
    ["an unknown top-level member", JSON.stringify({ changes: [validChange], force: true })],
  ])("a body that is %s with 400 invalid", async (_what, body) => {
    await expectProblem(await post(body), 400, "invalid");
  });

  it.each([
    ["an unknown op", { op: "delete_everything", id: "ctype_x" }],
    ["a missing op", { id: "ctype_x", name: "x", owner: "o" }],
    ["an op of the wrong type", { op: 7 }],
    ["a missing field", { op: "put_connector_type", id: "ctype_x", name: "x" }],
    ["an unknown field", { ...validChange, colour: "blue" }],
    ["a string where a number belongs", instance("cinst_x", "ctype_t", "cver_t_1", "tenant-a", "2" as never)],
    ["a fractional revision", instance("cinst_x", "ctype_t", "cver_t_1", "tenant-a", 1.5)],
    ["a negative revision", instance("cinst_x", "ctype_t", "cver_t_1", "tenant-a", -1)],
    ["a revision beyond 2^53", instance("cinst_x", "ctype_t", "cver_t_1", "tenant-a", 2 ** 60)],
    ["a number where a boolean belongs", { ...validChange, enabled: 1 }],
    ["an empty id", { ...validChange, id: "" }],
    ["a blank id", { ...validChange, id: "   " }],
    ["an id with NUL", { ...validChange, id: "ctype_\u0000x" }],
    ["an id over 256 bytes", { ...validChange, id: `ctype_${"é".repeat(130)}` }],
    ["an unknown status", { op: "set_version_status", id: "cver_t_1", status: "retired" }],
    [
      "a malformed digest",
      {
        op: "admit_version",
        id: "cver_x",
        connector_type_id: "ctype_t",
        version: "1",
        manifest: { capabilities: [] },
        manifest_digest: "sha256:XYZ",
        attestation: {},
      },
    ],
    ["a limit of zero", { op: "put_admission_policy", policy_ref: "quota:x", revision: 1, max_tenant_in_flight: 0 }],
    ["a change that is not an object", "put_connector_type"],
  ])("a change with %s with 400 invalid", async (_what, change) => {
    const body = await expectProblem(await post(JSON.stringify({ changes: [validChange, change] })), 400, "invalid");
    expect(body.errors).toEqual(expect.arrayContaining([expect.objectContaining({ field: expect.any(String), message: expect.any(String) })]));
  });

  it("a number too large for a double with 400 invalid", async () => {
    await expectProblem(
      await post(
        `{"changes": [{"op": "put_instance", "id": "cinst_x", "connector_type_id": "ctype_t", "version_id": "cver_t_1", "tenant_id": "tenant-a", "config_revision": 1e400, "secret_provider_ref": "vault://x"}]}`,
      ),
      400,
      "invalid",
    );
  });

  it("text the database cannot store (NUL, lone surrogates) inside a manifest with 400 invalid", async () => {
    for (const extra of ['"\\u0000"', '"\\ud800"']) {
      const change = await version("cver_bad_text", "ctype_t", ["cap:t.search"]);
      const text = JSON.stringify({ changes: [{ ...change, manifest: { ...change.manifest, note: "PLACEHOLDER" } }] }).replace('"PLACEHOLDER"', extra);
      await expectProblem(await post(text), 400, "invalid");
    }
  });

  it("a manifest nested deeper than 128 levels with 400 invalid, however deep", async () => {
    for (const depth of [200, 10_000, 200_000]) {
      const change = await version("cver_bad_deep", "ctype_t", ["cap:t.search"]);
      const text = JSON.stringify({ changes: [{ ...change, manifest: { ...change.manifest, note: "PLACEHOLDER" } }] }).replace(
        '"PLACEHOLDER"',
        `${"[".repeat(depth)}${"]".repeat(depth)}`,
      );
      await expectProblem(await post(text), 400, "invalid");
    }
  });

  it("an oversize body with 413 payload-too-large, with or without a declared length", async () => {
    const small = createTestApi(db.registry, { adminBodyLimitBytes: 4096 });
    const big = JSON.stringify({ changes: [{ ...validChange, name: "n".repeat(5000) }] });
    const declared = await small.app.request(PUBLICATIONS, {
      method: "POST",
      headers: { authorization: `Bearer ${admin}`, "content-type": "application/json", "content-length": String(big.length) },
      body: big,
    });
    await expectProblem(declared, 413, "payload-too-large");
    const stream = new ReadableStream({
      start(controller) {
        for (let i = 0; i < 10; i++) controller.enqueue(new TextEncoder().encode(big.slice(i * 600, (i + 1) * 600)));
        controller.enqueue(new TextEncoder().encode(big.slice(6000)));
        controller.close();
      },
    });
    const streamed = await small.app.request(PUBLICATIONS, {
      method: "POST",
      headers: { authorization: `Bearer ${admin}`, "content-type": "application/json" },
      body: stream,
      duplex: "half",
    } as RequestInit);
    await expectProblem(streamed, 413, "payload-too-large");
  });

  it("a missing or unusable bearer token with 401 unauthorized and a WWW-Authenticate challenge", async () => {
    const body = JSON.stringify({ changes: [validChange] });
    const wrongKey = await mintToken("another-secret-another-secret-0123456789", { subject: "x", scopes: ["registry:admin"] });
    const expired = await new SignJWT({ scope: "registry:admin" })
      .setProtectedHeader({ alg: "HS256" })
      .setIssuedAt(Math.floor(Date.now() / 1000) - 7200)
      .setExpirationTime(Math.floor(Date.now() / 1000) - 3600)
      .sign(new TextEncoder().encode(TEST_SECRET));
    const [header, payload] = admin.split(".");
    const unsigned = `${Buffer.from(JSON.stringify({ alg: "none", typ: "JWT" })).toString("base64url")}.${payload}.`;
    const tampered = `${header}.${Buffer.from(JSON.stringify({ scope: "registry:admin", sub: "mallory", exp: 9999999999 })).toString("base64url")}.${admin.split(".")[2]}`;
    for (const authorization of [
      undefined,
      "",
      "Bearer",
      "Bearer ",
      "Basic dXNlcjpwYXNz",
      `Token ${admin}`,
      "Bearer not-a-jwt",
      `Bearer ${wrongKey}`,
      `Bearer ${expired}`,
      `Bearer ${unsigned}`,
      `Bearer ${tampered}`,
      `Bearer ${admin} extra`,
    ]) {
      const response = await api.app.request(PUBLICATIONS, {
        method: "POST",
        headers: { "content-type": "application/json", ...(authorization !== undefined ? { authorization } : {}) },
        body,
      });
      await expectProblem(response, 401, "unauthorized");
      expect(response.headers.get("www-authenticate")).toMatch(/^Bearer/);
    }
  });

  it("a token without the registry:admin scope with 403 forbidden", async () => {
    const body = JSON.stringify({ changes: [validChange] });
    for (const token of [
      await api.tenantToken("tenant-a"),
      await api.token({ scopes: ["replicas:write"] }),
      await api.token({ scopes: ["fleet:read"] }),
      await api.token({ scopes: [] }),
    ]) {
      await expectProblem(await post(body, undefined, token), 403, "forbidden");
    }
  });

  it("a body that is not declared as JSON with 415 unsupported-media-type", async () => {
    const body = JSON.stringify({ changes: [validChange] });
    await expectProblem(await post(body, {}), 415, "unsupported-media-type");
    await expectProblem(await post(body, { "content-type": "text/plain" }), 415, "unsupported-media-type");
    await expectProblem(await post(body, { "content-type": "application/x-www-form-urlencoded" }), 415, "unsupported-media-type");
  });

  it("a malformed dry_run flag with 400 invalid", async () => {
    const response = await api.app.request(`${PUBLICATIONS}?dry_run=maybe`, {
      method: "POST",
      headers: { authorization: `Bearer ${admin}`, "content-type": "application/json" },
      body: JSON.stringify({ changes: [validChange] }),
    });
    await expectProblem(response, 400, "invalid");
  });

  it("and none of the refusals above changed anything", async () => {
    expect(await registryState(db.owner)).toEqual(before);
  });

  it("while a well-formed publication with a charset parameter is accepted", async () => {
    const response = await post(JSON.stringify({ changes: [validChange] }), { "content-type": "application/json; charset=utf-8" });
    expect(response.status).toBe(200);
    expect(await response.json()).toMatchObject({ changed: 1, catalog_revision: before.catalog_revision + 1 });
    before = await registryState(db.owner);
  });
});

describe("no request produces a 500", () => {
  it("across every route, with malformed paths, queries, bodies and tokens", async () => {
    const tenant = await api.tenantToken("tenant-a");
    const host = await api.token({ scopes: ["replicas:write"], peerPrincipalId: "service:bad-input-host" });
    const deep = `${"[".repeat(100_000)}${"]".repeat(100_000)}`;
    const requests: [string, string, string | undefined, string | undefined][] = [];
    const bodies = ["{", "[]", "null", '{"a":1}', deep, `{"x":${deep}}`, '"\\ud800"', '{"s":"\\u0000"}', "1e400"];
    bodies.push(`{"assignment":{"action_id":"act_bad","fence_token":"route_x","extra":${deep}},"outcome":"completed"}`);
    bodies.push(`{"capability_id":"cap:t.search","topology":${deep}}`);
    const paths = [
      ["PUT", "/v1/routes/act_bad"],
      ["POST", "/v1/routes/act_bad/settlement"],
      ["POST", "/v1/replicas/crepl_t_tenant-a/register"],
      ["POST", "/v1/replicas/crepl_t_tenant-a/heartbeat"],
      ["POST", "/v1/fleet/lease-expiry?limit=-1"],
      ["POST", PUBLICATIONS],
    ];
    for (const [method, path] of paths) {
      for (const body of bodies) for (const token of [admin, tenant, host]) requests.push([method!, path!, body, token]);
    }
    for (const path of [
      "/v1/catalog/capabilities?limit=abc&cursor=%00",
      "/v1/catalog/capabilities?cursor=99999999999999999999999:x",
      "/v1/catalog/capabilities/%E0%A4%A",
      "/v1/catalog/capabilities/%00",
      `/v1/catalog/capabilities/${"x".repeat(5000)}`,
      "/v1/routes/%00",
      "/v1/admin/bindings?tenant_id=tenant-a&limit=99999999999",
      "/v1/admin/bindings?tenant_id=tenant-a&cursor=%5B1%2C2%5D",
      "/v1/admin/bindings?tenant_id=tenant-a&cursor=%5B",
      "/v1/admin/bindings?tenant_id=%00",
      "/v1/admin/versions/%00",
      "/v1/admin/unknown-kind/x",
      "/v1/admin/catalog/capabilities?unbound=yes",
      "/v1/fleet/status",
      "/readyz",
      "/healthz",
      "/openapi.json",
      "/nowhere",
    ]) {
      for (const token of [admin, tenant]) requests.push(["GET", path, undefined, token]);
    }
    for (const [method, path, body, token] of requests) {
      const response = await api.app.request(path, {
        method,
        headers: { authorization: `Bearer ${token}`, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
        ...(body !== undefined ? { body } : {}),
      });
      const text = await response.text();
      expect(response.status, `${method} ${path} ${body?.slice(0, 40)}: ${text.slice(0, 300)}`).not.toBe(500);
      // /readyz answers 503 with its own JSON document (it is not an error report).
      if (response.status >= 400 && path !== "/readyz") {
        expect(response.headers.get("content-type"), `${method} ${path}`).toMatch(/^application\/problem\+json/);
        expect(text).not.toMatch(/\bat .+:\d+:\d+|node_modules|\.ts:\d+/);
      }
    }
    expect(await registryState(db.owner)).toEqual(before);
  });
});
