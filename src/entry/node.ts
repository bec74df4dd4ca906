/**
 * Node entry: serves the app with `pg` against DATABASE_URL (data role) and CONTROL_DATABASE_URL
 * (control role; defaults to DATABASE_URL), or, when DATABASE_URL is unset, with PGlite under
 * DATA_DIR: the embedded default, running the same SQL functions.
 *
 * Start-up order, each step only after the one before succeeded: the configuration is checked
 * (nothing is touched for a setting that cannot work), the port is bound (a taken port fails
 * before any data is opened), the embedded data directory is locked for this process (a second
 * process on it fails, naming the holder), then the database is opened, migrated or verified,
 * and only then are requests served (those arriving meanwhile wait).
 *
 * Shutdown (close(), which SIGTERM and SIGINT call through src/node/signals.ts) goes the other
 * way: the listener stops accepting and the requests in flight get up to SHUTDOWN_DRAIN_MS to
 * finish while lease maintenance stops, then the pools close, the data directory is released and
 * the last spans are exported.
 *
 * Every line it writes is one JSON object (src/telemetry/log.ts), start-up lines included.
 * With the standard OTEL_* variables set (src/observability/otel-env.ts) it records and exports
 * spans; without them no OpenTelemetry code is even loaded.
 */
import { randomBytes, randomUUID } from "node:crypto";
import { hostname } from "node:os";
import { createServer, type RequestListener, type Server } from "node:http";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { getRequestListener } from "@hono/node-server";
import type { PGlite } from "@electric-sql/pglite";
import type pg from "pg";
import { appOptions, createApp, type PoolUsage } from "../app.js";
import { MemoryCatalogCache } from "../catalog/cache.js";
import { CatalogReplica } from "../registry/catalog-replica.js";
import { CATALOG_REPLICA_CONNECT_TIMEOUT_MS } from "../limits.js";
import { loadConfig, type Config } from "../config.js";
import { migrate } from "../db/migrate.js";
import { createPgPool, pgExecutor, redactUrl, withPgSession } from "../db/pg.js";
import { openPglite, pgliteExecutor, pgliteSession } from "../db/pglite.js";
import { databaseFailure } from "../db/sqlstate.js";
import { verifySchema } from "../registry/schema-check.js";
import { authenticatorFrom } from "../http/auth.js";
import { bindRefusal } from "../http/bind-check.js";
import { mintToken } from "../http/tokens.js";
import { createMaintenanceTimer, type MaintenanceClock, type MaintenanceTimer } from "../maintenance/timer.js";
import { nodeCompressor } from "../node/compression.js";
import { pgliteOpenFailure } from "../node/data-dir-check.js";
import { lockDataDir, type DataDirLock } from "../node/data-dir-lock.js";
import { drainable, type Drainable, type DrainReport } from "../node/drain.js";
import { serveUntilSignal } from "../node/signals.js";
import { installTransport, TRANSPORT_SERVER_OPTIONS } from "../node/transport.js";
import { ChangeHistorySchedule, changeHistorySettings } from "../catalog/change-history.js";
import { RetentionSchedule, retentionSettings, type RetentionSettings } from "../maintenance/route-retention.js";
import { jsonLines } from "../observability/access-log.js";
import { MemoryActivity } from "../observability/activity.js";
import { FUNCTION_SET, FUNCTIONS_CHECKSUM, RELEASE, SCHEMA_VERSION } from "../db/schema-version.js";
import { log as processLog, Logger } from "../telemetry/log.js";
import { nodeMetrics } from "../observability/node-metrics.js";
import { otelSettings, OtelSettingsError, type OtelSettings } from "../observability/otel-env.js";
import type { ExportingTracer } from "../observability/otel.js";
import { Registry, type ServerIdentity } from "../registry/registry.js";
import { SIGHTING_INTERVAL_MS } from "../registry/schema-gate.js";
import type { RouteRetentionPolicy } from "../schemas.js";

export interface RunningServer {
  url: string;
  port: number;
  registry: Registry;
  config: Config;
  /** Lease maintenance (absent with LEASE_MAINTENANCE_INTERVAL_MS=0). */
  maintenance: MaintenanceTimer | undefined;
  /** The database pools' usage now (none on the embedded database). */
  pools: () => PoolUsage[];
  /** Requests being served now (the drain waits for these). */
  readonly inFlight: number;
  /** Graceful stop: drains requests (SHUTDOWN_DRAIN_MS), stops maintenance, closes the database, releases DATA_DIR. */
  close(): Promise<ShutdownReport>;
}

