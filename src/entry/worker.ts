/**
 * Workers entry: the same Hono app as Node, on `@neondatabase/serverless`.
 *
 * Bindings (wrangler vars and secrets; see wrangler.toml and docs/deploy.md):
 * - DATABASE_URL (secret): the data role. Required.
 * - CONTROL_DATABASE_URL (secret): the control role, for /v1/admin/*. Without it the Worker
 *   serves the data plane only: publications and admin reads answer 403 `forbidden` (the
 *   invariant checker, GET /v1/admin/invariants, runs as the data role).
 * - AUTH_HS256_SECRET (secret) or AUTH_JWKS_URL with AUTH_AUDIENCE and AUTH_ISSUER (or
 *   AUTH_ALLOW_ANY_ISSUER=true), and the other AUTH_* settings of src/config.ts: the same rules as
 *   the Node server (src/http/auth-settings.ts); a configuration they refuse answers every request
 *   with the misconfiguration problem.
 * - NEON_TRANSPORT: `http` (default; `neon()`, one HTTPS request per statement) or `websocket`
 *   (a `Pool` per request, ended with waitUntil).
 * - NEON_HTTP_TIMEOUT_MS: the longest wait for one statement on the HTTP transport (default 15 s:
 *   a compute waking from suspension plus a full statement timeout), then 503 `storage`.
 * Development and tests run dev/worker.ts, this Worker pointed at the local Neon proxy.
 * - CATALOG_DATABASE_URL (secret, optional): a Neon read replica (data role) for catalog reads;
 *   CATALOG_REPLICA_MAX_LAG_MS (1000 by default): the most replay lag its answers may have
 *   (src/registry/catalog-replica.ts; further behind, the read goes to DATABASE_URL).
 * - CATALOG_CACHE (on by default; `true`/`false` or `1`/`0`, as every flag): catalog answers kept in the location's Cache API;
 *   CATALOG_MAX_STALENESS_MS (0 by default): how long one may be served without asking the database.
 * - LEASE_CLOCK (Durable Object namespace): the lease clock (src/maintenance/lease-clock.ts), exported below.
 * - ROUTE_RETENTION_DAYS, ROUTE_RETENTION_REQUIRE_EXPORT: route retention, run in the clock's
 *   cycles (src/maintenance/route-retention.ts).
 *
 * - ACTIVITY_HISTORY (Durable Object namespace, optional): the deployment's activity history behind
 *   the dashboard's rates and latency (src/observability/activity-store.ts), exported below.
 * - AIP_ANALYTICS (Analytics Engine dataset, optional): one data point per request, the Worker's
 *   counterpart of the Node server's /metrics (src/observability/analytics-engine.ts).
 * - LOG_LEVEL: `error`, `warn`, `info` (default) or `debug` (src/telemetry/log.ts).
 * - The standard OpenTelemetry variables (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL,
 *   OTEL_EXPORTER_OTLP_HEADERS as a secret, OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER, ...:
 *   src/observability/otel-env.ts): the same spans as the Node server, exported over OTLP/HTTP
 *   after each response (waitUntil). Unset, nothing is built and nothing exported.
 *
 * A Worker never migrates: it verifies once per isolate that its own function set is installed
 * (builds serve one database side by side: docs/upgrades.md) and answers 503 `storage` until it
 * is; it reports itself to the database at most once a minute after a response, so a version that
 * serves (a gradual deployment's older one included) keeps its set from being finalized away.
 * Lease maintenance runs from the LeaseClock's alarm, only when a
 * lease can have ended: there is no cron trigger, and an idle deployment sends no statement.
 */
import type { ExecutionContext } from "hono";
import { appOptions, createApp } from "../app.js";
import { WorkerConfigSchema, type WorkerConfig, type WorkerSetting } from "../config.js";
import type { SqlExecutor } from "../db/executor.js";
import { RequestPools, neonHttpExecutor } from "../db/neon.js";
import { SchemaGate } from "../registry/schema-gate.js";
import { EdgeCatalogCache, type EdgeCache } from "../catalog/edge-cache.js";
import { ConfirmedRevision } from "../catalog/serve.js";
import { authenticatorFrom, type Authenticator } from "../http/auth.js";
import { PROBLEM_CONTENT_TYPE, problemDocument } from "../http/problem.js";
import { LeaseClockNotifier, LeaseClockObject, type ClockHost, type ClockNamespace, type ClockState } from "../maintenance/lease-clock.js";
import { DEFAULT_MIN_INTERVAL_MS, runMaintenanceCycle, type MaintenanceBounds, type MaintenanceCycle } from "../maintenance/cycle.js";
import { ChangeHistorySchedule, changeHistorySettings } from "../catalog/change-history.js";
import { RetentionSchedule, retentionSettings, type RetentionSettings } from "../maintenance/route-retention.js";
import { jsonLines } from "../observability/access-log.js";
import type { ActivityRecorder, BuildInfo } from "../observability/activity-route.js";
import { ActivityHistoryObject, EdgeActivity, type HistoryNamespace, type HistoryState } from "../observability/activity-store.js";
import { writeDataPoint, type AnalyticsDataset } from "../observability/analytics-engine.js";
import { FUNCTIONS_CHECKSUM, SCHEMA_VERSION } from "../db/schema-version.js";
import { log } from "../telemetry/log.js";
import { createOtelTracer, type ExportingTracer } from "../observability/otel.js";
import { otelSettings } from "../observability/otel-env.js";
import { version } from "../../package.json";
import { RegistryError } from "../registry/errors.js";
import { Registry } from "../registry/registry.js";
import { CatalogReplica } from "../registry/catalog-replica.js";

