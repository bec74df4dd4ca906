/**
 * A typed HTTP client of the registry API for TypeScript gateways, connector hosts and operator
 * tools. Request and response types are inferred from the same zod schemas that validate the
 * server's requests (src/schemas.ts), imported as types only: at run time this module is a thin
 * wrapper over `fetch`, usable in Node, Workers and browsers.
 *
 * Every non-2xx answer is an RFC 9457 problem and surfaces as a `RegistryProblem` carrying the
 * stable `code` (`capacity-exceeded`, `replica-unavailable`, ...) and its extension members.
 * Network failures are left as the fetch implementation's own errors.
 */
import type { z } from "@hono/zod-openapi";
import type { ProblemCode } from "./registry/errors.js";
import type * as S from "./schemas.js";

// Wire types ------------------------------------------------------------------------------------
export type { ProblemCode };
export type Problem = z.infer<typeof S.Problem>;
export type Topology = z.infer<typeof S.Topology>;
export type TopologyPreference = z.input<typeof S.TopologyPreference>;
export type RouteAssignment = z.infer<typeof S.RouteAssignment>;
export type ResolveRequest = z.input<typeof S.ResolveRequest>;
export type SettlementOutcome = z.infer<typeof S.SettlementOutcome>;
export type SettlementResult = z.infer<typeof S.SettlementResult>;
export type CapabilityDefinition = z.infer<typeof S.CapabilityDefinition>;
export type CatalogPage = z.infer<typeof S.CatalogPage>;
export type CatalogEntry = z.infer<typeof S.CatalogEntry>;
export type CatalogQuery = z.input<typeof S.CatalogQuery>;
export type CatalogChangesQuery = z.input<typeof S.CatalogChangesQuery>;
export type CatalogChanges = z.infer<typeof S.CatalogChanges>;
export type CatalogChange = z.infer<typeof S.CatalogChange>;
export type LifecycleOperation = z.infer<typeof S.LifecycleOperation>;
export type LifecycleRequest = z.input<typeof S.LifecycleRequest>;
export type LifecycleResponse = z.infer<typeof S.LifecycleResponse>;
export type Change = z.input<typeof S.Change>;
export type PublicationResult = z.infer<typeof S.PublicationResult>;
export type FleetStatus = z.infer<typeof S.FleetStatus>;
export type LeaseExpiryResult = z.infer<typeof S.LeaseExpiryResult>;
export type RouteRetentionResult = z.infer<typeof S.RouteRetentionResult>;
export type RouteRetentionPolicy = z.infer<typeof S.RouteRetentionPolicy>;
export type RoutesPage = z.infer<typeof S.RoutesPage>;
export type RouteEvidence = z.infer<typeof S.RouteEvidence>;
export type RouteExportWatermarks = z.infer<typeof S.RouteExportWatermarks>;
export type InvariantReport = z.infer<typeof S.InvariantReport>;
export type VersionIdentity = z.infer<typeof S.VersionIdentity>;
export type InstanceIdentity = z.infer<typeof S.InstanceIdentity>;
export type ReplicaIdentity = z.infer<typeof S.ReplicaIdentity>;
export type FleetRegion = z.infer<typeof S.FleetRegion>;
export type FleetRegions = z.infer<typeof S.FleetRegions>;
export type Readiness = z.infer<typeof S.Readiness>;
export type AdminRecordKind = z.infer<typeof S.AdminRecordKind>;
export type BindingsPage = z.infer<typeof S.BindingsPage>;
/** `AIP-Route-Outcome`: a new route, the existing one, or the existing one re-reserved. */
export type RouteOutcome = z.infer<typeof S.ResolveOutcome>;
/** A resolve's answer: the body, and the outcome from `AIP-Route-Outcome`. */
export type ResolvedRoute = z.infer<typeof S.ResolveResult>;
/** A route read: the body, `reserved` from `AIP-Route-Reserved` and the last settlement from `AIP-Last-Settlement`. */
export type RouteRead = Omit<z.infer<typeof S.RouteState>, "settled_at">;