export interface ShutdownReport extends DrainReport {
  /** False when the database did not close within its bound (the process should exit anyway). */
  databaseClosed: boolean;
}

export interface ServerOptions {
  /** The lease-maintenance timer's clock (tests drive a simulated one). */
  maintenanceClock?: MaintenanceClock;
}

/** Where start-up lines go (each one JSON line); stdout by default. */
type Log = (line: string) => void;
/** The start-up messages: migrations, the schema, the listening address, development tokens. */
type Say = (msg: string, fields?: Record<string, unknown>) => void;

/** A start-up refusal: the message says what to do. */
export class StartupError extends Error {
  override name = "StartupError";
}

/** The OTEL_* variables' verdict: null (no tracing) or what to export; a setting that cannot be honoured is a start-up error. */
function tracingSettings(env: Record<string, string | undefined>): OtelSettings | null {
  try {
    return otelSettings(env);
  } catch (error) {
    if (error instanceof OtelSettingsError) throw new StartupError(error.message);
    throw error;
  }
}

/** The exporting tracer, loaded only now: a server without OTEL_* variables never loads OpenTelemetry. */
async function startTracing(settings: OtelSettings | null): Promise<ExportingTracer | undefined> {
  if (!settings) return undefined;
  const { createOtelTracer } = await import("../observability/otel.js");
  return createOtelTracer(settings, RELEASE);
}

/** Settings that cannot work together are refused before anything is bound or opened. */
export function checkConfig(config: Config): void {
  const embedded = !config.DATABASE_URL;
  const bind = bindRefusal(config.HOST, config.ALLOW_NETWORK_BIND);
  if (bind) throw new StartupError(bind);
  if (config.REGISTRY_MODE === "data-plane") {
    if (embedded) {
      throw new StartupError("REGISTRY_MODE=data-plane needs DATABASE_URL (the data role's URL): the embedded database has no separate control plane");
    }
    if (config.CONTROL_DATABASE_URL) {
      throw new StartupError(
        "REGISTRY_MODE=data-plane holds no control-plane credentials: unset CONTROL_DATABASE_URL (publish through a process or CLI that has the control role)",
      );
    }
  }
  if (embedded && config.CATALOG_DATABASE_URL) {
    throw new StartupError("CATALOG_DATABASE_URL (a read replica for catalog reads) needs DATABASE_URL: the embedded database has no replicas");
  }
  if (!embedded && !config.AUTH_HS256_SECRET && !config.AUTH_JWKS_URL && !config.AUTH_ALLOW_DEVELOPMENT_SECRET) {
    throw new StartupError(
      "no AUTH_HS256_SECRET or AUTH_JWKS_URL: against PostgreSQL the server does not make up a signing secret. " +
        "Set AUTH_HS256_SECRET (32+ characters, e.g. `openssl rand -base64 48`) or AUTH_JWKS_URL; " +
        "on a development machine, AUTH_ALLOW_DEVELOPMENT_SECRET=true uses the generated secret under DATA_DIR and prints tokens",
    );
  }
}

/** Reads or creates a persistent development secret, so printed tokens survive restarts. */
async function developmentSecret(dataDir: string): Promise<string> {
  const path = join(dataDir, "auth-secret");
  try {
    return (await readFile(path, "utf8")).trim();
  } catch {
    await mkdir(dataDir, { recursive: true });
    const secret = randomBytes(32).toString("base64url");
    try {
      // Exclusive create: two servers starting at once on one DATA_DIR agree on one secret.
      await writeFile(path, `${secret}\n`, { mode: 0o600, flag: "wx" });
      return secret;
    } catch {
      return (await readFile(path, "utf8")).trim();
    }
  }
}

