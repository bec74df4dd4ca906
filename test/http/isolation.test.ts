/**
 * Tenant isolation under attack. The signed `tenant_id` claim is the only source of tenant
 * identity: another tenant's action can be neither read, settled (even with its exact, stolen
 * assignment) nor hijacked, and the refusal reveals nothing of it; a tenant named in a body, a
 * header, a query string, the JWT header or any other claim is ignored or refused; another
 * tenant's catalog stays invisible (pages, single reads, search, cursors, validators); and a token
 * without a tenant cannot route at all. Every refusal leaves the database as it was.
 */
import { SignJWT } from "jose";
import { beforeAll, beforeEach, describe, expect, it } from "vitest";
import { useTestDatabase } from "../support/database.js";
import { binding, connectorType, instance, registerReplica, replica, version } from "../../fixtures/records.js";
import { expectSaneAnswer, TENANT_HEADERS } from "../support/fuzz.js";
import { createTestApi, TEST_SECRET, type TestApi } from "../support/http.js";
import { expectHealthy } from "../support/invariants.js";
import { registryState, type RegistryState } from "../support/registry-state.js";

const VICTIM = "tenant-victim";
const ATTACKER = "tenant-attacker";
const SHARED = "cap:iso.shared";
const SECRET_CAP = "cap:iso.victim-only";

const db = useTestDatabase();
let api: TestApi;
let victim: string;
let attacker: string;
/** The victim's reserved route, as the victim received it (what a thief would replay). */
let stolen: Record<string, unknown>;
let stolenText: string;
const VICTIM_ACTION = "act_iso_victim_0001";

beforeAll(async () => {
  api = createTestApi(db.registry);
  await db.registry.publish([
    connectorType("ctype_iso"),
    await version("cver_iso_1", "ctype_iso", [SHARED, { id: SECRET_CAP, description: "payroll export for the victim" }]),
    instance("cinst_iso_victim", "ctype_iso", "cver_iso_1", VICTIM, 1, { secret_provider_ref: "vault://victim/only" }),
    binding(VICTIM, SHARED, "cinst_iso_victim", { credential_revision_ref: "victim-credential-rev-7" }),
    binding(VICTIM, SECRET_CAP, "cinst_iso_victim"),
    replica("crepl_iso_victim", "cinst_iso_victim", "cver_iso_1", { endpoint: "https://victim-host.internal.example/aip/v1/messages" }),
    instance("cinst_iso_attacker", "ctype_iso", "cver_iso_1", ATTACKER),
    binding(ATTACKER, SHARED, "cinst_iso_attacker"),
    replica("crepl_iso_attacker", "cinst_iso_attacker", "cver_iso_1"),
  ]);
  await registerReplica(db.registry, "crepl_iso_victim");
  await registerReplica(db.registry, "crepl_iso_attacker");
  victim = await api.tenantToken(VICTIM);
  attacker = await api.tenantToken(ATTACKER);
  const created = await api.call("PUT", `/v1/routes/${VICTIM_ACTION}`, { token: victim, body: { capability_id: SHARED } });
  expect(created.status).toBe(201);
  stolenText = await created.text();
  stolen = JSON.parse(stolenText) as Record<string, unknown>;
});

let before: RegistryState;
beforeEach(async () => {
  before = await registryState(db.owner);
});

/** Strings that identify the victim's route or configuration: none may appear in an attacker's answer. */
const victimSecrets = () => [
  VICTIM,
  String(stolen.fence_token),
  String(stolen.replica_id),
  String(stolen.instance_id),
  String(stolen.endpoint),
  String(stolen.peer_did),
  "victim-credential-rev-7",
  "vault://victim/only",
  "payroll",
  SECRET_CAP,
];

async function refusal(response: Response, status: number, code: string, inputs: string[] = []) {
  const text = await response.text();
  const { body } = expectSaneAnswer(response.url, "GET", response, text, inputs);
  expect(response.status, text).toBe(status);
  expect(body?.code, text).toBe(code);
  const visible = text + JSON.stringify([...response.headers]);
  for (const secret of victimSecrets().filter((s) => !inputs.includes(s))) expect(visible, `leaks ${secret}`).not.toContain(secret);
  return body!;
}

/** The problem body without the fields that differ between any two requests. */
const shape = (body: Record<string, unknown>, actionId: string) => ({
  ...body,
  request_id: "-",
  detail: String(body.detail).replace(actionId, "<action>"),
  action_id: undefined,
});

const sign = (payload: Record<string, unknown>, header: Record<string, unknown> = {}) =>
  new SignJWT(payload)
    .setProtectedHeader({ alg: "HS256", typ: "JWT", ...header })
    .setIssuedAt()
    .setExpirationTime("1h")
    .sign(new TextEncoder().encode(TEST_SECRET));

