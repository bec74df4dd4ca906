/**
 * Hostile input at the edges the random fuzz (fuzz.test.ts) only samples: nesting exactly at and
 * one past the 128-level limit (HTTP schemas and SQL agree), lone surrogates (refused, never
 * silently rewritten: PostgreSQL would store U+FFFD instead and two different IDs would become
 * one), NUL bytes, numbers at the 2^31 / 2^53 boundaries accepted end to end and refused one
 * past them, negative zero, invalid UTF-8, `__proto__` members, validators, request ids and
 * headers; and refusals that must not cost the server a database session each.
 */
import { SignJWT } from "jose";
import pg from "pg";
import { beforeAll, describe, expect, it } from "vitest";
import { canonicalDigest } from "../../src/canonical-json.js";
import { PROBLEM_SQLSTATE } from "../../src/registry/errors.js";
import { useTestDatabase } from "../support/database.js";
import { attestation, binding, connectorType, instance, publishSimpleFleet, replica, version } from "../../fixtures/records.js";
import { expectSaneAnswer, nested } from "../support/fuzz.js";
import { createTestApi, TEST_SECRET, type TestApi } from "../support/http.js";
import { registryState } from "../support/registry-state.js";
import { withSetOnPath } from "../support/server.js";

const db = useTestDatabase();
let api: TestApi;
let tenant: string;
let admin: string;
let host: string;

beforeAll(async () => {
  api = createTestApi(db.registry);
  await publishSimpleFleet(db.registry, { prefix: "ho", tenants: ["tenant-ho", "tenant-\ufffd"] });
  tenant = await api.tenantToken("tenant-ho");
  admin = await api.adminToken();
  host = await api.hostTokenFor("crepl_ho_tenant-ho");
});

const CAPABILITY = "cap:ho.search";
const PUBLICATIONS = "/v1/admin/publications";
let counter = 0;
const action = () => `act_ho_${++counter}`;

/** The problem an answer carries, after the rules every answer must pass. */
async function answer(response: Response, inputs: string[] = []) {
  const text = await response.text();
  const verdict = expectSaneAnswer(`${response.url}`, "GET", response, text, inputs);
  return { status: verdict.status, body: (verdict.body ?? JSON.parse(text || "null")) as Record<string, any> };
}

const raw = (method: string, path: string, body: string | Uint8Array, token = tenant, headers: Record<string, string> = {}) =>
  api.app.request(path, { method, headers: { authorization: `Bearer ${token}`, "content-type": "application/json", ...headers }, body });

const tenantToken = (claims: Record<string, unknown>) =>
  new SignJWT({ scope: "catalog:read routes:read routes:write", ...claims })
    .setProtectedHeader({ alg: "HS256", typ: "JWT" })
    .setIssuedAt()
    .setExpirationTime("1h")
    .sign(new TextEncoder().encode(TEST_SECRET));

