/**
 * The registry's HTTP API as typed methods, over `fetch` and nothing else (Node 20+, Workers,
 * browsers, Deno, Bun). One method per operation; each takes optional CallOptions last: an
 * AbortSignal of the caller's and a timeout (the client's default, 30 s, unless set), which cover
 * the whole call, the answer's body included.
 *
 * Every non-2xx answer is a RegistryProblem with the stable `code` (`capacity-exceeded`,
 * `replica-unavailable`, ...) and the problem's extension members; a call past its timeout is a
 * RegistryTimeoutError; an aborted call rejects with the signal's reason. Every registry call is
 * safe to retry with the same arguments (the same action ID, settlement body or request ID).
 */
import { RegistryProblem, RegistryTimeoutError, problemOf } from "./errors.js";
import type { Conditional, EtagCache } from "./etags.js";
import type { LifecycleRequests, DrainRequest, HeartbeatRequest, OfflineRequest, RegisterRequest } from "./lifecycle.js";
import type * as W from "./wire.js";

/** The client's timeout when neither the client nor the call sets one. */
export const DEFAULT_TIMEOUT_MS = 30_000;

export interface RegistryClientOptions {
  /** The registry's base URL, e.g. `https://registry.example` (a path prefix is kept). */
  baseUrl: string;
  /** A bearer token, or a function returning one per request (rotation, short-lived tokens). */
  token?: string | (() => string | Promise<string>);
  /** Defaults to the global fetch; pass `app.request`-like functions or instrumented fetches. */
  fetch?: (input: string, init: RequestInit) => Promise<Response>;
  /** Extra headers on every request (e.g. `x-request-id`). */
  headers?: Record<string, string>;
  /** The longest a call may take, answer included, in milliseconds (default 30 000; 0: no limit). */
  timeoutMs?: number;
  /** Keeps catalog answers and their ETags, and revalidates them (If-None-Match, 304). */
  etags?: EtagCache;
}

/** Per call: cancel it, bound it, or add headers. */
export interface CallOptions {
  /** Aborts the call; it then rejects with the signal's reason. */
  signal?: AbortSignal;
  /** This call's timeout in milliseconds (0: no limit); the client's otherwise. */
  timeoutMs?: number;
  headers?: Record<string, string>;
}

/** A route read: the body, `reserved` from `AIP-Route-Reserved` and the last settlement from `AIP-Last-Settlement`. */
export interface RouteRead {
  assignment: W.RouteAssignment;
  reserved: boolean;
  last_settlement: W.SettlementOutcome | null;
}

/** A resolve's answer: the body, and the outcome from `AIP-Route-Outcome`. */
export interface ResolvedRoute {
  outcome: W.ResolveOutcome;
  assignment: W.RouteAssignment;
}

type Query = Record<string, string | number | boolean | undefined>;

interface RequestParts {
  query?: Query | undefined;
  body?: unknown;
  headers?: Record<string, string>;
}

const enc = encodeURIComponent;

export class RegistryClient {
  private readonly base: string;
  private readonly fetchImpl: (input: string, init: RequestInit) => Promise<Response>;

  constructor(private readonly options: RegistryClientOptions) {
    this.base = options.baseUrl.replace(/\/+$/, "");
    this.fetchImpl = options.fetch ?? ((input, init) => fetch(input, init));
    if (options.timeoutMs !== undefined && !(options.timeoutMs >= 0)) throw new RangeError("timeoutMs must be 0 (no limit) or more");
  }

  // Operations ----------------------------------------------------------------------------------
  health(options?: CallOptions): Promise<{ status: "ok" }> {
    return this.json("GET", "/healthz", {}, options);
  }

  /** Readiness; a 503 "not_ready" answer is returned, not thrown. */
  readiness(options?: CallOptions): Promise<W.Readiness> {
    return this.exchange("GET", "/readyz", {}, options, async (response) => {
      if (response.status === 200 || response.status === 503) return (await response.json()) as W.Readiness;
      throw await problemOf(response);
    });
  }

  // Data plane: catalog -------------------------------------------------------------------------
  /** One page; with the client's `etags`, revalidated (a 304 answers the kept page). */
  catalogPage(query: W.CatalogQuery = {}, options?: CallOptions): Promise<W.CatalogPage> {
    return this.catalogRead("/v1/catalog/capabilities", query as Query, options);
  }

  /** One page, sent with `If-None-Match: ifNoneMatch` when given: 304 while it is current. */
  catalogPageConditional(query: W.CatalogQuery, ifNoneMatch: string | undefined, options?: CallOptions): Promise<Conditional<W.CatalogPage>> {
    return this.conditional("/v1/catalog/capabilities", query as Query, ifNoneMatch, options);
  }

