/**
 * The registry's Prometheus metrics (Node server): request latency by route and status, problem
 * answers and resolve outcomes by problem code, catalog cache outcomes, transport refusals, lease maintenance,
 * database pool usage, the build, and fleet gauges read from aip_fleet_status() at scrape time
 * (one SQL statement per scrape; nothing is polled in the background). Process and runtime metrics
 * come from the Node server (`extraText`: src/observability/process-metrics.ts), so that this
 * module stays free of Node-only code. docs/observability.md documents every metric.
 */
import type { MaintenanceStats } from "../maintenance/cycle.js";
import type { Registry } from "../registry/registry.js";
import { KeySetMetrics, type KeySetSource } from "./key-set-metrics.js";
import { MetricRegistry } from "./prometheus.js";
import type { RequestFacts } from "./request-info.js";

/** A database pool's usage, e.g. pg.Pool's totalCount / idleCount / waitingCount. */
export interface PoolUsage {
  pool: string;
  total: number;
  idle: number;
  waiting: number;
  max?: number;
}

export interface MetricsOptions {
  /** Pool usage at scrape time (Node: the pg pools; PGlite has none). */
  pools?: () => PoolUsage[];
  /**
   * Serve /metrics without a bearer token. By default a scrape needs a token with `fleet:read`,
   * like GET /v1/fleet/status, since it exposes the same aggregates.
   */
  public?: boolean;
  /** Requests refused below the app (Node's HTTP parser), by problem code, counted since start. */
  transportRefusals?: () => Record<string, number>;
  /** The identity provider's key set, when tokens are verified against one (AUTH_JWKS_URL). */
  keySet?: KeySetSource;
  /** What the lease-maintenance timer has done since start (absent when it is off). */
  maintenance?: () => MaintenanceStats;
  /** Labels of `aip_build_info` (src/observability/build-info.ts). */
  buildInfo?: Record<string, string>;
  /** More exposition text, appended to every scrape (Node: process and runtime metrics). */
  extraText?: () => Promise<string>;
}

const CATALOG_ROUTES: Record<string, string> = {
  "/v1/catalog/capabilities": "page",
  "/v1/catalog/capabilities/:capability_id": "definition",
};

/** Seconds; from sub-millisecond in-process calls to the 10 s statement timeout. */
const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

const REPLICA_STATES = ["unknown", "ok", "lagging", "behind_floor", "unreachable"] as const;

const RESOLVE_ROUTE = "/v1/routes/:action_id";

export class RegistryMetrics {
  private readonly metrics = new MetricRegistry();
  private readonly requestDuration = this.metrics.histogram(
    "aip_http_request_duration_seconds",
    "HTTP request latency by route template, method and status.",
    ["method", "route", "status"],
    LATENCY_BUCKETS,
  );
  private readonly resolutions = this.metrics.counter(
    "aip_route_resolutions_total",
    "Route resolutions (PUT /v1/routes/{action_id}) by outcome: created, existing, reacquired, or the problem code of a refusal.",
    ["outcome"],
  );
  private readonly problems = this.metrics.counter(
    "aip_http_problems_total",
    "Problem answers by route template, method and problem code: `busy` (and resolve's replica-unavailable / capacity-exceeded) is contention, `storage` a database failure.",
    ["method", "route", "code"],
  );
  private readonly transportRefusals = this.metrics.counter(
    "aip_http_transport_refusals_total",
    "Requests refused by the HTTP server before reaching a route (malformed HTTP, oversized headers, timeouts), by problem code.",
    ["code"],
  );
  private readonly catalogCache = this.metrics.counter(
    "aip_catalog_cache_requests_total",
    "Catalog answers by how they were produced: hit (no statement), revalidated (one statement, nothing built) or miss (built), per kind (page, definition).",
    ["kind", "outcome"],
  );
  private readonly maintenanceRuns = this.metrics.counter("aip_lease_maintenance_runs_total", "Lease-maintenance cycles run, successful or not.");
  private readonly maintenanceFailures = this.metrics.counter(
    "aip_lease_maintenance_failures_total",
    "Lease-maintenance cycles that failed (retried after a backoff).",
  );
  private readonly maintenanceExpired = this.metrics.counter(
    "aip_lease_maintenance_expired_replicas_total",
    "Replicas whose lease had ended that lease maintenance marked offline.",
  );
  private readonly maintenanceReleased = this.metrics.counter(
    "aip_lease_maintenance_released_routes_total",
    "Reserved routes that lease maintenance settled as lease_expired.",
  );
  private readonly maintenanceLastSuccess = this.metrics.gauge(
    "aip_lease_maintenance_last_success_timestamp_seconds",
    "When the last successful lease-maintenance cycle ended (Unix time).",
  );
  private readonly poolConnections = this.metrics.gauge("aip_db_pool_connections", "Open database connections per pool.", ["pool"]);
  private readonly poolInUse = this.metrics.gauge("aip_db_pool_in_use_connections", "Database connections per pool that are checked out or connecting.", [
    "pool",
  ]);
  private readonly poolIdle = this.metrics.gauge("aip_db_pool_idle_connections", "Idle database connections per pool.", ["pool"]);
  private readonly poolWaiting = this.metrics.gauge("aip_db_pool_waiting_requests", "Queries waiting for a database connection per pool.", ["pool"]);
  private readonly poolMax = this.metrics.gauge("aip_db_pool_max_connections", "Configured maximum connections per pool.", ["pool"]);
  private readonly replicaState = this.metrics.gauge(
    "aip_catalog_replica_state",
    "1 for the catalog replica's current state (CATALOG_DATABASE_URL; absent without one): ok, lagging, behind_floor, unreachable or unknown.",
    ["state"],
  );
  private readonly replicaLag = this.metrics.gauge(
    "aip_catalog_replica_lag_seconds",
    "The catalog replica's replay lag, as last measured (absent when unknown).",
  );
  private readonly replicaFallbacks = this.metrics.counter(
    "aip_catalog_replica_fallbacks_total",
    "Catalog reads the primary answered although a replica is configured, by reason: lagging, behind_floor, behind_request, unreachable, error.",
    ["reason"],
  );
  private readonly fleetUp = this.metrics.gauge("aip_fleet_status_up", "1 when the fleet status could be read at this scrape, else 0.");
  private readonly catalogRevision = this.metrics.gauge("aip_catalog_revision", "The published catalog revision.");
  private readonly fleetRecords = this.metrics.gauge(
    "aip_fleet_records",
    "Catalog records: connector types, active (qualified) versions and enabled instances.",
    ["kind"],
  );
  private readonly fleetReplicas = this.metrics.gauge(
    "aip_fleet_replicas",
    "Replicas by status; `expired` counts live-status replicas whose lease has run out.",
    ["status"],
  );
  private readonly openCircuits = this.metrics.gauge("aip_fleet_open_circuits", "Replicas whose circuit is open.");
  private readonly readyCapacity = this.metrics.gauge("aip_fleet_ready_capacity", "Summed capacity of ready replicas with a live lease.");
  private readonly activeAssignments = this.metrics.gauge("aip_fleet_active_assignments", "Reserved route assignments across all replicas.");

