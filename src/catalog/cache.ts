/**
 * Where catalog answers are kept between requests: a page or definition as the database wrote it
 * (JSON text), with the catalog revision it was read at, and (on the Node server) the compressed
 * codings of that text computed so far. An answer is a function of (tenant, request, revision),
 * so a cached one is served only after the revision is confirmed current (src/catalog/serve.ts);
 * the cache itself never decides freshness.
 *
 * Keys are exact strings that name the tenant and the whole request (see serve.ts): two tenants,
 * or two requests, never share one.
 */
import type { ContentCoding } from "../http/compression.js";

export interface CachedCatalogAnswer {
  revision: number;
  body: string;
  /** The body compressed, per coding: computed once, then served as is (src/http/compression.ts). */
  encoded?: Partial<Record<ContentCoding, Uint8Array>>;
}

export interface CatalogCache {
  get(key: string): Promise<CachedCatalogAnswer | undefined>;
  put(key: string, answer: CachedCatalogAnswer): Promise<void>;
  /** Keeps a coding of the cached answer at `revision` beside it (ignored when the entry is gone or newer). */
  attach?(key: string, revision: number, coding: ContentCoding, bytes: Uint8Array): void;
}

const encodedBytes = (answer: CachedCatalogAnswer) => Object.values(answer.encoded ?? {}).reduce((sum, bytes) => sum + bytes.byteLength, 0);

/** What an entry costs in memory: its key and body as UTF-16, its codings, plus bookkeeping. */
const entryBytes = (key: string, answer: CachedCatalogAnswer) => 2 * (key.length + answer.body.length) + encodedBytes(answer) + 64;

/**
 * A least-recently-used cache bounded by bytes (a Map keeps insertion order: a hit moves the
 * entry to the end, eviction takes from the front). Entries larger than a quarter of the budget
 * are not kept, so one huge page cannot flush everything else.
 */
export class MemoryCatalogCache implements CatalogCache {
  private readonly entries = new Map<string, CachedCatalogAnswer & { bytes: number }>();
  private used = 0;

  constructor(readonly maxBytes: number) {}

  get size(): number {
    return this.entries.size;
  }

  get bytes(): number {
    return this.used;
  }

  async get(key: string): Promise<CachedCatalogAnswer | undefined> {
    return this.getSync(key);
  }

  getSync(key: string): CachedCatalogAnswer | undefined {
    const entry = this.entries.get(key);
    if (!entry) return undefined;
    this.entries.delete(key);
    this.entries.set(key, entry);
    return entry;
  }

  async put(key: string, answer: CachedCatalogAnswer): Promise<void> {
    this.putSync(key, answer);
  }

  putSync(key: string, answer: CachedCatalogAnswer): void {
    const bytes = entryBytes(key, answer);
    const previous = this.entries.get(key);
    if (previous) {
      this.entries.delete(key);
      this.used -= previous.bytes;
    }
    if (bytes > this.maxBytes / 4) return;
    this.entries.set(key, { revision: answer.revision, body: answer.body, ...(answer.encoded ? { encoded: { ...answer.encoded } } : {}), bytes });
    this.used += bytes;
    this.evict();
  }

  attach(key: string, revision: number, coding: ContentCoding, bytes: Uint8Array): void {
    const entry = this.entries.get(key);
    if (!entry || entry.revision !== revision || entry.encoded?.[coding]) return;
    entry.encoded = { ...entry.encoded, [coding]: bytes };
    entry.bytes += bytes.byteLength;
    this.used += bytes.byteLength;
    this.evict();
  }

  private evict(): void {
    for (const [oldest, entry] of this.entries) {
      if (this.used <= this.maxBytes) break;
      this.entries.delete(oldest);
      this.used -= entry.bytes;
    }
  }
}
