/**
 * The pieces of the catalog cache that need no database: the byte-bounded LRU, cache keys that
 * can never be shared by two tenants or two requests, and ETag validators.
 */
import { describe, expect, it } from "vitest";
import { MemoryCatalogCache } from "../../src/catalog/cache.js";
import { definitionKey, etagOf, keyDigest, pageKey, SharedRevisionCheck, validatorRevision, type CheckedRevisions } from "../../src/catalog/serve.js";

describe("MemoryCatalogCache", () => {
  it("keeps at most its byte budget, evicting the least recently used first", async () => {
    const cache = new MemoryCatalogCache(4000);
    const body = "x".repeat(400); // about 900 bytes an entry with its key
    for (const key of ["a", "b", "c", "d"]) await cache.put(key, { revision: 1, body });
    expect(cache.bytes).toBeLessThanOrEqual(4000);
    expect(await cache.get("a")).toEqual({ revision: 1, body, bytes: expect.any(Number) });
    await cache.put("e", { revision: 1, body }); // evicts b, the least recently used now
    expect(await cache.get("b")).toBeUndefined();
    expect(await cache.get("a")).toBeDefined();
    expect(cache.bytes).toBeLessThanOrEqual(4000);
  });

  it("replaces an entry in place and refuses one larger than a quarter of the budget", async () => {
    const cache = new MemoryCatalogCache(4000);
    await cache.put("k", { revision: 1, body: "one" });
    await cache.put("k", { revision: 2, body: "two" });
    expect(cache.size).toBe(1);
    expect((await cache.get("k"))?.revision).toBe(2);
    await cache.put("huge", { revision: 1, body: "y".repeat(1000) });
    expect(await cache.get("huge")).toBeUndefined();
  });
});

describe("MemoryCatalogCache codings", () => {
  it("keeps a coding beside its answer, counted in the budget, only for the revision it was made from", async () => {
    const cache = new MemoryCatalogCache(8000);
    await cache.put("k", { revision: 3, body: "z".repeat(500) });
    const plain = cache.bytes;
    const coded = new Uint8Array(300);
    cache.attach("k", 2, "br", coded); // an older revision's: ignored
    cache.attach("missing", 3, "br", coded);
    expect(cache.bytes).toBe(plain);
    cache.attach("k", 3, "br", coded);
    expect(cache.bytes).toBe(plain + 300);
    expect((await cache.get("k"))?.encoded?.br).toBe(coded);
    cache.attach("k", 3, "br", new Uint8Array(10)); // kept once
    expect(cache.bytes).toBe(plain + 300);
    // A new revision replaces the entry and its codings.
    await cache.put("k", { revision: 4, body: "z".repeat(500) });
    expect((await cache.get("k"))?.encoded).toBeUndefined();
    expect(cache.bytes).toBe(plain);
  });

  it("evicts the least recently used when codings push it over its budget", async () => {
    const cache = new MemoryCatalogCache(4000);
    for (const key of ["a", "b", "c"]) await cache.put(key, { revision: 1, body: "x".repeat(400) });
    cache.attach("c", 1, "gzip", new Uint8Array(1500)); // 3 x 866 bytes, plus these: over 4000
    expect(cache.bytes).toBeLessThanOrEqual(4000);
    expect(await cache.get("a")).toBeUndefined();
    expect((await cache.get("c"))?.encoded?.gzip?.byteLength).toBe(1500);
  });
});

describe("cache keys", () => {
  it("name the tenant and every query member unambiguously", () => {
    const keys = [
      pageKey("tenant-a", {}),
      pageKey("tenant-b", {}),
      pageKey(null, {}),
      pageKey("tenant-a", { q: "x" }),
      pageKey("tenant-a", { capability_id: "x" }),
      pageKey("tenant-a", { profile: "x" }),
      pageKey("tenant-a", { cursor: "x" }),
      pageKey("tenant-a", { limit: 5 }),
      pageKey("tenant-a", { max_bytes: 5 }),
      // Separators inside values cannot forge another tenant's key.
      pageKey('tenant-a","x', {}),
      pageKey("tenant-a", { q: '","tenant-b' }),
      definitionKey("tenant-a", "cap:x"),
      definitionKey("tenant-b", "cap:x"),
    ];
    expect(new Set(keys).size).toBe(keys.length);
  });
});