describe("nesting: 128 levels pass, 129 are refused, by the HTTP schema and by SQL alike", () => {
  it("a manifest nested exactly 128 levels deep is admitted; one level more is 400 over HTTP and in SQL", async () => {
    const publish = async (id: string, depth: number) => {
      const change = await version(id, "ctype_ho", ["cap:ho.search"]);
      const manifest = { ...change.manifest, note: JSON.parse(nested(depth - 1).text) };
      const body = JSON.stringify({
        changes: [
          {
            ...change,
            manifest,
            manifest_digest: await canonicalDigest(manifest),
            attestation: { ...attestation(), schema_bundle_digest: change.attestation.schema_bundle_digest },
          },
        ],
      });
      return { body, response: await raw("POST", PUBLICATIONS, body, admin) };
    };
    const before = await registryState(db.owner);
    const deep = await publish("cver_ho_deep129", 129);
    expect((await answer(deep.response)).body).toMatchObject({
      code: "invalid",
      errors: [expect.objectContaining({ field: expect.stringContaining("manifest") })],
    });
    expect(await registryState(db.owner)).toEqual(before);

    // The database enforces the same limit on its own (a caller that skips the HTTP schemas).
    const control = new pg.Client({ connectionString: withSetOnPath(db.controlUrl) });
    await control.connect();
    try {
      const changes = (JSON.parse(deep.body) as { changes: unknown }).changes;
      await expect(control.query("SELECT aip_publish($1::jsonb, false)", [JSON.stringify(changes)])).rejects.toMatchObject({
        code: PROBLEM_SQLSTATE,
        detail: expect.stringContaining('"code": "invalid"'),
      });
    } finally {
      await control.end();
    }
    expect(await registryState(db.owner)).toEqual(before);

    const atLimit = await publish("cver_ho_deep128", 128);
    expect((await answer(atLimit.response)).status).toBe(200);
    expect(await db.registry.adminGet("version", "cver_ho_deep128")).toMatchObject({ id: "cver_ho_deep128" });
  });

  it("a settlement assignment nested exactly 128 levels deep is compared (fence-lost); deeper is 400", async () => {
    const id = action();
    const { assignment } = await db.registry.resolveRoute(id, "tenant-ho", CAPABILITY);
    const before = await registryState(db.owner);
    const settle = (depth: number) => {
      const text = JSON.stringify({ assignment: { ...assignment, extra: "PLACEHOLDER" }, outcome: "completed" }).replace(
        '"PLACEHOLDER"',
        nested(depth - 1).text,
      );
      return raw("POST", `/v1/routes/${id}/settlement`, text);
    };
    expect((await answer(await settle(128))).body.code).toBe("fence-lost");
    for (const depth of [129, 130, 100_000]) expect((await answer(await settle(depth))).body.code).toBe("invalid");
    expect(await registryState(db.owner)).toEqual(before);
    expect((await db.registry.settleRoute(id, "tenant-ho", assignment, "completed")).released).toBe(true);
  });
});

describe("lone surrogates are refused, never rewritten to U+FFFD", () => {
  it("in the tenant_id claim: 401, and never another tenant's routes or catalog", async () => {
    // tenant-\ufffd is a real tenant with a route; a claim with a lone surrogate in the same
    // place would reach the database as that very tenant if it got through.
    const owner = await api.tenantToken("tenant-\ufffd");
    const id = action();
    expect((await api.call("PUT", `/v1/routes/${id}`, { token: owner, body: { capability_id: CAPABILITY } })).status).toBe(201);
    for (const claim of ["tenant-\ud800", "tenant-\udfff", "tenant-\udc00"]) {
      const forged = await tenantToken({ tenant_id: claim });
      const read = await answer(await api.call("GET", `/v1/routes/${id}`, { token: forged }));
      expect(read.status, `GET with tenant_id ${JSON.stringify(claim)}`).toBe(401);
      expect((await answer(await api.call("GET", "/v1/catalog/capabilities", { token: forged }))).status).toBe(401);
    }
  });

  it("in body strings: 400 invalid, whether the value travels as text or as JSON to the database", async () => {
    const before = await registryState(db.owner);
    const resolve = await answer(await raw("PUT", `/v1/routes/${action()}`, '{"capability_id":"cap:ho.search\\ud800"}'));
    expect(resolve.body).toMatchObject({ code: "invalid", errors: [expect.objectContaining({ field: "capability_id" })] });
    const lifecycle = await answer(await raw("POST", "/v1/replicas/crepl_ho_tenant-ho/register", '{"request_id":"msg_\\udc00"}', host));
    expect(lifecycle.body.code).toBe("invalid");
    const publication = await answer(
      await raw("POST", PUBLICATIONS, JSON.stringify({ changes: [connectorType("ctype_ho_PLACEHOLDER")] }).replace("PLACEHOLDER", "\\ud800"), admin),
    );
    expect(publication.body.code).toBe("invalid");
    expect(await registryState(db.owner)).toEqual(before);
  });

  it("while paired surrogates (astral characters) are ordinary data, stored and read back verbatim", async () => {
    const id = `act_ho_\u{1f600}\u{10ffff}`;
    const created = await answer(await api.call("PUT", `/v1/routes/${encodeURIComponent(id)}`, { token: tenant, body: { capability_id: CAPABILITY } }));
    expect(created.body.action_id).toBe(id);
    expect((await answer(await api.call("GET", `/v1/routes/${encodeURIComponent(id)}`, { token: tenant }))).body.action_id).toBe(id);
  });
});

