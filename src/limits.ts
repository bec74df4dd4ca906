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
 * The SQL functions enforce the same bounds from the same values: scripts/generate-sql-constants.ts
 * writes every bound they share with TypeScript into functions/01_constants.sql (one small SQL
 * function each, named in the comments below), and test/unit/sql-constants.test.ts fails when
 * that file is stale. Change a value here and run `npm run db:constants`.
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
/** Catalog `limit` (tenant and admin catalog): aip_catalog_query, aip_catalog_page_default() and _max(). */
export const CATALOG_PAGE: PageBound = { default: 100, max: 200 };

/**
 * Catalog `max_bytes`, the summed canonical size of a page's definitions: the default is the
 * maximum, and larger asks get the maximum (aip_catalog_query). It is never 0: a budget below the
 * next definition is refused (400), so asking for no bytes at all is refused up front.
 * aip_catalog_page_bytes_max().
 */
export const CATALOG_PAGE_BYTES: PageBound = { default: 4 * MiB, max: 4 * MiB };

/** Admin bindings `limit`: aip_admin_bindings, aip_bindings_page_default() and _max(). */
export const BINDINGS_PAGE: PageBound = { default: 100, max: 1000 };

/** Fleet regions `limit`: aip_fleet_regions, aip_regions_page_default() and _max(). */
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
 * CLI's expire-leases): aip_expire_leases, aip_lease_expiry_batch_min() and _max(). 0 is invalid,
 * as in the reference; 500 is the reference daemon's batch.
 */
export const LEASE_EXPIRY_BATCH: RangeBound = { default: 500, min: 1, max: 10_000 };

/** Batches per lease maintenance cycle (LEASE_EXPIRY_MAX_BATCHES): the reference daemon's 8. */
export const LEASE_EXPIRY_MAX_BATCHES: RangeBound = { default: 8, min: 1, max: 1000 };

/** The shortest pause between two lease maintenance cycles (LEASE_MAINTENANCE_INTERVAL_MS; 0 = off). */
export const LEASE_MAINTENANCE_INTERVAL_MS: RangeBound = { default: 1000, min: 0, max: 3_600_000 };

/**
 * The route evidence window (ROUTE_RETENTION_DAYS): a released route is kept this many days after
 * its last settlement, then route retention removes it (aip_remove_settled_routes,
 * aip_route_retention_days_max(); it refuses a window below a day, which the retry contract's
 * check relies on). 0 keeps every route forever. README, "Route retention", gives the reasons for
 * the default.
 */
export const ROUTE_RETENTION_DAYS: RangeBound = { default: 30, min: 0, max: 36_500 };

/** Routes per retention batch (`POST /v1/fleet/route-retention?limit=`, the CLI's `routes prune`): aip_remove_settled_routes, aip_route_retention_batch_min() and _max(). */
export const ROUTE_RETENTION_BATCH: RangeBound = { default: 500, min: 1, max: 10_000 };

/**
 * The catalog change feed's history (GET /v1/catalog/changes): a removal is kept while it is less
 * than CATALOG_CHANGES_KEEP_REVISIONS catalog revisions behind the current one and at most
 * CATALOG_CHANGES_KEEP_SECONDS old; maintenance trims it after that (aip_trim_catalog_changes), and a feed from before what is
 * kept answers 410 `changes-expired` (re-list). A day of at most a million publications, by default.
 */
export const CATALOG_CHANGES_KEEP_REVISIONS: RangeBound = { default: 1_000_000, min: 1, max: 1_000_000_000 };
export const CATALOG_CHANGES_KEEP_SECONDS: RangeBound = { default: 86_400, min: 1, max: 315_360_000 };
/** Removals trimmed per aip_trim_catalog_changes call: aip_catalog_changes_trim_batch_min() and _max(). */
export const CATALOG_CHANGES_TRIM_BATCH: RangeBound = { default: 1000, min: 1, max: 10_000 };
/** The shortest pause between two trims of one process once it has caught up (src/catalog/change-history.ts). */
export const CATALOG_CHANGES_TRIM_PAUSE_MS = 60_000;

/**
 * How far a gateway's clock may run ahead of the database's when it mints an `act_` + UUIDv7
 * action ID: a new route for an action minted before route retention's watermark plus this is
 * refused `route-expired` (aip_check_action_retained, aip_action_clock_allowance_ms()).
 */