/** The standard OpenTelemetry variables the Worker reads (src/observability/otel-env.ts), as bindings. */
type OtelBinding =
  | "OTEL_SDK_DISABLED"
  | "OTEL_TRACES_EXPORTER"
  | "OTEL_EXPORTER_OTLP_ENDPOINT"
  | "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
  | "OTEL_EXPORTER_OTLP_PROTOCOL"
  | "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
  | "OTEL_EXPORTER_OTLP_HEADERS"
  | "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
  | "OTEL_EXPORTER_OTLP_TIMEOUT"
  | "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"
  | "OTEL_SERVICE_NAME"
  | "OTEL_RESOURCE_ATTRIBUTES"
  | "OTEL_TRACES_SAMPLER"
  | "OTEL_TRACES_SAMPLER_ARG"
  | "OTEL_BSP_SCHEDULE_DELAY"
  | "OTEL_BSP_EXPORT_TIMEOUT"
  | "OTEL_BSP_MAX_QUEUE_SIZE"
  | "OTEL_BSP_MAX_EXPORT_BATCH_SIZE";

/** The Worker's bindings: its settings (src/config.ts WorkerConfigSchema), the OTEL_* variables and the lease clock. */
export type WorkerEnv = { [Name in WorkerSetting | OtelBinding]?: string } & {
  LEASE_CLOCK?: ClockNamespace;
  ACTIVITY_HISTORY?: HistoryNamespace;
  AIP_ANALYTICS?: AnalyticsDataset;
};

/** What the Worker runs, reported beside its activity history. */
const BUILD: BuildInfo = { version, runtime: "workers", schema_version: SCHEMA_VERSION, functions_checksum: FUNCTIONS_CHECKSUM };

/** Each request into the activity history (when bound) and Analytics Engine (when bound). */
function workerActivity(history: HistoryNamespace | undefined, analytics: AnalyticsDataset | undefined): ActivityRecorder | undefined {
  const edge = history ? new EdgeActivity(history) : undefined;
  if (!edge && !analytics) return undefined;
  return {
    scope: "deployment",
    record(sample) {
      if (analytics) writeDataPoint(analytics, sample);
      return edge?.record(sample);
    },
    ...(edge ? { report: (query) => edge.report(query) } : {}),
  };
}

/** The part of the Workers ExecutionContext used here. */
export interface WaitUntil {
  waitUntil(promise: Promise<unknown>): void;
}

/** Everything that lives as long as the isolate: parsed config, auth, the schema gate, the lease clock's notifier. */
class WorkerRuntime implements ClockHost {
  /** This isolate, as its sightings name it (`migrate --finalize` keeps the sets of servers seen recently). */
  readonly gate = new SchemaGate({ runtime: "worker", instance: `isolate/${crypto.randomUUID()}` });
  readonly authenticator: Authenticator;
  readonly bounds: MaintenanceBounds;
  /**
   * Route retention within the LeaseClock's cycles; per isolate, so an evicted clock runs it in its
   * next cycle. Its first run also states ROUTE_RETENTION_DAYS and ROUTE_RETENTION_REQUIRE_EXPORT
   * to the database, which can only make the stored policy stricter (functions/82_retention.sql).
   */
  readonly retention: RetentionSettings;
  private readonly retentionSchedule: RetentionSchedule;
  /** Trimming of the catalog change feed's history, within the LeaseClock's cycles. */
  private readonly changeHistory: ChangeHistorySchedule;
  /**
   * The catalog replica's state for every registry this isolate builds: the revision floors that
   * keep its answers from going backwards, its lag bound and its backoff (src/registry/catalog-replica.ts).
   */
  private catalogReplica: CatalogReplica | undefined;
  /** The newest catalog revision this isolate has seen confirmed, for every app it builds. */
  readonly confirmedRevision = new ConfirmedRevision();
  /** The location's catalog cache (Cache API, behind an in-isolate memory cache); none when disabled or unavailable. */
  private readonly catalogCache: EdgeCatalogCache | undefined;
  /** LEASE_MAINTENANCE_INTERVAL_MS = 0 turns notifications off; a clock told anyway spaces cycles by the default. */
  readonly minIntervalMs: number;
  readonly notifier: LeaseClockNotifier | undefined;
  /** HTTP transport: executors hold no socket, so one app serves every request. */
  private sharedApp: ReturnType<typeof createApp> | undefined;
  /** Records and exports spans when the OTEL_* bindings ask for it; flushed after each response. */
  private readonly tracer: ExportingTracer | undefined;
  /** The dashboard's history and the Analytics Engine data points, when bound. */
  private readonly activity: ActivityRecorder | undefined;

