/**
 * The registry's enumerations and protocol versions, once. The wire schemas (src/schemas.ts) and
 * the table checks (drizzle/schema.ts) are built from these lists, and the SQL functions check
 * input against the same lists: scripts/generate-sql-constants.ts writes each one into
 * functions/01_constants.sql as a SQL function (test/unit/sql-constants.test.ts fails when that
 * file is stale).
 *
 * Values the functions only ever write (a publication outcome, a replica status they set) stay
 * literals in SQL; the shape tests compare those records with the zod schemas.
 */

/** A version's lifecycle status as a publication names it: candidate is refused by admission. */
export const VERSION_STATUSES = ["candidate", "admitted", "active", "revoked"] as const;

/** The statuses a stored version can have (aip_connector_versions_status). */
export const STORED_VERSION_STATUSES = ["admitted", "active", "revoked"] as const;

export const INSTANCE_STATUSES = ["enabled", "disabled"] as const;

export const REPLICA_STATUSES = ["ready", "draining", "offline"] as const;

/** What a connector host (or an operator) asks of a replica. */
export const LIFECYCLE_OPERATIONS = ["register", "heartbeat", "drain", "offline"] as const;

export const SETTLEMENT_OUTCOMES = ["completed", "outcome_unknown", "cancelled", "lease_expired"] as const;

/** The verdict of one supply-chain check in an attestation. */
export const CHECK_STATUSES = ["not_evaluated", "passed", "failed"] as const;

/** What an implementation may claim to support for one capability (implementation_support). */
export const IMPLEMENTATION_CLAIMS = [
  "invocation",
  "cancellation",
  "streaming",
  "retry",
  "transaction",
  "reconciliation",
  "compensation",
  "approval",
  "credentials",
] as const;

/** The changes a publication is made of, in the order the API documents them. */
export const PUBLICATION_OPS = [
  "put_connector_type",
  "set_connector_type_enabled",
  "admit_version",
  "set_version_status",
  "set_version_qualification",
  "put_instance",
  "put_binding",
  "put_admission_policy",
  "put_replica",
] as const;

/** The registry/SDK contract version this registry implements: an artifact's sdk_version_requirement must include it. */
export const REGISTRY_SDK_VERSION = "1.0.0";

/** The AIP version an artifact must declare in its attestation's supported_aip_versions. */
export const AIP_VERSION = "1.0";

/** A topology label (region, zone, capacity class): aip_check_label. */
export const LABEL_FORMAT = {
  pattern: "^[A-Za-z0-9._-]{1,128}$",
  message: "must contain 1 to 128 ASCII letters, digits, dots, dashes or underscores",
} as const;

/** A content digest (manifests, artifacts, evidence, schemas): aip_check_digest. */
export const DIGEST_FORMAT = {
  pattern: "^sha256:[0-9a-f]{64}$",
  message: "must be sha256: followed by 64 lowercase hex digits",
} as const;
