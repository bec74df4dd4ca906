/**
 * Configuration from environment variables (Node) or Worker bindings: one schema for both. The
 * Worker reads the settings of WORKER_SETTINGS from its bindings (wrangler.toml [vars] and
 * secrets) with these same parsers, plus the three that only the Worker has (its Neon transport,
 * its statement bound and its Cache API switch).
 */
import { z } from "zod";
import { AlgorithmList, refineVerifierSettings } from "./http/auth-settings.js";
import * as L from "./limits.js";
import { LOG_LEVELS } from "./telemetry/log.js";

const flag = (fallback: boolean) =>
  z
    .enum(["true", "false", "1", "0"])
    .optional()
    .transform((v) => (v === undefined ? fallback : v === "true" || v === "1"));
const int = (fallback: number, min: number, max: number) =>
  z.coerce
    .number()
    .int()
    .min(min)
    .max(max)
    .optional()
    .transform((v) => v ?? fallback);
/** A setting bounded in src/limits.ts: refused outside its range, its default when unset. */
const bounded = (bound: L.RangeBound) => int(bound.default, bound.min, bound.max);
const optionalString = z
  .string()
  .optional()
  .transform((v) => (v && v.trim() !== "" ? v.trim() : undefined));

export const ConfigSchema = z.object({
  DATABASE_URL: optionalString,
  CONTROL_DATABASE_URL: optionalString,
  AUTH_HS256_SECRET: optionalString,
  AUTH_JWKS_URL: optionalString,
  /** With AUTH_JWKS_URL both are required (src/http/auth-settings.ts), or AUTH_ALLOW_ANY_ISSUER=true instead of AUTH_ISSUER. */
  AUTH_ISSUER: optionalString,
  AUTH_AUDIENCE: optionalString,
  AUTH_ALLOW_ANY_ISSUER: flag(false),
  /** AUTH_JWKS_URL's accepted algorithms, comma-separated; unset: every one of JWKS_ALGORITHMS. */
  AUTH_ALGORITHMS: AlgorithmList,
  /** The JOSE header `typ` every token must carry (e.g. `at+jwt`, RFC 9068); unset: not checked. */
  AUTH_TYP: optionalString,
  /** The longest `exp` minus `iat` (or `nbf`) accepted; unset: a day with AUTH_JWKS_URL, 366 days with a shared secret. */
  AUTH_MAX_TOKEN_LIFETIME_S: z.coerce.number().int().min(L.AUTH_MAX_TOKEN_LIFETIME_S.min).max(L.AUTH_MAX_TOKEN_LIFETIME_S.max).optional(),
  /** The identity provider's key set (src/http/jwks.ts): its maximum age, refetch cooldown, outage grace, fetch timeout and size. */
  AUTH_JWKS_MAX_AGE_MS: bounded(L.AUTH_JWKS_MAX_AGE_MS),
  AUTH_JWKS_COOLDOWN_MS: bounded(L.AUTH_JWKS_COOLDOWN_MS),
  AUTH_JWKS_GRACE_MS: bounded(L.AUTH_JWKS_GRACE_MS),
  AUTH_JWKS_TIMEOUT_MS: bounded(L.AUTH_JWKS_TIMEOUT_MS),
  AUTH_JWKS_MAX_BYTES: bounded(L.AUTH_JWKS_MAX_BYTES),
  /**
   * Against PostgreSQL, start without AUTH_HS256_SECRET or AUTH_JWKS_URL: generate (or reuse) the
   * development secret under DATA_DIR and print admin tokens. Only the embedded default does that
   * by itself: a real database is never exposed to a secret nobody configured.
   */
  AUTH_ALLOW_DEVELOPMENT_SECRET: flag(false),
  /**
   * `all` (default): control and data plane; migrates on start (MIGRATE_ON_START).
   * `data-plane`: no control credentials or pool, no migration: verifies the schema that the
   * control plane installed and answers publications and admin reads with 403 (only the
   * read-only invariant checker, GET /v1/admin/invariants, runs as the data role).
   */
  REGISTRY_MODE: z
    .enum(["all", "data-plane"])
    .optional()
    .transform((v) => v ?? "all"),
  PORT: int(8787, 0, 65535),
  HOST: z
    .string()
    .optional()
    .transform((v) => v ?? "127.0.0.1"),
  /** Listen on a non-loopback HOST (behind a TLS-terminating proxy); refused otherwise (src/http/bind-check.ts). */
  ALLOW_NETWORK_BIND: flag(false),
  DATA_DIR: z
    .string()
    .optional()
    .transform((v) => v ?? ".data"),
  MIGRATE_ON_START: flag(true),
  /**
   * Accept a replica registration that states none of the evidence of what its host runs
   * (artifact and manifest digests, configuration revision, capability count). Off: every
   * registration must prove it. Only for migrating hosts that predate the check; a registration
   * that states any of it must state and prove all of it either way.
   */
  ALLOW_REGISTRATION_WITHOUT_EVIDENCE: flag(false),
  DB_POOL_MAX: bounded(L.DB_POOL_MAX),
  /** 0 sends no statement_timeout (poolers refuse startup parameters: set it on the login role). */
  DB_STATEMENT_TIMEOUT_MS: bounded(L.DB_STATEMENT_TIMEOUT_MS),
  /** Publications of large manifests take longer than data-plane calls. */
  CONTROL_DB_STATEMENT_TIMEOUT_MS: bounded(L.CONTROL_DB_STATEMENT_TIMEOUT_MS),
  BODY_LIMIT_BYTES: bounded(L.BODY_LIMIT_BYTES),
  ADMIN_BODY_LIMIT_BYTES: bounded(L.ADMIN_BODY_LIMIT_BYTES),
  LEASE_MAINTENANCE_INTERVAL_MS: bounded(L.LEASE_MAINTENANCE_INTERVAL_MS),
  LEASE_EXPIRY_BATCH: bounded(L.LEASE_EXPIRY_BATCH),
  LEASE_EXPIRY_MAX_BATCHES: bounded(L.LEASE_EXPIRY_MAX_BATCHES),
  /** Days a released route is kept as evidence before lease maintenance removes it (0: forever; src/maintenance/route-retention.ts). */
  ROUTE_RETENTION_DAYS: bounded(L.ROUTE_RETENTION_DAYS),
  /** Remove only routes an export covered (`aip-registry routes export` records how far). */
  ROUTE_RETENTION_REQUIRE_EXPORT: flag(false),
  /**
   * The catalog change feed's history (GET /v1/catalog/changes): a removal is kept while fewer
   * catalog revisions than this came after it, and at most CATALOG_CHANGES_KEEP_SECONDS; lease
   * maintenance trims it after that (src/catalog/change-history.ts), and a feed from before what is
   * kept answers 410 changes-expired.
   */
  CATALOG_CHANGES_KEEP_REVISIONS: bounded(L.CATALOG_CHANGES_KEEP_REVISIONS),
  CATALOG_CHANGES_KEEP_SECONDS: bounded(L.CATALOG_CHANGES_KEEP_SECONDS),
  /**
   * Catalog reads (pages, single definitions, 304 validations) from a read replica: a PostgreSQL
   * hot standby or a Neon read replica, as the data role. Routing and lifecycle stay on DATABASE_URL.
   */
  CATALOG_DATABASE_URL: optionalString,
  /**
   * The most replay lag the catalog replica may have for its answer to be served (src/registry/catalog-replica.ts);
   * a read on a replica further behind, behind a revision this process already served, or unreachable
   * goes to DATABASE_URL in the same request.
   */
  CATALOG_REPLICA_MAX_LAG_MS: bounded(L.CATALOG_REPLICA_MAX_LAG_MS),
  /** Bytes of catalog answers the Node server keeps in memory (0: no cache). */
  CATALOG_CACHE_BYTES: bounded(L.CATALOG_CACHE_BYTES),
  /** Serve a cached catalog answer without asking the database, this long after its revision was confirmed (0: never). */
  CATALOG_MAX_STALENESS_MS: bounded(L.CATALOG_MAX_STALENESS_MS),
  /**
   * Confirm concurrent warm catalog hits with one shared check of their tenants' revisions
   * (src/catalog/serve.ts), started after each arrived: far fewer statements under load, with the
   * same guarantee (a publication committed before a request arrived is seen); a request whose
   * check finds a newer revision sends a second statement for its answer. Off: exactly one
   * statement per catalog request.
   */
  CATALOG_SHARED_REVISION_CHECK: flag(true),
  /** Node: compress answers for clients that accept it (brotli, gzip); off behind a proxy that compresses. */
  COMPRESSION: flag(true),
  /** Node: the longest a graceful stop waits for the requests in flight (src/node/drain.ts). */
  SHUTDOWN_DRAIN_MS: bounded(L.SHUTDOWN_DRAIN_MS),
  ACCESS_LOG: flag(true),
  /**
   * The lowest level of log line written: `error`, `warn`, `info` (default: start-up, shutdown and
   * access lines) or `debug` (also every SQL statement of a request, with its duration). Every line
   * is one JSON object (src/telemetry/log.ts).
   */
  LOG_LEVEL: z
    .enum(LOG_LEVELS)
    .optional()
    .transform((v) => v ?? "info"),
  /** Serve Prometheus metrics at /metrics (scrapes need a fleet:read token unless METRICS_PUBLIC). */
  METRICS: flag(true),
  METRICS_PUBLIC: flag(false),
});

