/**
 * Catalog reads from a read replica (CATALOG_DATABASE_URL): a real streaming hot standby of a
 * private primary, made the way `pg_basebackup -R` would (test/support/private-server.ts).
 *
 * - The catalog functions run on a hot standby (no writes; the shared advisory lock is allowed in
 *   recovery) and answer every page, definition and 304 validation there, not on the primary.
 * - A standby's answer is one committed snapshot: under a stream of publications, no page ever
 *   mixes revisions (its total and its items agree, and match the revision's expected set).
 * - A lagging standby (replay paused) still answers first pages at its older revision, but a
 *   cursor or validator of a newer revision goes to the primary instead of back in time.
 *
 * It runs its own pair of servers from the embedded binaries, so it runs once: under an external
 * DATABASE_URL the run would add nothing but time.
 */
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MemoryCatalogCache } from "../../src/catalog/cache.js";
import { CatalogReplica } from "../../src/registry/catalog-replica.js";
import type { SqlExecutor } from "../../src/db/executor.js";
import { createPgPool, pgExecutor } from "../../src/db/pg.js";
import { Registry } from "../../src/registry/registry.js";
import { binding, connectorType, instance, version } from "../../fixtures/records.js";
import { createTestApi } from "../support/http.js";
import { embeddedPgCtl, startPrivateServer, type PrivateServer, type Standby } from "../support/private-server.js";
import { catalogGet, catalogPage } from "../../fixtures/catalog-reads.js";

const TENANT = "tenant-replica";
const CAPS = Array.from({ length: 6 }, (_, n) => `cap:replica.${n}`);

let primary: PrivateServer;
let standby: Standby;
const pools: pg.Pool[] = [];
let control: Registry;
let standbyPool: pg.Pool;
/** Statements each side received through the registry under test. */
const sent = { primary: 0, standby: 0 };
let registry: Registry;

function counting(executor: SqlExecutor, side: keyof typeof sent): SqlExecutor {
  return {
    query: (text, params) => {
      sent[side]++;
      return executor.query(text, params);
    },
  };
}

const pool = (url: string) => {
  const p = createPgPool(url, { max: 4 });
  pools.push(p);
  return p;
};