// Errors ----------------------------------------------------------------------------------------
/** A problem+json answer of the registry. */
export class RegistryProblem extends Error {
  readonly status: number;
  readonly code: ProblemCode | (string & {});
  /** `Retry-After` in milliseconds (429 and 503), or the problem's `retry_after_ms`. */
  readonly retryAfterMs: number | undefined;
  constructor(
    readonly problem: Problem,
    readonly response: { status: number; headers: Headers },
  ) {
    super(`${problem.code}: ${problem.detail}`);
    this.name = "RegistryProblem";
    this.status = response.status;
    this.code = problem.code;
    const header = Number(response.headers.get("retry-after"));
    this.retryAfterMs = typeof problem.retry_after_ms === "number" ? problem.retry_after_ms : Number.isFinite(header) && header > 0 ? header * 1000 : undefined;
  }

  /** Narrows on the problem code: `if (error instanceof RegistryProblem && error.is("capacity-exceeded"))`. */
  is(code: ProblemCode): boolean {
    return this.code === code;
  }
}

// Client ----------------------------------------------------------------------------------------
export interface RegistryClientOptions {
  /** The registry's base URL, e.g. `https://registry.example` (a path prefix is kept). */
  baseUrl: string;
  /** A bearer token, or a function returning one per request (rotation, short-lived tokens). */
  token?: string | (() => string | Promise<string>);
  /** Defaults to the global fetch; pass `app.request`-like functions or instrumented fetches. */
  fetch?: (input: string, init: RequestInit) => Promise<Response>;
  /** Extra headers on every request (e.g. `x-request-id`). */
  headers?: Record<string, string>;
}

type Query = Record<string, string | number | boolean | undefined>;

interface CallOptions {
  query?: Query;
  body?: unknown;
  headers?: Record<string, string>;
}

export class RegistryClient {
  private readonly base: string;
  private readonly fetchImpl: (input: string, init: RequestInit) => Promise<Response>;

  constructor(private readonly options: RegistryClientOptions) {
    this.base = options.baseUrl.replace(/\/+$/, "");
    this.fetchImpl = options.fetch ?? ((input, init) => fetch(input, init));
  }

  // Operations ----------------------------------------------------------------------------------
  async health(): Promise<{ status: "ok" }> {
    return this.json("GET", "/healthz");
  }

  /** Readiness; a 503 "not_ready" answer is returned, not thrown. */
  async readiness(): Promise<Readiness> {
    const response = await this.send("GET", "/readyz");
    if (response.status === 200 || response.status === 503) return (await response.json()) as Readiness;
    throw await this.problem(response);
  }

  // Data plane: catalog -------------------------------------------------------------------------
  async catalogPage(query: CatalogQuery = {}): Promise<CatalogPage> {
    return this.json("GET", "/v1/catalog/capabilities", { query: query as Query });
  }

  async catalogGet(capabilityId: string): Promise<CatalogEntry> {
    return this.json("GET", `/v1/catalog/capabilities/${enc(capabilityId)}`);
  }

  /** Every page of the tenant's catalog at one revision (restarts once on `stale-cursor`). */
  async *catalogAll(query: Omit<CatalogQuery, "cursor"> = {}): AsyncGenerator<CapabilityDefinition> {
    for (let attempt = 0; ; attempt++) {
      const seen: CapabilityDefinition[] = [];
      try {
        let cursor: string | undefined;
        do {
          const page = await this.catalogPage({ ...query, ...(cursor ? { cursor } : {}) });
          seen.push(...page.capabilities);
          cursor = page.next_cursor ?? undefined;
        } while (cursor);
      } catch (error) {
        if (attempt === 0 && error instanceof RegistryProblem && error.is("stale-cursor")) continue;
        throw error;
      }
      yield* seen;
      return;
    }
  }

  /**
   * One page of what changed in the tenant's catalog after `since` (a catalog_revision the
   * registry answered); null when nothing changed (304). A `changes-expired` problem (410) means
   * the history no longer reaches `since`: list the catalog again (docs/catalog-sync.md).
   */
  async catalogChanges(query: CatalogChangesQuery): Promise<CatalogChanges | null> {
    const response = await this.send("GET", "/v1/catalog/changes", { query: query as Query });
    if (response.status === 304) return null;
    if (!response.ok) throw await this.problem(response);
    return (await response.json()) as CatalogChanges;
  }