export type Config = z.infer<typeof ConfigSchema>;

/** The Node server's settings a Worker reads too; the others (port, pools, data directory, compression, metrics) are Node's alone. */
const WORKER_SETTINGS = {
  DATABASE_URL: true,
  CONTROL_DATABASE_URL: true,
  AUTH_HS256_SECRET: true,
  AUTH_JWKS_URL: true,
  AUTH_ISSUER: true,
  AUTH_AUDIENCE: true,
  AUTH_ALLOW_ANY_ISSUER: true,
  AUTH_ALGORITHMS: true,
  AUTH_TYP: true,
  AUTH_MAX_TOKEN_LIFETIME_S: true,
  AUTH_JWKS_MAX_AGE_MS: true,
  AUTH_JWKS_COOLDOWN_MS: true,
  AUTH_JWKS_GRACE_MS: true,
  AUTH_JWKS_TIMEOUT_MS: true,
  AUTH_JWKS_MAX_BYTES: true,
  ACCESS_LOG: true,
  LOG_LEVEL: true,
  BODY_LIMIT_BYTES: true,
  ADMIN_BODY_LIMIT_BYTES: true,
  LEASE_EXPIRY_BATCH: true,
  LEASE_EXPIRY_MAX_BATCHES: true,
  CATALOG_DATABASE_URL: true,
  CATALOG_REPLICA_MAX_LAG_MS: true,
  CATALOG_MAX_STALENESS_MS: true,
  LEASE_MAINTENANCE_INTERVAL_MS: true,
  ALLOW_REGISTRATION_WITHOUT_EVIDENCE: true,
  ROUTE_RETENTION_DAYS: true,
  ROUTE_RETENTION_REQUIRE_EXPORT: true,
  CATALOG_CHANGES_KEEP_REVISIONS: true,
  CATALOG_CHANGES_KEEP_SECONDS: true,
} as const;