/** Binds the port first: requests that arrive before the app is ready wait for it. */
async function listen(config: Config): Promise<{ server: Server; port: number; drain: Drainable; serve(listener: RequestListener): void }> {
  let listener: RequestListener | undefined;
  let ready: () => void = () => {};
  const opened = new Promise<void>((resolve) => (ready = resolve));
  let drain: Drainable | undefined;
  const server = createServer(TRANSPORT_SERVER_OPTIONS, (req, res) => {
    drain?.track(req, res);
    if (listener) return listener(req, res);
    void opened.then(() => listener?.(req, res));
  });
  // An Expect other than 100-continue is served as if it were absent (RFC 9110 allows it);
  // Node would answer a bare 417 itself.
  server.on("checkExpectation", (req, res) => server.emit("request", req, res));
  await new Promise<void>((resolve, reject) => {
    server.once("error", (error: NodeJS.ErrnoException) => {
      const where = `${config.HOST}:${config.PORT}`;
      reject(
        error.code === "EADDRINUSE"
          ? new StartupError(`cannot listen on ${where}: the port is in use (another server?); set PORT to a free port`)
          : error.code === "EACCES"
            ? new StartupError(`cannot listen on ${where}: permission denied; set PORT above 1023`)
            : error,
      );
    });
    server.listen(config.PORT, config.HOST, () => resolve());
  });
  server.removeAllListeners("error");
  server.on("error", (error) => processLog.error("http server error", { error: String(error) }));
  drain = drainable(server);
  const address = server.address();
  return {
    server,
    drain,
    port: typeof address === "object" && address ? address.port : config.PORT,
    serve(l) {
      listener = l;
      ready();
    },
  };
}

/**
 * This process, as its schema status calls report it: `migrate --finalize` drops no function set
 * whose servers were seen recently (docs/upgrades.md).
 */
const SERVER: ServerIdentity = { runtime: "node", instance: `${hostname()}/${process.pid}/${randomUUID().slice(0, 8)}` };

interface OpenDatabase {
  registry: Registry;
  label: string;
  pools: () => PoolUsage[];
  close(): Promise<void>;
}

async function openEmbedded(config: Config, say: Say): Promise<OpenDatabase> {
  const dir = join(config.DATA_DIR, "pglite");
  await mkdir(dir, { recursive: true });
  const db: PGlite = await openPglite(dir).catch((error: unknown) => {
    throw pgliteOpenFailure(config.DATA_DIR, error);
  });
  try {
    if (config.MIGRATE_ON_START) {
      const report = await migrate(pgliteSession(db), { log: (msg) => say(msg) });
      say(`embedded PGlite at ${dir}: schema version ${report.schemaVersion}`, { schema_version: report.schemaVersion });
    }
  } catch (error) {
    await db.close();
    throw error;
  }
  const executor = pgliteExecutor(db);
  return { registry: new Registry({ data: executor, control: executor, server: SERVER }), label: "embedded PGlite", pools: () => [], close: () => db.close() };
}

const usage = (pool: pg.Pool, name: string): PoolUsage => ({
  pool: name,
  total: pool.totalCount,
  idle: pool.idleCount,
  waiting: pool.waitingCount,
  max: pool.options.max,
});

/** Installs the schema through the control URL, or says what to do when that role may not. */
async function migrateOnStart(controlUrl: string, before: string | undefined, say: Say): Promise<void> {
  try {
    const report = await withPgSession(controlUrl, (session) => migrate(session, { log: (msg) => say(msg) }));
    say(`schema version ${report.schemaVersion}${report.applied.length ? ` (applied ${report.applied.join(", ")})` : ""}`, {
      schema_version: report.schemaVersion,
      applied: report.applied,
    });
  } catch (error) {
    if (databaseFailure(error) !== "permission") throw error;
    const role = new URL(controlUrl).username || "this role";
    throw new StartupError(
      `${before ?? "the schema is not current"}; ${role} may not install it (${(error as Error).message}). ` +
        "The runtime roles cannot migrate: run `npx --no-install aip-registry migrate` with the database owner's URL first (docs/deploy.md, step 2), then start again",
    );
  }
}

