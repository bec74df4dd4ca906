/**
 * One side of bench/app-overhead.ts, in a process of its own: the app of the source tree at
 * `root` (this checkout, or another commit's `git archive`) over a stub executor that answers
 * instantly, driven through `app.fetch` at 32 requests in flight. Prints one JSON line: the
 * process's CPU per request (µs). No network, no database: what is left is the app's own work per
 * request (middleware, authentication, validation, serialization), the part a change to the app's
 * hot path moves. Built as the Node server builds it (the activity history where the tree has
 * one; no access log, no metrics: the other HTTP benchmarks run without them too).
 *
 *   node --import tsx bench/workloads/app-request.ts <root> <catalog|resolve> [requests]
 */
export {};

const [root, workload, count] = process.argv.slice(2) as [string, "catalog" | "resolve", string | undefined];
const requests = Number(count ?? 40_000);
const { createApp } = await import(`${root}/src/app.ts`);
const { Registry } = await import(`${root}/src/registry/registry.ts`);
const { createAuthenticator } = await import(`${root}/src/http/auth.ts`);
const { mintToken } = await import(`${root}/src/http/tokens.ts`);
const { MemoryCatalogCache } = await import(`${root}/src/catalog/cache.ts`);
/** The same executor the tree's own adapters would give (this tree comments statements; an older one may not). */
const traced = await import(`${root}/src/db/traced.ts`).then((m) => m.traced as (e: unknown) => unknown).catch(() => (e: unknown) => e);

const PAGE = JSON.stringify({
  catalog_revision: 1,
  capabilities: Array.from({ length: 50 }, (_, i) => ({ capability: { id: `cap:bench.${i}` } })),
  next_cursor: null,
});
const ASSIGNMENT = { action_id: "act_bench", tenant_id: "tenant-bench", capability_id: "cap:bench.0", replica_id: "crepl_bench", fence_token: 1 };
const stub = {
  async query(text: string, params: unknown[]) {
    // A warm catalog hit: the page is built once, then every request only confirms its revision.
    if (text.includes("aip_catalog_page(")) return [{ revision: "1", text: params[2] === null ? PAGE : null, not_modified: params[2] !== null }];
    return [{ result: { outcome: "existing", assignment: ASSIGNMENT } }];
  },
};
const executor = traced(stub);
/** The activity history, as the Node server records it, where the tree has one. */
const activity = await import(`${root}/src/observability/activity.ts`)
  .then((m) => ({ activity: new m.MemoryActivity(), build: { version: "bench", runtime: "node", schema_version: 0, functions_checksum: "" } }))
  .catch(() => ({}));
const secret = "bench-secret-bench-secret-bench-secret-0123";
const app = createApp({
  registry: new Registry({ data: executor, control: executor }),
  authenticator: createAuthenticator({ hs256Secret: secret }),
  catalog: { cache: new MemoryCatalogCache(1 << 20) },
  ...activity,
});
const token = await mintToken(secret, { subject: "bench", tenantId: "tenant-bench", scopes: ["catalog:read", "routes:write"] });
const request =
  workload === "catalog"
    ? () => new Request("http://registry/v1/catalog/capabilities?limit=50", { headers: { authorization: `Bearer ${token}` } })
    : () =>
        new Request("http://registry/v1/routes/act_bench", {
          method: "PUT",
          headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
          body: JSON.stringify({ capability_id: "cap:bench.0" }),
        });
const one = async () => {
  const response = await app.fetch(request());
  if (response.status >= 300) throw new Error(`${workload}: ${response.status} ${await response.text()}`);
  await response.arrayBuffer();
};
const run = async (n: number) => {
  for (let i = 0; i < n; i += 32) await Promise.all(Array.from({ length: 32 }, one));
};
await run(4000); // JIT, the token cache, the catalog cache
const before = process.cpuUsage();
await run(requests);
const cpu = process.cpuUsage(before);
process.stdout.write(`${JSON.stringify({ cpuUsPerRequest: (cpu.user + cpu.system) / requests })}\n`);
