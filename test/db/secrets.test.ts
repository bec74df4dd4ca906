/**
 * No credential value is ever persisted: instances carry an opaque secret-provider reference,
 * bindings and routes an opaque credential revision reference, and nothing else. After a full
 * publish / resolve / settle / reacquire / lifecycle / expiry cycle, and after every attempt to
 * smuggle a credential value in (members named secret, password, credential, api_key, token ...
 * over HTTP, and straight into the SQL entry points past the HTTP schemas), a scan of every row
 * of every registry table finds the canary value nowhere, and the references only in the columns
 * that hold references. Bearer tokens and the signing secret are never stored either. The HTTP
 * schemas that take persisted input are strict (unknown members refused); the few free-form
 * documents are named, so a new loose schema is a deliberate change. See docs/security.md.
 */
import { randomBytes } from "node:crypto";
import pg from "pg";
import { beforeAll, describe, expect, it } from "vitest";
import { PROBLEM_SQLSTATE } from "../../src/registry/errors.js";
import { useTestDatabase } from "../support/database.js";
import { binding, connectorType, instance, policy, registerReplica, registrationEvidence, replica, requestId, version } from "../../fixtures/records.js";
import { createTestApi, TEST_SECRET, type TestApi } from "../support/http.js";
import { expectHealthy } from "../support/invariants.js";
import { registryState } from "../support/registry-state.js";
import { withSetOnPath } from "../support/server.js";

const CANARY = `S3CR3T-${randomBytes(8).toString("hex")}`;
const SECRET_NAMES = [
  "secret",
  "password",
  "credential",
  "credential_value",
  "api_key",
  "apiKey",
  "client_secret",
  "private_key",
  "token",
  "access_token",
  "authorization",
];
const TENANT = "tenant-sec";
const SECRET_REF = "vault://tenants/tenant-sec/crm#rev-3";
const CREDENTIAL_REF = "credential-revision-9";
const CAPABILITY = "cap:sec.run";

const db = useTestDatabase();
let api: TestApi;
let admin: string;
let tenant: string;
let host: string;
const tokensUsed: string[] = [];

beforeAll(async () => {
  api = createTestApi(db.registry);
  admin = await api.adminToken();
  tenant = await api.tenantToken(TENANT);
  host = await api.hostTokenFor("crepl_sec");
  tokensUsed.push(admin, tenant, host);
  const published = await api.call("POST", "/v1/admin/publications", {
    token: admin,
    body: {
      changes: [
        connectorType("ctype_sec"),
        await version("cver_sec_1", "ctype_sec", [CAPABILITY]),
        policy("quota:sec"),
        instance("cinst_sec", "ctype_sec", "cver_sec_1", TENANT, 1, { secret_provider_ref: SECRET_REF }),
        binding(TENANT, CAPABILITY, "cinst_sec", { credential_revision_ref: CREDENTIAL_REF, quota_policy_ref: "quota:sec" }),
        replica("crepl_sec", "cinst_sec", "cver_sec_1"),
      ],
    },
  });
  expect(published.status).toBe(200);
  await registerReplica(db.registry, "crepl_sec");
});

/** Every (table, column) whose value contains `needle`, over every row of every registry table. */
async function whereStored(needle: string): Promise<string[]> {
  const { rows: columns } = await db.owner.query<{ table_name: string; column_name: string }>(
    `SELECT table_name, column_name FROM information_schema.columns
     WHERE table_schema = 'public' AND table_name LIKE 'aip\\_%' ORDER BY 1, 2`,
  );
  expect(columns.length).toBeGreaterThan(50);
  const probe = columns
    .map((c, i) => `SELECT ${i} AS i FROM ${pg.escapeIdentifier(c.table_name)} WHERE strpos(${pg.escapeIdentifier(c.column_name)}::text, $1) > 0`)
    .join(" UNION ");
  const { rows } = await db.owner.query<{ i: number }>(probe, [needle]);
  return rows.map((r) => `${columns[r.i]!.table_name}.${columns[r.i]!.column_name}`).sort();
}