describe("validators", () => {
  const digest = keyDigest(pageKey("tenant-a", { limit: 2 }));

  it("are strong ETags of the revision and the request's digest", () => {
    expect(etagOf(7, digest)).toMatch(/^"7-[0-9a-f]{16}"$/);
    expect(keyDigest(pageKey("tenant-b", { limit: 2 }))).not.toBe(digest);
  });

  it("match only this request's digest, weak or strong, and take the newest of several", () => {
    expect(validatorRevision(undefined, digest)).toBeNull();
    expect(validatorRevision(etagOf(7, digest), digest)).toBe(7);
    expect(validatorRevision(`W/${etagOf(7, digest)}`, digest)).toBe(7);
    expect(validatorRevision(`${etagOf(3, digest)}, ${etagOf(9, digest)}`, digest)).toBe(9);
    expect(validatorRevision(etagOf(7, "0".repeat(16)), digest)).toBeNull();
    expect(validatorRevision("*", digest)).toBe("any");
    // Beyond 2^53 a revision cannot be compared exactly: it is no validator at all.
    expect(validatorRevision(`"9999999999999999-${digest}"`, digest)).toBeNull();
  });
});

describe("SharedRevisionCheck", () => {
  /** A read the test resolves by hand, in order: each resolves every tenant it was asked for at one revision. */
  function manualReads() {
    const pending: ((revision: number) => void)[] = [];
    const asked: string[][] = [];
    const read = (tenants: readonly string[]) =>
      new Promise<CheckedRevisions>((resolve) => {
        asked.push([...tenants]);
        pending.push((revision) => resolve({ revisions: new Map(tenants.map((tenant) => [tenant, revision])), replay_lag_ms: 0 }));
      });
    return { read, pending, asked, started: () => asked.length };
  }

  it("never answers a caller with a check that was already running when it asked", async () => {
    const reads = manualReads();
    const check = new SharedRevisionCheck(reads.read);
    const first = check.current("t1");
    expect(reads.started()).toBe(1);
    const second = check.current("t1"); // arrives while the first check runs: must wait for the next
    const third = check.current("t1"); // shares that next check
    expect(reads.started()).toBe(1);
    reads.pending[0]!(5);
    expect((await first).catalog_revision).toBe(5);
    await Promise.resolve();
    await Promise.resolve();
    expect(reads.started()).toBe(2);
    reads.pending[1]!(6);
    expect((await second).catalog_revision).toBe(6);
    expect((await third).catalog_revision).toBe(6);
    // Nothing running now: the next caller starts its own check.
    const fourth = check.current("t1");
    expect(reads.started()).toBe(3);
    reads.pending[2]!(7);
    expect((await fourth).catalog_revision).toBe(7);
  });

  it("reads every tenant that waited for the next check in that one statement", async () => {
    const reads = manualReads();
    const check = new SharedRevisionCheck(reads.read);
    const first = check.current("t1");
    const waiting = [check.current("t2"), check.current("t3"), check.current("t2"), check.current("")];
    reads.pending[0]!(4);
    expect((await first).catalog_revision).toBe(4);
    await Promise.resolve();
    await Promise.resolve();
    expect(reads.asked).toEqual([["t1"], ["t2", "t3", ""]]);
    reads.pending[1]!(8);
    expect((await Promise.all(waiting)).map((c) => c.catalog_revision)).toEqual([8, 8, 8, 8]);
  });

  it("starts the next check after a failed one, and reports the failure only to its own callers", async () => {
    let calls = 0;
    const check = new SharedRevisionCheck(async (tenants) => {
      calls++;
      if (calls === 1) throw new Error("connection lost");
      return { revisions: new Map(tenants.map((tenant) => [tenant, 9])), replay_lag_ms: 0 };
    });
    const first = check.current("t1");
    const second = check.current("t1");
    await expect(first).rejects.toThrow("connection lost");
    expect((await second).catalog_revision).toBe(9);
  });
});