export const ACTION_CLOCK_ALLOWANCE_MS = 3_600_000;

/**
 * How long before an export's first page its upper bound must lie, so that every settlement
 * before the bound has committed when the page is read (a settlement is one short statement):
 * aip_admin_routes_page and aip_record_route_export, aip_route_export_lag_ms().
 */
export const ROUTE_EXPORT_LAG_MS = 3_600_000;

/**
 * The shortest pause between two retention runs of one process once it has caught up (src/maintenance/route-retention.ts):
 * a route is removed within about this long after its window ends, while maintenance cycles run.
 */
export const ROUTE_RETENTION_PAUSE_MS = 15 * 60_000;

/** Routes per export page (`GET /v1/admin/routes`, the CLI's `routes export`): aip_admin_routes_page, aip_routes_export_page_default() and _max(). */
export const ROUTES_EXPORT_PAGE: PageBound = { default: 1000, max: 1000 };

/** A replica lease's length (`lease_ttl_ms`): aip_replica_transition, aip_lease_ttl_ms_default(), _min() and _max(). */
export const LEASE_TTL_MS: RangeBound = { default: 30_000, min: 1000, max: 300_000 };

/** Changes in one publication: aip_publish, aip_publication_changes_max(). */
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

/**
 * The most replay lag a catalog read replica (CATALOG_DATABASE_URL) may have for its answer to be
 * used (CATALOG_REPLICA_MAX_LAG_MS); a read on a replica further behind goes to the primary
 * (src/registry/catalog-replica.ts). 0: only a replica that has replayed everything it received.
 */
export const CATALOG_REPLICA_MAX_LAG_MS: RangeBound = { default: 1_000, min: 0, max: 600_000 };

/**
 * A catalog replica that cannot be reached is tried again after a backoff that doubles per failed
 * attempt from `base_ms` up to `max_ms` (jittered), while the primary answers (src/registry/catalog-replica.ts).
 */
export const CATALOG_REPLICA_RETRY = { base_ms: 250, max_ms: 30_000 } as const;

/** Node: connecting to the catalog replica gives up after this long, and the read goes to the primary. */
export const CATALOG_REPLICA_CONNECT_TIMEOUT_MS = 1_000;

// Token verification against an identity provider (AUTH_JWKS_URL; src/http/jwks.ts) ---------------
/**
 * How long a fetched key set is used before it is fetched again (AUTH_JWKS_MAX_AGE_MS): a key the
 * identity provider removed stops being honoured within this bound while the provider answers.
 */
export const AUTH_JWKS_MAX_AGE_MS: RangeBound = { default: 60_000, min: 1000, max: 3_600_000 };

/** The shortest pause between two fetches caused by a token naming an unknown key (AUTH_JWKS_COOLDOWN_MS). */
export const AUTH_JWKS_COOLDOWN_MS: RangeBound = { default: 10_000, min: 0, max: 3_600_000 };

/**
 * How long past its maximum age the last good key set is still used while the identity provider
 * cannot be fetched (AUTH_JWKS_GRACE_MS; 0 = not at all): the revocation bound during an outage.
 */
export const AUTH_JWKS_GRACE_MS: RangeBound = { default: 600_000, min: 0, max: 86_400_000 };

/** The longest wait for one key-set fetch, body included (AUTH_JWKS_TIMEOUT_MS). */
export const AUTH_JWKS_TIMEOUT_MS: RangeBound = { default: 5000, min: 100, max: 60_000 };

/** The largest key-set body accepted (AUTH_JWKS_MAX_BYTES); an identity provider's set is a few KiB. */
export const AUTH_JWKS_MAX_BYTES: RangeBound = { default: 256 * KiB, min: KiB, max: 4 * MiB };

/** Failed key-set fetches back off from this pause, doubling (with jitter) up to AUTH_JWKS_BACKOFF_MAX_MS. */
export const AUTH_JWKS_BACKOFF_MIN_MS = 1000;
export const AUTH_JWKS_BACKOFF_MAX_MS = 30_000;

/**
 * The longest token lifetime accepted (AUTH_MAX_TOKEN_LIFETIME_S), `exp` minus `iat` or `nbf`.
 * The default depends on the verifier: a day for an identity provider's tokens, and 366 days for
 * the shared secret's (the CLI mints tokens of up to 365 days).
 */
