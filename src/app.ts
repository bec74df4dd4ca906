/**
 * The Hono app factory: the same app serves Node (src/entry/node.ts) and Workers (src/entry/worker.ts).
 * Middleware order: the request's trace and its observers (access log, metrics, activity history:
 * src/observability/request-trace.ts), request id, body limit, auth (per area), routes; every
 * failure becomes a problem+json response in onError (or notFound), which records its code for the
 * observers.
 */
import { OpenAPIHono } from "@hono/zod-openapi";
import type { Context, MiddlewareHandler } from "hono";
import { HTTPException } from "hono/http-exception";
import { bodyLimit } from "hono/body-limit";
import { requestId } from "hono/request-id";
import type { Config } from "./config.js";
import type { Authenticator } from "./http/auth.js";
import type { AppEnv } from "./http/env.js";
import { allowedMethodsOf } from "./http/allowed-methods.js";
import { compressAnswers, type Compressor } from "./http/compression.js";
import { authenticate } from "./http/guards.js";
import { registerDashboardRoute } from "./dashboard/route.js";
import type { LeaseListener } from "./maintenance/lease-events.js";
import { registerDocsRoutes, type DocsAssets } from "./docs/route.js";
import { problemResponse } from "./http/problem.js";
import { fieldErrors } from "./http/validation.js";
import { ADMIN_BODY_LIMIT_BYTES, BODY_LIMIT_BYTES } from "./limits.js";
import { accessLogObserver, type AccessLogSink } from "./observability/access-log.js";
import { activityObserver, registerActivityRoute, type ActivityRecorder, type BuildInfo } from "./observability/activity-route.js";
import { log } from "./telemetry/log.js";
import { observeRequests, type RequestObserver } from "./observability/request-trace.js";
import { untraced, type Tracer } from "./telemetry/tracing.js";
import { RegistryMetrics, type MetricsOptions } from "./observability/metrics.js";
import { recordProblemCode } from "./observability/request-info.js";
import { registerMetricsRoute } from "./observability/route.js";
import { RegistryError } from "./registry/errors.js";
import type { Registry } from "./registry/registry.js";
import { registerAdminRoutes } from "./routes/admin.js";
import { registerCatalogRoutes } from "./routes/catalog.js";
import { CatalogServer, type CatalogServingOptions } from "./catalog/serve.js";
import { registerFleetRoutes } from "./routes/fleet.js";
import { registerOpsRoutes } from "./routes/ops.js";
import { registerReaderRoutes } from "./routes/reader.js";
import { registerReplicaRoutes } from "./routes/replicas.js";
import { registerRouteExportRoutes } from "./routes/route-export.js";
import { registerRoutingRoutes } from "./routes/routing.js";
import type { RetentionSettings } from "./maintenance/route-retention.js";

export type { AccessLogEntry } from "./observability/access-log.js";
export type { PoolUsage } from "./observability/metrics.js";

