/**
 * The registry's tables. drizzle-kit generates the numbered migrations in drizzle/ from this
 * file; the PL/pgSQL functions in functions/ are the only code that reads or writes them.
 *
 * Rules that shaped it:
 * - Normalized rows with indexed columns for every filter and ordering key; the fleet is never
 *   one JSON document. JSON columns hold only what is opaque to the registry (a manifest, an
 *   attestation, a capability contract, the pinned admission snapshot of one route).
 * - Hot columns (replica active_assignments and circuit state, admission counter `active`,
 *   route `reserved`) are in no index, so the updates of every resolve and settle can be HOT;
 *   the tables that carry them get a lower fillfactor in migration 0001.
 * - Times are timestamptz(3): the wire format is RFC 3339 with milliseconds, and storing exactly
 *   that precision makes a route read back byte-identical for the settlement fence check.
 */
import { sql } from "drizzle-orm";
import {
  type AnyPgColumn,
  bigint,
  boolean,
  check,
  customType,
  foreignKey,
  index,
  integer,
  json,
  jsonb,
  pgTable,
  primaryKey,
  text,
  timestamp,
  unique,
} from "drizzle-orm/pg-core";
import { ROUTE_RETENTION_DAYS } from "../src/limits.js";
import { INSTANCE_STATUSES, REPLICA_STATUSES, SETTLEMENT_OUTCOMES, STORED_VERSION_STATUSES } from "../src/vocabulary.js";

const ms = (name: string) => timestamp(name, { withTimezone: true, precision: 3, mode: "string" });
const revision = (name: string) => bigint(name, { mode: "number" });
const createdAt = () => ms("created_at").notNull().default(sql`now()`);
const updatedAt = () => ms("updated_at").notNull().default(sql`now()`);
/** `column IN ('a', 'b', ...)`: a check constraint on one of the registry's enumerations (src/vocabulary.ts). */
const oneOf = (column: AnyPgColumn, values: readonly string[]) => sql`${column} IN (${sql.raw(values.map((value) => `'${value}'`).join(", "))})`;

/** Raw bytes (a digest); only the functions in functions/ read and write them. */
const bytea = customType<{ data: Buffer }>({ dataType: () => "bytea" });

/** The monotonic catalog revision: one row, advanced once per publication that changed the catalog. */
export const catalogRevision = pgTable(
  "aip_catalog_revision",
  {
    singleton: boolean("singleton").primaryKey().default(true),
    revision: revision("revision").notNull().default(0),
    publishedAt: ms("published_at").notNull().default(sql`now()`),
  },
  (t) => [check("aip_catalog_revision_singleton", sql`${t.singleton}`), check("aip_catalog_revision_nonneg", sql`${t.revision} >= 0`)],
);

export const connectorTypes = pgTable("aip_connector_types", {
  typeId: text("type_id").primaryKey(),
  name: text("name").notNull(),
  owner: text("owner").notNull(),
  enabled: boolean("enabled").notNull(),
  createdAt: createdAt(),
  updatedAt: updatedAt(),
});

/**
 * Manifests, content-addressed by their digest (SHA-256 of the canonical JSON): immutable, and
 * identical content under one key by construction. A publication writes its versions' manifests
 * (and capability definitions) before it takes the exclusive publication lock, so that the lock is
 * held only for the rows the revision makes visible (functions/22_publish_versions.sql).
 */
export const manifests = pgTable("aip_manifests", {
  manifestDigest: text("manifest_digest").primaryKey(),
  manifest: jsonb("manifest").notNull(),
  createdAt: createdAt(),
});

