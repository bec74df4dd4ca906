/**
 * Catalog pages under concurrent publication, with readers and publishers on separate
 * connections. Every publication flips which of a tenant's two instances is enabled, which
 * changes the visibility of every one of its bindings: instance A serves the even capabilities
 * (12), instance B the odd ones below 21 (10). A page built from two publications would mix
 * parities or carry the wrong total, so each page is checked against exactly what its own
 * catalog_revision implies, reconstructed afterwards from the publishers' results.
 */
import type pg from "pg";
import { afterAll, beforeAll, expect, it } from "vitest";
import { createPgPool, pgExecutor } from "../../src/db/pg.js";
import { RegistryError } from "../../src/registry/errors.js";
import { Registry } from "../../src/registry/registry.js";
import type { CatalogPage } from "../../src/schemas.js";
import { useTestDatabase } from "../support/database.js";
import { binding, connectorType, hostPrincipal, instance, registerReplica, replica, requestId, version } from "../../fixtures/records.js";
import { catalogPage } from "../../fixtures/catalog-reads.js";

const db = useTestDatabase();
let control: pg.Pool;
beforeAll(async () => {
  // createPgPool, for its idle-client error listener (see test/db/maintenance.test.ts).
  control = createPgPool(db.controlUrl, { max: PUBLISHERS });
});
afterAll(async () => {
  await control?.end();
});

const PUBLISHERS = 3;
const READERS_PER_TENANT = 2;
const PUBLICATIONS = 20;
const LIMIT = 5;
const tenants = Array.from({ length: PUBLISHERS }, (_, k) => `tenant-cc${k}`);
const caps = (k: number) => Array.from({ length: 24 }, (_, n) => `cap:cc${k}.${String(n).padStart(2, "0")}`);
const onA = (k: number) => caps(k).filter((_, n) => n % 2 === 0);
const onB = (k: number) => caps(k).filter((_, n) => n % 2 === 1 && n < 21);

interface Observed {
  tenant: number;
  /** Last capability of the previous page ("" on a first page) and that page's revision. */
  after: string;
  cursorRevision: number | null;
  page: CatalogPage;
}

