/**
 * SQL injection through every string the API takes: record IDs, capability IDs, tenant IDs (from
 * the token's claim), policy, credential and secret-provider references, peer identities, replica
 * endpoints, lifecycle request IDs, catalog search text, filters and cursors, admin filters. Every
 * payload is data: stored and answered back verbatim where the value is valid, refused as input
 * where it is not, search text matched literally (`%`, `_` and `\` included), and every registry
 * table still there with exactly the rows the test created.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { useTestDatabase } from "../support/database.js";
import { binding, connectorType, instance, policy, registrationEvidence, replica, version } from "../../fixtures/records.js";
import { expectSaneAnswer, SQL_PAYLOADS } from "../support/fuzz.js";
import { createTestApi, type TestApi } from "../support/http.js";
import { expectHealthy } from "../support/invariants.js";
import { registryState } from "../support/registry-state.js";

const PAYLOADS = [...SQL_PAYLOADS, "Robert'); DROP TABLE aip_connector_types;--", "a'b\"c`d\\e;f--g/*h*/i$$j$x$k"];
const enc = encodeURIComponent;
const cap = (p: string) => `cap:${p}`;
const tenantOf = (p: string) => `t:${p}`;

const db = useTestDatabase();
let api: TestApi;
let admin: string;
let tables: string[];

beforeAll(async () => {
  api = createTestApi(db.registry);
  admin = await api.adminToken();
  tables = Object.keys((await registryState(db.owner)).tables);
  const changes: Record<string, unknown>[] = [connectorType("ctype_sql"), await version("cver_sql_1", "ctype_sql", [...PAYLOADS.map(cap), "cap:sql.plain"])];
  for (const p of PAYLOADS) {
    changes.push(
      policy(`quota:${p}`),
      instance(`cinst_${p}`, "ctype_sql", "cver_sql_1", tenantOf(p), 1, { secret_provider_ref: `vault://${p}` }),
      binding(tenantOf(p), cap(p), `cinst_${p}`, { credential_revision_ref: `cred:${p}`, quota_policy_ref: `quota:${p}` }),
      {
        ...replica(`crepl_${p}`, `cinst_${p}`, "cver_sql_1"),
        peer_principal_id: `service:${p}`,
        peer_did: `did:key:${p}`,
        trust_domain: p,
        endpoint: `https://host.example/aip/v1/${encodeURIComponent(p).replace(/%/g, "_")}';--`,
      },
    );
  }
  const published = await api.call("POST", "/v1/admin/publications", { token: admin, body: { changes } });
  expect(published.status, await published.clone().text()).toBe(200);
});

async function ok(response: Response, status = 200): Promise<any> {
  const text = await response.text();
  expectSaneAnswer(response.url, "GET", response, text, PAYLOADS);
  expect(response.status, text).toBe(status);
  return JSON.parse(text);
}

async function problem(response: Response): Promise<Record<string, unknown>> {
  const text = await response.text();
  const { status, body } = expectSaneAnswer(response.url, "GET", response, text, PAYLOADS);
  expect(status, text).toBeGreaterThanOrEqual(400);
  return body!;
}