  private readonly fleetGauges = [this.catalogRevision, this.fleetRecords, this.fleetReplicas, this.openCircuits, this.readyCapacity, this.activeAssignments];

  private readonly keySet: KeySetMetrics | undefined;

  constructor(private readonly options: MetricsOptions = {}) {
    this.keySet = options.keySet ? new KeySetMetrics(this.metrics, options.keySet) : undefined;
    const build = options.buildInfo;
    if (build) {
      this.metrics.gauge("aip_build_info", "Always 1; the labels describe the running build (docs/observability.md).", Object.keys(build)).set(build, 1);
    }
  }

  /** Records a finished request, error answers made by onError included (an observer: src/observability/request-trace.ts). */
  readonly observe = (facts: RequestFacts): void => {
    const { method, route, status, code } = facts;
    this.requestDuration.observe({ method, route, status: String(status) }, facts.latencyMs / 1000);
    if (code !== undefined) this.problems.inc({ method, route, code });
    if (route === RESOLVE_ROUTE && method === "PUT") {
      const outcome = status < 300 ? facts.routeOutcome : code;
      this.resolutions.inc({ outcome: outcome ?? `http-${status}` });
    }
    const kind = CATALOG_ROUTES[route];
    if (kind && facts.catalogCache) this.catalogCache.inc({ kind, outcome: facts.catalogCache });
  };

  /** The exposition text; reads the fleet status once. */
  async scrape(registry: Registry): Promise<string> {
    this.keySet?.collect();
    for (const [code, total] of Object.entries(this.options.transportRefusals?.() ?? {})) this.transportRefusals.setTotal({ code }, total);
    const maintenance = this.options.maintenance?.();
    if (maintenance) {
      this.maintenanceRuns.setTotal({}, maintenance.runs);
      this.maintenanceFailures.setTotal({}, maintenance.failures);
      this.maintenanceExpired.setTotal({}, maintenance.expired);
      this.maintenanceReleased.setTotal({}, maintenance.released);
      if (maintenance.lastSuccessAt !== null) this.maintenanceLastSuccess.set({}, maintenance.lastSuccessAt / 1000);
    }
    for (const pool of this.options.pools?.() ?? []) {
      this.poolConnections.set({ pool: pool.pool }, pool.total);
      this.poolInUse.set({ pool: pool.pool }, pool.total - pool.idle);
      this.poolIdle.set({ pool: pool.pool }, pool.idle);
      this.poolWaiting.set({ pool: pool.pool }, pool.waiting);
      if (pool.max !== undefined) this.poolMax.set({ pool: pool.pool }, pool.max);
    }
    const replica = await registry.catalogReplicaStatus();
    if (replica) {
      for (const state of REPLICA_STATES) this.replicaState.set({ state }, state === replica.state ? 1 : 0);
      this.replicaLag.reset();
      if (replica.lag_ms !== null) this.replicaLag.set({}, replica.lag_ms / 1000);
      for (const [reason, total] of Object.entries(replica.fallbacks)) this.replicaFallbacks.setTotal({ reason }, total);
    }
    try {
      const status = await registry.fleetStatus();
      this.fleetUp.set({}, 1);
      this.catalogRevision.set({}, status.catalog_revision);
      this.fleetRecords.set({ kind: "connector_types" }, status.connector_types);
      this.fleetRecords.set({ kind: "active_versions" }, status.active_versions);
      this.fleetRecords.set({ kind: "enabled_instances" }, status.enabled_instances);
      this.fleetReplicas.set({ status: "ready" }, status.ready_replicas);
      this.fleetReplicas.set({ status: "draining" }, status.draining_replicas);
      this.fleetReplicas.set({ status: "offline" }, status.offline_replicas);
      this.fleetReplicas.set({ status: "expired" }, status.expired_leases);
      this.openCircuits.set({}, status.open_circuits);
      this.readyCapacity.set({}, status.ready_capacity);
      this.activeAssignments.set({}, status.active_assignments);
    } catch {
      // Still answer: request metrics matter most when the database is the problem. Drop the
      // fleet gauges rather than repeat the last scrape's values as if they were current.
      for (const family of this.fleetGauges) family.reset();
      this.fleetUp.set({}, 0);
    }
    const own = this.metrics.render();
    return this.options.extraText ? own + (await this.options.extraText()) : own;
  }
}
