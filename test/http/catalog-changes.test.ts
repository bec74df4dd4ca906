/**
 * GET /v1/catalog/changes over HTTP and through the typed client: the gateway sync recipe of
 * docs/catalog-sync.md (list once, then poll changes), an empty last page when nothing changed
 * (other tenants' publications included) and 304 only for a current If-None-Match, as HTTP has
 * it; 410 problem+json below the history kept; `since` as written or 400; cursors bound to the
 * tenant, `since` and the walk kind; compressed answers on Node; and the staleness bound answering
 * an unchanged poll without a statement.
 */
import { brotliDecompressSync, gunzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RegistryClient, RegistryProblem } from "../../src/client/index.js";
import type { SqlExecutor } from "../../src/db/executor.js";
import { pgExecutor } from "../../src/db/pg.js";
import { nodeCompressor } from "../../src/node/compression.js";
import { Registry } from "../../src/registry/registry.js";
import { createTestDatabase, type TestDatabase } from "../support/database.js";
import { binding, connectorType, instance, policy, version } from "../../fixtures/records.js";
import { createTestApi, type TestApi } from "../support/http.js";

let db: TestDatabase;
let api: TestApi;
let token: string;
const CAPS = ["cap:sync.a", "cap:sync.b", "cap:sync.c"];

beforeAll(async () => {
  db = await createTestDatabase();
  api = createTestApi(db.registry);
  await db.registry.publish([
    connectorType("ctype_sync"),
    await version("cver_sync", "ctype_sync", [...CAPS, "cap:sync.d"]),
    instance("cinst_sync", "ctype_sync", "cver_sync", "tenant-sync"),
    instance("cinst_sync_other", "ctype_sync", "cver_sync", "tenant-sync-other"),
    ...CAPS.map((cap) => binding("tenant-sync", cap, "cinst_sync")),
    binding("tenant-sync-other", CAPS[0]!, "cinst_sync_other"),
  ]);
  token = await api.tenantToken("tenant-sync");
});
afterAll(() => db?.close());

/** One request, its body parsed (none for a 304). */
async function call(target: TestApi, path: string, token: string, headers: Record<string, string> = {}) {
  const response = await target.call("GET", path, { token, headers });
  const body: any = response.status === 304 ? null : await response.json();
  return { status: response.status, headers: response.headers, body };
}

const client = (bearer: string) =>
  new RegistryClient({ baseUrl: "http://registry.test", token: bearer, fetch: (url, init) => Promise.resolve(api.app.request(url, init)) });