  constructor(
    readonly config: WorkerConfig,
    env: WorkerEnv,
    bindings: Record<string, string>,
  ) {
    const clock = env.LEASE_CLOCK;
    this.activity = workerActivity(env.ACTIVITY_HISTORY, env.AIP_ANALYTICS);
    log.setLevel(config.LOG_LEVEL);
    const tracing = otelSettings(bindings);
    this.tracer = tracing ? createOtelTracer(tracing, version) : undefined;
    this.authenticator = authenticatorFrom(config);
    this.bounds = { batchSize: config.LEASE_EXPIRY_BATCH, maxBatches: config.LEASE_EXPIRY_MAX_BATCHES };
    this.retention = retentionSettings(config);
    this.retentionSchedule = new RetentionSchedule(this.retention);
    this.changeHistory = new ChangeHistorySchedule(changeHistorySettings(config));
    const edge = (globalThis as { caches?: { default?: EdgeCache } }).caches?.default;
    this.catalogCache = config.CATALOG_CACHE && edge ? new EdgeCatalogCache(edge) : undefined;
    this.minIntervalMs = config.LEASE_MAINTENANCE_INTERVAL_MS || DEFAULT_MIN_INTERVAL_MS;
    this.notifier = config.LEASE_MAINTENANCE_INTERVAL_MS > 0 && clock ? new LeaseClockNotifier(clock) : undefined;
  }

  /**
   * A registry over the configured transport. WebSocket executors belong to `pools` (one
   * request's); HTTP ones need nothing per request.
   */
  registry(pools?: RequestPools): Registry {
    const open = (url: string): SqlExecutor => (pools ? pools.executor(url) : neonHttpExecutor(url, { timeoutMs: this.config.NEON_HTTP_TIMEOUT_MS }));
    const data = open(this.config.DATABASE_URL);
    const control = this.config.CONTROL_DATABASE_URL ? open(this.config.CONTROL_DATABASE_URL) : undefined;
    const catalog = this.config.CATALOG_DATABASE_URL ? open(this.config.CATALOG_DATABASE_URL) : undefined;
    const guarded = catalog ? this.gate.guard(catalog, data) : undefined;
    // The state outlives the executor: it reads through whichever executor this request has.
    if (guarded) this.catalogReplica ??= new CatalogReplica(guarded, { maxLagMs: this.config.CATALOG_REPLICA_MAX_LAG_MS });
    return new Registry({
      data: this.gate.guard(data),
      ...(control ? { control: this.gate.guard(control, data) } : {}),
      ...(guarded && this.catalogReplica ? { catalog: guarded, catalogReplica: this.catalogReplica.over(guarded) } : {}),
    });
  }

  app(registry: Registry) {
    return createApp(
      appOptions(this.config, {
        registry,
        authenticator: this.authenticator,
        log: this.config.ACCESS_LOG ? jsonLines(undefined, this.config.LOG_LEVEL) : undefined,
        ...(this.tracer ? { tracer: this.tracer } : {}),
        ...(this.activity ? { activity: this.activity, build: BUILD } : {}),
        onLease: this.notifier?.notify,
        routeRetention: this.retention.days > 0 ? this.retention : undefined,
        catalog: { ...(this.catalogCache ? { cache: this.catalogCache } : {}), confirmed: this.confirmedRevision },
        // The Swagger UI files would triple the bundle: /docs loads them, pinned, from the CDN.
        docsAssets: "cdn",
      }),
    );
  }

  async fetch(request: Request, ctx: WaitUntil): Promise<Response> {
    try {
      return await this.serve(request, ctx);
    } finally {
      // The request's spans leave after its response: the isolate may not live until a batch fills.
      if (this.tracer) ctx.waitUntil(this.tracer.flush().catch(() => {}));
    }
  }