describe("payloads in record fields are stored and read back verbatim", () => {
  it("through publication and the administrative readers", async () => {
    for (const p of PAYLOADS) {
      expect(await ok(await api.call("GET", `/v1/admin/instances/${enc(`cinst_${p}`)}`, { token: admin }))).toMatchObject({
        id: `cinst_${p}`,
        tenant_id: tenantOf(p),
        secret_provider_ref: `vault://${p}`,
      });
      expect(await ok(await api.call("GET", `/v1/admin/replicas/${enc(`crepl_${p}`)}`, { token: admin }))).toMatchObject({
        peer_principal_id: `service:${p}`,
        peer_did: `did:key:${p}`,
        trust_domain: p,
      });
      expect(await ok(await api.call("GET", `/v1/admin/admission-policies/${enc(`quota:${p}`)}`, { token: admin }))).toMatchObject({
        policy_ref: `quota:${p}`,
      });
      const bindings = await ok(await api.call("GET", `/v1/admin/bindings?tenant_id=${enc(tenantOf(p))}`, { token: admin }));
      expect(bindings.bindings).toEqual([expect.objectContaining({ tenant_id: tenantOf(p), capability_id: cap(p), credential_revision_ref: `cred:${p}` })]);
    }
  });

  it("through the replica lifecycle (replica IDs and request IDs), replays included", async () => {
    for (const p of PAYLOADS) {
      // The host's principal claim carries the payload too.
      const host = await api.hostToken(`service:${p}`);
      const register = { request_id: p, lease_ttl_ms: 300_000, ...(await registrationEvidence(db.registry, `crepl_${p}`)) };
      const first = await api.call("POST", `/v1/replicas/${enc(`crepl_${p}`)}/register`, { token: host, body: register });
      const text = await first.text();
      expect(first.status, text).toBe(200);
      expect(JSON.parse(text)).toMatchObject({ replica_id: `crepl_${p}`, status: "ready" });
      const replay = await api.call("POST", `/v1/replicas/${enc(`crepl_${p}`)}/register`, { token: host, body: register });
      expect(await replay.text()).toBe(text);
    }
    const { rows } = await db.owner.query<{ n: number }>("SELECT count(*)::int AS n FROM aip_connector_replicas WHERE last_request_id = ANY($1::text[])", [
      PAYLOADS,
    ]);
    expect(rows[0]!.n).toBe(PAYLOADS.length);
  });

  it("through routing and settlement, with the tenant taken from the token's claim", async () => {
    for (const p of PAYLOADS) {
      const token = await api.tenantToken(tenantOf(p));
      const actionId = `act_${p}`;
      const assignment = await ok(await api.call("PUT", `/v1/routes/${enc(actionId)}`, { token, body: { capability_id: cap(p) } }), 201);
      expect(assignment).toMatchObject({
        action_id: actionId,
        tenant_id: tenantOf(p),
        capability_id: cap(p),
        instance_id: `cinst_${p}`,
        replica_id: `crepl_${p}`,
        credential_revision_ref: `cred:${p}`,
        quota_policy_ref: `quota:${p}`,
        peer_did: `did:key:${p}`,
      });
      expect(await ok(await api.call("GET", `/v1/routes/${enc(actionId)}`, { token }))).toEqual(assignment);
      // Another payload tenant does not see it, and a payload capability is not a way around a binding.
      const other = PAYLOADS[(PAYLOADS.indexOf(p) + 1) % PAYLOADS.length]!;
      const otherToken = await api.tenantToken(tenantOf(other));
      expect((await problem(await api.call("GET", `/v1/routes/${enc(actionId)}`, { token: otherToken }))).code).toBe("not-found");
      expect((await problem(await api.call("PUT", `/v1/routes/${enc(`act_x_${p}`)}`, { token: otherToken, body: { capability_id: cap(p) } }))).code).toBe(
        "binding-unavailable",
      );
      expect(await ok(await api.call("POST", `/v1/routes/${enc(actionId)}/settlement`, { token, body: { assignment, outcome: "completed" } }))).toEqual({
        action_id: actionId,
        released: true,
        last_settlement: "completed",
      });
    }
    const { rows } = await db.owner.query<{ n: number }>("SELECT count(*)::int AS n FROM aip_route_assignments WHERE action_id = ANY($1::text[])", [
      PAYLOADS.map((p) => `act_${p}`),
    ]);
    expect(rows[0]!.n).toBe(PAYLOADS.length);
  });
});