describe("the change feed over HTTP", () => {
  it("lists once, then polls: 304 while nothing changed for the tenant, the changes after one that reaches it", async () => {
    const gateway = client(token);
    // List once.
    const catalog = new Map<string, unknown>();
    for await (const definition of gateway.catalogAll()) catalog.set(String(definition.capability.id), definition);
    let since = (await gateway.catalogPage({ limit: 1 })).catalog_revision;
    expect([...catalog.keys()]).toEqual(CAPS);

    // Nothing changed: an empty last page with a strong ETag naming the tenant's revision, and
    // 304 for that ETag; so after another tenant's publication and an admission policy.
    const first = await call(api, `/v1/catalog/changes?since=${since}`, token);
    expect(first.status).toBe(200);
    expect(first.body).toEqual({ catalog_revision: since, since, changes: [], next_cursor: null });
    const etag = first.headers.get("etag")!;
    expect(etag).toMatch(new RegExp(`^"${since}-[0-9a-f]{16}"$`));
    expect(first.headers.get("cache-control")).toBe("private, no-cache");
    await db.registry.publish([binding("tenant-sync-other", CAPS[1]!, "cinst_sync_other")]);
    await db.registry.publish([policy("quota:sync-elsewhere")]);
    const revalidated = await call(api, `/v1/catalog/changes?since=${since}`, token, { "if-none-match": etag });
    expect(revalidated.status).toBe(304);
    expect(revalidated.headers.get("etag")).toBe(etag);
    expect((await gateway.catalogChanges({ since })).changes).toEqual([]);

    // One publication that reaches the tenant: a capability added, one removed.
    const published = await db.registry.publish([
      binding("tenant-sync", "cap:sync.d", "cinst_sync"),
      binding("tenant-sync", CAPS[1]!, "cinst_sync", { enabled: false, policy_revision: 2 }),
    ]);
    // The validator of the empty page is no longer current: the changes, with a new ETag.
    expect((await call(api, `/v1/catalog/changes?since=${since}`, token, { "if-none-match": etag })).status).toBe(200);
    const response = await call(api, `/v1/catalog/changes?since=${since}&limit=1`, token);
    expect(response.status).toBe(200);
    expect(response.headers.get("etag")).toMatch(new RegExp(`^"${published.catalog_revision}-[0-9a-f]{16}"$`));
    expect(response.body).toMatchObject({
      catalog_revision: published.catalog_revision,
      since,
      changes: [{ capability_id: CAPS[1], change: "removed", revision: published.catalog_revision, definition: null }],
      next_cursor: expect.any(String),
    });
    const all = await gateway.catalogChangesAll(since, { limit: 1 });
    expect(all.catalog_revision).toBe(published.catalog_revision);
    expect(all.changes.map((c) => [c.capability_id, c.change])).toEqual([
      [CAPS[1], "removed"],
      ["cap:sync.d", "added"],
    ]);
    for (const change of all.changes) {
      if (change.change === "removed") catalog.delete(change.capability_id);
      else catalog.set(change.capability_id, change.definition);
    }
    since = all.catalog_revision;
    // The synced catalog is the catalog, and the next poll is empty again.
    const relisted = new Map<string, unknown>();
    for await (const definition of gateway.catalogAll()) relisted.set(String(definition.capability.id), definition);
    expect(new Map([...catalog].sort())).toEqual(new Map([...relisted].sort()));
    expect(await gateway.catalogChanges({ since })).toMatchObject({ catalog_revision: since, changes: [], next_cursor: null });
  });

  it("answers 410 changes-expired as problem+json below the history kept, and 400 for a since not yet published", async () => {
    const gateway = client(token);
    const before = (await gateway.catalogPage({ limit: 1 })).catalog_revision;
    await db.registry.publish([binding("tenant-sync", CAPS[1]!, "cinst_sync", { enabled: true, policy_revision: 3 })]);
    const last = await db.registry.publish([binding("tenant-sync", CAPS[2]!, "cinst_sync", { enabled: false, policy_revision: 2 })]);
    await db.registry.trimCatalogChanges(1, 86_400, 10_000);
    const gone = await call(api, `/v1/catalog/changes?since=${before}`, token);
    expect(gone.status).toBe(410);
    expect(gone.headers.get("content-type")).toMatch(/^application\/problem\+json/);
    expect(gone.body).toMatchObject({ code: "changes-expired", since: before, oldest_since: last.catalog_revision - 1 });
    const problem = (await gateway.catalogChanges({ since: before }).catch((e: unknown) => e)) as RegistryProblem;
    expect(problem).toBeInstanceOf(RegistryProblem);
    expect(problem.is("changes-expired")).toBe(true);
    expect((await call(api, `/v1/catalog/changes?since=${last.catalog_revision - 1}`, token)).status).toBe(200);

    const ahead = await call(api, `/v1/catalog/changes?since=${last.catalog_revision + 1000}`, token);
    expect(ahead.status).toBe(400);
    expect(ahead.body).toMatchObject({ code: "invalid", errors: [{ field: "since" }] });
    // `since` as written, in decimal digits: Number() would read an empty value as 0 (the whole
    // feed), and 1e3, 0x10, +5 or " 5" as numbers.
    for (const query of [
      "",
      "since=",
      "since=-1",
      "since=x",
      "since=1e3",
      "since=0x10",
      "since=%2B5",
      "since=%205",
      "since=1.0",
      `since=${last.catalog_revision}&cursor=garbage`,
    ]) {
      const refused = await call(api, `/v1/catalog/changes?${query}`, token);
      expect(refused.status, query).toBe(400);
      if (query.startsWith("since=") && !query.includes("cursor")) expect(refused.body, query).toMatchObject({ code: "invalid", errors: [{ field: "since" }] });
    }
    // Without a tenant the feed never changes; without catalog:read there is none.
    const anonymous = await api.token({ scopes: ["catalog:read"] });
    const empty = await call(api, "/v1/catalog/changes?since=0", anonymous);
    expect(empty).toMatchObject({ status: 200, body: { catalog_revision: 0, since: 0, changes: [], next_cursor: null } });
    expect((await call(api, "/v1/catalog/changes?since=0", await api.tenantToken("tenant-sync", ["routes:write"]))).status).toBe(403);
  });

  it("within the staleness bound answers an unchanged poll without a statement", async () => {
    let statements = 0;
    const counted: SqlExecutor = {
      query: (text, params) => {
        statements++;
        return pgExecutor(db.dataPool).query(text, params);
      },
    };
    let now = 5_000_000;
    const stale = createTestApi(new Registry({ data: counted, control: pgExecutor(db.owner) }), { catalog: { maxStalenessMs: 5000, now: () => now } });
    const tokenStale = await stale.tenantToken("tenant-sync");
    const revision = (await call(stale, "/v1/catalog/capabilities?limit=1", tokenStale)).body.catalog_revision as number;
    const n = statements;
    const poll = await call(stale, `/v1/catalog/changes?since=${revision}`, tokenStale);
    expect(poll.status).toBe(200);
    expect(poll.body).toEqual({ catalog_revision: revision, since: revision, changes: [], next_cursor: null });
    expect(poll.headers.get("aip-catalog-cache")).toBe("hit");
    const validated = await call(stale, `/v1/catalog/changes?since=${revision}`, tokenStale, { "if-none-match": poll.headers.get("etag")! });
    expect(validated.status).toBe(304);
    expect(validated.headers.get("aip-catalog-cache")).toBe("hit");
    expect(statements - n).toBe(0);
    now += 6000;
    // Past the bound: one statement each, and the same answers (the same bytes under the same ETag).
    const confirmed = await call(stale, `/v1/catalog/changes?since=${revision}`, tokenStale);
    expect(confirmed.body).toEqual(poll.body);
    expect(confirmed.headers.get("etag")).toBe(poll.headers.get("etag"));
    expect(statements - n).toBe(1);
    now += 6000;
    expect((await call(stale, `/v1/catalog/changes?since=${revision}`, tokenStale, { "if-none-match": poll.headers.get("etag")! })).status).toBe(304);
    expect(statements - n).toBe(2);
  });
});

