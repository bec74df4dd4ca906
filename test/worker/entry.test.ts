/**
 * The Worker entry itself: served through the runtime's own dispatch (SELF, with wrangler.toml's
 * main and the project's bindings), the data-plane-only deployment, the schema gate (refuses a
 * mismatch with 503, recovers once the schema matches) and a misconfigured deployment. Lease
 * maintenance (the LeaseClock Durable Object) is test/worker/lease-clock.test.ts.
 */
import { SELF } from "cloudflare:test";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { BUNDLED_ASSET_PREFIX, CDN_ASSET_PREFIX, SWAGGER_UI_FILES } from "../../src/docs/assets.js";
import { conformancePrefix } from "../conformance/index.js";
import { Api, expectProblem, smallFleet } from "../conformance/target.js";
import { connectorType } from "../../fixtures/records.js";
import { FUNCTION_SET } from "../../src/db/schema-version.js";
import { TRANSPORTS, callWorker, databaseUrlOf, mint, ownerSql, workerEnv, workerTarget } from "./support.js";

describe("through the runtime's dispatch (SELF)", () => {
  const api = new Api({ prefix: conformancePrefix("self"), fetch: (path, init) => SELF.fetch(new URL(path, "http://registry.test"), init), mintToken: mint });

  it("serves /healthz and /readyz", async () => {
    expect((await api.call("GET", "/healthz")).body).toEqual({ status: "ok" });
    expect((await api.call("GET", "/readyz")).body).toMatchObject({ status: "ready", function_set: FUNCTION_SET });
  });

  it("reports its isolate as a server of its function set (what migrate --finalize counts)", async () => {
    await api.call("GET", "/v1/fleet/status", { token: await api.admin() });
    const rows = (await ownerSql(inject("workerDatabase")).query(
      "SELECT instance_id, release FROM aip_schema_sightings WHERE set_name = $1 AND runtime = 'worker'",
      [FUNCTION_SET],
    )) as { instance_id: string; release: string }[];
    expect(rows.length).toBeGreaterThan(0);
    expect(rows[0]).toMatchObject({ instance_id: expect.stringMatching(/^isolate\//), release: expect.stringMatching(/^\d+\.\d+\.\d+/) });
  });

  it("serves /docs with the pinned Swagger UI from the CDN, integrity-checked (no asset copies in the bundle)", async () => {
    const page = await SELF.fetch("http://registry.test/docs");
    expect(page.status).toBe(200);
    expect(page.headers.get("content-security-policy")).toMatch(/^default-src 'none'; script-src 'nonce-[^']+'; style-src 'nonce-[^']+'; connect-src 'self'/);
    const html = await page.text();
    for (const [file, { integrity }] of Object.entries(SWAGGER_UI_FILES)) expect(html).toContain(`="${CDN_ASSET_PREFIX}${file}" integrity="${integrity}"`);
    expect((await SELF.fetch(`http://registry.test${BUNDLED_ASSET_PREFIX}swagger-ui.css`)).status).toBe(404);
  });

  it("publishes and reads the records back over the Neon driver", async () => {
    const fleet = await smallFleet(api.prefix);
    const result = await api.publish(fleet.changes);
    expect(result.changed).toBe(fleet.changes.length);
    const type = await api.call("GET", `/v1/admin/connector-types/${fleet.typeId}`, { token: await api.admin() });
    expect(type.body).toMatchObject({ id: fleet.typeId, owner: "org:acme" });
    const catalog = await api.call("GET", "/v1/catalog/capabilities", { token: await api.tenant(fleet.tenants[0] as string) });
    expect(catalog.body.capabilities.map((d: { capability: { id: string } }) => d.capability.id)).toEqual(fleet.capabilities);
  });
});

describe.each(TRANSPORTS)("data-plane-only deployment (no CONTROL_DATABASE_URL), %s", (transport) => {
  const api = new Api(workerTarget(workerEnv({ NEON_TRANSPORT: transport, CONTROL_DATABASE_URL: undefined }), conformancePrefix("dp")));

  it("refuses the control plane with 403 and serves the data plane", async () => {
    const admin = await api.admin();
    expectProblem(
      await api.call("POST", "/v1/admin/publications", { token: admin, body: { changes: [connectorType(`ctype_${api.prefix}`)] } }),
      403,
      "forbidden",
    );
    expectProblem(await api.call("GET", `/v1/admin/connector-types/ctype_${api.prefix}`, { token: admin }), 403, "forbidden");
    expect((await api.call("GET", "/v1/fleet/status", { token: admin })).status).toBe(200);
    // The invariant checker runs as the data role: `doctor` can check an edge deployment.
    expect((await api.call("GET", "/v1/admin/invariants", { token: admin })).body).toMatchObject({ healthy: expect.any(Boolean) });
    expect((await api.call("GET", "/v1/catalog/capabilities", { token: await api.tenant(`${api.prefix}-t`) })).status).toBe(200);
    expect((await api.call("GET", "/readyz")).body).toMatchObject({ status: "ready" });
  });
});

describe("schema gate", () => {
  const server = inject("pgServer");
  const database = `aip_t_${server.runId}_wgate`;
  const postgres = ownerSql("postgres");

  beforeAll(async () => {
    await postgres.query(`CREATE DATABASE ${database} TEMPLATE ${server.template}`);
  });
  afterAll(async () => {
    await postgres.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
  });

  it.each(TRANSPORTS)("refuses a schema it was not built for with 503, and recovers once it matches (%s)", async (transport) => {
    const bindings = workerEnv({
      NEON_TRANSPORT: transport,
      DATABASE_URL: databaseUrlOf(workerEnv().DATABASE_URL as string, database),
      CONTROL_DATABASE_URL: databaseUrlOf(workerEnv().CONTROL_DATABASE_URL as string, database),
    });
    const api = new Api(workerTarget(bindings, conformancePrefix("gate")));
    const owner = ownerSql(database);
    const [{ checksum }] = (await owner.query("SELECT checksum FROM aip_schema_sets WHERE name = $1", [FUNCTION_SET])) as [{ checksum: string }];
    await owner.query("UPDATE aip_schema_sets SET checksum = 'not-this-build' WHERE name = $1", [FUNCTION_SET]);
    try {
      const refused = await api.call("GET", "/v1/fleet/status", { token: await api.admin() });
      expectProblem(refused, 503, "storage");
      expect(refused.body.detail).toMatch(/refusing to serve/);
      expect(refused.headers.get("retry-after")).toBeTruthy();
      expect((await api.call("GET", "/readyz")).status).toBe(503);
    } finally {
      await owner.query("UPDATE aip_schema_sets SET checksum = $1 WHERE name = $2", [checksum, FUNCTION_SET]);
    }
    // A failed check is not remembered: the next request checks again and is served.
    expect((await api.call("GET", "/v1/fleet/status", { token: await api.admin() })).status).toBe(200);
  });
});

describe.each(TRANSPORTS)("database unavailable (%s)", (transport) => {
  it("answers 503 storage and /readyz not_ready, without details of the failure", async () => {
    const missing = `aip_t_${inject("pgServer").runId}_absent`;
    const api = new Api(
      workerTarget(
        workerEnv({ NEON_TRANSPORT: transport, DATABASE_URL: databaseUrlOf(workerEnv().DATABASE_URL as string, missing) }),
        conformancePrefix("down"),
      ),
    );
    const response = await api.call("GET", "/v1/fleet/status", { token: await api.admin() });
    expectProblem(response, 503, "storage");
    expect(response.body.detail).not.toContain(missing);
    expect((await api.call("GET", "/readyz")).body).toMatchObject({ status: "not_ready" });
  });
});

describe("misconfiguration", () => {
  it.each([
    ["no DATABASE_URL", { DATABASE_URL: undefined }],
    ["no auth", { AUTH_HS256_SECRET: undefined }],
    ["an unknown transport", { NEON_TRANSPORT: "carrier-pigeon" }],
    ["lease maintenance without the lease clock's binding", { LEASE_MAINTENANCE_INTERVAL_MS: "1000", LEASE_CLOCK: undefined }],
  ])("%s: 500 internal, without details", async (_name, overrides) => {
    const response = await callWorker(workerEnv(overrides), "/healthz");
    expect(response.status).toBe(500);
    expect(response.headers.get("content-type")).toMatch(/^application\/problem\+json/);
    const body = (await response.json()) as Record<string, unknown>;
    expect(body).toMatchObject({ code: "internal", status: 500 });
    expect(JSON.stringify(body)).not.toMatch(/DATABASE_URL|AUTH_|pigeon|LEASE_/);
  });
});
