/**
 * Every default and bound of the TypeScript side, in one place (docs/reliability.md, "Limits and
 * defaults"). The policy:
 *
 * - Page sizes (how many items one answer holds) are clamped to [1, max]: asking for 0 gets one
 *   item, asking for too many gets the maximum, as the reference clamps the catalog `limit`. The
 *   zod schemas clamp them (src/schemas.ts, PageSize) and the SQL function clamps again as the last
 *   line of defence.
 * - Every other bound (batch sizes, body sizes, lease lengths, timeouts, configuration) is refused
 *   outside its range: a 400 `invalid` for a request, a start-up error for configuration.
 *
 * Where a SQL function enforces the same bound, its name is given: change both together.
 */

const KiB = 1024;
const MiB = 1024 * KiB;

/** A page size: clamped to [1, max]; `default` when the caller names none. */
export interface PageBound {
  readonly default: number;
  readonly max: number;
}

/** `value` clamped to [1, page.max]. */
export const clampPage = (value: number, page: PageBound): number => Math.min(Math.max(value, 1), page.max);

// Page sizes ------------------------------------------------------------------------------------
/** Catalog `limit` (tenant and admin catalog): aip_catalog_query (functions/30_catalog.sql). */
export const CATALOG_PAGE: PageBound = { default: 100, max: 200 };

/**
 * Catalog `max_bytes`, the summed canonical size of a page's definitions: the default is the
 * maximum, and larger asks get the maximum (aip_catalog_query). It is never 0: a budget below the
 * next definition is refused (400), so asking for no bytes at all is refused up front.
 */
export const CATALOG_PAGE_BYTES: PageBound = { default: 4 * MiB, max: 4 * MiB };

/** Admin bindings `limit`: aip_admin_bindings (functions/85_admin.sql). */
export const BINDINGS_PAGE: PageBound = { default: 100, max: 1000 };

/** Fleet regions `limit`: aip_fleet_regions (functions/80_fleet.sql). */
export const REGIONS_PAGE: PageBound = { default: 256, max: 1000 };

// Refused outside their range -------------------------------------------------------------------
/** A bound that is refused outside [min, max]. */
export interface RangeBound {
  readonly default: number;
  readonly min: number;
  readonly max: number;
}

/**
 * Replicas per lease-expiry batch (`POST /v1/fleet/lease-expiry?limit=`, LEASE_EXPIRY_BATCH, the
 * CLI's expire-leases): aip_expire_leases (functions/80_fleet.sql). 0 is invalid, as in the
 * reference; 500 is the reference daemon's batch.
 */
export const LEASE_EXPIRY_BATCH: RangeBound = { default: 500, min: 1, max: 10_000 };

/** Batches per lease maintenance cycle (LEASE_EXPIRY_MAX_BATCHES): the reference daemon's 8. */
export const LEASE_EXPIRY_MAX_BATCHES: RangeBound = { default: 8, min: 1, max: 1000 };

/** The shortest pause between two lease maintenance cycles (LEASE_MAINTENANCE_INTERVAL_MS; 0 = off). */
export const LEASE_MAINTENANCE_INTERVAL_MS: RangeBound = { default: 1000, min: 0, max: 3_600_000 };

/** A replica lease's length (`lease_ttl_ms`): aip_host_replica_lifecycle (functions/70_replicas.sql). */
export const LEASE_TTL_MS: RangeBound = { default: 30_000, min: 1000, max: 300_000 };

/** Changes in one publication: aip_publish (functions/20_publish.sql). */
export const PUBLICATION_CHANGES = { min: 1, max: 10_000 } as const;

/** Request bodies of the data plane (BODY_LIMIT_BYTES); larger ones are 413. */
export const BODY_LIMIT_BYTES: RangeBound = { default: 256 * KiB, min: KiB, max: 64 * MiB };

/** Publication bodies (ADMIN_BODY_LIMIT_BYTES): a version manifest alone may be 4 MiB. */
export const ADMIN_BODY_LIMIT_BYTES: RangeBound = { default: 32 * MiB, min: KiB, max: 256 * MiB };

/** Node data pool: connections (DB_POOL_MAX). */
export const DB_POOL_MAX: RangeBound = { default: 16, min: 1, max: 1000 };

/** Node data pool: server-side statement_timeout (DB_STATEMENT_TIMEOUT_MS; 0 sends none). */
export const DB_STATEMENT_TIMEOUT_MS: RangeBound = { default: 10_000, min: 0, max: 600_000 };

/** Node control pool: publications of large manifests take longer (CONTROL_DB_STATEMENT_TIMEOUT_MS). */
export const CONTROL_DB_STATEMENT_TIMEOUT_MS: RangeBound = { default: 60_000, min: 0, max: 3_600_000 };

/**
 * The CLI's bound on connecting to a database (migrate, and every command run with
 * --database-url): a server that accepts the connection and never answers is reported after this
 * long (exit 3) instead of hanging the command. Also migrations' connect bound (src/db/pg.ts).
 */
export const CLI_CONNECT_TIMEOUT_MS = 10_000;
export const MIGRATION_CONNECT_TIMEOUT_MS = CLI_CONNECT_TIMEOUT_MS;
/** A migration's statements run under a 15-minute server-side timeout (src/db/migrate.ts); the client waits a minute longer. */
export const MIGRATION_QUERY_TIMEOUT_MS = 16 * 60_000;

/**
 * Node server: how long a graceful stop (SIGTERM, SIGINT) lets the requests in flight finish
 * before their connections are cut (SHUTDOWN_DRAIN_MS). 8 s plus the 2 s the pools get to close
 * fits Docker's default 10 s between SIGTERM and SIGKILL; Kubernetes gives 30 s, systemd 90 s.
 */
export const SHUTDOWN_DRAIN_MS: RangeBound = { default: 8_000, min: 0, max: 600_000 };

/** Workers, HTTP transport: the longest wait for one statement, a waking compute included (NEON_HTTP_TIMEOUT_MS). */
export const NEON_HTTP_TIMEOUT_MS: RangeBound = { default: 15_000, min: 100, max: 600_000 };

/** Node: memory for cached catalog answers (CATALOG_CACHE_BYTES; 0 = no cache). */
export const CATALOG_CACHE_BYTES: RangeBound = { default: 64 * MiB, min: 0, max: 4 * 1024 * MiB };

/** How long a cached catalog answer may be served unconfirmed (CATALOG_MAX_STALENESS_MS; 0 = never). */
export const CATALOG_MAX_STALENESS_MS: RangeBound = { default: 0, min: 0, max: 3_600_000 };