describe("the change feed's HTTP semantics", () => {
  const TENANTS = ["tenant-bind-a", "tenant-bind-b"];
  const BIND_CAPS = ["cap:bind.1", "cap:bind.2", "cap:bind.3"];
  let before: number;
  let after: number;
  let tokens: Record<string, string>;

  beforeAll(async () => {
    await db.registry.publish([
      await version("cver_bind", "ctype_sync", BIND_CAPS),
      ...TENANTS.map((tenant) => instance(`cinst_${tenant}`, "ctype_sync", "cver_bind", tenant)),
    ]);
    before = (await db.registry.catalogChanges(TENANTS[0]!, { since: 0 }))?.catalog_revision ?? 0;
    // One publication reaches both tenants: both are at the same revision afterwards, so a cursor
    // is refused for whose it is, never as stale.
    after = (await db.registry.publish(TENANTS.flatMap((tenant) => BIND_CAPS.map((cap) => binding(tenant, cap, `cinst_${tenant}`))))).catalog_revision;
    tokens = Object.fromEntries(await Promise.all(TENANTS.map(async (tenant) => [tenant, await api.tenantToken(tenant)] as const)));
  });

  it("binds cursors to the tenant, to since and to the walk kind: any other use is 400, the cursor's own walk continues", async () => {
    const [a, b] = TENANTS as [string, string];
    const feed = await call(api, `/v1/catalog/changes?since=${before}&limit=1`, tokens[a]!);
    expect(feed.body).toMatchObject({ catalog_revision: after, changes: [{ capability_id: "cap:bind.1" }] });
    const cursor = feed.body.next_cursor as string;
    const page = await call(api, "/v1/catalog/capabilities?limit=1", tokens[a]!);
    expect(page.body.catalog_revision).toBe(after);
    const pageCursor = page.body.next_cursor as string;
    expect((await call(api, "/v1/catalog/capabilities?limit=1", tokens[b]!)).body.catalog_revision).toBe(after);

    const refused = async (path: string, token: string) => {
      const answer = await call(api, path, token);
      expect(answer.status, path).toBe(400);
      expect(answer.body, path).toMatchObject({ code: "invalid", errors: [{ field: "cursor" }] });
    };
    const enc = encodeURIComponent;
    await refused(`/v1/catalog/changes?since=${before}&limit=1&cursor=${enc(cursor)}`, tokens[b]!); // another tenant's
    await refused(`/v1/catalog/changes?since=${before + 1}&limit=1&cursor=${enc(cursor)}`, tokens[a]!); // another since
    await refused(`/v1/catalog/changes?since=${before}&limit=1&cursor=${enc(pageCursor)}`, tokens[a]!); // a page cursor
    await refused(`/v1/catalog/capabilities?limit=1&cursor=${enc(cursor)}`, tokens[a]!); // a feed cursor as a page cursor
    await refused(`/v1/catalog/capabilities?limit=1&cursor=${enc(pageCursor)}`, tokens[b]!); // another tenant's page cursor
    await refused(`/v1/catalog/capabilities?limit=1&q=bind&cursor=${enc(pageCursor)}`, tokens[a]!); // other filters
    await refused(`/v1/catalog/changes?since=${before}&cursor=${enc(cursor.replace(/cap:bind\.1$/, "cap:bind.2"))}`, tokens[a]!); // altered
    await refused(`/v1/catalog/changes?since=${before}&cursor=${enc(`${after}:cap:bind.1`)}`, tokens[a]!); // unbound (the old format)

    // The cursor's own walk goes on, for its tenant; and B's own walk is B's.
    const next = await call(api, `/v1/catalog/changes?since=${before}&limit=1&cursor=${enc(cursor)}`, tokens[a]!);
    expect(next.body.changes.map((c: { capability_id: string }) => c.capability_id)).toEqual(["cap:bind.2"]);
    const own = await call(api, `/v1/catalog/changes?since=${before}&limit=1`, tokens[b]!);
    const ownNext = await call(api, `/v1/catalog/changes?since=${before}&limit=1&cursor=${enc(own.body.next_cursor)}`, tokens[b]!);
    expect(ownNext.status).toBe(200);
    expect((await call(api, `/v1/catalog/capabilities?limit=1&cursor=${enc(pageCursor)}`, tokens[a]!)).body.capabilities[0].capability.id).toBe("cap:bind.2");
  });

  it("answers 304 only to If-None-Match naming this request's current answer, weakly compared", async () => {
    const a = tokens[TENANTS[0]!]!;
    const path = `/v1/catalog/changes?since=${before}`;
    const fresh = await call(api, path, a);
    expect(fresh.status).toBe(200);
    const etag = fresh.headers.get("etag")!;
    expect(etag).toMatch(new RegExp(`^"${after}-[0-9a-f]{16}"$`));
    for (const [validator, status] of [
      [etag, 304],
      [`W/${etag}`, 304],
      [`"1-0000000000000000", ${etag}`, 304],
      ["*", 304],
      [etag.replace(`"${after}-`, `"${after - 1}-`), 200], // an older answer of this request
      ['"0-0000000000000000"', 200], // another request's
    ] as const) {
      const answer = await call(api, path, a, { "if-none-match": validator });
      expect(answer.status, validator).toBe(status);
      expect(answer.headers.get("etag"), validator).toBe(etag);
      if (status === 200) expect(answer.body, validator).toEqual(fresh.body);
    }
    // The same validator for another request (another since, another page size) is not current.
    expect((await call(api, `/v1/catalog/changes?since=${before}&limit=2`, a, { "if-none-match": etag })).status).toBe(200);
  });

  it("compresses answers on Node like catalog pages, with the coding in the strong ETag", async () => {
    const node = createTestApi(db.registry, { compressor: nodeCompressor });
    const a = await node.tenantToken(TENANTS[0]!);
    const path = `/v1/catalog/changes?since=${before}`;
    const plain = await node.call("GET", path, { token: a });
    const text = await plain.text();
    expect(plain.headers.get("content-encoding")).toBeNull();
    expect(plain.headers.get("vary")).toBe("authorization, accept-encoding");
    for (const coding of ["br", "gzip"] as const) {
      const compressed = await node.call("GET", path, { token: a, headers: { "accept-encoding": coding } });
      expect(compressed.status).toBe(200);
      expect(compressed.headers.get("content-encoding")).toBe(coding);
      expect(compressed.headers.get("etag")).toBe(plain.headers.get("etag")!.replace(/"$/, `-${coding}"`));
      const bytes = Buffer.from(await compressed.arrayBuffer());
      expect(bytes.length).toBeLessThan(Buffer.byteLength(text));
      expect((coding === "br" ? brotliDecompressSync(bytes) : gunzipSync(bytes)).toString("utf8")).toBe(text);
      // A validator of any coding of this request answers 304 with this request's representation.
      const validated = await node.call("GET", path, { token: a, headers: { "accept-encoding": coding, "if-none-match": plain.headers.get("etag")! } });
      expect(validated.status).toBe(304);
      expect(validated.headers.get("etag")).toBe(compressed.headers.get("etag"));
    }
  });
});