/** Immutable connector versions: only `status` ever changes. */
export const connectorVersions = pgTable(
  "aip_connector_versions",
  {
    versionId: text("version_id").primaryKey(),
    typeId: text("type_id")
      .notNull()
      .references(() => connectorTypes.typeId),
    version: text("version").notNull(),
    status: text("status").notNull(),
    artifactDigest: text("artifact_digest").notNull(),
    /** The version's manifest, in aip_manifests. */
    manifestDigest: text("manifest_digest").notNull(),
    attestation: jsonb("attestation").notNull(),
    /** Per capability ID, what the implementation behind it supports (invocation, cancellation, ...): the claims admission checked. */
    implementationSupport: jsonb("implementation_support").notNull().default(sql`'{}'::jsonb`),
    /** True once admission accepted the supply-chain evidence; an operator may revoke it (set_version_qualification). */
    supplyChainQualified: boolean("supply_chain_qualified").notNull(),
    /** Why qualification last changed after admission (an operator's reason); null while it stands as admitted. */
    qualificationReason: text("qualification_reason"),
    admittedAt: ms("admitted_at").notNull().default(sql`now()`),
    updatedAt: updatedAt(),
  },
  (t) => [
    foreignKey({ name: "aip_connector_versions_manifest_fk", columns: [t.manifestDigest], foreignColumns: [manifests.manifestDigest] }),
    unique("aip_connector_versions_artifact_digest_key").on(t.artifactDigest),
    unique("aip_connector_versions_type_version_key").on(t.typeId, t.version),
    check("aip_connector_versions_status", oneOf(t.status, STORED_VERSION_STATUSES)),
  ],
);

/**
 * Capability definitions are shared by every version that implements the same capability ID, and
 * immutable: one contract per ID (a conflicting one is refused), so like manifests they are written
 * before the publication lock; only the versions that reference them (aip_version_capabilities,
 * written under it) make them visible.
 */
export const capabilityDefinitions = pgTable(
  "aip_capability_definitions",
  {
    capabilityId: text("capability_id").primaryKey(),
    contractDigest: text("contract_digest").notNull(),
    schemaDigest: text("schema_digest").notNull(),
    /** The complete capability object as admitted. */
    capability: jsonb("capability").notNull(),
    /** Length of the canonical JSON of {capability, contract_digest, schema_digest}: the page byte budget unit. */
    definitionBytes: integer("definition_bytes").notNull(),
    /** lower(id || ' ' || name || ' ' || description), matched literally by catalog search. */
    searchText: text("search_text").notNull(),
    createdAt: createdAt(),
  },
  (t) => [check("aip_capability_definitions_bytes", sql`${t.definitionBytes} > 0`)],
);

export const versionCapabilities = pgTable(
  "aip_version_capabilities",
  {
    versionId: text("version_id")
      .notNull()
      .references(() => connectorVersions.versionId),
    capabilityId: text("capability_id")
      .notNull()
      .references(() => capabilityDefinitions.capabilityId),
  },
  (t) => [
    primaryKey({ name: "aip_version_capabilities_pkey", columns: [t.versionId, t.capabilityId] }),
    index("aip_version_capabilities_capability_idx").on(t.capabilityId, t.versionId),
  ],
);

export const versionProfiles = pgTable(
  "aip_version_profiles",
  {
    versionId: text("version_id")
      .notNull()
      .references(() => connectorVersions.versionId),
    profileId: text("profile_id").notNull(),
  },
  (t) => [
    primaryKey({ name: "aip_version_profiles_pkey", columns: [t.versionId, t.profileId] }),
    index("aip_version_profiles_profile_idx").on(t.profileId, t.versionId),
  ],
);

