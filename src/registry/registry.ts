/**
 * Typed client of the registry's SQL functions: one method per function, one statement per call.
 *
 * Two executors mirror the database roles: `data` (catalog reads, routing, settlement, replica
 * lifecycle, the registry reader, fleet) and `control` (publication and administrative reads). A data-plane-only
 * process has no control executor, and its control methods fail with `forbidden`.
 */
import type { z } from "@hono/zod-openapi";
import { CatalogReplica, primaryStatement, type CatalogStatement, type ReplicaStatus } from "./catalog-replica.js";
import type { SqlExecutor } from "../db/executor.js";
import { FUNCTION_SET, RELEASE } from "../db/schema-version.js";
import { REGIONS_PAGE } from "../limits.js";
import type { READER_KINDS } from "../record-kinds.js";
import type * as S from "../schemas.js";
import type {
  AdminRecord,
  BindingsPage,
  CatalogPage,
  CatalogText,
  Change,
  FleetRegions,
  FleetStatus,
  InvariantReport,
  LeaseExpiryResult,
  LifecycleOperation,
  PublicationResult,
  ReaderRecord,
  RecordKind,
  ResolveResult,
  RouteExportWatermarks,
  RouteRetentionPolicy,
  RouteRetentionResult,
  RoutesPage,
  RouteState,
  SchemaStatus,
  SettlementOutcome,
  SettlementResult,
} from "../schemas.js";
import { RegistryError, fromDatabaseError } from "./errors.js";

// What the functions take: the request schemas' validated output (src/schemas.ts).
export type CatalogQuery = z.output<typeof S.CatalogQuery>;
export type CatalogChangesQuery = z.output<typeof S.CatalogChangesQuery>;
export type CatalogChanges = S.CatalogChanges;
export type TopologyPreference = z.output<typeof S.TopologyPreference>;
export type LifecycleRequest = z.output<typeof S.LifecycleRequest>;
export type LifecycleResult = z.infer<typeof S.LifecycleResponse>;
export type { CatalogText, RecordKind, ResolveResult, RouteState };

export interface LifecycleOptions {
  /** Accept a register that states no registration evidence (ALLOW_REGISTRATION_WITHOUT_EVIDENCE, a migration setting). */
  evidenceOptional?: boolean;
}

/**
 * `ifRevision` of a catalog read: a validator's revision, or ANY_REVISION for `If-None-Match: *`
 * (any negative revision: aip_catalog_not_modified).
 */
export const ANY_REVISION = -1;
/** The record kinds the registry reader (aip_registry_read) serves. */
export type ReaderKind = (typeof READER_KINDS)[number];

export interface RegistryExecutors {
  data: SqlExecutor;
  control?: SqlExecutor;
  /**
   * Catalog reads only (a hot standby or Neon read replica); the data executor when unset. Its
   * answers are served only while they are recent enough (src/registry/catalog-replica.ts); otherwise, or
   * when it cannot be reached, the read goes to the data executor in the same request.
   */
  catalog?: SqlExecutor;
  /**
   * The replica's state (floors, lag bound, backoff), shared by every Registry of the process
   * over the same `catalog`; a Registry of its own (default settings) when unset.
   */
  catalogReplica?: CatalogReplica;
  /**
   * The schema of the function set to call: this build's (FUNCTION_SET) unless a test or a
   * benchmark says otherwise. Builds serve one database side by side, each calling only its own
   * set (docs/upgrades.md).
   */
  functionSet?: string;
  /** This process, as its schema status calls report it (a sighting of its set: `migrate --finalize`). */
  server?: ServerIdentity;
}

/** Who is asking for the schema status: recorded as a sighting of this build's set. */
export interface ServerIdentity {
  runtime: "node" | "worker" | "cli";
  instance: string;
}

/** A catalog read's answer; a replica's says how long before now it was known current. */
export type CatalogAnswer = CatalogText & { replay_lag_ms?: number };

const json = (value: unknown) => JSON.stringify(value);

export class Registry {
  private readonly replica: CatalogReplica | undefined;
  /** `<set>.`: every call names the set's schema, so no search_path decides which build answers. */
  private readonly set: string;

  constructor(private readonly executors: RegistryExecutors) {
    this.replica = executors.catalog ? (executors.catalogReplica ?? new CatalogReplica(executors.catalog)) : undefined;
    this.set = `${executors.functionSet ?? FUNCTION_SET}.`;
  }

  /** The function set this registry calls. */
  get functionSet(): string {
    return this.set.slice(0, -1);
  }