async function openPostgres(config: Config & { DATABASE_URL: string }, say: Say): Promise<OpenDatabase> {
  const dataPool: pg.Pool = createPgPool(config.DATABASE_URL, { max: config.DB_POOL_MAX, statementTimeoutMs: config.DB_STATEMENT_TIMEOUT_MS });
  const data = pgExecutor(dataPool);
  // Catalog reads on a read replica, when one is configured: a pool of its own, as the data role.
  const catalogPool = config.CATALOG_DATABASE_URL
    ? createPgPool(config.CATALOG_DATABASE_URL, {
        max: config.DB_POOL_MAX,
        statementTimeoutMs: config.DB_STATEMENT_TIMEOUT_MS,
        applicationName: `aip-registry-catalog/${FUNCTION_SET}`,
        // An unreachable replica costs at most this before the read goes to the primary; a
        // replica that stops answering mid-session, its statement timeout and a second more.
        connectionTimeoutMs: CATALOG_REPLICA_CONNECT_TIMEOUT_MS,
        ...(config.DB_STATEMENT_TIMEOUT_MS > 0 ? { queryTimeoutMs: config.DB_STATEMENT_TIMEOUT_MS + 1_000 } : {}),
      })
    : undefined;
  const catalogExecutor = catalogPool ? pgExecutor(catalogPool) : undefined;
  const catalog = catalogExecutor
    ? { catalog: catalogExecutor, catalogReplica: new CatalogReplica(catalogExecutor, { maxLagMs: config.CATALOG_REPLICA_MAX_LAG_MS }) }
    : {};
  const catalogUsage = (): PoolUsage[] => (catalogPool ? [usage(catalogPool, "catalog")] : []);
  if (config.REGISTRY_MODE === "data-plane") {
    // No control credentials, no control pool: publications and admin reads are 403 (Registry refuses control calls).
    return {
      registry: new Registry({ data, ...catalog, server: SERVER }),
      label: "PostgreSQL, data plane only",
      pools: () => [usage(dataPool, "data"), ...catalogUsage()],
      close: async () => {
        await dataPool.end();
        await catalogPool?.end();
      },
    };
  }
  const controlUrl = config.CONTROL_DATABASE_URL ?? config.DATABASE_URL;
  // Always a pool of its own, even on the same URL: publications get their longer timeout and
  // can never take the data plane's connections.
  const controlPool: pg.Pool = createPgPool(controlUrl, { max: Math.min(4, config.DB_POOL_MAX), statementTimeoutMs: config.CONTROL_DB_STATEMENT_TIMEOUT_MS });
  const registry = new Registry({ data, control: pgExecutor(controlPool), ...catalog, server: SERVER });
  const close = async () => {
    await dataPool.end();
    await controlPool.end();
    await catalogPool?.end();
  };
  try {
    if (config.MIGRATE_ON_START) {
      // A schema that is already current needs no migration, and no DDL privileges: the runtime
      // roles of docs/deploy.md start without the owner's credentials.
      const verdict = await askSchema(registry, redactUrl(config.DATABASE_URL));
      if (!verdict.ok) await migrateOnStart(controlUrl, verdict.reason, say);
    }
  } catch (error) {
    await close();
    throw error;
  }
  return { registry, label: "PostgreSQL", pools: () => [usage(dataPool, "data"), usage(controlPool, "control"), ...catalogUsage()], close };
}

/** The schema verdict; a database that cannot be asked at all is a start-up error with its cause. */
async function askSchema(registry: Registry, target: string) {
  try {
    return await verifySchema(registry);
  } catch (error) {
    const cause = (error as Error).cause as Error | undefined;
    throw new StartupError(`cannot use the database at ${target}: ${cause?.message ?? (error as Error).message}`);
  }
}

