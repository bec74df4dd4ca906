/**
 * Node entry: serves the app with `pg` against DATABASE_URL (data role) and CONTROL_DATABASE_URL
 * (control role; defaults to DATABASE_URL), or, when DATABASE_URL is unset, with PGlite under
 * DATA_DIR: the embedded default, running the same SQL functions.
 */
import { randomBytes } from "node:crypto";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { serve, type ServerType } from "@hono/node-server";
import type { PGlite } from "@electric-sql/pglite";
import type pg from "pg";
import { createApp, type PoolUsage } from "./app.js";
import { loadConfig, type Config } from "./config.js";
import { migrate } from "./db/migrate.js";
import { createPgPool, pgExecutor, withPgSession } from "./db/pg.js";
import { openPglite, pgliteExecutor, pgliteSession } from "./db/pglite.js";
import { verifySchema } from "./db/schema-check.js";
import { createAuthenticator } from "./http/auth.js";
import { mintToken } from "./http/tokens.js";
import { createMaintenanceTimer, type MaintenanceClock, type MaintenanceTimer } from "./maintenance-timer.js";
import { jsonLines } from "./observability/access-log.js";
import { Registry } from "./registry/registry.js";

export interface RunningServer {
  url: string;
  port: number;
  registry: Registry;
  config: Config;
  /** Lease maintenance (absent with LEASE_MAINTENANCE_INTERVAL_MS=0). */
  maintenance: MaintenanceTimer | undefined;
  close(): Promise<void>;
}

export interface ServerOptions {
  /** The lease-maintenance timer's clock (tests drive a simulated one). */
  maintenanceClock?: MaintenanceClock;
}

type Log = (line: string) => void;

/** Reads or creates a persistent development secret, so printed tokens survive restarts. */
async function developmentSecret(dataDir: string): Promise<string> {
  const path = join(dataDir, "auth-secret");
  try {
    return (await readFile(path, "utf8")).trim();
  } catch {
    await mkdir(dataDir, { recursive: true });
    const secret = randomBytes(32).toString("base64url");
    await writeFile(path, `${secret}\n`, { mode: 0o600 });
    return secret;
  }
}

async function openDatabase(config: Config, log: Log) {
  if (!config.DATABASE_URL) {
    const dir = join(config.DATA_DIR, "pglite");
    await mkdir(dir, { recursive: true });
    const db: PGlite = await openPglite(dir);
    if (config.MIGRATE_ON_START) {
      const report = await migrate(pgliteSession(db), { log });
      log(`embedded PGlite at ${dir}: schema version ${report.schemaVersion}`);
    }
    const executor = pgliteExecutor(db);
    return { registry: new Registry({ data: executor, control: executor }), embedded: true, pools: () => [], close: () => db.close() };
  }
  if (config.MIGRATE_ON_START) {
    const report = await withPgSession(config.CONTROL_DATABASE_URL ?? config.DATABASE_URL, (session) => migrate(session, { log }));
    log(`schema version ${report.schemaVersion}${report.applied.length ? ` (applied ${report.applied.join(", ")})` : ""}`);
  }
  const dataPool: pg.Pool = createPgPool(config.DATABASE_URL, { max: config.DB_POOL_MAX, statementTimeoutMs: config.DB_STATEMENT_TIMEOUT_MS });
  // Always a pool of its own, even on the same URL: publications get their longer timeout and
  // can never take the data plane's connections.
  const controlPool: pg.Pool = createPgPool(config.CONTROL_DATABASE_URL ?? config.DATABASE_URL, {
    max: Math.min(4, config.DB_POOL_MAX),
    statementTimeoutMs: config.CONTROL_DB_STATEMENT_TIMEOUT_MS,
  });
  const registry = new Registry({ data: pgExecutor(dataPool), control: pgExecutor(controlPool) });
  const usage = (pool: pg.Pool, name: string): PoolUsage => ({
    pool: name,
    total: pool.totalCount,
    idle: pool.idleCount,
    waiting: pool.waitingCount,
    max: pool.options.max,
  });
  return {
    registry,
    embedded: false,
    pools: (): PoolUsage[] => [usage(dataPool, "data"), usage(controlPool, "control")],
    close: async () => {
      await dataPool.end();
      await controlPool.end();
    },
  };
}

