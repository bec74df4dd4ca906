/**
 * Conditional catalog reads. Every catalog answer (a page, a definition, a change feed page)
 * carries a strong ETag, `"<revision>-<digest>"` (plus `-br` or `-gzip` for a compressed answer),
 * that names the tenant's catalog revision and the request; sent back as `If-None-Match`, it is
 * answered 304 while the tenant's catalog has not changed (docs/catalog-caching.md). A 304 costs
 * the registry one tiny statement, or none, and the network no body.
 *
 * `EtagCache` does it for a client: given to RegistryClient (`etags`), it keeps the last answer
 * and ETag of each catalog request and revalidates them on the next identical request, returning
 * the kept answer on a 304. The `...Conditional` methods of the client do one conditional request
 * for a caller that keeps answers itself.
 */

/** A conditional read: the answer and its ETag, or 304 (what the caller holds is current). */
export type Conditional<T> = { status: 200; etag: string | null; body: T } | { status: 304; etag: string | null };

/**
 * The catalog revision a registry ETag names (weak or strong, any coding), or null for anything
 * else. Two answers of one request at the same revision are the same answer.
 */
export function etagRevision(etag: string | null | undefined): number | null {
  const match = etag ? /^(?:W\/)?"(\d{1,16})-[0-9a-f]{16}(?:-[a-z]+)?"$/.exec(etag.trim()) : null;
  const revision = Number(match?.[1]);
  return match && Number.isSafeInteger(revision) ? revision : null;
}

/**
 * The last answer and ETag of each catalog request (by method and URL), at most `maxEntries`; the
 * least recently used goes first. Answers are kept as parsed JSON and handed out as they are: do
 * not modify them.
 */
export class EtagCache {
  private readonly entries = new Map<string, { etag: string; body: unknown }>();

  constructor(private readonly maxEntries = 1000) {
    if (!(maxEntries >= 1)) throw new RangeError("an EtagCache holds at least one entry");
  }

  get size(): number {
    return this.entries.size;
  }

  get(key: string): { etag: string; body: unknown } | undefined {
    const entry = this.entries.get(key);
    if (entry) {
      this.entries.delete(key);
      this.entries.set(key, entry);
    }
    return entry;
  }

  set(key: string, etag: string, body: unknown): void {
    this.entries.delete(key);
    this.entries.set(key, { etag, body });
    for (const oldest of this.entries.keys()) {
      if (this.entries.size <= this.maxEntries) break;
      this.entries.delete(oldest);
    }
  }

  delete(key: string): void {
    this.entries.delete(key);
  }

  clear(): void {
    this.entries.clear();
  }
}