export const AUTH_MAX_TOKEN_LIFETIME_S = { jwksDefault: 86_400, sharedSecretDefault: 366 * 86_400, min: 60, max: 366 * 86_400 } as const;

/** Clock skew tolerated on `exp`, `nbf` and `iat`, in seconds. */
export const AUTH_CLOCK_TOLERANCE_S = 5;

// Records ---------------------------------------------------------------------------------------
/**
 * The longest text a field may hold, in UTF-8 bytes (what PostgreSQL's octet_length counts, not
 * UTF-16 units): zod refuses longer (src/schemas.ts, Id) and so does the SQL reader
 * (aip_read_text with aip_text_bytes_<field>()). `id` is every identifier or reference not named
 * otherwise: record IDs, tenant, capability, policy and quota references, request and action IDs,
 * profiles, trust domain, transport profile, the SDK requirement.
 */
export const TEXT_BYTES = {
  id: 256,
  connector_type_name: 512,
  /** The connector type's owner, and the attestation's owner that must equal it. */
  connector_type_owner: 512,
  version: 128,
  capability_name: 1024,
  /** `sha256:` and 64 hex digits. */
  digest: 71,
  attestation_signature_ref: 512,
  attestation_signer_identity: 512,
  qualification_reason: 1024,
  secret_provider_ref: 1024,
  credential_revision_ref: 1024,
  endpoint: 2048,
  peer_principal_id: 512,
  peer_principal_kind: 128,
  peer_did: 1024,
  /** The catalog's `q` search text. */
  catalog_q: 512,
  /** The catalog's `cursor`: a revision, a total, a fingerprint and a capability ID. */
  catalog_cursor: 1100,
} as const;

/** The largest integer a JSON number carries exactly: revisions, sequences (aip_json_integer_max()). */
export const JSON_INTEGER_MAX = Number.MAX_SAFE_INTEGER;

/** The largest value of a PostgreSQL integer column: priorities, in-flight limits, thresholds (aip_sql_integer_max()). */
export const SQL_INTEGER_MAX = 2_147_483_647;

/** Nesting of JSON the registry canonicalizes (manifests, attestations): serde_json's default recursion limit (aip_json_depth_max()). */
export const JSON_DEPTH_MAX = 128;

/** A replica's capacity (put_replica): aip_replica_capacity_min() and _max(). */
export const REPLICA_CAPACITY = { min: 1, max: 1_000_000 } as const;

/** Capabilities in one manifest (admit_version): aip_manifest_capabilities_max(). */
export const MANIFEST_CAPABILITIES = { max: 512 } as const;

/** A manifest's canonical size (admit_version): aip_manifest_bytes_max(). */
export const MANIFEST_BYTES = { max: 4 * MiB } as const;

/**
 * One capability definition's canonical size (admit_version): aip_definition_bytes_max(). Below
 * the catalog page's byte maximum, so a page always holds the next definition.
 */
export const DEFINITION_BYTES = { max: 256 * KiB } as const;

// Admission policies ----------------------------------------------------------------------------
/** Consecutive outcome_unknown settlements that open a replica's circuit: aip_circuit_failure_threshold_default(), _min(), _max(). */
export const CIRCUIT_FAILURE_THRESHOLD: RangeBound = { default: 5, min: 1, max: SQL_INTEGER_MAX };

/** How long an open circuit stays open: aip_circuit_open_ms_default(), _min(), _max(). */
export const CIRCUIT_OPEN_MS: RangeBound = { default: 30_000, min: 100, max: 3_600_000 };

/**
 * The admission policy of a binding without quota_policy_ref: the reference's "fleet" preset. The
 * global and connector-type counters stay off, because each would serialize every tenant on one
 * row (aip_route_policy, aip_default_policy_<member>()).
 */
export const DEFAULT_ADMISSION_POLICY = {
  revision: 1,
  max_tenant_in_flight: 1000,
  max_instance_in_flight: 500,
  max_binding_in_flight: 250,
  max_tenant_retry_in_flight: 100,
  circuit_failure_threshold: CIRCUIT_FAILURE_THRESHOLD.default,
  circuit_open_ms: CIRCUIT_OPEN_MS.default,
} as const;
