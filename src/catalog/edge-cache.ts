/**
 * The Worker's catalog cache: the Cache API of the location (`caches.default`), shared by every
 * isolate there, behind a small in-isolate memory cache for the hottest answers.
 *
 * The Cache API is keyed by URL, so an entry lives under a synthetic URL naming the SHA-256 of the
 * cache key, and carries the key itself in a header that a read compares exactly: even a hash
 * collision could not hand one tenant's answer to another. The stored response's max-age only
 * bounds how long the location keeps it; whether it may be served is decided per request against
 * the confirmed revision (src/catalog/serve.ts).
 */
import { MemoryCatalogCache, type CachedCatalogAnswer, type CatalogCache } from "./cache.js";

const ORIGIN = "https://catalog-cache.aip-registry.invalid/v1/";
const KEY_HEADER = "aip-cache-key";
const REVISION_HEADER = "aip-catalog-revision";
/** How long the location may keep an entry (it is revalidated on every use regardless). */
const RETAIN_SECONDS = 24 * 3600;

async function keyUrl(key: string): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(key)));
  return ORIGIN + Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** The part of the Workers Cache interface used here. */
export interface EdgeCache {
  match(request: string): Promise<Response | undefined>;
  put(request: string, response: Response): Promise<void>;
}

export class EdgeCatalogCache implements CatalogCache {
  constructor(
    private readonly edge: EdgeCache,
    private readonly memory = new MemoryCatalogCache(8 * 1024 * 1024),
  ) {}

  async get(key: string): Promise<CachedCatalogAnswer | undefined> {
    const local = this.memory.getSync(key);
    if (local) return local;
    const response = await this.edge.match(await keyUrl(key));
    if (!response || response.headers.get(KEY_HEADER) !== encodeURIComponent(key)) return undefined;
    const revision = Number(response.headers.get(REVISION_HEADER));
    if (!Number.isSafeInteger(revision)) return undefined;
    const answer = { revision, body: await response.text() };
    this.memory.putSync(key, answer);
    return answer;
  }

  async put(key: string, answer: CachedCatalogAnswer): Promise<void> {
    this.memory.putSync(key, answer);
    const response = new Response(answer.body, {
      headers: {
        "content-type": "application/json",
        "cache-control": `max-age=${RETAIN_SECONDS}`,
        [KEY_HEADER]: encodeURIComponent(key),
        [REVISION_HEADER]: String(answer.revision),
      },
    });
    await this.edge.put(await keyUrl(key), response);
  }
}