describe("NUL bytes, invalid UTF-8 and odd members", () => {
  it("refuses NUL in paths, queries and every kind of body string with 400, storing nothing", async () => {
    const before = await registryState(db.owner);
    const cases: [string, string, string | undefined, string][] = [
      ["PUT", "/v1/routes/act_ho_%00", JSON.stringify({ capability_id: CAPABILITY }), tenant],
      ["PUT", `/v1/routes/${action()}`, JSON.stringify({ capability_id: "cap:ho\u0000search" }), tenant],
      ["GET", "/v1/routes/%00", undefined, tenant],
      ["GET", "/v1/catalog/capabilities?q=a%00b", undefined, tenant],
      ["GET", "/v1/catalog/capabilities?cursor=1%00", undefined, tenant],
      ["GET", "/v1/catalog/capabilities/cap%00x", undefined, tenant],
      ["POST", "/v1/replicas/crepl_ho_tenant-ho/register", JSON.stringify({ request_id: "msg_\u0000" }), host],
      ["POST", PUBLICATIONS, JSON.stringify({ changes: [{ ...connectorType("ctype_ho_nul"), owner: "org:\u0000" }] }), admin],
      [
        "POST",
        PUBLICATIONS,
        JSON.stringify({ changes: [instance("cinst_ho_nul", "ctype_ho", "cver_ho_1", "tenant-ho", 1, { secret_provider_ref: "vault://\u0000" })] }),
        admin,
      ],
      ["GET", "/v1/admin/bindings?tenant_id=%00", undefined, admin],
    ];
    for (const [method, path, body, token] of cases) {
      const response = body === undefined ? await api.call(method, path, { token }) : await raw(method, path, body, token);
      expect((await answer(response)).body.code, `${method} ${path} ${body ?? ""}`).toBe("invalid");
    }
    expect(await registryState(db.owner)).toEqual(before);
  });

  it("treats invalid UTF-8 in a body as replacement characters: refused as data, never a 500", async () => {
    const before = await registryState(db.owner);
    const bytes = new Uint8Array([...new TextEncoder().encode('{"capability_id":"cap:'), 0xff, 0xfe, 0xed, 0xa0, 0x80, ...new TextEncoder().encode('"}')]);
    const refused = await answer(await raw("PUT", `/v1/routes/${action()}`, bytes));
    expect(refused.status).toBe(404);
    expect(refused.body.code).toBe("binding-unavailable");
    expect(await registryState(db.owner)).toEqual(before);
  });

  it("compares a settlement's `__proto__` member like any other: fence-lost, not silently dropped", async () => {
    const id = action();
    const { assignment } = await db.registry.resolveRoute(id, "tenant-ho", CAPABILITY);
    const before = await registryState(db.owner);
    const text = JSON.stringify({ assignment, outcome: "completed" }).replace('{"action_id"', '{"__proto__":{"tenant_id":"x"},"action_id"');
    const settled = await answer(await raw("POST", `/v1/routes/${id}/settlement`, text));
    expect(settled.body.code).toBe("fence-lost");
    expect(await registryState(db.owner)).toEqual(before);
    await db.registry.settleRoute(id, "tenant-ho", assignment, "completed");
  });

  it("bounds the nesting of a settlement's `__proto__` member too: 400, not a stack overflow", async () => {
    // Found by the fuzzer (seed 809835576): the schema's copy has no `__proto__` member to
    // walk, and the raw assignment is what goes on to the fence check.
    const id = action();
    const { assignment } = await db.registry.resolveRoute(id, "tenant-ho", CAPABILITY);
    const before = await registryState(db.owner);
    const deep = "[".repeat(5000) + "]".repeat(5000);
    const text = JSON.stringify({ assignment, outcome: "completed" }).replace('{"action_id"', `{"__proto__":${deep},"action_id"`);
    const refused = await answer(await raw("POST", `/v1/routes/${id}/settlement`, text));
    expect(refused.status).toBe(400);
    expect(refused.body).toMatchObject({ code: "invalid", errors: [{ field: "assignment" }] });
    expect(await registryState(db.owner)).toEqual(before);
    await db.registry.settleRoute(id, "tenant-ho", assignment, "completed");
  });

  it("refuses `__proto__`, `constructor` and duplicate members in strict bodies", async () => {
    for (const text of [
      '{"capability_id":"cap:ho.search","__proto__":{"tenant_id":"tenant-\ufffd"}}',
      '{"capability_id":"cap:ho.search","constructor":{"prototype":{"x":1}}}',
      '{"capability_id":"cap:ho.search","topology":{"__proto__":{"region":"x"}}}',
    ]) {
      expect((await answer(await raw("PUT", `/v1/routes/${action()}`, text))).body.code, text).toBe("invalid");
    }
    // Duplicate keys: JSON.parse keeps the last one, and so does the route.
    const id = action();
    const created = await answer(await raw("PUT", `/v1/routes/${id}`, '{"capability_id":"cap:nope","capability_id":"cap:ho.search"}'));
    expect(created.body).toMatchObject({ action_id: id, capability_id: CAPABILITY, tenant_id: "tenant-ho" });
  });
});

