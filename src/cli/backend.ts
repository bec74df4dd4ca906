/**
 * What the operator commands need from a registry, over either transport:
 *
 * - HTTP (default): the registry's API at --url with a bearer token. Works against any
 *   deployment (Node, Workers) and goes through the same auth and validation as every caller.
 * - SQL (--database-url): the same SQL functions, directly. For when the API is down or not
 *   reachable from where the operator is (doctor on a broken deployment, CI pipelines next to
 *   the database). It cannot share an embedded PGlite directory with a running server.
 */
import {
  RegistryClient,
  RegistryProblem,
  type CatalogChange,
  type Change,
  type FleetRegion,
  type FleetStatus,
  type InvariantReport,
  type PublicationResult,
  type Readiness,
  type RouteExportWatermarks,
  type RouteRetentionPolicy,
  type RouteRetentionResult,
  type RoutesPage,
} from "../client/index.js";
import { BINDINGS_PAGE } from "../limits.js";
import { RECORD_KINDS } from "../record-kinds.js";
import type { Change as ChangeRecord, RecordKind } from "../schemas.js";
import { RegistryUnreachable } from "./errors.js";

export interface Backend {
  /** Where it points, for messages (never includes credentials). */
  readonly target: string;
  readiness(): Promise<Readiness>;
  publish(changes: ChangeRecord[], dryRun: boolean): Promise<PublicationResult>;
  adminGet(kind: RecordKind, id: string): Promise<Record<string, unknown> | null>;
  /** Every binding of a tenant (all pages). */
  bindings(tenantId: string): Promise<Record<string, unknown>[]>;
  fleetStatus(): Promise<FleetStatus>;
  /** Per-region counts, or null when this registry does not report regions. */
  fleetRegions(): Promise<FleetRegion[] | null>;
  checkInvariants(): Promise<InvariantReport>;
  expireLeases(limit: number): Promise<{ expired: number; released: number }>;
  /**
   * One route-retention batch. Over HTTP the server applies its own window and `window` must be
   * absent; over SQL there is no server, so it is required.
   */
  removeSettledRoutes(limit: number, window?: RetentionWindow): Promise<RouteRetentionResult>;
  routesPage(query: RoutesQuery): Promise<RoutesPage>;
  recordRouteExport(settledAfter: string | null, settledBefore: string): Promise<RouteExportWatermarks>;
  /**
   * The database's route retention policy; with `change`, set as given first. Over SQL only: it is
   * the database owner's (a runtime role's connection is refused `forbidden`).
   */
  retentionPolicy(change?: { days?: number; requireExport?: boolean }): Promise<RouteRetentionPolicy>;
  /**
   * Every change in a tenant's catalog after `since` (all pages), and the revision reached.
   * Over HTTP the tenant is the token's and `tenantId` must be absent; over SQL it is required.
   */
  catalogChanges(tenantId: string | undefined, since: number, limit?: number): Promise<{ catalog_revision: number; changes: CatalogChange[] }>;
  close(): Promise<void>;
}

export interface RetentionWindow {
  days: number;
  requireExport: boolean;
}

interface RoutesQuery {
  settledBefore: string;
  settledAfter?: string;
  cursor?: string;
  limit?: number;
}

export function httpBackend(options: { url: string; token: string | (() => Promise<string>); timeoutMs: number }): Backend {
  const client = new RegistryClient({
    baseUrl: options.url,
    token: options.token,
    headers: { "user-agent": "aip-registry-cli" },
    // The whole call, answer included; past it the client throws RegistryTimeoutError (exit 3).
    timeoutMs: options.timeoutMs,
    fetch: (input, init) =>
      fetch(input, init).catch((error: unknown) => {
        // The client's own abort (its timeout) is its to report.
        if (init.signal?.aborted) throw error;
        throw new RegistryUnreachable(options.url, error);
      }),
  });
  return {
    target: options.url,
    readiness: () => client.readiness(),
    publish: (changes, dryRun) => client.publish(changes as Change[], { dryRun }),
    adminGet: (kind, id) => client.adminGet(RECORD_KINDS[kind], id),
    async bindings(tenantId) {
      const all: Record<string, unknown>[] = [];
      let cursor: string | undefined;
      do {
        const page = await client.adminBindings(tenantId, { limit: BINDINGS_PAGE.max, ...(cursor ? { cursor } : {}) });
        // Records as plain objects (the wire types are interfaces, which carry no index signature).
        all.push(...page.bindings.map((binding) => ({ ...binding })));
        cursor = page.next_cursor ?? undefined;
      } while (cursor);
      return all;
    },
    fleetStatus: () => client.fleetStatus(),
    fleetRegions: () =>
      client.fleetRegions().then(
        (answer) => answer.regions,
        (error: unknown) => {
          if (error instanceof RegistryProblem && error.is("not-found")) return null;
          throw error;
        },
      ),
    checkInvariants: () => client.checkInvariants(),
    expireLeases: (limit) => client.expireLeases(limit),
    async removeSettledRoutes(limit, window) {
      if (window) throw new Error("over HTTP the server applies its own evidence window");
      return client.removeSettledRoutes(limit);
    },
    routesPage: (query) => client.routesPage(query),
    recordRouteExport: (after, before) => client.recordRouteExport(after, before),
    async retentionPolicy() {
      throw new Error("the route retention policy is the database owner's: over SQL only");
    },
    async catalogChanges(tenantId, since, limit) {
      if (tenantId) throw new Error("over HTTP the tenant is the token's");
      return client.catalogChangesAll(since, limit ? { limit } : {});
    },
    close: async () => {},
  };
}