  get hasControl(): boolean {
    return this.executors.control !== undefined;
  }

  // Control plane ---------------------------------------------------------------------------------
  publish(changes: Change[] | unknown[], options: { dryRun?: boolean } = {}): Promise<PublicationResult> {
    return this.control("aip_publish($1::jsonb, $2::boolean)", [json(changes), options.dryRun ?? false]);
  }

  adminGet<K extends RecordKind>(kind: K, id: string): Promise<AdminRecord<K> | null> {
    return this.control("aip_admin_get($1::text, $2::text)", [kind, id]);
  }

  adminBindings(tenantId: string, cursor?: string, limit?: number): Promise<BindingsPage> {
    return this.control("aip_admin_bindings($1::text, $2::text, $3::integer)", [tenantId, cursor ?? null, limit ?? null]);
  }

  adminCatalogPage(tenantId: string | null, unbound: boolean, query: CatalogQuery): Promise<CatalogPage> {
    return this.control("aip_admin_catalog_page($1::text, $2::boolean, $3::jsonb)", [tenantId, unbound, json(query)]);
  }

  /** One page of released routes settled in [settledAfter, settledBefore), every tenant's, for an export. */
  routesPage(query: { settledBefore: string; settledAfter?: string | null; cursor?: string | null; limit?: number }): Promise<RoutesPage> {
    return this.control("aip_admin_routes_page($1::timestamptz, $2::timestamptz, $3::text, $4::integer)", [
      query.settledBefore,
      query.settledAfter ?? null,
      query.cursor ?? null,
      query.limit ?? null,
    ]);
  }

  /**
   * The route retention policy set as given, looser or stricter (null: that part as it is). Only
   * the database owner may (aip_set_route_retention_policy is granted to no runtime role): over a
   * runtime role's connection this is `forbidden`. Runs on the control executor (the CLI's SQL
   * backend puts the owner's connection there).
   */
  setRouteRetentionPolicy(retentionDays: number | null, requireExport: boolean | null): Promise<RouteRetentionPolicy> {
    return this.control("aip_set_route_retention_policy($1::integer, $2::boolean)", [retentionDays, requireExport]);
  }

  /** An export covered every route settled in [settledAfter, settledBefore): the export watermark moves there. */
  recordRouteExport(settledAfter: string | null, settledBefore: string): Promise<RouteExportWatermarks> {
    return this.control("aip_record_route_export($1::timestamptz, $2::timestamptz)", [settledAfter, settledBefore]);
  }

  /** Read-only, granted to both roles: runs on the data executor when there is no control one (data-plane deployments). */
  checkInvariants(): Promise<InvariantReport> {
    return this.call(this.executors.control ?? this.executors.data, "aip_check_invariants()", []);
  }

  // Data plane ------------------------------------------------------------------------------------
  /** One catalog page as JSON text; `ifRevision` short-circuits to "not modified" at that revision. */
  catalogPageText(tenantId: string | null, query: CatalogQuery, ifRevision: number | null): Promise<CatalogAnswer> {
    return this.catalogRead(
      tenantId,
      {
        columns: "catalog_revision::text AS revision, page AS text, not_modified",
        from: (after) => `${this.set}aip_catalog_page($1::text, $2::jsonb, $3::bigint${after})`,
      },
      [tenantId, json(query), ifRevision],
    );
  }

  /** One definition as the JSON text of {catalog_revision, definition} (null: not visible to the tenant). */
  catalogGetText(tenantId: string | null, capabilityId: string, ifRevision: number | null): Promise<CatalogAnswer> {
    return this.catalogRead(
      tenantId,
      {
        columns: "catalog_revision::text AS revision, definition AS text, not_modified",
        from: (after) => `${this.set}aip_catalog_get($1::text, $2::text, $3::bigint${after})`,
      },
      [tenantId, capabilityId, ifRevision],
    );
  }

  /**
   * The tenant's catalog changes after `query.since` as JSON text (functions/31_catalog_changes.sql),
   * or not_modified (text null) when there is nothing to build: nothing changed after `since`, or
   * `ifRevision` (the revision of an answer the caller holds for this very request; ANY_REVISION
   * for `*`) is still current.
   */
  catalogChangesText(tenantId: string | null, query: CatalogChangesQuery, ifRevision: number | null = null): Promise<CatalogAnswer> {
    return this.catalogRead(
      tenantId,
      {
        columns:
          "r->>'catalog_revision' AS revision, CASE WHEN r->>'not_modified' IS NULL THEN r::text END AS text, r->>'not_modified' IS NOT NULL AS not_modified",
        from: (after) => `${this.set}aip_catalog_changes($1::text, $2::jsonb, $3::bigint${after}) AS r`,
      },
      [tenantId, json(query), ifRevision],
    );
  }

