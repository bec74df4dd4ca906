/**
 * Tenant-scoped catalog reads by parallel readers (limit 50): the first page, and deep pages
 * (the second half of a tenant's 10 pages) reached with real continuation cursors collected by
 * walking each sampled tenant's catalog once. Every read counts the tenant's whole visible set
 * (`total`), so a deep page costs what a first page costs plus its offset in the ordering.
 */
import type { Registry } from "../../src/registry/registry.js";
import type { Recorder } from "../lib/figures.js";
import { tenantId, type Layout } from "../../fixtures/layout.js";
import type { BenchDatabase } from "../lib/target.js";
import { UnexpectedOutcome } from "./routing.js";
import { catalogPage } from "../../fixtures/catalog-reads.js";

const PAGE = 50;

async function deepCursors(registry: Registry, tenant: string): Promise<string[]> {
  const cursors: string[] = [];
  let cursor: string | undefined;
  do {
    const page = await catalogPage(registry, tenant, { limit: PAGE, ...(cursor ? { cursor } : {}) });
    cursor = page.next_cursor ?? undefined;
    if (cursor) cursors.push(cursor);
  } while (cursor);
  return cursors.slice(Math.floor(cursors.length / 2));
}

export async function runCatalog(
  recorder: Recorder,
  db: BenchDatabase,
  l: Layout,
  plan: { target: string; readers: number; durationMs: number; sampledTenants: number },
): Promise<void> {
  const handle = await db.registry(plan.readers);
  try {
    await measureCatalog(recorder, db, l, plan, handle.registry);
  } finally {
    await handle.close();
  }
}

async function measureCatalog(
  recorder: Recorder,
  db: BenchDatabase,
  l: Layout,
  plan: { target: string; readers: number; durationMs: number; sampledTenants: number },
  registry: Registry,
): Promise<void> {
  const tenants = Array.from({ length: Math.min(plan.sampledTenants, l.tenants) }, (_, i) => tenantId(Math.floor((i * l.tenants) / plan.sampledTenants)));
  const cursors = new Map<string, string[]>();
  for (const tenant of tenants) cursors.set(tenant, await deepCursors(registry, tenant));
  const spec = (name: string) => ({
    suite: "catalog",
    name,
    concurrency: plan.readers,
    pool: plan.readers,
    durationMs: plan.durationMs,
    warmupMs: plan.durationMs / 4,
  });
  const pick = <T>(items: T[]) => items[Math.floor(Math.random() * items.length)] as T;

  await recorder.measure(db, plan.target, spec(`first page (limit ${PAGE})`), async () => {
    const page = await catalogPage(registry, tenantId(Math.floor(Math.random() * l.tenants)), { limit: PAGE });
    if (page.capabilities.length !== PAGE || page.total !== l.visiblePerTenant) throw new UnexpectedOutcome("short first page");
  });
  await recorder.measure(db, plan.target, spec(`deep page (pages 6-10, limit ${PAGE})`), async () => {
    const tenant = pick(tenants);
    const page = await catalogPage(registry, tenant, { limit: PAGE, cursor: pick(cursors.get(tenant) ?? []) });
    if (page.capabilities.length === 0) throw new UnexpectedOutcome("empty deep page");
  });
}
