/**
 * The revision-keyed catalog cache behind the HTTP API (src/catalog/serve.ts), on the Node app:
 * one statement per request, which on a warm cache only confirms the cached answer's revision;
 * tenants never share an answer, whatever they send; a publication is seen at once when no
 * staleness is allowed; cursors go stale exactly as without a cache; and with staleness allowed, a
 * cached answer is served without a statement only within the bound and never for a cursor of a
 * revision this process has not seen. Statements are counted at the executor the app's registry
 * uses, so "one statement" means one call reaching PostgreSQL.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { MemoryCatalogCache } from "../../src/catalog/cache.js";
import type { SqlExecutor } from "../../src/db/executor.js";
import { pgExecutor } from "../../src/db/pg.js";
import { Registry } from "../../src/registry/registry.js";
import { useTestDatabase } from "../support/database.js";
import { binding, connectorType, instance, policy, version } from "../../fixtures/records.js";
import { createTestApi, type TestApi } from "../support/http.js";
import { catalogPage } from "../../fixtures/catalog-reads.js";

const db = useTestDatabase();
const CAPS = ["cap:cc.a", "cap:cc.b", "cap:cc.c", "cap:cc.d", "cap:cc.e"];

/** A data executor that counts the statements it sends. */
function counted(executor: SqlExecutor) {
  const counter = {
    statements: 0,
    executor: {
      query: <R extends Record<string, unknown>>(text: string, params?: readonly unknown[]) => {
        counter.statements++;
        return executor.query<R>(text, params);
      },
    } as SqlExecutor,
  };
  return counter;
}

/** An app with its own cache and its own statement counter. */
function cachedApi(options: { maxStalenessMs?: number; now?: () => number; sharedRevisionCheck?: boolean } = {}) {
  const counter = counted(pgExecutor(db.dataPool));
  const registry = new Registry({ data: counter.executor, control: pgExecutor(db.owner) });
  const api = createTestApi(registry, { catalog: { cache: new MemoryCatalogCache(4 * 1024 * 1024), ...options } });
  return { api, counter };
}

beforeAll(async () => {
  await db.registry.publish([
    connectorType("ctype_cc"),
    await version("cver_cc", "ctype_cc", CAPS),
    instance("cinst_cc_a", "ctype_cc", "cver_cc", "tenant-cc-a"),
    instance("cinst_cc_b", "ctype_cc", "cver_cc", "tenant-cc-b"),
    ...CAPS.map((cap) => binding("tenant-cc-a", cap, "cinst_cc_a")),
    // Tenant b sees only every other capability.
    ...CAPS.filter((_, n) => n % 2 === 1).map((cap) => binding("tenant-cc-b", cap, "cinst_cc_b")),
  ]);
});

async function read(api: TestApi, token: string, path: string, headers: Record<string, string> = {}) {
  const response = await api.call("GET", path, { token, headers });
  return { status: response.status, etag: response.headers.get("etag"), cache: response.headers.get("aip-catalog-cache"), text: await response.text() };
}

const ids = (text: string): string[] => (JSON.parse(text) as { capabilities: { capability: { id: string } }[] }).capabilities.map((d) => d.capability.id);