describe("numbers at the boundaries are accepted end to end, and refused one past them", () => {
  it("2^31 - 1 and 2^53 - 1 pass both the schema and SQL; 2^31 and 2^53 are 400 before the database", async () => {
    const cases: [string, Record<string, unknown>, number][] = [
      ["priority 2^31 - 1", binding("tenant-ho", CAPABILITY, "cinst_ho_tenant-ho", { priority: 2 ** 31 - 1, policy_revision: 2 }), 200],
      ["priority 2^31", binding("tenant-ho", CAPABILITY, "cinst_ho_tenant-ho", { priority: 2 ** 31, policy_revision: 3 }), 400],
      ["policy_revision 2^53 - 1", binding("tenant-ho", CAPABILITY, "cinst_ho_tenant-ho", { policy_revision: 2 ** 53 - 1 }), 200],
      ["policy_revision 2^53", binding("tenant-ho", CAPABILITY, "cinst_ho_tenant-ho", { policy_revision: 2 ** 53 }), 400],
      ["max_tenant_in_flight 2^31 - 1", { op: "put_admission_policy", policy_ref: "quota:ho", revision: 1, max_tenant_in_flight: 2 ** 31 - 1 }, 200],
      ["max_tenant_in_flight 2^31", { op: "put_admission_policy", policy_ref: "quota:ho", revision: 2, max_tenant_in_flight: 2 ** 31 }, 400],
      ["config_revision 2^53 - 1", instance("cinst_ho_tenant-ho", "ctype_ho", "cver_ho_1", "tenant-ho", 2 ** 53 - 1), 200],
      ["capacity 1000001", replica("crepl_ho_big", "cinst_ho_tenant-ho", "cver_ho_1", { capacity: 1_000_001 }), 400],
    ];
    for (const [what, change, status] of cases) {
      const before = await registryState(db.owner);
      const result = await answer(await api.call("POST", PUBLICATIONS, { token: admin, body: { changes: [change] } }));
      expect(result.status, what).toBe(status);
      if (status === 400) {
        expect(result.body.errors?.[0]?.field, what).toMatch(/^changes\.0\./);
        expect(await registryState(db.owner), what).toEqual(before);
      }
    }
  });

  it("refuses 1e309, 2^53 + 1 and fractions in lifecycle requests, and reads -0 as the sequence 0", async () => {
    const replicaId = "crepl_ho_tenant-ho";
    for (const literal of ["1e309", "-1e309", "9007199254740993", "9007199254740992", "1.5", "-1", '"1"', "null"]) {
      const result = await answer(await raw("POST", `/v1/replicas/${replicaId}/heartbeat`, `{"request_id":"msg_ho_n","previous_sequence":${literal}}`, host));
      expect(result.body.code, literal).toBe("invalid");
    }
    // -0 is the number 0: a well-formed, stale sequence (409 naming the current one).
    const stale = await answer(await raw("POST", `/v1/replicas/${replicaId}/heartbeat`, '{"request_id":"msg_ho_zero","previous_sequence":-0}', host));
    expect(stale.body).toMatchObject({ code: "conflict", sequence: expect.any(Number) });
  });

  it("ignores an If-None-Match revision beyond 2^53 instead of failing the read", async () => {
    const first = await api.call("GET", "/v1/catalog/capabilities", { token: tenant });
    const digest = /-([0-9a-f]{16})"$/.exec(first.headers.get("etag") ?? "")?.[1];
    expect(digest).toBeDefined();
    const page = await answer(
      await api.call("GET", "/v1/catalog/capabilities", { token: tenant, headers: { "if-none-match": `W/"9999999999999999-${digest}"` } }),
    );
    expect(page.status).toBe(200);
  });
});

