/**
 * The Worker's catalog replica path (CATALOG_DATABASE_URL) in workerd, on the Neon driver through
 * the local proxy: the replica statement (its lag measured in the same statement) runs over
 * Neon's HTTP transport, one statement per catalog request; a replica that cannot be used leaves
 * the catalog answering from DATABASE_URL, and `/readyz` ready with the replica's state. The real
 * streaming standby cases are test/http/catalog-replica-bounds.test.ts.
 */
import { env } from "cloudflare:workers";
import { beforeAll, describe, expect, it } from "vitest";
import { conformancePrefix } from "../conformance/index.js";
import { Api } from "../conformance/target.js";
import { binding, connectorType, instance, version } from "../../fixtures/records.js";
import { proxyStats, workerEnv, workerTarget } from "./support.js";

const p = conformancePrefix("cr");
const caps = [`cap:${p}.a`, `cap:${p}.b`];
const tenant = `${p}-t`;

const statements = async () => (await proxyStats()).statements;
const api = (prefix: string, overrides: Record<string, string>) => new Api(workerTarget(workerEnv({ NEON_TRANSPORT: "http", ...overrides }), prefix));

beforeAll(async () => {
  await api(p, {}).publish([
    connectorType(`ctype_${p}`),
    await version(`cver_${p}`, `ctype_${p}`, caps),
    instance(`cinst_${p}`, `ctype_${p}`, `cver_${p}`, tenant),
    ...caps.map((cap) => binding(tenant, cap, `cinst_${p}`)),
  ]);
});

describe("a catalog replica in the Worker", () => {
  it("serves catalog reads from the replica in one statement each, and reports it ready", async () => {
    // The primary itself as the "replica": not in recovery, so its lag is 0.
    const worker = api(p, { CATALOG_DATABASE_URL: env.DATABASE_URL as string, CATALOG_MAX_STALENESS_MS: "0" });
    const token = await worker.tenant(tenant);
    expect((await worker.call("GET", "/v1/catalog/capabilities", { token })).status).toBe(200);
    const before = await statements();
    const page = await worker.call("GET", "/v1/catalog/capabilities", { token });
    expect(page.status).toBe(200);
    expect((page.body.capabilities as unknown[]).length).toBe(2);
    expect((await statements()) - before).toBe(1);
    const ready = await worker.call("GET", "/readyz");
    expect(ready.status).toBe(200);
    expect(ready.body.catalog_replica).toMatchObject({ state: "ok", lag_ms: 0, max_lag_ms: 1000 });
  });

  it("answers from DATABASE_URL while the replica cannot be used, and stays ready", async () => {
    const broken = (env.DATABASE_URL as string).replace(/\/[^/]*$/, "/aip_no_such_replica");
    const worker = api(`${p}b`, { CATALOG_DATABASE_URL: broken, CATALOG_REPLICA_MAX_LAG_MS: "500" });
    const token = await worker.tenant(tenant);
    for (let n = 0; n < 3; n++) {
      const page = await worker.call("GET", "/v1/catalog/capabilities", { token });
      expect(page.status).toBe(200);
      expect((page.body.capabilities as unknown[]).length).toBe(2);
      expect((await worker.call("GET", `/v1/catalog/capabilities/${encodeURIComponent(caps[0]!)}`, { token })).status).toBe(200);
    }
    const ready = await worker.call("GET", "/readyz");
    expect(ready.status).toBe(200);
    expect(ready.body).toMatchObject({ status: "ready", catalog_replica: { state: "unreachable", max_lag_ms: 500 } });
    expect((ready.body.catalog_replica as { fallbacks: Record<string, number> }).fallbacks.error).toBeGreaterThan(0);
  });
});