describe("with no staleness (the default)", () => {
  it("sends one statement per request: a miss builds the page, a warm hit only confirms its revision", async () => {
    const { api, counter } = cachedApi();
    const token = await api.tenantToken("tenant-cc-a");
    const path = "/v1/catalog/capabilities?limit=2";
    const first = await read(api, token, path);
    expect(first).toMatchObject({ status: 200, cache: "miss" });
    const before = counter.statements;
    const again = await read(api, token, path);
    expect(counter.statements - before).toBe(1);
    expect(again).toMatchObject({ status: 200, cache: "revalidated", etag: first.etag });
    expect(again.text).toBe(first.text);
    for (const validator of [first.etag!, "*"]) {
      const n = counter.statements;
      expect(await read(api, token, path, { "if-none-match": validator })).toMatchObject({ status: 304, cache: "revalidated", etag: first.etag, text: "" });
      expect(counter.statements - n).toBe(1);
    }
  });

  it("never lets a tenant see another tenant's cached answer: same query, same cursor, same ETag", async () => {
    const { api } = cachedApi();
    const [a, b] = [await api.tenantToken("tenant-cc-a"), await api.tenantToken("tenant-cc-b")];
    const path = "/v1/catalog/capabilities?limit=2";
    const pageA = await read(api, a, path);
    expect(ids(pageA.text)).toEqual(CAPS.slice(0, 2));
    // The same query: b gets its own page, built for it (a miss), never a's.
    const pageB = await read(api, b, path);
    expect(pageB.cache).toBe("miss");
    expect(ids(pageB.text)).toEqual(["cap:cc.b", "cap:cc.d"]);
    expect(pageB.etag).not.toBe(pageA.etag);
    // a's ETag is no validator of b's request: 200 with b's page.
    const withA = await read(api, b, path, { "if-none-match": pageA.etag! });
    expect(withA.status).toBe(200);
    expect(ids(withA.text)).toEqual(["cap:cc.b", "cap:cc.d"]);
    // a's cursor walks on for a, and is refused to b (bound to a's walk), never served from a's cache.
    const cursorA = (JSON.parse(pageA.text) as { next_cursor: string }).next_cursor;
    const nextA = await read(api, a, `/v1/catalog/capabilities?limit=2&cursor=${encodeURIComponent(cursorA)}`);
    const nextB = await read(api, b, `/v1/catalog/capabilities?limit=2&cursor=${encodeURIComponent(cursorA)}`);
    expect(ids(nextA.text)).toEqual(["cap:cc.c", "cap:cc.d"]);
    expect([400, 409]).toContain(nextB.status);
    expect(nextB.text).not.toContain("cap:cc.c");
    // A token without a tenant sees an empty catalog, cached apart from both.
    const none = await read(api, await api.token({ scopes: ["catalog:read"] }), path);
    expect(ids(none.text)).toEqual([]);
    // The single definition b may not see stays 404 for b after a read it for a.
    expect((await read(api, a, "/v1/catalog/capabilities/cap%3Acc.a")).status).toBe(200);
    expect((await read(api, b, "/v1/catalog/capabilities/cap%3Acc.a")).status).toBe(404);
  });

  it("shows a publication at once, and a cursor across it is stale, cached or not", async () => {
    const { api } = cachedApi();
    const token = await api.tenantToken("tenant-cc-b");
    const path = "/v1/catalog/capabilities?limit=1";
    const before = await read(api, token, path);
    const cursor = (JSON.parse(before.text) as { next_cursor: string }).next_cursor;
    const pagePath = `/v1/catalog/capabilities?limit=1&cursor=${encodeURIComponent(cursor)}`;
    expect((await read(api, token, pagePath)).status).toBe(200); // cached now
    await db.registry.publish([binding("tenant-cc-b", "cap:cc.a", "cinst_cc_b")]);
    const after = await read(api, token, path);
    expect(after).toMatchObject({ status: 200, cache: "miss" });
    expect(ids(after.text)).toEqual(["cap:cc.a"]);
    expect(JSON.parse(after.text).catalog_revision).toBe(JSON.parse(before.text).catalog_revision + 1);
    // The old revision's validator no longer matches, and its cursor is stale.
    expect((await read(api, token, path, { "if-none-match": before.etag! })).status).toBe(200);
    const stale = await read(api, token, pagePath);
    expect(stale.status).toBe(409);
    expect(JSON.parse(stale.text)).toMatchObject({ code: "stale-cursor" });
  });
});

describe("under other tenants' publications", () => {
  it("keeps a tenant's cached pages, validators and cursors current: one statement, nothing rebuilt", async () => {
    const { api, counter } = cachedApi();
    const token = await api.tenantToken("tenant-cc-b");
    const path = "/v1/catalog/capabilities?limit=1";
    const first = await read(api, token, path);
    const cursor = (JSON.parse(first.text) as { next_cursor: string }).next_cursor;
    // Another tenant's binding, and an admission policy: the global revision moves twice.
    await db.registry.publish([binding("tenant-cc-a", "cap:cc.b", "cinst_cc_a", { priority: 3, policy_revision: 5 })]);
    await db.registry.publish([policy("quota:cc-elsewhere")]);
    const n = counter.statements;
    expect(await read(api, token, path)).toMatchObject({ status: 200, cache: "revalidated", etag: first.etag, text: first.text });
    expect(await read(api, token, path, { "if-none-match": first.etag! })).toMatchObject({ status: 304, cache: "revalidated" });
    const next = await read(api, token, `/v1/catalog/capabilities?limit=1&cursor=${encodeURIComponent(cursor)}`);
    expect(next.status).toBe(200);
    expect(JSON.parse(next.text).catalog_revision).toBe(JSON.parse(first.text).catalog_revision);
    expect(counter.statements - n).toBe(3);
  });
});