describe("another tenant's action", () => {
  it("cannot be read: 404, indistinguishable from an action that was never routed", async () => {
    const theirs = await refusal(await api.call("GET", `/v1/routes/${VICTIM_ACTION}`, { token: attacker }), 404, "not-found", [VICTIM_ACTION]);
    const never = await refusal(await api.call("GET", "/v1/routes/act_iso_never_0001", { token: attacker }), 404, "not-found", ["act_iso_never_0001"]);
    expect(shape(theirs, VICTIM_ACTION)).toEqual(shape(never, "act_iso_never_0001"));
    expect(await registryState(db.owner)).toEqual(before);
  });

  it("cannot be settled with its exact, stolen assignment, nor with one rewritten to the thief's tenant", async () => {
    for (const outcome of ["completed", "outcome_unknown", "cancelled", "lease_expired"]) {
      await refusal(
        await api.call("POST", `/v1/routes/${VICTIM_ACTION}/settlement`, { token: attacker, body: `{"assignment":${stolenText},"outcome":"${outcome}"}` }),
        404,
        "not-found",
        [VICTIM_ACTION],
      );
    }
    await refusal(
      await api.call("POST", `/v1/routes/${VICTIM_ACTION}/settlement`, {
        token: attacker,
        body: { assignment: { ...stolen, tenant_id: ATTACKER }, outcome: "completed" },
      }),
      404,
      "not-found",
      [VICTIM_ACTION, ATTACKER],
    );
    // The stolen assignment under the thief's own action id is not the thief's route either.
    await refusal(
      await api.call("POST", "/v1/routes/act_iso_never_0002/settlement", { token: attacker, body: { assignment: stolen, outcome: "completed" } }),
      404,
      "not-found",
      ["act_iso_never_0002"],
    );
    expect(await registryState(db.owner)).toEqual(before);
    const mine = await api.call("GET", `/v1/routes/${VICTIM_ACTION}`, { token: victim });
    expect(mine.headers.get("aip-route-reserved")).toBe("true");
    expect(await mine.text()).toBe(stolenText);
  });

  it("cannot be hijacked: resolving its action id is a 409 that names nothing of the victim's route", async () => {
    await refusal(await api.call("PUT", `/v1/routes/${VICTIM_ACTION}`, { token: attacker, body: { capability_id: SHARED } }), 409, "conflict", [
      VICTIM_ACTION,
      SHARED,
    ]);
    await refusal(
      await api.call("PUT", `/v1/routes/${VICTIM_ACTION}`, {
        token: attacker,
        body: { capability_id: SHARED, topology: { region: "eu-west", allow_cross_region: false } },
      }),
      409,
      "conflict",
      [VICTIM_ACTION, SHARED],
    );
    expect(await registryState(db.owner)).toEqual(before);
    expect(await (await api.call("GET", `/v1/routes/${VICTIM_ACTION}`, { token: victim })).text()).toBe(stolenText);
  });

  it("stays the victim's after all of the above: its owner still settles it exactly once", async () => {
    const settled = await api.call("POST", `/v1/routes/${VICTIM_ACTION}/settlement`, {
      token: victim,
      body: `{"assignment":${stolenText},"outcome":"completed"}`,
    });
    expect(await settled.json()).toEqual({ action_id: VICTIM_ACTION, released: true, last_settlement: "completed" });
    // Settled: the attacker still cannot reacquire it.
    await refusal(await api.call("PUT", `/v1/routes/${VICTIM_ACTION}`, { token: attacker, body: { capability_id: SHARED } }), 409, "conflict", [
      VICTIM_ACTION,
      SHARED,
    ]);
    await expectHealthy(db.registry);
  });
});