describe("payloads in read filters are matched as data", () => {
  /** What a literal, case-insensitive substring search over "id name description" finds. */
  const literalMatches = (q: string) => {
    const needle = q.replace(/^ +| +$/g, "").toLowerCase();
    return [...PAYLOADS.map(cap), "cap:sql.plain"]
      .filter((id) => needle === "" || [id, id.replace(/^cap:/, ""), `Capability ${id}`].join(" ").toLowerCase().includes(needle))
      .sort();
  };

  it("searches text literally: %, _ and \\ are ordinary characters", async () => {
    for (const q of [...PAYLOADS, "%", "_", "\\", "%%", "_%_", "sql.plain", "SQL.PLAIN", "' or '1'='1"]) {
      const page = await ok(await api.call("GET", `/v1/admin/catalog/capabilities?unbound=true&limit=200&q=${enc(q)}`, { token: admin }));
      const expected = literalMatches(q);
      expect(page.capabilities.map((d: any) => d.capability.id).sort(), q).toEqual(expected);
      expect(page.total, q).toBe(expected.length);
    }
    // A tenant's search never leaves its own catalog, whatever the text.
    for (const p of PAYLOADS) {
      const token = await api.tenantToken(tenantOf(p));
      for (const q of ["%", "_", "' OR '1'='1", p]) {
        const page = await ok(await api.call("GET", `/v1/catalog/capabilities?q=${enc(q)}`, { token }));
        expect(
          page.capabilities.map((d: any) => d.capability.id),
          `${p} / ${q}`,
        ).toEqual(literalMatches(q).filter((id) => id === cap(p)));
      }
    }
  });

  it("filters by exact capability ID and profile, and reads single definitions by payload IDs", async () => {
    const token = await api.tenantToken(tenantOf(PAYLOADS[0]!));
    for (const p of PAYLOADS) {
      const exact = await ok(await api.call("GET", `/v1/admin/catalog/capabilities?unbound=true&capability_id=${enc(cap(p))}`, { token: admin }));
      expect(exact.capabilities.map((d: any) => d.capability.id)).toEqual([cap(p)]);
      expect((await ok(await api.call("GET", `/v1/admin/catalog/capabilities?unbound=true&profile=${enc(p)}`, { token: admin }))).total).toBe(0);
      const single = await api.call("GET", `/v1/catalog/capabilities/${enc(cap(p))}`, { token });
      expect(single.status).toBe(p === PAYLOADS[0] ? 200 : 404);
      await single.text();
    }
  });

  it("refuses payload cursors as malformed input, and finds no record under a payload ID", async () => {
    const token = await api.tenantToken(tenantOf(PAYLOADS[0]!));
    for (const p of PAYLOADS) {
      expect(["invalid", "stale-cursor"], p).toContain((await problem(await api.call("GET", `/v1/catalog/capabilities?cursor=${enc(p)}`, { token }))).code);
      expect(["invalid", "stale-cursor"], p).toContain(
        (await problem(await api.call("GET", `/v1/admin/catalog/capabilities?unbound=true&cursor=${enc(p)}`, { token: admin }))).code,
      );
      expect((await problem(await api.call("GET", `/v1/admin/bindings?tenant_id=x&cursor=${enc(p)}`, { token: admin }))).code).toBe("invalid");
      for (const kind of ["connector-types", "versions", "instances", "replicas", "admission-policies"]) {
        expect((await problem(await api.call("GET", `/v1/admin/${kind}/${enc(p)}`, { token: admin }))).code, `${kind} ${p}`).toBe("not-found");
      }
    }
  });
});

describe("afterwards", () => {
  it("every registry table is still there, holding exactly the rows the test created", async () => {
    expect(Object.keys((await registryState(db.owner)).tables)).toEqual(tables);
    const counts = async (sql: string) => (await db.owner.query<{ n: number }>(sql)).rows[0]!.n;
    expect(await counts("SELECT count(*)::int AS n FROM aip_connector_types")).toBe(1);
    expect(await counts("SELECT count(*)::int AS n FROM aip_connector_instances")).toBe(PAYLOADS.length);
    expect(await counts("SELECT count(*)::int AS n FROM aip_connector_replicas WHERE status = 'ready'")).toBe(PAYLOADS.length);
    expect(await counts("SELECT count(*)::int AS n FROM aip_capability_bindings")).toBe(PAYLOADS.length);
    expect(await counts("SELECT count(*)::int AS n FROM aip_capability_definitions")).toBe(PAYLOADS.length + 1);
    expect(await counts("SELECT count(*)::int AS n FROM aip_route_assignments WHERE NOT reserved")).toBe(PAYLOADS.length);
    expect(await counts("SELECT count(*)::int AS n FROM aip_admission_counters WHERE active <> 0")).toBe(0);
    await expectHealthy(db.registry);
    // The login role is still the unprivileged one, and nobody was granted anything.
    const { rows } = await db.owner.query<{ super: boolean }>("SELECT rolsuper AS super FROM pg_roles WHERE rolname = 'aip_tests_data'");
    expect(rows[0]!.super).toBe(false);
  });
});