export interface AppOptions {
  /** Catalog answer cache and staleness (src/catalog/serve.ts); default: no cache, always one statement that builds the answer. */
  catalog?: CatalogServingOptions;
  registry: Registry;
  authenticator: Authenticator;
  /** Body limit of data-plane requests (default: src/limits.ts BODY_LIMIT_BYTES, 256 KiB). */
  bodyLimitBytes?: number;
  /** Body limit of publications (default: src/limits.ts ADMIN_BODY_LIMIT_BYTES, 32 MiB). */
  adminBodyLimitBytes?: number;
  /** Structured access log sink (see observability/access-log.ts); never receives tokens, bodies or paths. */
  log?: AccessLogSink;
  /**
   * Records and exports the requests' spans (src/observability/otel.ts, when the OTEL_* variables
   * ask for it). Default: none; every request still has a trace, named in its log lines and SQL.
   */
  tracer?: Tracer;
  /** Serve Prometheus metrics at /metrics (the Node server; omitted on Workers). */
  metrics?: MetricsOptions;
  /** Serve the fleet dashboard at /dashboard (default true). */
  dashboard?: boolean;
  /**
   * The activity history behind the dashboard's rates, refusals and latency
   * (src/observability/activity.ts): every request is recorded, and GET /v1/fleet/activity
   * answers it. Node: MemoryActivity; Workers: the ActivityHistory Durable Object.
   */
  activity?: ActivityRecorder;
  /** What runs (version, schema version): GET /v1/fleet/activity reports it. */
  build?: BuildInfo;
  /**
   * The server's verdict on a request whose connection failed under it (Node:
   * src/node/transport.ts): a malformed body or a client that left is not an `internal` error.
   */
  transportFailure?: (c: Context) => RegistryError | undefined;
  /** Told of every live lease deadline the app serves (lease maintenance runs by them: src/maintenance/lease-events.ts). */
  onLease?: LeaseListener;
  /** The evidence window `POST /v1/fleet/route-retention` applies (ROUTE_RETENTION_DAYS); absent: retention is off and it answers 409. */
  routeRetention?: Pick<RetentionSettings, "days" | "requireExport">;
  /**
   * Compress answers for clients that accept it (the Node server; a Worker leaves it to
   * Cloudflare): catalog answers once per cached answer, the OpenAPI document once per process,
   * other potentially large answers per answer (src/http/compression.ts).
   */
  compressor?: Compressor;
  /**
   * ALLOW_REGISTRATION_WITHOUT_EVIDENCE: accept a replica registration that states none of the
   * evidence of what its host runs (default false: every registration must prove it). A
   * migration setting for hosts that predate the check.
   */
  allowRegistrationWithoutEvidence?: boolean;
  /**
   * Where the /docs page loads Swagger UI from: `bundled` (default) from this server, which serves
   * the installed package's files (Node); `cdn` from the pinned jsDelivr URLs (the Worker).
   */
  docsAssets?: DocsAssets;
}

/** The settings both runtimes read alike (src/config.ts). */
type SharedSettings = Pick<Config, "BODY_LIMIT_BYTES" | "ADMIN_BODY_LIMIT_BYTES" | "CATALOG_MAX_STALENESS_MS" | "ALLOW_REGISTRATION_WITHOUT_EVIDENCE">;

/**
 * The app's options from the configuration, for both entry points: what both read alike is mapped
 * here once; each runtime adds what only it has (Node: compression, metrics, the transport's
 * verdicts; the Worker: the Cache API, Swagger UI from the CDN).
 */
export function appOptions(
  config: SharedSettings,
  parts: Pick<AppOptions, "registry" | "authenticator" | "log" | "onLease" | "routeRetention"> &
    Omit<Partial<AppOptions>, "bodyLimitBytes" | "adminBodyLimitBytes">,
): AppOptions {
  const { registry, authenticator, log, onLease, routeRetention, catalog, ...runtimeOnly } = parts;
  return {
    registry,
    authenticator,
    bodyLimitBytes: config.BODY_LIMIT_BYTES,
    adminBodyLimitBytes: config.ADMIN_BODY_LIMIT_BYTES,
    catalog: { ...catalog, maxStalenessMs: config.CATALOG_MAX_STALENESS_MS },
    allowRegistrationWithoutEvidence: config.ALLOW_REGISTRATION_WITHOUT_EVIDENCE,
    ...(log ? { log } : {}),
    ...(onLease ? { onLease } : {}),
    ...(routeRetention ? { routeRetention } : {}),
    ...runtimeOnly,
  };
}