describe("a forged tenant", () => {
  it("in a body member is refused by the strict schemas (400), before the database", async () => {
    const cases: [string, string, string, unknown][] = [
      ["PUT", "/v1/routes/act_iso_forge_1", attacker, { capability_id: SHARED, tenant_id: VICTIM }],
      ["PUT", "/v1/routes/act_iso_forge_1", attacker, { capability_id: SHARED, topology: { tenant_id: VICTIM } }],
      ["POST", `/v1/routes/${VICTIM_ACTION}/settlement`, attacker, { assignment: stolen, outcome: "completed", tenant_id: VICTIM }],
      [
        "POST",
        "/v1/replicas/crepl_iso_victim/heartbeat",
        await api.hostTokenFor("crepl_iso_victim"),
        { request_id: "msg_iso_forge", previous_sequence: 1, tenant_id: VICTIM },
      ],
    ];
    for (const [method, path, token, body] of cases) {
      const problem = await refusal(await api.call(method, path, { token, body }), 400, "invalid", [VICTIM_ACTION, VICTIM, SHARED]);
      expect(problem.errors, JSON.stringify(body)).toEqual(
        expect.arrayContaining([{ field: expect.stringMatching(/^(topology\.)?tenant_id$/), message: "is not a known field" }]),
      );
    }
    expect(await registryState(db.owner)).toEqual(before);
  });

  it("in a header or a query string is ignored: the token's tenant is the one that acts", async () => {
    const forged = Object.fromEntries(TENANT_HEADERS.map((h) => [h, VICTIM]));
    await refusal(await api.call("GET", `/v1/routes/${VICTIM_ACTION}?tenant_id=${VICTIM}`, { token: attacker, headers: forged }), 404, "not-found", [
      VICTIM_ACTION,
      VICTIM,
    ]);
    const created = await api.call("PUT", `/v1/routes/act_iso_forge_2?tenant_id=${VICTIM}`, {
      token: attacker,
      headers: forged,
      body: { capability_id: SHARED },
    });
    expect(created.status).toBe(201);
    expect(await created.json()).toMatchObject({ tenant_id: ATTACKER, instance_id: "cinst_iso_attacker" });
    const page = await api.call("GET", `/v1/catalog/capabilities?tenant_id=${VICTIM}`, { token: attacker, headers: forged });
    expect(((await page.json()) as { capabilities: { capability: { id: string } }[] }).capabilities.map((d) => d.capability.id)).toEqual([SHARED]);
    await refusal(
      await api.call("PUT", `/v1/routes/act_iso_forge_3`, { token: attacker, headers: forged, body: { capability_id: SECRET_CAP } }),
      404,
      "binding-unavailable",
      [SECRET_CAP, ATTACKER],
    );
  });

  it("in the JWT header or in any claim but a signed tenant_id is ignored", async () => {
    const scope = "catalog:read routes:read routes:write";
    // Header parameters are not claims: only the payload's tenant_id counts.
    const headerForged = await sign({ scope, tenant_id: ATTACKER }, { kid: VICTIM, tenant_id: VICTIM });
    await refusal(await api.call("GET", `/v1/routes/${VICTIM_ACTION}`, { token: headerForged }), 404, "not-found", [VICTIM_ACTION]);
    const created = await api.call("PUT", "/v1/routes/act_iso_forge_4", { token: headerForged, body: { capability_id: SHARED } });
    expect(await created.json()).toMatchObject({ tenant_id: ATTACKER });
    // Look-alike claims name no tenant: such a token cannot route and sees an empty catalog.
    const lookalike = await sign({
      scope,
      tenant: VICTIM,
      tid: VICTIM,
      org_id: VICTIM,
      "https://aip.dev/tenant_id": VICTIM,
      tenant_ids: [VICTIM],
      sub: VICTIM,
    });
    await refusal(await api.call("GET", `/v1/routes/${VICTIM_ACTION}`, { token: lookalike }), 403, "forbidden", [VICTIM_ACTION]);
    await refusal(await api.call("PUT", "/v1/routes/act_iso_forge_5", { token: lookalike, body: { capability_id: SHARED } }), 403, "forbidden");
    const page = await api.call("GET", "/v1/catalog/capabilities", { token: lookalike });
    expect(await page.json()).toMatchObject({ capabilities: [], total: 0 });
  });

  it("can only be a string: a tenant_id that is a number, array, object, empty or blank is a 401", async () => {
    for (const tenant of [42, [VICTIM], { id: VICTIM }, "", "   ", true, null]) {
      const token = await sign({ scope: "catalog:read routes:read routes:write", tenant_id: tenant });
      await refusal(await api.call("GET", `/v1/routes/${VICTIM_ACTION}`, { token }), 401, "unauthorized", [VICTIM_ACTION]);
    }
    expect(await registryState(db.owner)).toEqual(before);
  });
});