export async function startServer(
  env: Record<string, string | undefined> = process.env,
  log: Log = (line) => console.log(line),
  options: ServerOptions = {},
): Promise<RunningServer> {
  const config = loadConfig(env);
  checkConfig(config);
  const tracing = tracingSettings(env);
  processLog.setLevel(config.LOG_LEVEL);
  const startup = new Logger(config.LOG_LEVEL, (line) => log(line));
  const say: Say = (msg, fields) => startup.info(msg, fields);

  const { server, port, drain, serve } = await listen(config);
  const url = `http://${config.HOST}:${port}`;
  const closeServer = () => new Promise<void>((resolve) => server.close(() => resolve()));

  let lock: DataDirLock | undefined;
  let database: OpenDatabase | undefined;
  let secret = config.AUTH_HS256_SECRET;
  const generated = !secret && !config.AUTH_JWKS_URL;
  let running: RunningServer | undefined;
  try {
    if (!config.DATABASE_URL) {
      lock = await lockDataDir(
        config.DATA_DIR,
        { command: "aip-registry serve", url },
        {
          onLost: () => {
            processLog.error("the data directory lock was lost: stopping", { data_dir: config.DATA_DIR });
            process.exitCode = 1;
            void running?.close();
          },
        },
      );
    }
    if (generated) secret = await developmentSecret(config.DATA_DIR);
    database = config.DATABASE_URL ? await openPostgres(config as Config & { DATABASE_URL: string }, say) : await openEmbedded(config, say);
    const target = config.DATABASE_URL ? redactUrl(config.DATABASE_URL) : join(config.DATA_DIR, "pglite");
    const verdict = await askSchema(database.registry, target);
    if (!verdict.ok) throw new StartupError(`refusing to serve ${target}: ${verdict.reason}`);
    // Works, but outside development it gives up every boundary the runtime roles draw: say so loudly.
    if (verdict.role_warning && config.DATABASE_URL) processLog.warn(verdict.role_warning);
    await statePolicy(database.registry, retentionSettings(config), target);
  } catch (error) {
    await database?.close().catch(() => {});
    await lock?.release();
    // Requests that arrived during start-up are waiting for an app that will never come.
    server.closeAllConnections();
    await closeServer();
    throw error;
  }
  const { registry } = database;

  const authenticator = authenticatorFrom({ ...config, AUTH_HS256_SECRET: secret });
  // Lease maintenance runs when a lease can end: at start-up, then at the deadlines it learns from
  // the database and from the lifecycle answers this server gives (src/maintenance/timer.ts).
  // Route retention rides on its cycles (src/maintenance/route-retention.ts).
  const retention = retentionSettings(config);
  const maintenance =
    config.LEASE_MAINTENANCE_INTERVAL_MS > 0
      ? createMaintenanceTimer(registry, {
          minIntervalMs: config.LEASE_MAINTENANCE_INTERVAL_MS,
          bounds: { batchSize: config.LEASE_EXPIRY_BATCH, maxBatches: config.LEASE_EXPIRY_MAX_BATCHES },
          ...(retention.days > 0 ? { retention: new RetentionSchedule(retention) } : {}),
          changeHistory: new ChangeHistorySchedule(changeHistorySettings(config)),
          ...(options.maintenanceClock ? { clock: options.maintenanceClock } : {}),
          onError: (error) => processLog.warn("lease maintenance failed", { error: String(error) }),
          onCycle: ({ expired, released, retention: retained }) => {
            if (expired > 0) processLog.info("leases expired", { expired, released });
            if (retained && retained.removed > 0) processLog.info("routes removed", { removed: retained.removed });
          },
        })
      : undefined;
  const accessLog = config.ACCESS_LOG ? jsonLines(undefined, config.LOG_LEVEL) : undefined;
  let tracer: ExportingTracer | undefined;
  try {
    tracer = await startTracing(tracing);
  } catch (error) {
    await database.close().catch(() => {});
    await lock?.release();
    server.closeAllConnections();
    await closeServer();
    throw error;
  }
  const transport = installTransport(server, accessLog ? { log: accessLog } : {});
  const app = createApp(
    appOptions(config, {
      registry,
      authenticator,
      log: accessLog,
      ...(tracer ? { tracer } : {}),
      // The dashboard's history: this process's requests, in memory (docs/observability.md).
      activity: new MemoryActivity(),
      build: { version: RELEASE, runtime: "node", schema_version: SCHEMA_VERSION, functions_checksum: FUNCTIONS_CHECKSUM },
      onLease: maintenance ? (notice) => maintenance.note(notice.expires_at) : undefined,
      routeRetention: retention.days > 0 ? retention : undefined,
      transportFailure: transport.transportFailure,
      ...(config.COMPRESSION ? { compressor: nodeCompressor } : {}),
      catalog: {
        ...(config.CATALOG_CACHE_BYTES > 0 ? { cache: new MemoryCatalogCache(config.CATALOG_CACHE_BYTES) } : {}),
        sharedRevisionCheck: config.CATALOG_SHARED_REVISION_CHECK,
      },
      ...(config.METRICS
        ? {
            metrics: nodeMetrics(config, {
              pools: database.pools,
              transportRefusals: transport.refusals,
              maintenance,
              ...(authenticator.keySet ? { keySet: authenticator.keySet } : {}),
            }),
          }
        : {}),
    }),
  );
  serve(transport.dispatch(getRequestListener(app.fetch, { hostname: config.HOST, errorHandler: transport.requestError })));
  maintenance?.start();
  // While it serves, this server reports itself (readiness probes do too): finalize keeps its set.
  const sightings = setInterval(() => void registry.schemaStatus().catch(() => {}), SIGHTING_INTERVAL_MS);
  sightings.unref();

  say(`aip-registry listening on ${url} (${database.label}), PID ${process.pid}`, {
    url,
    database: database.label,
    pid: process.pid,
    version: RELEASE,
    tracing: tracer ? (tracing?.otlp ? `otlp ${tracing.otlp.protocol} ${tracing.otlp.url}` : "console") : "off",
  });
  if (generated && secret) await printDevelopmentTokens(secret, url, config.DATA_DIR, say);

  let closing: Promise<ShutdownReport> | undefined;
  const open = database;
  running = {
    url,
    port,
    registry,
    config,
    maintenance,
    pools: open.pools,
    get inFlight() {
      return drain.inFlight;
    },
    close: () =>
      (closing ??= (async () => {
        // No new connections from here on; the requests in flight finish (or are cut at the
        // deadline) while a running maintenance cycle completes.
        clearInterval(sightings);
        const [drained] = await Promise.all([drain.drain(config.SHUTDOWN_DRAIN_MS), maintenance?.stop()]);
        // A request cut at the deadline may still hold a pool connection until its statement
        // ends (the statement timeout): wait for that at most DATABASE_CLOSE_MS.
        const databaseClosed = await Promise.race([open.close().then(() => true), sleep(DATABASE_CLOSE_MS).then(() => false)]);
        // Last, and only once the database is closed: otherwise the lock goes with the process,
        // which the kernel releases when it exits.
        if (databaseClosed) await lock?.release();
        // The spans of the last requests, within a bound: a collector that is down must not hold the exit.
        if (tracer) await Promise.race([tracer.shutdown().catch(() => {}), sleep(TRACE_FLUSH_MS)]);
        return { ...drained, databaseClosed };
      })()),
  };
  return running;
}

