/**
 * Worker cold start: the first requests of a fresh workerd isolate against warm requests.
 *
 * Builds the bundle exactly as `wrangler deploy` would (dry run), then, per round, starts a fresh
 * workerd (Miniflare) on that bundle and times: the runtime start (process + script load and
 * top-level evaluation), the first request (configuration, app construction, the once-per-isolate
 * schema check and the call itself), and then warm requests of the same call. Each transport
 * (NEON_TRANSPORT=http|websocket) is measured separately, against a local PostgreSQL through the
 * local Neon proxy, so network latency to Neon is NOT in these figures: they isolate the Worker's
 * own start-up cost and the driver's per-request overhead.
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres npx tsx bench/worker-cold-start.ts
 *   (ROUNDS=5 WARM=30; a scratch database is created and dropped)
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { convertV4MiniflareOptions, Miniflare } from "miniflare";
import pg from "pg";
import { buildWorkerBundle } from "../scripts/bundle-size.js";
import { prepareLocalWorkerDatabase } from "../dev/local-database.js";
import { startNeonProxy } from "../dev/neon-proxy.js";
import { mintToken } from "../src/http/tokens.js";

const ROUNDS = Number(process.env.ROUNDS ?? 5);
const WARM = Number(process.env.WARM ?? 30);
const SECRET = "cold-start-bench-secret-0123456789abcdef";
// wrangler.toml's date, or the newest the workerd under this miniflare supports when that is
// older (as vitest.config.ts does for the workerd tests).
const { compatibilityDate: workerdDate } = createRequire(import.meta.url)("workerd") as { compatibilityDate: string };
const COMPATIBILITY_DATE = [
  /^compatibility_date\s*=\s*"([^"]+)"/m.exec(readFileSync(new URL("../wrangler.toml", import.meta.url), "utf8"))?.[1] ?? workerdDate,
  workerdDate,
].sort()[0] as string;

const quantile = (values: number[], q: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] as number;
};
const ms = (value: number) => `${value.toFixed(1)} ms`;

async function timed<T>(fn: () => Promise<T>): Promise<[T, number]> {
  const started = performance.now();
  const result = await fn();
  return [result, performance.now() - started];
}

async function main() {
  const admin = new URL(process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres");
  const scratch = `aip_bench_cold_${process.pid}`;
  const ownerUrl = new URL(admin);
  ownerUrl.pathname = `/${scratch}`;

  const outdir = await mkdtemp(join(tmpdir(), "aip-cold-start-"));
  // The development entry: the production Worker pointed at the local Neon proxy (a few hundred bytes more).
  const bundle = await buildWorkerBundle(outdir, process.cwd(), "dev/worker.ts");
  console.log(`bundle: ${(bundle.rawBytes / 1024).toFixed(1)} KiB raw, ${(bundle.gzipBytes / 1024).toFixed(1)} KiB gzip`);

  const database = await prepareLocalWorkerDatabase(ownerUrl.toString(), {
    data: "aip_coldstart_data",
    control: "aip_coldstart_control",
    password: "aip-bench-password",
  });
  const proxy = await startNeonProxy({ pgHost: admin.hostname, pgPort: Number(admin.port || 5432) });
  const token = await mintToken(SECRET, { subject: "bench", scopes: ["catalog:read", "fleet:read"], tenantId: "tenant-bench" });
  const get = (mf: Miniflare, path: string) =>
    mf.dispatchFetch(`http://registry.bench${path}`, { headers: { authorization: `Bearer ${token}` } }).then(async (response) => {
      await response.arrayBuffer();
      if (response.status !== 200) throw new Error(`unexpected status ${response.status} for ${path}`);
    });
  const catalog = (mf: Miniflare) => get(mf, "/v1/catalog/capabilities");
  const healthz = (mf: Miniflare) => get(mf, "/healthz");

  try {
    for (const transport of ["http", "websocket"]) {
      const starts: number[] = [];
      const firstHealthz: number[] = [];
      const firstCatalog: number[] = [];
      const warmHealthz: number[] = [];
      const warmCatalog: number[] = [];
      for (let round = 0; round < ROUNDS; round++) {
        const [mf, start] = await timed(async () => {
          const instance = new Miniflare(
            convertV4MiniflareOptions({
              modules: true,
              scriptPath: join(outdir, "worker.js"),
              modulesRoot: outdir,
              compatibilityDate: COMPATIBILITY_DATE,
              bindings: {
                DATABASE_URL: database.dataUrl,
                CONTROL_DATABASE_URL: database.controlUrl,
                AUTH_HS256_SECRET: SECRET,
                NEON_LOCAL_PROXY: proxy.url,
                NEON_TRANSPORT: transport,
                ACCESS_LOG: "false",
                // No lease clock (its Durable Object is not bound here): cold start does not need it.
                LEASE_MAINTENANCE_INTERVAL_MS: "0",
              },
            }),
          );
          await instance.ready;
          return instance;
        });
        try {
          starts.push(start);
          // No database: module already evaluated at start; this pays configuration and app construction.
          firstHealthz.push((await timed(() => healthz(mf)))[1]);
          // The isolate's schema check (one extra statement) and the first driver use.
          firstCatalog.push((await timed(() => catalog(mf)))[1]);
          for (let i = 0; i < WARM; i++) {
            warmHealthz.push((await timed(() => healthz(mf)))[1]);
            warmCatalog.push((await timed(() => catalog(mf)))[1]);
          }
        } finally {
          await mf.dispose();
        }
      }
      console.log(
        [
          `${transport}: runtime start p50 ${ms(quantile(starts, 0.5))} (${ROUNDS} fresh isolates, ${WARM} warm requests each)`,
          `  GET /healthz                first p50 ${ms(quantile(firstHealthz, 0.5))}   warm p50 ${ms(quantile(warmHealthz, 0.5))} p95 ${ms(quantile(warmHealthz, 0.95))}`,
          `  GET /v1/catalog/capabilities first p50 ${ms(quantile(firstCatalog, 0.5))}   warm p50 ${ms(quantile(warmCatalog, 0.5))} p95 ${ms(quantile(warmCatalog, 0.95))}`,
        ].join("\n"),
      );
    }
  } finally {
    await proxy.close();
    const client = new pg.Client({ connectionString: admin.toString() });
    await client.connect();
    await client.query(`DROP DATABASE IF EXISTS ${scratch} WITH (FORCE)`);
    for (const role of ["aip_coldstart_data", "aip_coldstart_control"]) await client.query(`DROP ROLE IF EXISTS ${role}`).catch(() => {});
    await client.end();
    await rm(outdir, { recursive: true, force: true });
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