  /** The tenant's catalog changes after `query.since`; null when nothing changed since. */
  async catalogChanges(tenantId: string | null, query: CatalogChangesQuery): Promise<CatalogChanges | null> {
    const answer = await this.catalogChangesText(tenantId, query);
    return answer.text === null ? null : (JSON.parse(answer.text) as CatalogChanges);
  }

  /**
   * Maintenance: removes up to `limit` of the oldest catalog change rows outside the history kept,
   * raising the affected tenants' oldest answerable `since`.
   */
  trimCatalogChanges(keepRevisions: number, keepSeconds: number, limit: number): Promise<{ trimmed: number; backlog: boolean }> {
    return this.data("aip_trim_catalog_changes($1::bigint, $2::bigint, $3::integer)", [keepRevisions, keepSeconds, limit]);
  }

  /**
   * The committed catalog revisions of these tenants ("" for a read without a tenant: always 0), in
   * one statement: from the replica when it is recent enough for every tenant's floor
   * (src/registry/catalog-replica.ts), else from the primary.
   */
  async catalogRevisions(tenantIds: readonly string[]): Promise<{ revisions: Map<string, number>; replay_lag_ms: number }> {
    type Row = { tenant_id: string; revision: string };
    const statement: CatalogStatement = {
      columns: "n.tenant_id, n.revision::text AS revision",
      // A JSON array, not a driver's array literal: the same text on pg, PGlite and Neon.
      from: () => `${this.set}aip_catalog_revisions_now(ARRAY(SELECT jsonb_array_elements_text($1::jsonb))) AS n`,
    };
    const params = [json(tenantIds)];
    try {
      const { rows, lagMs } = this.replica
        ? await this.replica.readRows<Row>((row) => row.tenant_id || null, statement, params, this.executors.data)
        : { rows: await this.executors.data.query<Row>(primaryStatement(statement), params), lagMs: 0 };
      return { revisions: new Map(rows.map((row) => [row.tenant_id, Number(row.revision)])), replay_lag_ms: lagMs };
    } catch (error) {
      throw fromDatabaseError(error);
    }
  }

  /** The catalog replica's state (null: none configured); `probe` asks it for its lag first. */
  async catalogReplicaStatus(options: { probe?: boolean } = {}): Promise<ReplicaStatus | null> {
    if (!this.replica) return null;
    return options.probe ? this.replica.probe() : this.replica.status();
  }

  resolveRoute(actionId: string, tenantId: string, capabilityId: string, topology: TopologyPreference = {}): Promise<ResolveResult> {
    return this.data("aip_resolve_route($1::text, $2::text, $3::text, $4::jsonb)", [actionId, tenantId, capabilityId, json(topology)]);
  }

  getRoute(actionId: string, tenantId: string): Promise<RouteState | null> {
    return this.data("aip_get_route($1::text, $2::text)", [actionId, tenantId]);
  }

  settleRoute(actionId: string, tenantId: string, assignment: unknown, outcome: SettlementOutcome): Promise<SettlementResult> {
    return this.data("aip_settle_route($1::text, $2::text, $3::jsonb, $4::text)", [actionId, tenantId, json(assignment), outcome]);
  }

  /**
   * A connector host's transition: only a replica provisioned for `peerPrincipalId` (the host's
   * verified principal) is found. A register states and proves its registration evidence, unless
   * `evidenceOptional` (ALLOW_REGISTRATION_WITHOUT_EVIDENCE) lets it state none.
   */
  replicaLifecycle(
    replicaId: string,
    operation: LifecycleOperation,
    request: LifecycleRequest,
    peerPrincipalId: string,
    options: LifecycleOptions = {},
  ): Promise<LifecycleResult> {
    return this.data("aip_host_replica_lifecycle($1::text, $2::text, $3::jsonb, $4::text, $5::boolean)", [
      replicaId,
      operation,
      json(request),
      peerPrincipalId,
      options.evidenceOptional ?? false,
    ]);
  }

  /** An operator's transition of any replica: the control role's authority. */
  operatorReplicaLifecycle(
    replicaId: string,
    operation: LifecycleOperation,
    request: LifecycleRequest,
    options: LifecycleOptions = {},
  ): Promise<LifecycleResult> {
    return this.control("aip_operator_replica_lifecycle($1::text, $2::text, $3::jsonb, $4::boolean)", [
      replicaId,
      operation,
      json(request),
      options.evidenceOptional ?? false,
    ]);
  }