export function createApp(options: AppOptions): OpenAPIHono<AppEnv> {
  const { registry } = options;
  const app = new OpenAPIHono<AppEnv>({
    defaultHook: (result) => {
      if (!result.success) {
        const errors = fieldErrors(result.error.issues);
        throw new RegistryError("invalid", `request validation failed: ${errors.map((e) => `${e.field}: ${e.message}`).join("; ")}`, { errors });
      }
    },
  });

  const metrics = options.metrics ? new RegistryMetrics(options.metrics) : undefined;
  const observers: RequestObserver[] = [];
  if (options.log) observers.push(accessLogObserver(options.log));
  if (metrics) observers.push(metrics.observe);
  if (options.activity) observers.push(activityObserver(options.activity));
  app.use(observeRequests(options.tracer ?? untraced, observers));
  app.use(requestId());

  const tooLarge = () => {
    throw new RegistryError("payload-too-large", "the request body exceeds the size limit");
  };
  // GET and HEAD handlers never read a body, and Hono's limit asks for one by building the whole
  // WHATWG Request on Node (its AbortController and stream included): CPU spent on a body nobody
  // reads (its share of a warm catalog hit: docs/decisions.md).
  const limitBodies = (maxSize: number): MiddlewareHandler => {
    const limit = bodyLimit({ maxSize, onError: tooLarge });
    return (c, next) => (c.req.method === "GET" || c.req.method === "HEAD" ? next() : limit(c, next));
  };
  app.use("/v1/admin/*", limitBodies(options.adminBodyLimitBytes ?? ADMIN_BODY_LIMIT_BYTES.default));
  const dataBodyLimit = limitBodies(options.bodyLimitBytes ?? BODY_LIMIT_BYTES.default);
  for (const area of ["catalog", "routes", "replicas", "registry", "fleet"]) app.use(`/v1/${area}/*`, dataBodyLimit);
  app.use("/v1/*", authenticate(options.authenticator));
  if (options.compressor) {
    // Only where an answer can be large: the data plane's hot answers are always small.
    const compress = compressAnswers(options.compressor);
    for (const path of ["/v1/admin/*", "/v1/registry/*", "/v1/fleet/regions", "/metrics"]) app.use(path, compress);
  }

  registerOpsRoutes(app, registry, options.compressor);
  registerCatalogRoutes(app, new CatalogServer(registry, { ...options.catalog, ...(options.compressor ? { compressor: options.compressor } : {}) }));
  registerRoutingRoutes(app, registry);
  registerReplicaRoutes(app, registry, {
    onLease: options.onLease,
    lifecycle: { evidenceOptional: options.allowRegistrationWithoutEvidence ?? false },
  });
  registerReaderRoutes(app, registry);
  registerAdminRoutes(app, registry);
  registerRouteExportRoutes(app, registry);
  registerFleetRoutes(app, registry, options.onLease, options.routeRetention);
  const report = options.activity?.report?.bind(options.activity);
  if (report && options.activity && options.build) registerActivityRoute(app, { report, scope: options.activity.scope }, options.build);
  registerDocsRoutes(app, options.docsAssets ?? "bundled");
  if (options.dashboard ?? true) registerDashboardRoute(app);
  if (metrics && options.metrics) registerMetricsRoute(app, { registry, metrics, authenticator: options.authenticator, options: options.metrics });

  const respond = (c: Context, error: RegistryError) => {
    recordProblemCode(c, error.code);
    return problemResponse(c, error);
  };

  let allowedMethods: ((path: string) => string[]) | undefined;
  app.notFound((c) => {
    // Every route is registered by the first request.
    allowedMethods ??= allowedMethodsOf(app.routes);
    const allow = allowedMethods(c.req.path);
    if (allow.length === 0) return respond(c, new RegistryError("not-found", `no route for ${c.req.method} ${c.req.path}`));
    const response = respond(c, new RegistryError("method-not-allowed", `${c.req.method} is not allowed on ${c.req.path}; it serves ${allow.join(", ")}`));
    response.headers.set("allow", allow.join(", "));
    return response;
  });
  app.onError((error, c) => {
    let registryError: RegistryError;
    const transport = options.transportFailure?.(c);
    if (transport) {
      registryError = transport;
    } else if (error instanceof RegistryError) {
      registryError = error;
    } else if (error instanceof HTTPException) {
      // Hono's own refusals: malformed JSON bodies and the like.
      const code = error.status === 413 ? "payload-too-large" : error.status === 415 ? "unsupported-media-type" : error.status < 500 ? "invalid" : "internal";
      registryError = new RegistryError(code, error.status === 415 ? "request bodies must be application/json" : error.message || "bad request");
    } else {
      // A bug: log it, never leak it.
      log.error("unhandled error", { request_id: c.get("requestId"), error: String((error as Error)?.stack ?? error) });
      registryError = new RegistryError("internal", "internal error");
    }
    return respond(c, registryError);
  });
  return app;
}