  /**
   * Every change after `since`, all pages: the changes in feed order and the catalog revision the
   * caller then holds (`since` itself when nothing changed).
   */
  async catalogChangesAll(
    since: number,
    query: Omit<CatalogChangesQuery, "since" | "cursor"> = {},
  ): Promise<{ catalog_revision: number; changes: CatalogChange[] }> {
    const changes: CatalogChange[] = [];
    let page = await this.catalogChanges({ ...query, since });
    if (!page) return { catalog_revision: since, changes };
    changes.push(...page.changes);
    while (page.next_cursor) {
      const next: CatalogChanges | null = await this.catalogChanges({ ...query, since, cursor: page.next_cursor });
      if (!next) break;
      page = next;
      changes.push(...page.changes);
    }
    return { catalog_revision: page.catalog_revision, changes };
  }

  // Data plane: routes --------------------------------------------------------------------------
  async resolveRoute(actionId: string, request: ResolveRequest): Promise<ResolvedRoute> {
    const response = await this.call("PUT", `/v1/routes/${enc(actionId)}`, { body: request });
    const outcome = (response.headers.get("aip-route-outcome") ?? (response.status === 201 ? "created" : "existing")) as RouteOutcome;
    return { outcome, assignment: (await response.json()) as RouteAssignment };
  }

  async getRoute(actionId: string): Promise<RouteRead> {
    const response = await this.call("GET", `/v1/routes/${enc(actionId)}`);
    return {
      assignment: (await response.json()) as RouteAssignment,
      reserved: response.headers.get("aip-route-reserved") === "true",
      last_settlement: (response.headers.get("aip-last-settlement") as SettlementOutcome | null) ?? null,
    };
  }

  /** Present the assignment exactly as received from resolveRoute or getRoute. */
  async settleRoute(actionId: string, assignment: RouteAssignment, outcome: SettlementOutcome): Promise<SettlementResult> {
    return this.json("POST", `/v1/routes/${enc(actionId)}/settlement`, { body: { assignment, outcome } });
  }

  // Connector hosts -----------------------------------------------------------------------------
  /**
   * `register` states what the host runs (`artifact_digest`, `manifest_digest`, `config_revision`,
   * `capability_count`): the registry refuses it with `admission` naming the field unless each is
   * the replica's admitted version's and instance's. Heartbeat, drain and offline state none of it.
   */
  async replicaLifecycle(replicaId: string, operation: LifecycleOperation, request: LifecycleRequest): Promise<LifecycleResponse> {
    return this.json("POST", `/v1/replicas/${enc(replicaId)}/${operation}`, { body: request });
  }

  // Registry reader (host admission, callback and event ingress) ---------------------------------
  /** A version's identity and state, or null when it does not exist or is not the token's to see. */
  async readVersion(versionId: string): Promise<VersionIdentity | null> {
    return this.orNull(this.json("GET", `/v1/registry/versions/${enc(versionId)}`));
  }

  /** An instance's identity and state (never its secret_provider_ref), or null. */
  async readInstance(instanceId: string): Promise<InstanceIdentity | null> {
    return this.orNull(this.json("GET", `/v1/registry/instances/${enc(instanceId)}`));
  }

  /** A replica's identity, lease and load, or null. */
  async readReplica(replicaId: string): Promise<ReplicaIdentity | null> {
    return this.orNull(this.json("GET", `/v1/registry/replicas/${enc(replicaId)}`));
  }

  // Control plane -------------------------------------------------------------------------------
  async publish(changes: Change[], options: { dryRun?: boolean } = {}): Promise<PublicationResult> {
    return this.json("POST", "/v1/admin/publications", { body: { changes }, query: { dry_run: options.dryRun ? "true" : undefined } });
  }

  /** One record, or null when it does not exist. */
  async adminGet(kind: AdminRecordKind, id: string): Promise<Record<string, unknown> | null> {
    return this.orNull(this.json("GET", `/v1/admin/${kind}/${enc(id)}`));
  }

  async adminBindings(tenantId: string, page: { cursor?: string; limit?: number } = {}): Promise<BindingsPage> {
    return this.json("GET", "/v1/admin/bindings", { query: { tenant_id: tenantId, ...page } });
  }