  /**
   * The registry reader: one version, instance or replica's identity and state, or null when it
   * does not exist or is not visible under the caller's verified tenant and peer principal.
   */
  registryRead<K extends ReaderKind>(kind: K, id: string, scope: { tenantId: string | null; peerPrincipalId: string | null }): Promise<ReaderRecord<K> | null> {
    return this.data("aip_registry_read($1::text, $2::text, $3::text, $4::text)", [kind, id, scope.tenantId, scope.peerPrincipalId]);
  }

  /** `next_deadline`: the earliest lease end among replicas not yet offline (past: a backlog remains), null when none is live. */
  expireLeases(limit: number): Promise<LeaseExpiryResult> {
    return this.data("aip_expire_leases($1::integer)", [limit]);
  }

  /**
   * This process's retention configuration stated to the database: the stored policy becomes the
   * stricter of the two (a longer window, export required; 0 days keeps every route), never looser.
   * Nulls only read it.
   */
  routeRetentionPolicy(retentionDays: number | null, requireExport: boolean | null): Promise<RouteRetentionPolicy> {
    return this.data("aip_route_retention_policy($1::integer, $2::boolean)", [retentionDays, requireExport]);
  }

  /**
   * One route-retention batch under the database's policy, made at least as strict as
   * `retentionDays` and `requireExport` first: at most `limit` released routes settled before the
   * policy's window (and, with export required, before the export watermark).
   */
  removeSettledRoutes(retentionDays: number, requireExport: boolean, limit: number): Promise<RouteRetentionResult> {
    return this.data("aip_remove_settled_routes($1::integer, $2::boolean, $3::integer)", [retentionDays, requireExport, limit]);
  }

  fleetStatus(): Promise<FleetStatus> {
    return this.data("aip_fleet_status()", []);
  }

  fleetRegions(limit = REGIONS_PAGE.default): Promise<FleetRegions> {
    return this.data("aip_fleet_regions($1::integer)", [limit]);
  }

  /** This build's set's status; a server's call records that it was seen (src/db/migrate.ts, finalize). */
  schemaStatus(): Promise<SchemaStatus | null> {
    const server = this.executors.server;
    return this.data("aip_schema_status($1::text, $2::text, $3::text)", [server?.runtime ?? null, server?.instance ?? null, RELEASE]);
  }

  // -----------------------------------------------------------------------------------------------
  /**
   * A catalog read for `tenantId`: on the replica when its answer is recent enough
   * (src/registry/catalog-replica.ts), else on the data executor; one statement either way, two when the
   * replica's answer is not used.
   */
  private async catalogRead(tenantId: string | null, statement: CatalogStatement, params: unknown[]): Promise<CatalogAnswer> {
    type Row = { revision: string; text?: string | null; not_modified?: boolean };
    try {
      const { row, lagMs, from } = this.replica
        ? await this.replica.read<Row>(tenantId, statement, params, this.executors.data)
        : { row: (await this.executors.data.query<Row>(primaryStatement(statement), params))[0], lagMs: 0, from: "primary" };
      if (!row) throw new RegistryError("storage", "the catalog read returned no row", {}, true);
      const answer: CatalogAnswer = { catalog_revision: Number(row.revision), text: row.text ?? null, not_modified: row.not_modified ?? false };
      if (from === "replica") answer.replay_lag_ms = lagMs;
      return answer;
    } catch (error) {
      throw fromDatabaseError(error);
    }
  }

  private data<T>(call: string, params: unknown[]): Promise<T> {
    return this.call(this.executors.data, call, params);
  }

  private control<T>(call: string, params: unknown[]): Promise<T> {
    const executor = this.executors.control;
    if (!executor) {
      return Promise.reject(new RegistryError("forbidden", "this process serves the data plane only: no control-plane database credentials are configured"));
    }
    return this.call(executor, call, params);
  }

  /** `SELECT <function call> AS result`: exactly one statement, one round trip. */
  private async call<T>(executor: SqlExecutor, call: string, params: unknown[]): Promise<T> {
    let rows: { result: unknown }[];
    try {
      rows = await executor.query<{ result: unknown }>(`SELECT ${this.set}${call} AS result`, params);
    } catch (error) {
      throw fromDatabaseError(error);
    }
    const result = rows[0]?.result;
    // json results arrive parsed from pg, PGlite and Neon alike; be tolerant of a text payload.
    return (typeof result === "string" ? JSON.parse(result) : (result ?? null)) as T;
  }
}