describe("with the shared revision check (the Node server's default)", () => {
  it("confirms concurrent warm hits with a few shared statements, each answer the current one", async () => {
    const { api, counter } = cachedApi({ sharedRevisionCheck: true });
    const token = await api.tenantToken("tenant-cc-a");
    const path = "/v1/catalog/capabilities?limit=3";
    const first = await read(api, token, path);
    expect(first.cache).toBe("miss");
    const before = counter.statements;
    const answers = await Promise.all(Array.from({ length: 24 }, () => read(api, token, path)));
    const statements = counter.statements - before;
    for (const answer of answers) expect(answer).toMatchObject({ status: 200, cache: "revalidated", etag: first.etag, text: first.text });
    // One check started by the first request, one shared by every request that arrived while it
    // ran (and perhaps one more for stragglers): far fewer than one per request.
    expect(statements).toBeGreaterThanOrEqual(1);
    expect(statements).toBeLessThanOrEqual(4);
  });

  it("shows a publication at once: a check that finds a newer revision reads the new answer", async () => {
    const { api, counter } = cachedApi({ sharedRevisionCheck: true });
    const token = await api.tenantToken("tenant-cc-b");
    const path = "/v1/catalog/capabilities/cap%3Acc.d";
    const before = await read(api, token, path);
    expect(before.status).toBe(200);
    expect((await read(api, token, path)).cache).toBe("revalidated");
    // Another tenant's publication leaves the cached answer current: the check confirms it.
    await db.registry.publish([binding("tenant-cc-a", "cap:cc.d", "cinst_cc_a", { priority: 7, policy_revision: 2 })]);
    let n = counter.statements;
    expect(await read(api, token, path)).toMatchObject({ status: 200, cache: "revalidated", etag: before.etag });
    expect(counter.statements - n).toBe(1);
    // One that reaches tenant b: a new binding.
    const reached = await db.registry.publish([binding("tenant-cc-b", "cap:cc.e", "cinst_cc_b")]);
    n = counter.statements;
    const after = await read(api, token, path);
    expect(counter.statements - n).toBe(2); // the shared check, then this request's read
    expect(after).toMatchObject({ status: 200, cache: "miss" });
    expect(JSON.parse(after.text).catalog_revision).toBe(reached.catalog_revision);
    expect(after.etag).not.toBe(before.etag);
  });
});

describe("with staleness allowed", () => {
  it("serves a cached answer without a statement within the bound, and revalidates after it", async () => {
    let now = 1_000_000;
    const { api, counter } = cachedApi({ maxStalenessMs: 5000, now: () => now });
    const token = await api.tenantToken("tenant-cc-a");
    const path = "/v1/catalog/capabilities?limit=3";
    const first = await read(api, token, path);
    let n = counter.statements;
    now += 4000;
    expect(await read(api, token, path)).toMatchObject({ status: 200, cache: "hit", text: first.text });
    expect(await read(api, token, path, { "if-none-match": first.etag! })).toMatchObject({ status: 304, cache: "hit" });
    expect(counter.statements - n).toBe(0);
    // The documented trade-off: a publication inside the window is not seen until the bound...
    const reached = await db.registry.publish([binding("tenant-cc-a", "cap:cc.e", "cinst_cc_a", { enabled: false, policy_revision: 2 })]);
    expect(await read(api, token, path)).toMatchObject({ status: 200, cache: "hit", text: first.text });
    // ...and is seen right after it (the revalidation finds the new revision and builds).
    now += 2000;
    n = counter.statements;
    const fresh = await read(api, token, path);
    expect(fresh.cache).toBe("miss");
    expect(JSON.parse(fresh.text).catalog_revision).toBe(reached.catalog_revision);
    expect(counter.statements - n).toBe(1);
  });

  it("never answers a cursor of a revision this process has not seen from an older page", async () => {
    let now = 2_000_000;
    const { api, counter } = cachedApi({ maxStalenessMs: 60_000, now: () => now });
    const token = await api.tenantToken("tenant-cc-a");
    const path = "/v1/catalog/capabilities?limit=2";
    const old = await read(api, token, path);
    // Another process (here the database directly) serves a page of a newer revision.
    await db.registry.publish([binding("tenant-cc-a", "cap:cc.e", "cinst_cc_a", { enabled: true, policy_revision: 3 })]);
    const newer = await catalogPage(db.registry, "tenant-cc-a", { limit: 2 });
    expect(newer.catalog_revision).toBeGreaterThan(JSON.parse(old.text).catalog_revision);
    now += 10;
    // Its cursor reaches this process: revalidated (a statement), answered at its revision.
    const n = counter.statements;
    const next = await read(api, token, `/v1/catalog/capabilities?limit=2&cursor=${encodeURIComponent(newer.next_cursor!)}`);
    expect(counter.statements - n).toBe(1);
    expect(next.status).toBe(200);
    expect(JSON.parse(next.text).catalog_revision).toBe(newer.catalog_revision);
    // Having confirmed the newer revision, the older first page is no longer served unconfirmed.
    const first = await read(api, token, path);
    expect(first.cache).toBe("miss");
    expect(JSON.parse(first.text).catalog_revision).toBe(newer.catalog_revision);
  });
});