describe("another tenant's catalog", () => {
  it("is invisible in pages, single reads and search, and its 404 matches a capability that does not exist", async () => {
    const page = (await (await api.call("GET", "/v1/catalog/capabilities", { token: attacker })).json()) as {
      capabilities: { capability: { id: string } }[];
      total: number;
    };
    expect(page.capabilities.map((d) => d.capability.id)).toEqual([SHARED]);
    expect(page.total).toBe(1);
    for (const q of ["payroll", "victim", "iso.victim-only", "%", "_"]) {
      const search = (await (await api.call("GET", `/v1/catalog/capabilities?q=${encodeURIComponent(q)}`, { token: attacker })).json()) as { total: number };
      expect(search.total, q).toBe(0);
    }
    const exact = (await (await api.call("GET", `/v1/catalog/capabilities?capability_id=${encodeURIComponent(SECRET_CAP)}`, { token: attacker })).json()) as {
      total: number;
    };
    expect(exact.total).toBe(0);
    const theirs = await refusal(await api.call("GET", `/v1/catalog/capabilities/${encodeURIComponent(SECRET_CAP)}`, { token: attacker }), 404, "not-found", [
      SECRET_CAP,
    ]);
    const none = await refusal(
      await api.call("GET", `/v1/catalog/capabilities/${encodeURIComponent("cap:iso.nothing")}`, { token: attacker }),
      404,
      "not-found",
      ["cap:iso.nothing"],
    );
    expect(shape(theirs, SECRET_CAP)).toEqual(shape(none, "cap:iso.nothing"));
  });

  it("does not leak through the victim's cursor or validator", async () => {
    const first = await api.call("GET", "/v1/catalog/capabilities?limit=1", { token: victim });
    const { next_cursor } = (await first.json()) as { next_cursor: string };
    expect(next_cursor).toEqual(expect.any(String));
    // The victim's cursor in the attacker's hands is refused: it is bound to the victim's walk
    // (400; or 409 stale-cursor when the tenants' revisions differ), and tells nothing.
    const continued = await api.call("GET", `/v1/catalog/capabilities?limit=1&cursor=${encodeURIComponent(next_cursor)}`, { token: attacker });
    const text = await continued.text();
    expect([400, 409], text).toContain(continued.status);
    expect(JSON.parse(text)).toMatchObject({ code: continued.status === 400 ? "invalid" : "stale-cursor" });
    expect(text).not.toContain(SECRET_CAP);
    // The victim's ETag is bound to the victim's tenant: it never makes the attacker's read a 304.
    const etag = first.headers.get("etag")!;
    const revalidated = await api.call("GET", "/v1/catalog/capabilities?limit=1", { token: attacker, headers: { "if-none-match": etag } });
    expect(revalidated.status).toBe(200);
    const single = await api.call("GET", `/v1/catalog/capabilities/${encodeURIComponent(SHARED)}`, { token: victim });
    const singleAttacker = await api.call("GET", `/v1/catalog/capabilities/${encodeURIComponent(SHARED)}`, {
      token: attacker,
      headers: { "if-none-match": single.headers.get("etag")! },
    });
    expect(singleAttacker.status).toBe(200);
  });
});

describe("a token without tenant_id", () => {
  it("cannot route, read or settle routes (403), sees an empty catalog, and changes nothing", async () => {
    const untenanted = await api.token({ scopes: ["catalog:read", "routes:read", "routes:write"] });
    await refusal(await api.call("PUT", "/v1/routes/act_iso_none_1", { token: untenanted, body: { capability_id: SHARED } }), 403, "forbidden");
    await refusal(await api.call("GET", `/v1/routes/${VICTIM_ACTION}`, { token: untenanted }), 403, "forbidden", [VICTIM_ACTION]);
    await refusal(
      await api.call("POST", `/v1/routes/${VICTIM_ACTION}/settlement`, { token: untenanted, body: { assignment: stolen, outcome: "completed" } }),
      403,
      "forbidden",
      [VICTIM_ACTION],
    );
    expect(await (await api.call("GET", "/v1/catalog/capabilities", { token: untenanted })).json()).toMatchObject({ capabilities: [], total: 0 });
    await refusal(await api.call("GET", `/v1/catalog/capabilities/${encodeURIComponent(SHARED)}`, { token: untenanted }), 404, "not-found", [SHARED]);
    expect(await registryState(db.owner)).toEqual(before);
  });

  it("and a tenant token cannot reach the control plane or drive replicas (403)", async () => {
    await refusal(await api.call("GET", `/v1/admin/bindings?tenant_id=${VICTIM}`, { token: attacker }), 403, "forbidden", [VICTIM]);
    await refusal(await api.call("GET", `/v1/admin/catalog/capabilities?tenant_id=${VICTIM}`, { token: attacker }), 403, "forbidden", [VICTIM]);
    await refusal(await api.call("GET", "/v1/admin/instances/cinst_iso_victim", { token: attacker }), 403, "forbidden", ["cinst_iso_victim"]);
    await refusal(
      await api.call("POST", "/v1/replicas/crepl_iso_victim/offline", { token: attacker, body: { request_id: "msg_iso_x", previous_sequence: 1 } }),
      403,
      "forbidden",
      ["crepl_iso_victim"],
    );
    await refusal(
      await api.call("POST", "/v1/admin/publications", { token: attacker, body: { changes: [connectorType("ctype_iso_evil")] } }),
      403,
      "forbidden",
    );
    expect(await registryState(db.owner)).toEqual(before);
  });
});
