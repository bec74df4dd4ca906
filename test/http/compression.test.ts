/**
 * Compressed answers on the Node app (src/http/compression.ts with the Node compressor): catalog
 * answers are compressed once per cached answer and coding and served from the cache as they are,
 * with their own strong ETags and Vary; the OpenAPI document is built once per process and
 * compressed once per coding; large administrative answers are compressed per answer; the data
 * plane's small answers and clients that do not ask are served as before. Compressed bodies are
 * decompressed here and compared with the identity ones byte for byte.
 */
import { brotliDecompressSync, gunzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { MemoryCatalogCache } from "../../src/catalog/cache.js";
import type { Compressor } from "../../src/http/compression.js";
import { nodeCompressor } from "../../src/node/compression.js";
import { mintToken } from "../../src/http/tokens.js";
import { startServer, type RunningServer } from "../../src/entry/node.js";
import { useTestDatabase } from "../support/database.js";
import { publishSimpleFleet } from "../../fixtures/records.js";
import { createTestApi, TEST_SECRET, type TestApi } from "../support/http.js";

const db = useTestDatabase();
let server: RunningServer | undefined;
const CAPS = Array.from({ length: 40 }, (_, n) => `cap:gz.c${String(n).padStart(2, "0")}`);

beforeAll(async () => {
  await publishSimpleFleet(db.registry, { prefix: "gz", tenants: ["tenant-gz"], capabilities: CAPS });
});
afterAll(async () => {
  await server?.close();
});

/** The Node compressor, counting what it compresses. */
function countingCompressor() {
  const calls: string[] = [];
  const compressor: Compressor = {
    codings: nodeCompressor.codings,
    compress(body, coding) {
      calls.push(coding);
      return nodeCompressor.compress(body, coding);
    },
  };
  return { compressor, calls };
}

function compressedApi(cache = new MemoryCatalogCache(16 * 1024 * 1024)) {
  const { compressor, calls } = countingCompressor();
  return { api: createTestApi(db.registry, { compressor, catalog: { cache } }), calls, cache };
}

const decode = (coding: string | null, bytes: Buffer) =>
  (coding === "br" ? brotliDecompressSync(bytes) : coding === "gzip" ? gunzipSync(bytes) : bytes).toString();

async function get(api: TestApi, path: string, headers: Record<string, string> = {}) {
  const response = await api.call("GET", path, { token: await api.tenantToken("tenant-gz"), headers });
  const bytes = Buffer.from(await response.arrayBuffer());
  const coding = response.headers.get("content-encoding");
  return { response, coding, bytes, text: bytes.length ? decode(coding, bytes) : "" };
}

const PAGE = "/v1/catalog/capabilities?limit=40";

describe("catalog answers", () => {
  it("are compressed once per cached answer and coding, then served from the cache as they are", async () => {
    const { api, calls } = compressedApi();
    const plain = await get(api, PAGE);
    expect(plain.coding).toBeNull();
    expect(plain.response.headers.get("vary")).toBe("authorization, accept-encoding");
    const etag = plain.response.headers.get("etag") as string;
    expect(etag).toMatch(/^"\d+-[0-9a-f]{16}"$/);
    expect(calls).toEqual([]);

    const br = await get(api, PAGE, { "accept-encoding": "gzip, deflate, br" });
    expect(br.coding).toBe("br");
    expect(br.text).toBe(plain.text);
    expect(br.bytes.length).toBeLessThan(plain.bytes.length / 4);
    expect(br.response.headers.get("etag")).toBe(etag.replace(/"$/, '-br"'));
    expect(br.response.headers.get("aip-catalog-cache")).toBe("revalidated");
    expect(calls).toEqual(["br"]);

    // Hits serve the kept bytes: no further compression, the very same bytes.
    for (let n = 0; n < 3; n++) {
      const again = await get(api, PAGE, { "accept-encoding": "br" });
      expect(again.bytes.equals(br.bytes)).toBe(true);
    }
    const gzip = await get(api, PAGE, { "accept-encoding": "gzip" });
    expect(gzip.coding).toBe("gzip");
    expect(gzip.text).toBe(plain.text);
    expect(gzip.response.headers.get("etag")).toBe(etag.replace(/"$/, '-gzip"'));
    await get(api, PAGE, { "accept-encoding": "gzip" });
    expect(calls).toEqual(["br", "gzip"]);
  });

  it("compresses a miss before keeping it, and keeps the coded bytes in the cache's byte budget", async () => {
    const { api, calls, cache } = compressedApi();
    const first = await get(api, `${PAGE}&q=gz`, { "accept-encoding": "br" });
    expect(first.response.headers.get("aip-catalog-cache")).toBe("miss");
    expect(first.coding).toBe("br");
    const before = cache.bytes;
    await get(api, `${PAGE}&q=gz`, { "accept-encoding": "br" });
    expect(calls).toEqual(["br"]);
    await get(api, `${PAGE}&q=gz`, { "accept-encoding": "gzip" });
    expect(cache.bytes).toBeGreaterThan(before);
    expect(calls).toEqual(["br", "gzip"]);
  });

  it("answers If-None-Match with any coding's ETag of the request with 304 and the ETag of this request's coding", async () => {
    const { api } = compressedApi();
    const br = await get(api, PAGE, { "accept-encoding": "br" });
    const brTag = br.response.headers.get("etag") as string;
    for (const [validator, accept, expected] of [
      [brTag, "br", brTag],
      [brTag, "gzip", brTag.replace("-br", "-gzip")],
      [brTag, "identity", brTag.replace("-br", "")],
      [brTag.replace("-br", ""), "br", brTag],
      [`W/${brTag}`, "br", brTag],
    ] as const) {
      const response = await api.call("GET", PAGE, {
        token: await api.tenantToken("tenant-gz"),
        headers: { "if-none-match": validator, "accept-encoding": accept },
      });
      expect(response.status, `${validator} ${accept}`).toBe(304);
      expect(response.headers.get("etag")).toBe(expected);
      expect(response.headers.get("vary")).toBe("authorization, accept-encoding");
    }
  });

  it("are compressed for single definitions too, and never where the app has no compressor (the Worker)", async () => {
    const { api } = compressedApi();
    const path = `/v1/catalog/capabilities/${encodeURIComponent(CAPS[0] as string)}`;
    const gz = await get(api, path, { "accept-encoding": "gzip" });
    expect(gz.coding).toBe("gzip");
    expect(JSON.parse(gz.text)).toMatchObject({ definition: { capability: { id: CAPS[0] } } });
    const worker = createTestApi(db.registry);
    const plain = await get(worker, PAGE, { "accept-encoding": "br, gzip" });
    expect(plain.coding).toBeNull();
    expect(plain.response.headers.get("vary")).toBe("authorization");
    expect(plain.response.headers.get("etag")).toMatch(/^"\d+-[0-9a-f]{16}"$/);
  });
});

describe("the OpenAPI document", () => {
  it("is built once per process and compressed once per coding", async () => {
    const { api, calls } = compressedApi();
    const build = vi.spyOn(api.app, "getOpenAPI31Document");
    const plain = await api.app.request("/openapi.json");
    const text = await plain.text();
    expect(JSON.parse(text)).toMatchObject({ openapi: "3.1.0" });
    expect(plain.headers.get("content-type")).toBe("application/json");
    expect(plain.headers.get("vary")).toBe("accept-encoding");
    for (let n = 0; n < 3; n++) {
      const br = await api.app.request("/openapi.json", { headers: { "accept-encoding": "br" } });
      expect(br.headers.get("content-encoding")).toBe("br");
      expect(brotliDecompressSync(Buffer.from(await br.arrayBuffer())).toString()).toBe(text);
    }
    expect(build).toHaveBeenCalledTimes(1);
    expect(calls).toEqual(["br"]);
  });
});

describe("other answers", () => {
  it("compresses large administrative answers per answer, and leaves small and hot ones alone", async () => {
    const { api, calls } = compressedApi();
    const admin = await api.adminToken();
    const version = await api.call("GET", "/v1/admin/versions/cver_gz_1", { token: admin, headers: { "accept-encoding": "gzip" } });
    expect(version.status).toBe(200);
    expect(version.headers.get("content-encoding")).toBe("gzip");
    expect(version.headers.get("vary")).toContain("accept-encoding");
    expect(JSON.parse(gunzipSync(Buffer.from(await version.arrayBuffer())).toString())).toMatchObject({ id: "cver_gz_1" });

    // A small admin answer (a problem) is not compressed; neither is the data plane's.
    const missing = await api.call("GET", "/v1/admin/versions/cver_none", { token: admin, headers: { "accept-encoding": "gzip" } });
    expect(missing.status).toBe(404);
    expect(missing.headers.get("content-encoding")).toBeNull();
    expect((await missing.json()) as object).toMatchObject({ code: "not-found" });
    const tenant = await api.tenantToken("tenant-gz");
    const route = await api.call("PUT", "/v1/routes/act_gz_1", { token: tenant, body: { capability_id: CAPS[0] }, headers: { "accept-encoding": "gzip" } });
    expect(route.status).toBe(201);
    expect(route.headers.get("content-encoding")).toBeNull();
    expect(route.headers.get("vary")).toBeNull();
    expect(calls).toEqual(["gzip"]);
  });
});

describe("the Node server", () => {
  it("compresses for clients that ask, and not with COMPRESSION=false", async () => {
    server = await startServer(
      {
        DATABASE_URL: db.dataUrl,
        CONTROL_DATABASE_URL: db.controlUrl,
        AUTH_HS256_SECRET: TEST_SECRET,
        PORT: "0",
        MIGRATE_ON_START: "false",
        ACCESS_LOG: "false",
        LEASE_MAINTENANCE_INTERVAL_MS: "0",
      },
      () => {},
    );
    const token = await mintToken(TEST_SECRET, { subject: "gw", tenantId: "tenant-gz", scopes: ["catalog:read"] });
    const page = await fetch(`${server.url}${PAGE}`, { headers: { authorization: `Bearer ${token}`, "accept-encoding": "br" } });
    expect(page.headers.get("content-encoding")).toBe("br");
    expect((await page.json()) as { capabilities: unknown[] }).toMatchObject({ capabilities: expect.any(Array) });
    const metrics = await fetch(`${server.url}/metrics`, {
      headers: { authorization: `Bearer ${await mintToken(TEST_SECRET, { subject: "p", scopes: ["fleet:read"] })}`, "accept-encoding": "gzip" },
    });
    expect(metrics.headers.get("content-encoding")).toBe("gzip");
    expect(await metrics.text()).toContain("aip_build_info");
    await server.close();

    server = await startServer(
      {
        DATABASE_URL: db.dataUrl,
        CONTROL_DATABASE_URL: db.controlUrl,
        AUTH_HS256_SECRET: TEST_SECRET,
        PORT: "0",
        MIGRATE_ON_START: "false",
        ACCESS_LOG: "false",
        LEASE_MAINTENANCE_INTERVAL_MS: "0",
        COMPRESSION: "false",
      },
      () => {},
    );
    const plain = await fetch(`${server.url}${PAGE}`, { headers: { authorization: `Bearer ${token}`, "accept-encoding": "br" } });
    expect(plain.headers.get("content-encoding")).toBeNull();
    expect(plain.headers.get("vary")).toBe("authorization");
  });
});