/**
 * The database's route retention policy made at least as strict as this server's
 * ROUTE_RETENTION_DAYS and ROUTE_RETENTION_REQUIRE_EXPORT, before the server serves: a server can
 * only tighten it (functions/82_retention.sql); a looser configuration than the stored policy is
 * reported, since the stricter policy is what applies.
 */
async function statePolicy(registry: Registry, retention: RetentionSettings, target: string): Promise<void> {
  let policy: RouteRetentionPolicy;
  try {
    policy = await registry.routeRetentionPolicy(retention.days, retention.requireExport);
  } catch (error) {
    throw new StartupError(`refusing to serve ${target}: could not state the route retention policy: ${String(error)}`, { cause: error });
  }
  const keeps = (days: number) => (days === 0 ? Number.POSITIVE_INFINITY : days);
  if (keeps(policy.retention_days) > keeps(retention.days) || (policy.require_export && !retention.requireExport)) {
    console.error(
      JSON.stringify({
        level: "warn",
        msg: "the database's route retention policy is stricter than this server's configuration, and applies; only the owner relaxes it (aip-registry routes policy)",
        retention_days: policy.retention_days,
        require_export: policy.require_export,
        configured: { ROUTE_RETENTION_DAYS: retention.days, ROUTE_RETENTION_REQUIRE_EXPORT: retention.requireExport },
      }),
    );
  }
}

/** How long a stop waits for the database to close after the drain (pools end, PGlite closes). */
const DATABASE_CLOSE_MS = 2000;
/** How long a stop waits for the last spans to be exported. */
const TRACE_FLUSH_MS = 2000;
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms).unref());

/**
 * The development tokens, as one log line like every other. `paste` is the line to paste into a
 * second terminal (the README's quick start): `export ADMIN_TOKEN=... TENANT_TOKEN=...`.
 */
async function printDevelopmentTokens(secret: string, url: string, dataDir: string, say: Say) {
  const ttlSeconds = 30 * 24 * 3600;
  const admin = await mintToken(secret, { subject: "dev-operator", scopes: ["registry:admin", "fleet:read"], ttlSeconds });
  const tenant = await mintToken(secret, { subject: "dev-gateway", tenantId: "tenant-a", scopes: ["catalog:read", "routes:write", "routes:read"], ttlSeconds });
  say(`No AUTH_HS256_SECRET or AUTH_JWKS_URL: using a generated development secret (${join(dataDir, "auth-secret")}); development tokens valid 30 days`, {
    secret_file: join(dataDir, "auth-secret"),
    paste: `export ADMIN_TOKEN=${admin} TENANT_TOKEN=${tenant} # TENANT_TOKEN: tenant_id=tenant-a`,
    host_tokens: "npx --no-install aip-registry token --scope replicas:write --peer-principal <peer_principal_id>",
    try: [`curl -s ${url}/readyz`, `curl -s -H "Authorization: Bearer $TENANT_TOKEN" ${url}/v1/catalog/capabilities`],
  });
}

// `npm start` (node dist/entry/node.js), or `tsx src/entry/node.ts` in development.
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  serveUntilSignal(() => startServer()).then(
    (code) => process.exit(code),
    (error: unknown) => {
      processLog.error(error instanceof Error ? error.message : String(error));
      process.exit(1);
    },
  );
}
