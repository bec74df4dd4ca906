/**
 * GET /v1/catalog/changes over HTTP and through the typed client: the gateway sync recipe of
 * docs/catalog-sync.md (list once, then poll changes), 304 with a strong ETag when nothing changed
 * (other tenants' publications included), 410 problem+json below the history kept, and the
 * staleness bound answering an unchanged poll without a statement.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RegistryClient, RegistryProblem } from "../../src/client.js";
import type { SqlExecutor } from "../../src/db/executor.js";
import { pgExecutor } from "../../src/db/pg.js";
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
async function call(target: TestApi, path: string, token: string) {
  const response = await target.call("GET", path, { token });
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

    // Nothing changed: 304 with a strong ETag naming the tenant's revision; so after another
    // tenant's publication and an admission policy.
    const first = await call(api, `/v1/catalog/changes?since=${since}`, token);
    expect(first.status).toBe(304);
    expect(first.headers.get("etag")).toMatch(new RegExp(`^"${since}-[0-9a-f]{16}"$`));
    expect(first.headers.get("cache-control")).toBe("private, no-cache");
    await db.registry.publish([binding("tenant-sync-other", CAPS[1]!, "cinst_sync_other")]);
    await db.registry.publish([policy("quota:sync-elsewhere")]);
    expect(await gateway.catalogChanges({ since })).toBeNull();

    // One publication that reaches the tenant: a capability added, one removed.
    const published = await db.registry.publish([
      binding("tenant-sync", "cap:sync.d", "cinst_sync"),
      binding("tenant-sync", CAPS[1]!, "cinst_sync", { enabled: false, policy_revision: 2 }),
    ]);
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
    // The synced catalog is the catalog, and the next poll is 304 again.
    const relisted = new Map<string, unknown>();
    for await (const definition of gateway.catalogAll()) relisted.set(String(definition.capability.id), definition);
    expect(new Map([...catalog].sort())).toEqual(new Map([...relisted].sort()));
    expect(await gateway.catalogChanges({ since })).toBeNull();
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
    for (const query of ["", "since=-1", "since=x", `since=${last.catalog_revision}&cursor=garbage`]) {
      expect((await call(api, `/v1/catalog/changes?${query}`, token)).status, query).toBe(400);
    }
    // Without a tenant the feed never changes; without catalog:read there is none.
    const anonymous = await api.token({ scopes: ["catalog:read"] });
    expect((await call(api, "/v1/catalog/changes?since=0", anonymous)).status).toBe(304);
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
    expect(poll.status).toBe(304);
    expect(poll.headers.get("aip-catalog-cache")).toBe("hit");
    expect(statements - n).toBe(0);
    now += 6000;
    expect((await call(stale, `/v1/catalog/changes?since=${revision}`, tokenStale)).status).toBe(304);
    expect(statements - n).toBe(1);
  });
});