  private async serve(request: Request, ctx: WaitUntil): Promise<Response> {
    // The execution context reaches the routes (c.executionCtx): lease notices use its waitUntil.
    const executionCtx = ctx as ExecutionContext;
    if (this.config.NEON_TRANSPORT === "http") {
      this.sharedApp ??= this.app(this.registry());
      try {
        return await this.sharedApp.fetch(request, undefined, executionCtx);
      } finally {
        if (this.gate.sightingDue)
          ctx.waitUntil(this.gate.reportSighting(neonHttpExecutor(this.config.DATABASE_URL, { timeoutMs: this.config.NEON_HTTP_TIMEOUT_MS })));
      }
    }
    const pools = new RequestPools();
    try {
      return await this.app(this.registry(pools)).fetch(request, undefined, executionCtx);
    } finally {
      // A version that serves keeps reporting itself, after its responses, never before them.
      const sighting = this.gate.sightingDue ? this.gate.reportSighting(pools.executor(this.config.DATABASE_URL)) : Promise.resolve();
      ctx.waitUntil(sighting.finally(() => pools.end()));
    }
  }

  /** One bounded lease-maintenance cycle (the LeaseClock's alarm). */
  async maintain(): Promise<MaintenanceCycle> {
    const pools = this.config.NEON_TRANSPORT === "websocket" ? new RequestPools() : undefined;
    try {
      const cycle = await runMaintenanceCycle(this.registry(pools), this.bounds, this.retentionSchedule, Date.now, this.changeHistory);
      if (cycle.expired > 0) log.info("leases expired", { expired: cycle.expired, released: cycle.released });
      if (cycle.retention && cycle.retention.removed > 0) log.info("routes removed", { removed: cycle.retention.removed });
      return cycle;
    } finally {
      await pools?.end();
    }
  }
}

// Bindings are fixed for a deployment, so this holds one entry; tests may run a few configurations.
const runtimes = new Map<string, WorkerRuntime>();

function runtimeFor(env: WorkerEnv): WorkerRuntime {
  const bindings: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) {
    if (typeof value === "string" || typeof value === "number" || typeof value === "boolean") bindings[name] = String(value);
  }
  const key = JSON.stringify([
    Object.entries(bindings).sort(([a], [b]) => (a < b ? -1 : 1)),
    env.LEASE_CLOCK !== undefined,
    env.ACTIVITY_HISTORY !== undefined,
    env.AIP_ANALYTICS !== undefined,
  ]);
  let runtime = runtimes.get(key);
  if (!runtime) {
    const parsed = WorkerConfigSchema.safeParse(bindings);
    if (!parsed.success) {
      throw new Error(`invalid configuration: ${parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`);
    }
    if (parsed.data.LEASE_MAINTENANCE_INTERVAL_MS > 0 && !env.LEASE_CLOCK) {
      // Without it no lease would ever be expired: refuse, as for any missing binding.
      throw new Error(
        "LEASE_CLOCK: the lease clock's Durable Object binding is missing (see wrangler.toml); LEASE_MAINTENANCE_INTERVAL_MS=0 runs without lease maintenance",
      );
    }
    runtime = new WorkerRuntime(parsed.data as WorkerConfig, env, bindings);
    if (runtimes.size >= 8) runtimes.delete(runtimes.keys().next().value as string);
    runtimes.set(key, runtime);
  }
  return runtime;
}

/** A deployment mistake: logged in full, answered without details. */
function misconfigured(error: unknown): Response {
  log.error("worker misconfigured", { error: error instanceof Error ? error.message : String(error) });
  const body = problemDocument(new RegistryError("internal", "the registry Worker is misconfigured; see its logs"));
  return new Response(JSON.stringify(body), { status: 500, headers: { "content-type": PROBLEM_CONTENT_TYPE } });
}

export default {
  async fetch(request: Request, env: WorkerEnv, ctx: WaitUntil): Promise<Response> {
    let runtime: WorkerRuntime;
    try {
      runtime = runtimeFor(env);
    } catch (error) {
      return misconfigured(error);
    }
    return runtime.fetch(request, ctx);
  },
};

/** The activity history (wrangler.toml binding ACTIVITY_HISTORY): minute buckets of every isolate's requests. */
export class ActivityHistory extends ActivityHistoryObject {
  constructor(state: HistoryState, _env: WorkerEnv) {
    super(state);
  }
}

/** The lease clock (wrangler.toml binding LEASE_CLOCK): same script, same bindings as the Worker. */
export class LeaseClock extends LeaseClockObject {
  constructor(state: ClockState, env: WorkerEnv) {
    super(state, () => runtimeFor(env));
  }
}