describe("credential values are never persisted", () => {
  it("runs a full cycle with references only: publish, resolve, settle, reacquire, lifecycle, expiry", async () => {
    const assignment = (await (await api.call("PUT", "/v1/routes/act_sec_1", { token: tenant, body: { capability_id: CAPABILITY } })).json()) as Record<
      string,
      unknown
    >;
    expect(assignment).toMatchObject({ credential_revision_ref: CREDENTIAL_REF });
    expect(JSON.stringify(assignment)).not.toContain(SECRET_REF);
    expect((await api.call("POST", "/v1/routes/act_sec_1/settlement", { token: tenant, body: { assignment, outcome: "completed" } })).status).toBe(200);
    expect((await api.call("PUT", "/v1/routes/act_sec_1", { token: tenant, body: { capability_id: CAPABILITY } })).headers.get("aip-route-outcome")).toBe(
      "reacquired",
    );
    const sequence = (await db.registry.adminGet("replica", "crepl_sec"))!.health_revision as number;
    expect(
      (await api.call("POST", "/v1/replicas/crepl_sec/offline", { token: host, body: { request_id: requestId(), previous_sequence: sequence } })).status,
    ).toBe(200);
    expect((await api.call("POST", "/v1/fleet/lease-expiry?limit=10", { token: admin })).status).toBe(200);
    await expectHealthy(db.registry);
  });

  it("refuses every member named like a credential value over HTTP (400), persisting nothing", async () => {
    const before = await registryState(db.owner);
    const attempts: [string, string, string, (name: string) => unknown][] = [
      ["POST", "/v1/admin/publications", admin, (name) => ({ changes: [{ ...instance("cinst_sec_x", "ctype_sec", "cver_sec_1", TENANT), [name]: CANARY }] })],
      [
        "POST",
        "/v1/admin/publications",
        admin,
        (name) => ({ changes: [{ ...binding(TENANT, CAPABILITY, "cinst_sec", { policy_revision: 2 }), [name]: CANARY }] }),
      ],
      ["POST", "/v1/admin/publications", admin, (name) => ({ changes: [{ ...replica("crepl_sec_x", "cinst_sec", "cver_sec_1"), [name]: CANARY }] })],
      ["POST", "/v1/admin/publications", admin, (name) => ({ changes: [{ ...connectorType("ctype_sec_x"), [name]: CANARY }] })],
      ["POST", "/v1/admin/publications", admin, (name) => ({ changes: [{ ...policy("quota:sec_x"), [name]: CANARY }] })],
      ["POST", "/v1/admin/publications", admin, (name) => ({ changes: [connectorType("ctype_sec_y")], [name]: CANARY })],
      ["PUT", "/v1/routes/act_sec_x", tenant, (name) => ({ capability_id: CAPABILITY, [name]: CANARY })],
      ["PUT", "/v1/routes/act_sec_x", tenant, (name) => ({ capability_id: CAPABILITY, topology: { [name]: CANARY } })],
      [
        "POST",
        "/v1/routes/act_sec_1/settlement",
        tenant,
        (name) => ({ assignment: { action_id: "act_sec_1", fence_token: "x" }, outcome: "completed", [name]: CANARY }),
      ],
      ["POST", "/v1/replicas/crepl_sec/register", host, (name) => ({ request_id: requestId(), [name]: CANARY })],
    ];
    for (const [method, path, token, body] of attempts) {
      for (const name of SECRET_NAMES) {
        const response = await api.call(method, path, { token, body: body(name), headers: { "x-secret": CANARY, "x-api-key": CANARY } });
        const problem = (await response.json()) as { code: string; errors?: { message: string }[] };
        expect(response.status, `${method} ${path} with ${name}`).toBe(400);
        expect(problem.code).toBe("invalid");
        expect(JSON.stringify(problem), "the refusal does not echo the value").not.toContain(CANARY);
      }
    }
    expect(await registryState(db.owner)).toEqual(before);
    expect(await whereStored(CANARY)).toEqual([]);
  });

  it("stores no credential value even when a caller skips the HTTP schemas and calls SQL directly", async () => {
    const control = new pg.Client({ connectionString: withSetOnPath(db.controlUrl) });
    const data = new pg.Client({ connectionString: withSetOnPath(db.dataUrl) });
    await Promise.all([control.connect(), data.connect()]);
    try {
      const smuggled = Object.fromEntries(SECRET_NAMES.map((name) => [name, CANARY]));
      const changes = [
        { ...instance("cinst_sec_sql", "ctype_sec", "cver_sec_1", TENANT), ...smuggled },
        { ...binding(TENANT, CAPABILITY, "cinst_sec_sql"), ...smuggled },
        { ...replica("crepl_sec_sql", "cinst_sec_sql", "cver_sec_1"), ...smuggled },
        { ...connectorType("ctype_sec_sql"), ...smuggled },
        { ...policy("quota:sec_sql"), ...smuggled },
      ];
      // Unknown members are not read by the SQL publication: the records are published, the values dropped.
      await control.query("SELECT aip_publish($1::jsonb, false)", [JSON.stringify(changes)]);
      await data.query("SELECT aip_host_replica_lifecycle('crepl_sec_sql', 'register', $1::jsonb, 'service:crepl_sec_sql')", [
        JSON.stringify({ request_id: "msg_sec_sql", ...(await registrationEvidence(db.registry, "crepl_sec_sql")), ...smuggled }),
      ]);
      const routed = await data.query<{ r: { assignment: Record<string, unknown> } }>("SELECT aip_resolve_route('act_sec_sql', $1, $2, $3::jsonb) AS r", [
        TENANT,
        CAPABILITY,
        JSON.stringify(smuggled),
      ]);
      const assignment = routed.rows[0]!.r.assignment;
      await expect(
        data.query("SELECT aip_settle_route('act_sec_sql', $1, $2::jsonb, 'completed')", [TENANT, JSON.stringify({ ...assignment, ...smuggled })]),
      ).rejects.toMatchObject({ code: PROBLEM_SQLSTATE, detail: expect.stringContaining('"code": "fence-lost"') });
      await data.query("SELECT aip_settle_route('act_sec_sql', $1, $2::jsonb, 'completed')", [TENANT, JSON.stringify(assignment)]);
    } finally {
      await Promise.all([control.end(), data.end()]);
    }
    expect(await whereStored(CANARY)).toEqual([]);
  });

  it("stores the references only in the columns that hold references, and never a bearer token or the signing secret", async () => {
    expect(await whereStored(SECRET_REF)).toEqual(["aip_connector_instances.secret_provider_ref"]);
    expect(await whereStored(CREDENTIAL_REF)).toEqual([
      "aip_capability_bindings.credential_revision_ref",
      "aip_catalog_entries.credential_revision_ref",
      "aip_route_assignments.credential_revision_ref",
    ]);
    for (const token of tokensUsed) {
      for (const part of token.split(".")) expect(await whereStored(part), "a bearer token segment").toEqual([]);
    }
    expect(await whereStored(TEST_SECRET)).toEqual([]);
  });

  it("has no column for a credential value: the credential-like columns are exactly the references and the fence token", async () => {
    const { rows } = await db.owner.query<{ column: string }>(
      `SELECT table_name || '.' || column_name AS column FROM information_schema.columns
       WHERE table_schema = 'public' AND table_name LIKE 'aip\\_%'
         AND column_name ~* '(secret|password|passwd|credential|api_?key|private|token|auth)'
       ORDER BY 1`,
    );
    expect(rows.map((r) => r.column)).toEqual([
      "aip_capability_bindings.credential_revision_ref",
      // The live binding chain carries the binding's reference for the resolver.
      "aip_catalog_entries.credential_revision_ref",
      "aip_connector_instances.secret_provider_ref",
      "aip_route_assignments.credential_revision_ref",
      "aip_route_assignments.fence_token",
    ]);
  });
});