describe("headers", () => {
  it("keeps a well-formed client X-Request-Id and replaces a malformed or oversized one", async () => {
    const echoed = await api.call("GET", "/v1/routes/act_missing", { token: tenant, headers: { "x-request-id": "client-req-1" } });
    expect((await answer(echoed)).body.request_id).toBe("client-req-1");
    for (const value of ["a b", "../x", "x".repeat(300), "<script>"]) {
      const replaced = await api.call("GET", "/v1/routes/act_missing", { token: tenant, headers: { "x-request-id": value } });
      const body = (await answer(replaced)).body;
      expect(body.request_id).not.toBe(value);
      expect(body.request_id).toMatch(/^[\w=-]{1,255}$/);
    }
  });

  it("refuses a duplicated, doubled or megabyte Authorization header with 401", async () => {
    const duplicated = new Headers();
    duplicated.append("authorization", `Bearer ${tenant}`);
    duplicated.append("authorization", `Bearer ${admin}`);
    const answers = [
      await api.app.request("/v1/catalog/capabilities", { headers: duplicated }),
      await api.app.request("/v1/catalog/capabilities", { headers: { authorization: `Bearer ${tenant} Bearer ${admin}` } }),
      await api.app.request("/v1/catalog/capabilities", { headers: { authorization: `Bearer ${"A".repeat(1_000_000)}.${"B".repeat(1_000)}.C` } }),
      await api.app.request("/v1/catalog/capabilities", { headers: { authorization: `Bearer ${tenant}`.repeat(2) } }),
    ];
    for (const response of answers) expect((await answer(response)).body.code).toBe("unauthorized");
  });
});

describe("refusals keep their database session", () => {
  it("answers a run of refused data-plane requests without opening a new database connection for each", async () => {
    // pg-pool's pool.query() throws a client away after any failed statement; a registry refusal
    // (capacity, fence, conflict, not found...) is a failed statement on a healthy session, so
    // every refusal would cost a new connection, authentication and fresh plans.
    const id = action();
    await api.call("PUT", `/v1/routes/${id}`, { token: tenant, body: { capability_id: CAPABILITY } });
    let opened = 0;
    const count = () => void opened++;
    db.dataPool.on("connect", count);
    try {
      for (let i = 0; i < 10; i++) {
        expect((await api.call("PUT", `/v1/routes/${action()}`, { token: tenant, body: { capability_id: "cap:ho.none" } })).status).toBe(404);
        expect((await api.call("PUT", `/v1/routes/${id}`, { token: tenant, body: { capability_id: "cap:ho.other" } })).status).toBe(409);
      }
    } finally {
      db.dataPool.off("connect", count);
    }
    expect(opened, "database connections opened while answering 20 refusals").toBe(0);
  });
});