  async adminCatalogPage(query: CatalogQuery & { tenant_id?: string; unbound?: boolean } = {}): Promise<CatalogPage> {
    return this.json("GET", "/v1/admin/catalog/capabilities", { query: query as Query });
  }

  async checkInvariants(): Promise<InvariantReport> {
    return this.json("GET", "/v1/admin/invariants");
  }

  // Fleet ---------------------------------------------------------------------------------------
  async fleetStatus(): Promise<FleetStatus> {
    return this.json("GET", "/v1/fleet/status");
  }

  async fleetRegions(limit?: number): Promise<FleetRegions> {
    return this.json("GET", "/v1/fleet/regions", { query: { limit } });
  }

  async expireLeases(limit?: number): Promise<LeaseExpiryResult> {
    return this.json("POST", "/v1/fleet/lease-expiry", { query: { limit } });
  }

  // Plumbing ------------------------------------------------------------------------------------
  /** A `not-found` answer as null. */
  /** One route-retention batch with the server's evidence window (POST /v1/fleet/route-retention). */
  async removeSettledRoutes(limit?: number): Promise<RouteRetentionResult> {
    return this.json("POST", "/v1/fleet/route-retention", { query: { limit } });
  }

  /** One page of released routes settled in [settledAfter, settledBefore), every tenant's (GET /v1/admin/routes). */
  async routesPage(query: { settledBefore: string; settledAfter?: string; cursor?: string; limit?: number }): Promise<RoutesPage> {
    return this.json("GET", "/v1/admin/routes", {
      query: { settled_before: query.settledBefore, settled_after: query.settledAfter, cursor: query.cursor, limit: query.limit },
    });
  }

  /** Records that an export covered every route settled in [settledAfter, settledBefore) (POST /v1/admin/route-exports). */
  async recordRouteExport(settledAfter: string | null, settledBefore: string): Promise<RouteExportWatermarks> {
    return this.json("POST", "/v1/admin/route-exports", { body: { settled_after: settledAfter, settled_before: settledBefore } });
  }

  private async orNull<T>(read: Promise<T>): Promise<T | null> {
    try {
      return await read;
    } catch (error) {
      if (error instanceof RegistryProblem && error.is("not-found")) return null;
      throw error;
    }
  }

  private async json<T>(method: string, path: string, options: CallOptions = {}): Promise<T> {
    return (await (await this.call(method, path, options)).json()) as T;
  }

  /** Sends and returns a 2xx response; anything else becomes a RegistryProblem. */
  private async call(method: string, path: string, options: CallOptions = {}): Promise<Response> {
    const response = await this.send(method, path, options);
    if (response.ok) return response;
    throw await this.problem(response);
  }

  private async send(method: string, path: string, options: CallOptions = {}): Promise<Response> {
    const headers: Record<string, string> = { accept: "application/json", ...this.options.headers, ...options.headers };
    const token = typeof this.options.token === "function" ? await this.options.token() : this.options.token;
    if (token) headers.authorization = `Bearer ${token}`;
    let body: string | undefined;
    if (options.body !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(options.body);
    }
    const search = new URLSearchParams();
    for (const [key, value] of Object.entries(options.query ?? {})) if (value !== undefined) search.set(key, String(value));
    const query = search.size ? `?${search}` : "";
    return this.fetchImpl(`${this.base}${path}${query}`, { method, headers, ...(body !== undefined ? { body } : {}) });
  }

  private async problem(response: Response): Promise<RegistryProblem> {
    const text = await response.text();
    let problem: Problem;
    try {
      const parsed = JSON.parse(text) as Problem;
      if (typeof parsed?.code !== "string") throw new Error("not a problem");
      problem = parsed;
    } catch {
      // Not from the registry (a proxy, a load balancer): keep the status, say what came back.
      problem = {
        type: "about:blank",
        title: response.statusText || "HTTP error",
        status: response.status,
        detail: text.slice(0, 200) || `HTTP ${response.status}`,
        code: `http-${response.status}`,
      };
    }
    return new RegistryProblem(problem, response);
  }
}

const enc = encodeURIComponent;

export function createRegistryClient(options: RegistryClientOptions): RegistryClient {
  return new RegistryClient(options);
}