describe("the HTTP schemas of persisted input", () => {
  /** Free-form documents by design: a version's manifest and attestation (published artifact metadata, shown to tenants) and the presented assignment (compared, never stored). */
  const LOOSE = new Set(["#/components/schemas/Manifest", "#/components/schemas/Attestation", "SettlementRequest.assignment"]);

  it("refuse unknown members everywhere except the named free-form documents", async () => {
    const doc = (await (await api.app.request("/openapi.json")).json()) as {
      paths: Record<string, Record<string, any>>;
      components: { schemas: Record<string, any> };
    };
    const strict: string[] = [];
    const loose: string[] = [];
    const maps: string[] = [];
    const visit = (schema: any, where: string, seen: Set<string>) => {
      if (!schema || typeof schema !== "object") return;
      if (schema.$ref) {
        if (LOOSE.has(schema.$ref)) return void loose.push(schema.$ref);
        if (seen.has(schema.$ref)) return;
        const name = schema.$ref.split("/").pop();
        return visit(doc.components.schemas[name], name, new Set([...seen, schema.$ref]));
      }
      for (const key of ["oneOf", "anyOf", "allOf"]) for (const [i, s] of (schema[key] ?? []).entries()) visit(s, `${where}[${i}]`, seen);
      if (schema.items) visit(schema.items, `${where}[]`, seen);
      if (schema.type === "object" || schema.properties) {
        if (LOOSE.has(where)) return void loose.push(where);
        if (!schema.properties && schema.additionalProperties && typeof schema.additionalProperties === "object") {
          // A map keyed by identifiers (implementation_support by capability ID): its values must be strict.
          maps.push(where);
          return visit(schema.additionalProperties, `${where}{}`, seen);
        }
        expect(schema.additionalProperties, `${where} must refuse unknown members`).toBe(false);
        strict.push(where);
        for (const [name, s] of Object.entries(schema.properties ?? {})) visit(s, `${where}.${name}`, seen);
      }
    };
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(item)) {
        const schema = op?.requestBody?.content?.["application/json"]?.schema;
        if (schema) visit(schema, `${method.toUpperCase()} ${path}`, new Set());
      }
    }
    expect(strict).toEqual(
      expect.arrayContaining([
        "ResolveRequest",
        "SettlementRequest",
        "LifecycleRequest",
        "PublicationRequest",
        "TopologyPreference",
        "Change[5]",
        "Change[6]",
        "Change[8]",
        "ImplementationSupport",
      ]),
    );
    expect(maps).toEqual(["Change[2].implementation_support"]);
    expect(new Set(loose)).toEqual(LOOSE);
  });
});