/** Tenant-owned installations; type and tenant are fixed, the rest moves with config_revision. */
export const connectorInstances = pgTable(
  "aip_connector_instances",
  {
    instanceId: text("instance_id").primaryKey(),
    typeId: text("type_id")
      .notNull()
      .references(() => connectorTypes.typeId),
    versionId: text("version_id")
      .notNull()
      .references(() => connectorVersions.versionId),
    tenantId: text("tenant_id").notNull(),
    configRevision: revision("config_revision").notNull(),
    /** Opaque reference into the deployment's secret provider: never a credential value. */
    secretProviderRef: text("secret_provider_ref").notNull(),
    status: text("status").notNull(),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [
    index("aip_connector_instances_tenant_idx").on(t.tenantId, t.instanceId),
    index("aip_connector_instances_version_idx").on(t.versionId),
    index("aip_connector_instances_type_idx").on(t.typeId),
    check("aip_connector_instances_status", oneOf(t.status, INSTANCE_STATUSES)),
    check("aip_connector_instances_config_revision", sql`${t.configRevision} >= 0`),
  ],
);

/** Admission policies referenced by bindings (`quota_policy_ref`); a null limit keeps no counter. */
export const admissionPolicies = pgTable(
  "aip_admission_policies",
  {
    policyRef: text("policy_ref").primaryKey(),
    revision: revision("revision").notNull(),
    enabled: boolean("enabled").notNull(),
    maxGlobalInFlight: integer("max_global_in_flight"),
    maxTenantInFlight: integer("max_tenant_in_flight"),
    maxConnectorTypeInFlight: integer("max_connector_type_in_flight"),
    maxInstanceInFlight: integer("max_instance_in_flight"),
    maxBindingInFlight: integer("max_binding_in_flight"),
    maxTenantRetryInFlight: integer("max_tenant_retry_in_flight"),
    circuitFailureThreshold: integer("circuit_failure_threshold").notNull(),
    circuitOpenMs: integer("circuit_open_ms").notNull(),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [check("aip_admission_policies_revision", sql`${t.revision} > 0`)],
);

/** The key is (tenant, capability, instance); everything else moves with policy_revision. */
export const capabilityBindings = pgTable(
  "aip_capability_bindings",
  {
    tenantId: text("tenant_id").notNull(),
    capabilityId: text("capability_id")
      .notNull()
      .references(() => capabilityDefinitions.capabilityId),
    instanceId: text("instance_id")
      .notNull()
      .references(() => connectorInstances.instanceId),
    priority: integer("priority").notNull(),
    policyRevision: revision("policy_revision").notNull(),
    /** Opaque credential revision reference: never a credential value. */
    credentialRevisionRef: text("credential_revision_ref"),
    quotaPolicyRef: text("quota_policy_ref").references(() => admissionPolicies.policyRef),
    enabled: boolean("enabled").notNull(),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [
    // The primary key serves the catalog: a tenant's bindings in capability order.
    primaryKey({ name: "aip_capability_bindings_pkey", columns: [t.tenantId, t.capabilityId, t.instanceId] }),
    index("aip_capability_bindings_instance_idx").on(t.instanceId),
    index("aip_capability_bindings_capability_idx").on(t.capabilityId),
    check("aip_capability_bindings_priority", sql`${t.priority} >= 0`),
    check("aip_capability_bindings_policy_revision", sql`${t.policyRevision} >= 0`),
  ],
);

/**
 * The live binding chains, one row per enabled binding whose whole chain holds (instance of the
 * same tenant and enabled, its current version active and supply-chain qualified, an enabled
 * type, the version implementing the capability). Derived state: publication maintains it in
 * the same transaction as the change (aip_publish through aip_refresh_catalog_entries,
 * functions/30_catalog.sql), so it is exactly as consistent as the catalog revision. A tenant's
 * catalog page and total are
 * then one range of the primary key, and a new route's candidate bindings one key lookup.
 * (The profile filter stays at read time, through the version.)
 */
export const catalogEntries = pgTable(
  "aip_catalog_entries",
  {
    tenantId: text("tenant_id").notNull(),
    capabilityId: text("capability_id").notNull(),
    instanceId: text("instance_id").notNull(),
    versionId: text("version_id").notNull(),
    priority: integer("priority").notNull(),
    // What a new route through this binding pins besides its replica, so the resolver reads it
    // with the candidates: the type (the connector_type scope), the binding's counter key and
    // policy, credential and quota references.
    typeId: text("type_id").notNull(),
    bindingKey: text("binding_key").notNull(),
    policyRevision: revision("policy_revision").notNull(),
    credentialRevisionRef: text("credential_revision_ref"),
    quotaPolicyRef: text("quota_policy_ref"),
  },
  (t) => [
    primaryKey({ name: "aip_catalog_entries_pkey", columns: [t.tenantId, t.capabilityId, t.instanceId] }),
    // Publication refreshes the entries of the instances a change touched.
    index("aip_catalog_entries_instance_idx").on(t.instanceId),
  ],
);

/**
 * Each tenant's catalog revision: the catalog revision at which what the tenant can see (its live
 * chains' capabilities and versions, aip_catalog_entries) last changed. Publication sets it in
 * the same statement as the entries it re-derives (aip_refresh_catalog_entries,
 * functions/30_catalog.sql), so it is exactly as consistent as the global revision and never
 * exceeds it. A tenant without a row has never seen anything (revision 0). Tenant pages, ETags,
 * cursors and caches are keyed on it: another tenant's publication leaves them valid.
 */
export const tenantCatalogRevisions = pgTable(
  "aip_tenant_catalog_revisions",
  {
    tenantId: text("tenant_id").primaryKey(),
    revision: revision("revision").notNull(),
    /**
     * The tenant's change feed (aip_catalog_changes) is complete after this revision: changes at or
     * before it may have been trimmed, so a feed from an older revision is 410 (re-list).
     */
    changesFloor: revision("changes_floor").notNull().default(0),
  },
  (t) => [check("aip_tenant_catalog_revisions_nonneg", sql`${t.revision} >= 0`)],
);

/**
 * The change feed of each tenant's catalog: one row per publication that changed what the tenant
 * sees, at the tenant's new catalog revision, naming the capabilities it added, changed (their
 * implementing versions) and removed. Written by publication with the revision
 * (aip_refresh_catalog_entries), append-only; maintenance trims rows older than the history kept
 * (CATALOG_CHANGES_KEEP_REVISIONS, CATALOG_CHANGES_KEEP_SECONDS), which raises the tenant's
 * changes_floor. GET /v1/catalog/changes?since=R folds the tenant's rows after R.
 */
export const catalogChanges = pgTable(
  "aip_catalog_changes",
  {
    tenantId: text("tenant_id").notNull(),
    revision: revision("revision").notNull(),
    added: text("added").array().notNull(),
    changed: text("changed").array().notNull(),
    removed: text("removed").array().notNull(),
    changedAt: ms("changed_at").notNull().default(sql`now()`),
  },
  (t) => [
    // The feed: a tenant's rows after a revision.
    primaryKey({ name: "aip_catalog_changes_pkey", columns: [t.tenantId, t.revision] }),
    // Trimming: the oldest rows first.
    index("aip_catalog_changes_revision_idx").on(t.revision),
  ],
);

/** Shared in-flight counters, one per (scope kind, key); rows are kept at zero, never deleted. */
export const admissionCounters = pgTable(
  "aip_admission_counters",
  {
    scopeKind: text("scope_kind").notNull(),
    scopeKey: text("scope_key").notNull(),
    active: integer("active").notNull().default(0),
  },
  (t) => [
    primaryKey({ name: "aip_admission_counters_pkey", columns: [t.scopeKind, t.scopeKey] }),
    check("aip_admission_counters_active", sql`${t.active} >= 0`),
  ],
);

/**
 * Pre-provisioned host identities. Identity and topology are fixed at provisioning; status,
 * lease and capacity move only with a newer health_revision; active_assignments and the
 * circuit are registry-owned.
 */
export const connectorReplicas = pgTable(
  "aip_connector_replicas",
  {
    replicaId: text("replica_id").primaryKey(),
    instanceId: text("instance_id").notNull(),
    versionId: text("version_id").notNull(),
    endpoint: text("endpoint").notNull(),
    peerPrincipalId: text("peer_principal_id").notNull(),
    peerPrincipalKind: text("peer_principal_kind").notNull(),
    peerDid: text("peer_did").notNull(),
    trustDomain: text("trust_domain").notNull(),
    transportProfile: text("transport_profile").notNull(),
    region: text("region").notNull(),
    zone: text("zone").notNull(),
    capacityClass: text("capacity_class").notNull(),
    status: text("status").notNull().default("offline"),
    leaseExpiresAt: ms("lease_expires_at").notNull().default(sql`'-infinity'`),
    capacity: integer("capacity").notNull(),
    activeAssignments: integer("active_assignments").notNull().default(0),
    healthRevision: revision("health_revision").notNull().default(0),
    consecutiveFailures: integer("consecutive_failures").notNull().default(0),
    circuitOpenUntil: ms("circuit_open_until").notNull().default(sql`'-infinity'`),
    /** The last lifecycle request (normalized, compared as jsonb) and its answer (json: replayed byte for byte). */
    lastRequestId: text("last_request_id"),
    lastRequest: jsonb("last_request"),
    lastResponse: json("last_response"),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [
    foreignKey({ name: "aip_connector_replicas_instance_fk", columns: [t.instanceId], foreignColumns: [connectorInstances.instanceId] }),
    foreignKey({ name: "aip_connector_replicas_version_fk", columns: [t.versionId], foreignColumns: [connectorVersions.versionId] }),
    // Routing reaches replicas through (instance, rollout version); status, lease and load are
    // filtered on the few rows that index returns, keeping hot columns out of it.
    index("aip_connector_replicas_routing_idx").on(t.instanceId, t.versionId),
    index("aip_connector_replicas_version_idx").on(t.versionId),
    // The registry reader finds a connector host's own replicas (never updated: HOT still applies).
    index("aip_connector_replicas_peer_idx").on(t.peerPrincipalId),
    // Lease maintenance finds expired live replicas without scanning the fleet.
    index("aip_connector_replicas_lease_idx").on(t.leaseExpiresAt, t.replicaId).where(sql`status <> 'offline'`),
    check("aip_connector_replicas_status", oneOf(t.status, REPLICA_STATUSES)),
    check("aip_connector_replicas_capacity", sql`${t.capacity} > 0`),
    check("aip_connector_replicas_active", sql`${t.activeAssignments} >= 0 AND ${t.activeAssignments} <= ${t.capacity}`),
    check("aip_connector_replicas_failures", sql`${t.consecutiveFailures} >= 0`),
  ],
);

/**
 * Register requests each replica has consumed, kept for a day. A register carries no sequence
 * fence (a restarted host does not know its sequence), so without this a delayed duplicate of an
 * old register would bring an offline replica back; heartbeat, drain and offline are fenced by
 * previous_sequence instead. Registers are rare, so this costs one insert per registration.
 */
export const replicaRegisterRequests = pgTable(
  "aip_replica_register_requests",
  {
    replicaId: text("replica_id").notNull(),
    requestId: text("request_id").notNull(),
    consumedAt: ms("consumed_at").notNull(),
  },
  (t) => [
    primaryKey({ name: "aip_replica_register_requests_pkey", columns: [t.replicaId, t.requestId] }),
    foreignKey({ name: "aip_replica_register_requests_replica_fk", columns: [t.replicaId], foreignColumns: [connectorReplicas.replicaId] }),
    // Expiry walks one replica's oldest claims.
    index("aip_replica_register_requests_age_idx").on(t.replicaId, t.consumedAt),
  ],
);

/**
 * Durable, pinned routes: one row per action, never deleted. Everything up to assigned_at is
 * the immutable RouteAssignment, except what the row would only copy from elsewhere: the
 * replica's endpoint, peer identity, trust domain, transport profile and topology, and the
 * version's manifest digest, are immutable in their own rows and joined when the record is
 * built (aip_assignment_json), so the route, written once per action, stays narrow. reserved /
 * retry / last_settlement / settled_at are bookkeeping.
 */
export const routeAssignments = pgTable(
  "aip_route_assignments",
  {
    actionId: text("action_id").primaryKey(),
    capabilityId: text("capability_id").notNull(),
    tenantId: text("tenant_id").notNull(),
    // Instances and versions are never deleted, so no foreign key guards them: a key check would
    // share-lock the instance's and version's rows for every route (multixacts on the hottest
    // rows of the catalog). The replica's row is locked by the resolve anyway.
    instanceId: text("instance_id").notNull(),
    versionId: text("version_id").notNull(),
    replicaId: text("replica_id")
      .notNull()
      .references(() => connectorReplicas.replicaId),
    catalogRevision: revision("catalog_revision").notNull(),
    bindingPolicyRevision: revision("binding_policy_revision").notNull(),
    credentialRevisionRef: text("credential_revision_ref"),
    quotaPolicyRef: text("quota_policy_ref"),
    replicaHealthRevision: revision("replica_health_revision").notNull(),
    fenceToken: text("fence_token").notNull(),
    // The admission policy pinned at creation, as the policy had it: the record's `admission`
    // ({policy_ref, policy_revision, scopes, retry_scope, circuit_*}) is built from these and the
    // route's own keys (aip_route_admission), so later policy edits only affect new actions and
    // the row carries numbers, not a copy of every scope key.
    admissionPolicyRevision: revision("admission_policy_revision").notNull(),
    admissionMaxGlobalInFlight: integer("admission_max_global_in_flight"),
    admissionMaxTenantInFlight: integer("admission_max_tenant_in_flight"),
    admissionMaxConnectorTypeInFlight: integer("admission_max_connector_type_in_flight"),
    admissionMaxInstanceInFlight: integer("admission_max_instance_in_flight"),
    admissionMaxBindingInFlight: integer("admission_max_binding_in_flight"),
    admissionMaxTenantRetryInFlight: integer("admission_max_tenant_retry_in_flight"),
    admissionCircuitFailureThreshold: integer("admission_circuit_failure_threshold").notNull(),
    admissionCircuitOpenMs: integer("admission_circuit_open_ms").notNull(),
    assignedAt: ms("assigned_at").notNull(),
    reserved: boolean("reserved").notNull(),
    /**
     * The reservation holds the pinned retry scope too (a reacquisition): the scopes held are the
     * admission's base scopes, plus its retry_scope when this is true.
     */
    retry: boolean("retry").notNull().default(false),
    lastSettlement: text("last_settlement"),
    settledAt: ms("settled_at"),
    updatedAt: updatedAt(),
    /**
     * SHA-256 of the route's RouteAssignment as jsonb text (aip_assignment_digest), written with the
     * route: settlement compares a presented copy by it instead of rebuilding the record. NULL on
     * routes written by an earlier release's functions (0.1.0, which may keep serving during an
     * upgrade: they do not know the column), which settlement compares the old way
     * (functions/60_settlement.sql); the record is immutable, so a digest never goes stale.
     */
    assignmentDigest: bytea("assignment_digest"),
  },
  (t) => [
    // No unique index on fence_token: it is `route_` + a UUIDv7 (48 bits of milliseconds, 74
    // random), unique by construction, and the fence check compares the whole record by action.
    // Lease maintenance and the invariant checker look up a replica's reserved routes.
    index("aip_route_assignments_reserved_idx").on(t.replicaId).where(sql`reserved`),
    // Route retention removes released routes oldest settlement first, and the export pages
    // through them in (settled_at, action_id) order, which stays one index range per page even
    // when a lease-expiry batch settled thousands of routes at one instant (functions/82_retention.sql).
    // Partial: a settlement adds one entry, a resolve or reacquisition none (docs/scaling.md has
    // the measured cost).
    index("aip_route_assignments_settled_idx").on(t.settledAt, t.actionId).where(sql`NOT reserved`),
    check("aip_route_assignments_last_settlement", sql`${t.lastSettlement} IS NULL OR ${oneOf(t.lastSettlement, SETTLEMENT_OUTCOMES)}`),
  ],
);

/**
 * Route retention's policy and watermarks, one row (functions/82_retention.sql). The policy is
 * the database's, not a caller's: removal applies it whoever calls, and the table itself refuses
 * to lose a route it does not allow (the guard trigger of migration 0010).
 * - retention_days, require_export: the policy. Runtime roles may only make it stricter (a longer
 *   window, export required; 0 days keeps every route); only the owner may relax it;
 * - removed_before: every route retention removed was settled before it; a new route for an
 *   `act_` + UUIDv7 action minted before it is refused (`route-expired`), as its route may have
 *   been removed and a fresh one could reroute a committed action;
 * - exported_before: an export covered every route settled before it (`aip-registry routes
 *   export`); with require_export, retention removes nothing settled after it. It never passes
 *   read_through_at;
 * - read_through_at, read_through_action: how far export pages have handed out released routes,
 *   contiguously from the start ((settled_at, action_id) keyset order): every released route
 *   settled before read_through_at has left the database in an export page.
 */
export const routeRetention = pgTable(
  "aip_route_retention",
  {
    singleton: boolean("singleton").primaryKey().default(true),
    removedBefore: ms("removed_before"),
    exportedBefore: ms("exported_before"),
    updatedAt: updatedAt(),
    retentionDays: integer("retention_days").notNull().default(ROUTE_RETENTION_DAYS.default),
    requireExport: boolean("require_export").notNull().default(false),
    readThroughAt: ms("read_through_at"),
    readThroughAction: text("read_through_action"),
  },
  (t) => [check("aip_route_retention_singleton", sql`${t.singleton}`), check("aip_route_retention_days", sql`${t.retentionDays} >= 0`)],
);

/**
 * Actions whose removed route their ID cannot vouch for: an ID with no minting time in it, or one
 * whose time is not before its route's settlement (a gateway clock far ahead). A new route for one
 * of them is refused (`route-expired`) as for an `act_` + UUIDv7 minted before removed_before.
 * Written by the removal trigger of migration 0010, whatever removed the route; never removed.
 */
export const removedActions = pgTable("aip_removed_actions", {
  actionId: text("action_id").primaryKey(),
  removedAt: ms("removed_at").notNull().default(sql`now()`),
});