/** The Worker's configuration: the shared settings above with their Node parsers, and the Worker's own. */
export const WorkerConfigSchema = ConfigSchema.pick(WORKER_SETTINGS)
  .extend({
    /** `http` (default; neon() over HTTPS, one request per statement) or `websocket` (a Pool per request). */
    NEON_TRANSPORT: z
      .enum(["http", "websocket"])
      .optional()
      .transform((v) => v ?? "http"),
    /** The longest wait for one statement on the HTTP transport (a waking compute included). */
    NEON_HTTP_TIMEOUT_MS: bounded(L.NEON_HTTP_TIMEOUT_MS),
    /** Catalog answers kept in the location's Cache API (default on). */
    CATALOG_CACHE: flag(true),
  })
  .superRefine(refineVerifierSettings)
  .refine((config) => config.DATABASE_URL, { path: ["DATABASE_URL"], message: "is required (the data role's connection string)" });

export type WorkerConfig = z.infer<typeof WorkerConfigSchema> & { DATABASE_URL: string };
/** The names of the Worker's settings, each a string binding. */
export type WorkerSetting = keyof z.input<typeof WorkerConfigSchema>;

/** Settings that are each valid but cannot work together (the Worker applies the same rules). */
const CheckedConfigSchema = ConfigSchema.superRefine(refineVerifierSettings);

export function loadConfig(env: Record<string, string | undefined>): Config {
  const parsed = CheckedConfigSchema.safeParse(env);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((issue) => `  ${issue.path.join(".")}: ${issue.message}`);
    throw new Error(`invalid configuration:\n${lines.join("\n")}`);
  }
  return parsed.data;
}