  catalogGet(capabilityId: string, options?: CallOptions): Promise<W.CatalogEntry> {
    return this.catalogRead(`/v1/catalog/capabilities/${enc(capabilityId)}`, undefined, options);
  }

  catalogGetConditional(capabilityId: string, ifNoneMatch: string | undefined, options?: CallOptions): Promise<Conditional<W.CatalogEntry>> {
    return this.conditional(`/v1/catalog/capabilities/${enc(capabilityId)}`, undefined, ifNoneMatch, options);
  }

  /** Every page of the tenant's catalog at one revision (restarts once on `stale-cursor`). */
  async *catalogAll(query: Omit<W.CatalogQuery, "cursor"> = {}, options?: CallOptions): AsyncGenerator<W.CapabilityDefinition> {
    for (let attempt = 0; ; attempt++) {
      const seen: W.CapabilityDefinition[] = [];
      try {
        let cursor: string | undefined;
        do {
          const page = await this.catalogPage({ ...query, ...(cursor ? { cursor } : {}) }, options);
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
   * registry answered); an empty last page when nothing changed. With the client's `etags`,
   * revalidated. A `changes-expired` problem (410) means the history no longer reaches `since`:
   * list the catalog again (docs/catalog-sync.md).
   */
  catalogChanges(query: W.CatalogChangesQuery, options?: CallOptions): Promise<W.CatalogChanges> {
    return this.catalogRead("/v1/catalog/changes", query as unknown as Query, options);
  }

  catalogChangesConditional(query: W.CatalogChangesQuery, ifNoneMatch: string | undefined, options?: CallOptions): Promise<Conditional<W.CatalogChanges>> {
    return this.conditional("/v1/catalog/changes", query as unknown as Query, ifNoneMatch, options);
  }

  /**
   * Every change after `since`, all pages: the changes in feed order and the catalog revision the
   * caller then holds (`since` itself when nothing changed).
   */
  async catalogChangesAll(
    since: number,
    query: Omit<W.CatalogChangesQuery, "since" | "cursor"> = {},
    options?: CallOptions,
  ): Promise<{ catalog_revision: number; changes: W.CatalogChange[] }> {
    let page = await this.catalogChanges({ ...query, since }, options);
    const changes = [...page.changes];
    while (page.next_cursor) {
      page = await this.catalogChanges({ ...query, since, cursor: page.next_cursor }, options);
      changes.push(...page.changes);
    }
    return { catalog_revision: Math.max(since, page.catalog_revision), changes };
  }

  // Data plane: routes --------------------------------------------------------------------------
  resolveRoute(actionId: string, request: W.ResolveRequest, options?: CallOptions): Promise<ResolvedRoute> {
    return this.exchange("PUT", `/v1/routes/${enc(actionId)}`, { body: request }, options, async (response) => {
      const answer = await this.ok(response);
      const outcome = (answer.headers.get("aip-route-outcome") ?? (answer.status === 201 ? "created" : "existing")) as W.ResolveOutcome;
      return { outcome, assignment: (await answer.json()) as W.RouteAssignment };
    });
  }

  getRoute(actionId: string, options?: CallOptions): Promise<RouteRead> {
    return this.exchange("GET", `/v1/routes/${enc(actionId)}`, {}, options, async (response) => {
      const answer = await this.ok(response);
      return {
        assignment: (await answer.json()) as W.RouteAssignment,
        reserved: answer.headers.get("aip-route-reserved") === "true",
        last_settlement: (answer.headers.get("aip-last-settlement") as W.SettlementOutcome | null) ?? null,
      };
    });
  }

  /** Present the assignment exactly as received from resolveRoute or getRoute. */
  settleRoute(actionId: string, assignment: W.RouteAssignment, outcome: W.SettlementOutcome, options?: CallOptions): Promise<W.SettlementResult> {
    return this.json("POST", `/v1/routes/${enc(actionId)}/settlement`, { body: { assignment, outcome } }, options);
  }

  // Connector hosts -----------------------------------------------------------------------------
  /**
   * A lifecycle transition, with the request that operation takes (LifecycleRequests): register
   * states the host's registration evidence, heartbeat, drain and offline the `previous_sequence`
   * of the last answer.
   */
  replicaLifecycle<Op extends W.LifecycleOperation>(
    replicaId: string,
    operation: Op,
    request: LifecycleRequests[Op],
    options?: CallOptions,
  ): Promise<W.LifecycleResponse> {
    return this.json("POST", `/v1/replicas/${enc(replicaId)}/${operation}`, { body: request }, options);
  }

  register(replicaId: string, request: RegisterRequest, options?: CallOptions): Promise<W.LifecycleResponse> {
    return this.replicaLifecycle(replicaId, "register", request, options);
  }

  heartbeat(replicaId: string, request: HeartbeatRequest, options?: CallOptions): Promise<W.LifecycleResponse> {
    return this.replicaLifecycle(replicaId, "heartbeat", request, options);
  }

  drain(replicaId: string, request: DrainRequest, options?: CallOptions): Promise<W.LifecycleResponse> {
    return this.replicaLifecycle(replicaId, "drain", request, options);
  }

  offline(replicaId: string, request: OfflineRequest, options?: CallOptions): Promise<W.LifecycleResponse> {
    return this.replicaLifecycle(replicaId, "offline", request, options);
  }

  // Registry reader (host admission, callback and event ingress) ---------------------------------
  /** A version's identity and state, or null when it does not exist or is not the token's to see. */
  readVersion(versionId: string, options?: CallOptions): Promise<W.VersionIdentity | null> {
    return this.orNull(this.json("GET", `/v1/registry/versions/${enc(versionId)}`, {}, options));
  }

  /** An instance's identity and state (never its secret_provider_ref), or null. */
  readInstance(instanceId: string, options?: CallOptions): Promise<W.InstanceIdentity | null> {
    return this.orNull(this.json("GET", `/v1/registry/instances/${enc(instanceId)}`, {}, options));
  }

  /** A replica's identity, lease and load, or null. */
  readReplica(replicaId: string, options?: CallOptions): Promise<W.ReplicaIdentity | null> {
    return this.orNull(this.json("GET", `/v1/registry/replicas/${enc(replicaId)}`, {}, options));
  }

  // Control plane -------------------------------------------------------------------------------
  /** One publication batch; large batches may need a longer `timeoutMs` than the default. */
  publish(changes: W.Change[], options: CallOptions & { dryRun?: boolean } = {}): Promise<W.PublicationResult> {
    return this.json("POST", "/v1/admin/publications", { body: { changes }, query: { dry_run: options.dryRun ? "true" : undefined } }, options);
  }

  /** One record, or null when it does not exist. */
  adminGet(kind: W.AdminRecordKind, id: string, options?: CallOptions): Promise<Record<string, unknown> | null> {
    return this.orNull(this.json("GET", `/v1/admin/${kind}/${enc(id)}`, {}, options));
  }

  adminBindings(tenantId: string, page: { cursor?: string; limit?: number } = {}, options?: CallOptions): Promise<W.BindingsPage> {
    return this.json("GET", "/v1/admin/bindings", { query: { tenant_id: tenantId, ...page } }, options);
  }

  adminCatalogPage(query: W.CatalogQuery & { tenant_id?: string; unbound?: boolean } = {}, options?: CallOptions): Promise<W.CatalogPage> {
    return this.json("GET", "/v1/admin/catalog/capabilities", { query: query as Query }, options);
  }

  checkInvariants(options?: CallOptions): Promise<W.InvariantReport> {
    return this.json("GET", "/v1/admin/invariants", {}, options);
  }

  /** One page of released routes settled in [settledAfter, settledBefore), every tenant's (GET /v1/admin/routes). */
  routesPage(query: { settledBefore: string; settledAfter?: string; cursor?: string; limit?: number }, options?: CallOptions): Promise<W.RoutesPage> {
    return this.json(
      "GET",
      "/v1/admin/routes",
      { query: { settled_before: query.settledBefore, settled_after: query.settledAfter, cursor: query.cursor, limit: query.limit } },
      options,
    );
  }

  /** Records that an export covered every route settled in [settledAfter, settledBefore) (POST /v1/admin/route-exports). */
  recordRouteExport(settledAfter: string | null, settledBefore: string, options?: CallOptions): Promise<W.RouteExportWatermarks> {
    return this.json("POST", "/v1/admin/route-exports", { body: { settled_after: settledAfter, settled_before: settledBefore } }, options);
  }

  // Fleet ---------------------------------------------------------------------------------------
  fleetStatus(options?: CallOptions): Promise<W.FleetStatus> {
    return this.json("GET", "/v1/fleet/status", {}, options);
  }

  fleetRegions(limit?: number, options?: CallOptions): Promise<W.FleetRegions> {
    return this.json("GET", "/v1/fleet/regions", { query: { limit } }, options);
  }

  expireLeases(limit?: number, options?: CallOptions): Promise<W.LeaseExpiryResult> {
    return this.json("POST", "/v1/fleet/lease-expiry", { query: { limit } }, options);
  }

  /** One route-retention batch with the server's evidence window (POST /v1/fleet/route-retention). */
  removeSettledRoutes(limit?: number, options?: CallOptions): Promise<W.RouteRetentionResult> {
    return this.json("POST", "/v1/fleet/route-retention", { query: { limit } }, options);
  }

  // Plumbing ------------------------------------------------------------------------------------
  /** A catalog read, revalidated through the client's `etags` when it has them. */
  private async catalogRead<T>(path: string, query: Query | undefined, options: CallOptions | undefined): Promise<T> {
    const cache = this.options.etags;
    if (!cache) return this.json("GET", path, { query }, options);
    const key = `GET ${this.url(path, query)}`;
    const kept = cache.get(key);
    const answer = await this.conditional<T>(path, query, kept?.etag, options);
    if (answer.status === 304) {
      if (kept) return kept.body as T;
      throw new Error(`GET ${path}: 304 Not Modified to a request without If-None-Match`);
    }
    if (answer.etag) cache.set(key, answer.etag, answer.body);
    else cache.delete(key);
    return answer.body;
  }

  private conditional<T>(path: string, query: Query | undefined, ifNoneMatch: string | undefined, options: CallOptions | undefined): Promise<Conditional<T>> {
    return this.exchange("GET", path, { query, headers: ifNoneMatch ? { "if-none-match": ifNoneMatch } : {} }, options, async (response) => {
      const etag = response.headers.get("etag");
      if (response.status === 304) {
        await response.body?.cancel();
        return { status: 304, etag };
      }
      return { status: 200, etag, body: (await (await this.ok(response)).json()) as T };
    });
  }

  private async orNull<T>(read: Promise<T>): Promise<T | null> {
    try {
      return await read;
    } catch (error) {
      if (error instanceof RegistryProblem && error.is("not-found")) return null;
      throw error;
    }
  }

  private json<T>(method: string, path: string, parts: RequestParts, options: CallOptions | undefined): Promise<T> {
    return this.exchange(method, path, parts, options, async (response) => (await (await this.ok(response)).json()) as T);
  }

  /** The response when it is a 2xx; a RegistryProblem otherwise. */
  private async ok(response: Response): Promise<Response> {
    if (response.ok) return response;
    throw await problemOf(response);
  }

  private url(path: string, query: Query | undefined): string {
    const search = new URLSearchParams();
    for (const [key, value] of Object.entries(query ?? {})) if (value !== undefined) search.set(key, String(value));
    const text = search.toString();
    return `${this.base}${path}${text ? `?${text}` : ""}`;
  }

  /**
   * One request and the reading of its answer (`read`), within the call's timeout and signal:
   * whichever ends first settles the call, and aborts the fetch (a fetch that ignores its signal
   * is left to finish on its own).
   */
  private async exchange<T>(
    method: string,
    path: string,
    parts: RequestParts,
    options: CallOptions = {},
    read: (response: Response) => Promise<T>,
  ): Promise<T> {
    const timeoutMs = options.timeoutMs ?? this.options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const caller = options.signal;
    caller?.throwIfAborted();
    const controller = new AbortController();
    let stop: (reason: unknown) => void = () => {};
    const stopped = new Promise<never>((_, reject) => {
      stop = (reason) => {
        // Settle first, then abort: the call rejects with this reason, not the fetch's own error.
        reject(reason);
        controller.abort(reason);
      };
    });
    const onAbort = () => stop(caller?.reason);
    caller?.addEventListener("abort", onAbort, { once: true });
    const timer = timeoutMs > 0 ? setTimeout(() => stop(new RegistryTimeoutError(method, path, timeoutMs)), timeoutMs) : undefined;
    const work = (async () => {
      const headers: Record<string, string> = { accept: "application/json", ...this.options.headers, ...parts.headers, ...options.headers };
      const token = typeof this.options.token === "function" ? await this.options.token() : this.options.token;
      if (token) headers.authorization = `Bearer ${token}`;
      let body: string | undefined;
      if (parts.body !== undefined) {
        headers["content-type"] = "application/json";
        body = JSON.stringify(parts.body);
      }
      const init: RequestInit = { method, headers, signal: controller.signal, ...(body !== undefined ? { body } : {}) };
      return read(await this.fetchImpl(this.url(path, parts.query), init));
    })();
    // The loser of the race below is settled too, and must not be reported as unhandled.
    work.catch(() => {});
    stopped.catch(() => {});
    try {
      return await Promise.race([work, stopped]);
    } finally {
      if (timer !== undefined) clearTimeout(timer);
      caller?.removeEventListener("abort", onAbort);
    }
  }
}

export function createRegistryClient(options: RegistryClientOptions): RegistryClient {
  return new RegistryClient(options);
}