export async function startServer(
  env: Record<string, string | undefined> = process.env,
  log: Log = (line) => console.log(line),
  options: ServerOptions = {},
): Promise<RunningServer> {
  const config = loadConfig(env);
  const database = await openDatabase(config, log);
  const verdict = await verifySchema(database.registry);
  if (!verdict.ok) {
    await database.close();
    throw new Error(`refusing to serve: ${verdict.reason}`);
  }

  let secret = config.AUTH_HS256_SECRET;
  const generated = !secret && !config.AUTH_JWKS_URL;
  if (generated) secret = await developmentSecret(config.DATA_DIR);
  const authenticator = createAuthenticator({
    ...(config.AUTH_JWKS_URL ? { jwksUrl: config.AUTH_JWKS_URL } : { hs256Secret: secret }),
    ...(config.AUTH_ISSUER ? { issuer: config.AUTH_ISSUER } : {}),
    ...(config.AUTH_AUDIENCE ? { audience: config.AUTH_AUDIENCE } : {}),
  });
  // Lease maintenance runs when a lease can end: at start-up, then at the deadlines it learns from
  // the database and from the lifecycle answers this server gives (src/maintenance-timer.ts).
  const maintenance =
    config.LEASE_MAINTENANCE_INTERVAL_MS > 0
      ? createMaintenanceTimer(database.registry, {
          minIntervalMs: config.LEASE_MAINTENANCE_INTERVAL_MS,
          bounds: { batchSize: config.LEASE_EXPIRY_BATCH, maxBatches: config.LEASE_EXPIRY_MAX_BATCHES },
          ...(options.maintenanceClock ? { clock: options.maintenanceClock } : {}),
          onError: (error) => console.error(JSON.stringify({ level: "warn", msg: "lease maintenance failed", error: String(error) })),
          onCycle: ({ expired, released }) => {
            if (expired > 0) console.log(JSON.stringify({ level: "info", msg: "leases expired", expired, released }));
          },
        })
      : undefined;
  const app = createApp({
    registry: database.registry,
    authenticator,
    bodyLimitBytes: config.BODY_LIMIT_BYTES,
    adminBodyLimitBytes: config.ADMIN_BODY_LIMIT_BYTES,
    ...(config.ACCESS_LOG ? { log: jsonLines() } : {}),
    ...(config.METRICS ? { metrics: { pools: database.pools, public: config.METRICS_PUBLIC } } : {}),
    ...(maintenance ? { onLease: (notice) => maintenance.note(notice.expires_at) } : {}),
  });

  const { server, port } = await new Promise<{ server: ServerType; port: number }>((resolve, reject) => {
    const server = serve({ fetch: app.fetch, port: config.PORT, hostname: config.HOST }, (info) => resolve({ server, port: info.port }));
    server.once("error", reject);
  });
  const url = `http://${config.HOST}:${port}`;

  maintenance?.start();

  log(`aip-registry listening on ${url} (${database.embedded ? "embedded PGlite" : "PostgreSQL"})`);
  if (generated && secret) await printDevelopmentTokens(secret, url, config.DATA_DIR, log);

  return {
    url,
    port,
    registry: database.registry,
    config,
    maintenance,
    async close() {
      await maintenance?.stop();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await database.close();
    },
  };
}

async function printDevelopmentTokens(secret: string, url: string, dataDir: string, log: Log) {
  const ttlSeconds = 30 * 24 * 3600;
  const admin = await mintToken(secret, { subject: "dev-operator", scopes: ["registry:admin", "fleet:read"], ttlSeconds });
  const tenant = await mintToken(secret, { subject: "dev-gateway", tenantId: "tenant-a", scopes: ["catalog:read", "routes:write", "routes:read"], ttlSeconds });
  log(
    [
      "",
      `No AUTH_HS256_SECRET or AUTH_JWKS_URL: using a generated development secret (${join(dataDir, "auth-secret")}).`,
      "Development tokens (valid 30 days):",
      `  ADMIN_TOKEN=${admin}`,
      `  TENANT_TOKEN=${tenant}      # tenant_id=tenant-a`,
      "Connector hosts get tokens bound to their replica's peer principal:",
      "  npx aip-registry token --scope replicas:write --peer-principal <peer_principal_id>",
      "Try:",
      `  curl -s ${url}/readyz`,
      `  curl -s -H "Authorization: Bearer $TENANT_TOKEN" ${url}/v1/catalog/capabilities`,
      "",
    ].join("\n"),
  );
}

// `node --import tsx src/node.ts` / `npm start`
if (import.meta.url === `file://${process.argv[1]}`) {
  startServer().then(
    (running) => {
      const shutdown = () => {
        running.close().then(() => process.exit(0), () => process.exit(1));
      };
      process.once("SIGINT", shutdown);
      process.once("SIGTERM", shutdown);
    },
    (error: unknown) => {
      console.error(error instanceof Error ? error.message : error);
      process.exit(1);
    },
  );
}
