/**
 * The SQL transport of the operator commands (--database-url): the registry's functions called
 * directly through a small pg pool, as the API itself would call them.
 */
import { createPgPool, pgExecutor, redactUrl } from "../db/pg.js";
import { BINDINGS_PAGE, CLI_CONNECT_TIMEOUT_MS, DB_STATEMENT_TIMEOUT_MS } from "../limits.js";
import { verifySchema } from "../registry/schema-check.js";
import { Registry, type CatalogChanges } from "../registry/registry.js";
import type { CatalogChange } from "../client/index.js";
import type { Backend } from "./backend.js";
import { isConnectionFailure, RegistryUnreachable } from "./errors.js";

/**
 * Connects once before anything else, within CLI_CONNECT_TIMEOUT_MS: a database that cannot be
 * reached (or accepts and never answers) is reported as such, naming it (exit 3). Every statement
 * is bounded server-side (the pool's statement_timeout) and client-side a little later.
 */
export async function sqlBackend(databaseUrl: string): Promise<Backend> {
  const target = redactUrl(databaseUrl);
  const pool = createPgPool(databaseUrl, {
    max: 2,
    applicationName: "aip-registry-cli",
    connectionTimeoutMs: CLI_CONNECT_TIMEOUT_MS,
    queryTimeoutMs: DB_STATEMENT_TIMEOUT_MS.default + 5_000,
  });
  try {
    (await pool.connect()).release();
  } catch (error) {
    await pool.end().catch(() => {});
    throw isConnectionFailure(error) ? new RegistryUnreachable(target, error, "the database", CLI_CONNECT_TIMEOUT_MS) : error;
  }
  const executor = pgExecutor(pool);
  const registry = new Registry({ data: executor, control: executor });
  return {
    target,
    async readiness() {
      const { ok, ...verdict } = await verifySchema(registry);
      return { status: ok ? "ready" : "not_ready", ...verdict };
    },
    publish: (changes, dryRun) => registry.publish(changes, { dryRun }),
    adminGet: (kind, id) => registry.adminGet(kind, id),
    async bindings(tenantId) {
      const all: Record<string, unknown>[] = [];
      let cursor: string | undefined;
      do {
        const page = await registry.adminBindings(tenantId, cursor, BINDINGS_PAGE.max);
        all.push(...page.bindings);
        cursor = page.next_cursor ?? undefined;
      } while (cursor);
      return all;
    },
    fleetStatus: () => registry.fleetStatus(),
    fleetRegions: async () => (await registry.fleetRegions()).regions,
    checkInvariants: () => registry.checkInvariants(),
    expireLeases: (limit) => registry.expireLeases(limit),
    async removeSettledRoutes(limit, window) {
      if (!window) throw new Error("over SQL the evidence window must be given");
      return registry.removeSettledRoutes(window.days, window.requireExport, limit);
    },
    routesPage: (query) => registry.routesPage(query),
    recordRouteExport: (after, before) => registry.recordRouteExport(after, before),
    retentionPolicy: (change) =>
      change ? registry.setRouteRetentionPolicy(change.days ?? null, change.requireExport ?? null) : registry.routeRetentionPolicy(null, null),
    async catalogChanges(tenantId, since, limit) {
      if (!tenantId) throw new Error("over SQL the tenant must be given");
      const changes: CatalogChange[] = [];
      let page = await registry.catalogChanges(tenantId, { since, ...(limit ? { limit } : {}) });
      if (!page) return { catalog_revision: since, changes };
      changes.push(...page.changes);
      while (page.next_cursor) {
        const next: CatalogChanges | null = await registry.catalogChanges(tenantId, { since, cursor: page.next_cursor, ...(limit ? { limit } : {}) });
        if (!next) break;
        page = next;
        changes.push(...page.changes);
      }
      return { catalog_revision: page.catalog_revision, changes };
    },
    close: () => pool.end(),
  };
}