it("a reader never sees a page that mixes two publications, and a cursor never crosses one", async () => {
  for (let k = 0; k < PUBLISHERS; k++) {
    await db.registry.publish([
      connectorType(`ctype_cc${k}`),
      await version(`cver_cc${k}`, `ctype_cc${k}`, caps(k)),
      instance(`cinst_cc${k}_a`, `ctype_cc${k}`, `cver_cc${k}`, tenants[k]!),
      instance(`cinst_cc${k}_b`, `ctype_cc${k}`, `cver_cc${k}`, tenants[k]!, 1, { status: "disabled" }),
      ...onA(k).map((cap) => binding(tenants[k]!, cap, `cinst_cc${k}_a`)),
      ...onB(k).map((cap) => binding(tenants[k]!, cap, `cinst_cc${k}_b`)),
      replica(`crepl_cc${k}`, `cinst_cc${k}_a`, `cver_cc${k}`),
    ]);
  }
  const start = Number((await db.owner.query("SELECT revision FROM aip_catalog_revision")).rows[0].revision);

  // State of tenant k after each of its publications: the revision it produced and whether A is on.
  const history: { revision: number; aOn: boolean }[][] = tenants.map(() => []);
  let publishing = true;
  const publisher = async (k: number) => {
    const registry = new Registry({ data: pgExecutor(db.dataPool), control: pgExecutor(control) });
    for (let m = 1; m <= PUBLICATIONS; m++) {
      const aOn = m % 2 === 0;
      const result = await registry.publish([
        instance(`cinst_cc${k}_a`, `ctype_cc${k}`, `cver_cc${k}`, tenants[k]!, m + 1, { status: aOn ? "enabled" : "disabled" }),
        instance(`cinst_cc${k}_b`, `ctype_cc${k}`, `cver_cc${k}`, tenants[k]!, m + 1, { status: aOn ? "disabled" : "enabled" }),
      ]);
      history[k]!.push({ revision: result.catalog_revision, aOn });
      // A pause long enough that walks often get past their first page before the next one.
      await new Promise((resolve) => setTimeout(resolve, 5 + Math.random() * 10));
    }
  };

  const { registry: readerRegistry } = db.registryWithPool(PUBLISHERS * READERS_PER_TENANT + 1);
  const observed: Observed[] = [];
  const stale: number[] = [];
  const reader = async (k: number) => {
    while (publishing) {
      let cursor: string | undefined;
      let after = "";
      let cursorRevision: number | null = null;
      try {
        do {
          const page = await catalogPage(readerRegistry, tenants[k]!, { limit: LIMIT, ...(cursor ? { cursor } : {}) });
          observed.push({ tenant: k, after, cursorRevision, page });
          cursor = page.next_cursor ?? undefined;
          after = page.capabilities.at(-1)?.capability.id ?? after;
          cursorRevision = page.catalog_revision;
        } while (cursor);
      } catch (error) {
        if (!(error instanceof RegistryError && error.code === "stale-cursor")) throw error;
        stale.push(k);
      }
    }
  };

  // Host churn alongside: heartbeats never move the revision nor block readers.
  await registerReplica(db.registry, "crepl_cc0", 60_000);
  const heartbeats = async () => {
    let sequence = Number((await db.registry.adminGet("replica", "crepl_cc0"))!.health_revision);
    while (publishing) {
      sequence = (
        await readerRegistry.replicaLifecycle("crepl_cc0", "heartbeat", { request_id: requestId(), previous_sequence: sequence }, hostPrincipal("crepl_cc0"))
      ).sequence;
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
  };

  const readers = tenants.flatMap((_, k) => Array.from({ length: READERS_PER_TENANT }, () => reader(k)));
  const churn = heartbeats();
  await Promise.all(tenants.map((_, k) => publisher(k)));
  publishing = false;
  await Promise.all([...readers, churn]);

  // Every publication advanced the revision by exactly one, so the histories cover every revision.
  const revisions = history
    .flat()
    .map((h) => h.revision)
    .sort((a, b) => a - b);
  expect(revisions).toEqual(Array.from({ length: PUBLISHERS * PUBLICATIONS }, (_, n) => start + 1 + n));

  const expectedAt = (k: number, revision: number) => {
    const last = history[k]!.filter((h) => h.revision <= revision).at(-1);
    return (last?.aOn ?? true) ? onA(k) : onB(k);
  };
  for (const { tenant: k, after, page } of observed) {
    const expected = expectedAt(k, page.catalog_revision).filter((id) => id > after);
    expect(
      page.capabilities.map((d) => d.capability.id),
      `tenant ${k} at revision ${page.catalog_revision} after ${after}`,
    ).toEqual(expected.slice(0, LIMIT));
    expect(page.total).toBe(expectedAt(k, page.catalog_revision).length);
    expect(page.next_cursor === null).toBe(expected.length <= LIMIT);
    if (page.next_cursor) expect(Number(page.next_cursor.split(":")[0])).toBe(page.catalog_revision);
  }

  // Continuation pages were read, and each one at the revision of the page before it.
  const continued = observed.filter((o) => o.cursorRevision !== null);
  expect(continued.length).toBeGreaterThanOrEqual(PUBLISHERS);
  for (const o of continued) expect(o.page.catalog_revision).toBe(o.cursorRevision);
  expect(stale.length).toBeGreaterThan(0);
  expect(observed.length).toBeGreaterThan((PUBLISHERS * PUBLICATIONS) / 2);
  // Heartbeats ran and did not touch the catalog.
  expect(Number((await db.owner.query("SELECT revision FROM aip_catalog_revision")).rows[0].revision)).toBe(start + PUBLISHERS * PUBLICATIONS);
});
