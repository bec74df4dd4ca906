/**
 * Catalog pages over HTTP: the Node server (its own process, as in the http suite) under
 * autocannon, 32 connections, each request a random sampled tenant's page (limit 50) with that
 * tenant's token. Measured in one run, beside the same server's GET /healthz (the HTTP stack's
 * own no-op ceiling):
 * - first pages with the catalog cache warm and no staleness (one statement that only confirms
 *   the revision), deep pages (pages 6-10) the same way, the 304 path (If-None-Match with the
 *   page's ETag), first pages with 5 s of staleness allowed (no statement), and first pages with
 *   the cache off (every request builds its page).
 * - first pages with the cache warm, asking for identity, gzip and brotli in turn (the same
 *   server, only Accept-Encoding differs), alternated A B C A B C: throughput and bytes per page
 *   with and without compression in one run. The Node server compresses a cached answer once per
 *   coding, so these are hits that serve stored bytes.
 * Each configuration is a server process of its own; pages are requested once untimed first, so a
 * warm figure measures warm hits.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { readFileSync } from "node:fs";
import { request as httpRequest } from "node:http";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import autocannon from "autocannon";
import { mintToken } from "../../src/http/tokens.js";
import type { Figure, Recorder } from "../lib/figures.js";
import { tenantId, type Layout } from "../../fixtures/layout.js";
import { observe } from "../lib/observe.js";
import type { BenchDatabase } from "../lib/target.js";

export const SECRET = "aip-bench-secret-aip-bench-secret-0123456789";
const PAGE = 50;

/** The Node server (bench/workloads/http-server.ts) in its own process over `db`, data plane only. */
export async function startServer(db: BenchDatabase, env: Record<string, string>): Promise<{ url: string; child: ChildProcess }> {
  const child = spawn(process.execPath, ["--import", "tsx", fileURLToPath(new URL("./http-server.ts", import.meta.url))], {
    env: {
      ...process.env,
      DATABASE_URL: db.dataUrl,
      REGISTRY_MODE: "data-plane",
      AUTH_HS256_SECRET: SECRET,
      PORT: "0",
      HOST: "127.0.0.1",
      LEASE_MAINTENANCE_INTERVAL_MS: "0",
      ACCESS_LOG: "false",
      ...env,
    },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const lines = createInterface({ input: child.stdout! });
  const [line] = (await Promise.race([
    once(lines, "line"),
    once(child, "exit").then(() => {
      throw new Error("catalog HTTP server exited before listening");
    }),
  ])) as [string];
  return { url: (JSON.parse(line) as { url: string }).url, child };
}

/** States a figure as a ratio to the same server's /healthz, measured just before. */
function relate(figure: Figure, health: Figure): void {
  const ratio = figure.throughput / health.throughput;
  figure.note = `${figure.note ?? ""}; ${ratio.toFixed(3)} x this server's /healthz (${health.throughput.toFixed(0)}/s)`;
  console.log(`    = ${ratio.toFixed(3)} x /healthz`);
}

interface Target {
  path: string;
  token: string;
  etag?: string;
}

/**
 * CPU time the server process has used so far, in ms (Linux /proc; clock ticks of 10 ms). On a
 * machine shared with other work, CPU per request is the figure other load moves least.
 */
function processCpuMs(pid: number | undefined): number | undefined {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ") ?? [];
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after "pid (comm) ".
    return (Number(fields[11]) + Number(fields[12])) * 10;
  } catch {
    return undefined;
  }
}

/** The body bytes a client receives for `target` with this Accept-Encoding (undecoded, as on the wire). */
function wireBytes(url: string, target: Target, acceptEncoding: string | undefined): Promise<{ bytes: number; coding: string | null }> {
  return new Promise((resolve, reject) => {
    const request = httpRequest(`${url}${target.path}`, {
      headers: { authorization: `Bearer ${target.token}`, ...(acceptEncoding ? { "accept-encoding": acceptEncoding } : {}) },
    });
    request.on("response", (response) => {
      let bytes = 0;
      response.on("data", (chunk: Buffer) => (bytes += chunk.length));
      response.on("end", () => resolve({ bytes, coding: (response.headers["content-encoding"] as string | undefined) ?? null }));
      response.on("error", reject);
    });
    request.on("error", reject);
    request.end();
  });
}

export async function runCatalogHttp(
  recorder: Recorder,
  db: BenchDatabase,
  l: Layout,
  plan: { target: string; connections: number; poolMax: number; durationMs: number; sampledTenants: number },
): Promise<void> {
  const tenants = Array.from({ length: Math.min(plan.sampledTenants, l.tenants) }, (_, i) => tenantId(Math.floor((i * l.tenants) / plan.sampledTenants)));
  const tokens = new Map<string, string>();
  for (const tenant of tenants) tokens.set(tenant, await mintToken(SECRET, { subject: "bench-gateway", tenantId: tenant, scopes: ["catalog:read"] }));
  const seconds = Math.max(1, Math.round(plan.durationMs / 1000));

  /** One autocannon phase over `targets`, recorded as a figure. */
  const phase = async (
    url: string,
    name: string,
    targets: Target[],
    options: { expect: number; conditional?: boolean; acceptEncoding?: string; note?: string; serverPid?: number },
  ) => {
    let next = 0;
    const failures: Record<string, number> = {};
    const run = (duration: number) =>
      autocannon({
        url,
        connections: plan.connections,
        duration,
        requests: [
          {
            method: "GET",
            setupRequest: (request) => {
              const target = targets[next++ % targets.length] as Target;
              return {
                ...request,
                path: target.path,
                headers: {
                  authorization: `Bearer ${target.token}`,
                  ...(options.conditional && target.etag ? { "if-none-match": target.etag } : {}),
                  ...(options.acceptEncoding ? { "accept-encoding": options.acceptEncoding } : {}),
                },
              };
            },
            onResponse: (status) => {
              if (status !== options.expect) failures[String(status)] = (failures[String(status)] ?? 0) + 1;
            },
          },
        ],
      });
    await run(1);
    const observer = await observe(db.server.adminUrl, db.name);
    const cpuBefore = processCpuMs(options.serverPid);
    const result = await run(seconds);
    const cpuAfter = processCpuMs(options.serverPid);
    const observation = await observer.stop();
    const cpuPerRequest = cpuBefore !== undefined && cpuAfter !== undefined ? (cpuAfter - cpuBefore) / result.requests.total : undefined;
    if (cpuPerRequest !== undefined) console.log(`    server CPU ${(cpuPerRequest * 1000).toFixed(0)} µs per request`);
    return recorder.add({
      suite: "catalog-http",
      name,
      target: plan.target,
      concurrency: plan.connections,
      pool: plan.poolMax,
      ops: result.requests.total,
      errors: { ...failures, ...(result.errors ? { socket: result.errors } : {}) },
      seconds: result.duration,
      throughput: result.requests.total / result.duration,
      latency: {
        count: result.requests.total,
        mean: result.latency.average,
        p50: result.latency.p50,
        p95: result.latency.p90,
        p99: result.latency.p99,
        max: result.latency.max,
      },
      observation,
      note: `autocannon request latency; p95 column shows p90${options.note ? `; ${options.note}` : ""}${
        cpuPerRequest !== undefined ? `; server CPU ${(cpuPerRequest * 1000).toFixed(0)} µs per request` : ""
      }`,
    });
  };

  /** First and deep page targets of every sampled tenant, with their ETags, read once (warming the cache). */
  const collect = async (url: string) => {
    const first: Target[] = [];
    const deep: Target[] = [];
    for (const tenant of tenants) {
      const token = tokens.get(tenant) as string;
      let path = `/v1/catalog/capabilities?limit=${PAGE}`;
      const pages: Target[] = [];
      for (;;) {
        const response = await fetch(url + path, { headers: { authorization: `Bearer ${token}` } });
        const body = (await response.json()) as { next_cursor: string | null };
        pages.push({ path, token, etag: response.headers.get("etag") ?? "" });
        if (!body.next_cursor) break;
        path = `/v1/catalog/capabilities?limit=${PAGE}&cursor=${encodeURIComponent(body.next_cursor)}`;
      }
      first.push(pages[0] as Target);
      deep.push(...pages.slice(Math.floor(pages.length / 2)));
    }
    return { first, deep };
  };

  const configurations: { label: string; env: Record<string, string>; phases: (url: string, serverPid: number | undefined) => Promise<void> }[] = [
    {
      label: "cache, no staleness, one statement per request",
      env: { CATALOG_CACHE_BYTES: String(256 * 1024 * 1024), CATALOG_MAX_STALENESS_MS: "0", CATALOG_SHARED_REVISION_CHECK: "false" },
      phases: async (url, serverPid) => {
        const health = await phase(url, "GET /healthz (HTTP no-op)", [{ path: "/healthz", token: "" }], { expect: 200 });
        const { first, deep } = await collect(url);
        for (const figure of [
          await phase(url, `first page, cache warm, staleness 0, one statement per request (limit ${PAGE})`, first, { expect: 200 }),
          await phase(url, "deep page, cache warm, staleness 0 (pages 6-10)", deep, { expect: 200 }),
          await phase(url, "304: If-None-Match with the page's ETag", first, { expect: 304, conditional: true }),
        ]) {
          relate(figure, health);
        }
        // Compression A/B/C on this server: only Accept-Encoding differs. Bytes first (which also
        // makes every coding of every page cached), then the rounds.
        const codings: [string, string | undefined][] = [
          ["identity", undefined],
          ["gzip", "gzip"],
          ["br", "br"],
        ];
        const perPage: Record<string, number> = {};
        for (const [label, accept] of codings) {
          let total = 0;
          for (const target of first) {
            const { bytes, coding } = await wireBytes(url, target, accept);
            if (coding !== (accept ?? null)) throw new Error(`asked for ${label}, got ${coding ?? "identity"}`);
            total += bytes;
          }
          perPage[label] = total / first.length;
        }
        console.log(`    bytes per first page (limit ${PAGE}): ${codings.map(([label]) => `${label} ${perPage[label]?.toFixed(0)}`).join(", ")}`);
        for (let round = 1; round <= 3; round++) {
          for (const [label, accept] of codings) {
            const bytes = perPage[label] as number;
            relate(
              await phase(url, `first page, cache warm, staleness 0, ${label} (round ${round})`, first, {
                expect: 200,
                serverPid,
                ...(accept ? { acceptEncoding: accept } : {}),
                note: `Accept-Encoding ${accept ?? "none"}; ${bytes.toFixed(0)} body bytes per page (${((100 * bytes) / (perPage.identity as number)).toFixed(1)} % of identity)`,
              }),
              health,
            );
          }
        }
      },
    },
    {
      label: "default settings (cache, no staleness, shared revision check)",
      env: {},
      phases: async (url) => {
        const health = await phase(url, "GET /healthz (HTTP no-op, default-settings server)", [{ path: "/healthz", token: "" }], { expect: 200 });
        const { first } = await collect(url);
        relate(
          await phase(url, `first page, cache warm, default settings: staleness 0, shared revision check (limit ${PAGE})`, first, {
            expect: 200,
            note: "default settings (CATALOG_SHARED_REVISION_CHECK=true): concurrent hits share one check of their tenants' revisions",
          }),
          health,
        );
      },
    },
    {
      label: "cache, 5 s staleness",
      env: { CATALOG_CACHE_BYTES: String(256 * 1024 * 1024), CATALOG_MAX_STALENESS_MS: "5000" },
      phases: async (url) => {
        const health = await phase(url, "GET /healthz (HTTP no-op, staleness server)", [{ path: "/healthz", token: "" }], { expect: 200 });
        const { first } = await collect(url);
        relate(
          await phase(url, `first page, cache warm, staleness 5 s (limit ${PAGE})`, first, { expect: 200, note: "no statement within the staleness bound" }),
          health,
        );
      },
    },
    {
      label: "no cache",
      env: { CATALOG_CACHE_BYTES: "0" },
      phases: async (url) => {
        const health = await phase(url, "GET /healthz (HTTP no-op, uncached server)", [{ path: "/healthz", token: "" }], { expect: 200 });
        const { first, deep } = await collect(url);
        relate(await phase(url, `first page, no cache (limit ${PAGE})`, first, { expect: 200, note: "every request builds its page" }), health);
        relate(await phase(url, "deep page, no cache (pages 6-10)", deep, { expect: 200 }), health);
      },
    },
  ];
  for (const configuration of configurations) {
    const { url, child } = await startServer(db, { DB_POOL_MAX: String(plan.poolMax), ...configuration.env });
    try {
      await configuration.phases(url, child.pid);
    } finally {
      child.kill("SIGTERM");
      await once(child, "exit").catch(() => {});
    }
  }
}