describe.skipIf(Boolean(process.env.DATABASE_URL) || !embeddedPgCtl())("catalog reads on a streaming hot standby", () => {
  beforeAll(async () => {
    primary = await startPrivateServer({ maxConnections: 40 });
    control = new Registry({ data: pgExecutor(pool(primary.dataUrl)), control: pgExecutor(pool(primary.controlUrl)) });
    await control.publish([
      connectorType("ctype_replica"),
      await version("cver_replica", "ctype_replica", CAPS),
      instance("cinst_replica", "ctype_replica", "cver_replica", TENANT),
      ...CAPS.slice(0, 3).map((cap) => binding(TENANT, cap, "cinst_replica")),
    ]);
    standby = await primary.startStandby();
    standbyPool = pool(standby.dataUrl);
    const catalog = counting(pgExecutor(standbyPool), "standby");
    registry = new Registry({
      data: counting(pgExecutor(pool(primary.dataUrl)), "primary"),
      catalog,
      // A lag bound the paused standby stays within: these cases are about revisions a request
      // names (test/http/catalog-replica-bounds.test.ts covers the lag bound and the floor).
      catalogReplica: new CatalogReplica(catalog, { maxLagMs: 600_000 }),
    });
  }, 180_000);

  afterAll(async () => {
    await Promise.all(pools.map((p) => p.end()));
    await standby?.stop();
    await primary?.stop();
  }, 120_000);

  const reset = () => Object.assign(sent, { primary: 0, standby: 0 });

  it("answers pages, definitions and validations on the standby, as the data role", async () => {
    const { rows } = await standbyPool.query<{ in_recovery: boolean }>("SELECT pg_is_in_recovery() AS in_recovery");
    expect(rows[0]!.in_recovery).toBe(true);
    reset();
    const page = await catalogPage(registry, TENANT, { limit: 2 });
    expect(page.capabilities.map((d) => (d.capability as { id: string }).id)).toEqual(CAPS.slice(0, 2));
    expect(await catalogGet(registry, TENANT, CAPS[0]!)).toMatchObject({ definition: { capability: { id: CAPS[0] } } });
    // Through the HTTP app with its cache: a miss, then a 304 validation, both on the standby.
    const api = createTestApi(registry, { catalog: { cache: new MemoryCatalogCache(1024 * 1024) } });
    const token = await api.tenantToken(TENANT);
    const first = await api.call("GET", "/v1/catalog/capabilities?limit=2", { token });
    expect(first.status).toBe(200);
    const again = await api.call("GET", "/v1/catalog/capabilities?limit=2", { token, headers: { "if-none-match": first.headers.get("etag")! } });
    expect(again.status).toBe(304);
    expect(sent).toEqual({ primary: 0, standby: 4 });
  });

  it("never mixes revisions in a page while publications stream in", async () => {
    const expected = new Map<number, string[]>();
    const start = await catalogPage(control, TENANT, { limit: 200 });
    expected.set(
      start.catalog_revision,
      start.capabilities.map((d) => (d.capability as { id: string }).id),
    );
    let publishing = true;
    const seen: { revision: number; ids: string[]; total: number }[] = [];
    /** Lets the readers take a few pages between two publications (no clock involved). */
    const readersCatchUp = async (count: number) => {
      while (seen.length < count) await new Promise((resolve) => setImmediate(resolve));
    };
    let last = start;
    const publisher = (async () => {
      try {
        for (let n = 0; n < 24; n++) {
          await readersCatchUp(3 * n);
          // Alternately add and disable bindings: each revision that reaches the tenant has its
          // own visible set (disabling a binding the tenant never had reaches nobody).
          const cap = CAPS[3 + (n % 3)]!;
          const result = await control.publish([binding(TENANT, cap, "cinst_replica", { enabled: n % 2 === 0, policy_revision: 2 + n })]);
          const page = await catalogPage(control, TENANT, { limit: 200 });
          const ids = page.capabilities.map((d) => (d.capability as { id: string }).id);
          const changed = JSON.stringify(ids) !== JSON.stringify(last.capabilities.map((d) => (d.capability as { id: string }).id));
          // A page carries the tenant's catalog revision: the publication's when it reached the
          // tenant, the previous one when it did not.
          expect(page.catalog_revision).toBe(changed ? result.catalog_revision : last.catalog_revision);
          expected.set(page.catalog_revision, ids);
          last = page;
        }
      } finally {
        publishing = false;
      }
    })();
    const reader = async () => {
      while (publishing) {
        const page = await catalogPage(registry, TENANT, { limit: 200 });
        seen.push({ revision: page.catalog_revision, ids: page.capabilities.map((d) => (d.capability as { id: string }).id), total: page.total });
      }
    };
    await Promise.all([publisher, reader(), reader(), reader()]);
    await standby.catchUp();
    expect(new Set(seen.map((page) => page.revision)).size).toBeGreaterThan(5);
    for (const page of seen) {
      expect(page.total, `revision ${page.revision}`).toBe(page.ids.length);
      if (expected.has(page.revision)) expect(page.ids, `revision ${page.revision}`).toEqual(expected.get(page.revision));
    }
  });

  it("sends a cursor or validator the lagging standby has not replayed to the primary, never back in time", async () => {
    await standby.catchUp();
    await standby.pauseReplay();
    try {
      const before = await catalogPage(registry, TENANT, { limit: 1 });
      const published = await control.publish([binding(TENANT, CAPS[0]!, "cinst_replica", { enabled: false, policy_revision: 100 })]);
      // It reaches the tenant (its binding is disabled): the tenant's revision moves to it.
      expect(published.catalog_revision).toBeGreaterThan(before.catalog_revision);
      expect((await catalogPage(control, TENANT, { limit: 1 })).catalog_revision).toBe(published.catalog_revision);

      // A first page: the standby's own, older but whole, revision.
      reset();
      expect((await catalogPage(registry, TENANT, { limit: 1 })).catalog_revision).toBe(before.catalog_revision);
      expect(sent).toEqual({ primary: 0, standby: 1 });

      // A cursor of the newer revision (a gateway walked it on the primary): the primary answers.
      const newer = await catalogPage(control, TENANT, { limit: 1 });
      reset();
      const next = await catalogPage(registry, TENANT, { limit: 1, cursor: newer.next_cursor! });
      expect(next.catalog_revision).toBe(published.catalog_revision);
      expect(sent).toEqual({ primary: 1, standby: 1 });

      // A validator of the newer revision: "not modified" from the primary, not a page from the past.
      reset();
      const validated = await registry.catalogPageText(TENANT, { limit: 1 }, published.catalog_revision);
      expect(validated).toMatchObject({ catalog_revision: published.catalog_revision, not_modified: true, text: null });
      expect(sent).toEqual({ primary: 1, standby: 1 });
      // An older cursor is stale wherever it is asked.
      await expect(catalogPage(registry, TENANT, { limit: 1, cursor: `${before.catalog_revision - 1}:0:0000000000000000:x` })).rejects.toMatchObject({
        code: "stale-cursor",
      });
    } finally {
      await standby.resumeReplay();
    }
    await standby.catchUp();
    reset();
    expect((await catalogPage(registry, TENANT, { limit: 1 })).catalog_revision).toBe((await catalogPage(control, TENANT, {})).catalog_revision);
    expect(sent.primary).toBe(0);
  });
});
