/**
 * Wire schemas: the single source for request validation, response types and the OpenAPI
 * document. Field names are the specification's (snake_case on the wire and in SQL).
 *
 * The database re-validates everything it relies on; these schemas exist to give callers precise
 * 400s before a round trip and to document the API.
 */
import { z } from "@hono/zod-openapi";
import {
  CATALOG_PAGE,
  CATALOG_PAGE_BYTES,
  CIRCUIT_FAILURE_THRESHOLD,
  CIRCUIT_OPEN_MS,
  clampPage,
  JSON_DEPTH_MAX,
  JSON_INTEGER_MAX,
  LEASE_TTL_MS,
  MANIFEST_CAPABILITIES,
  PUBLICATION_CHANGES,
  type PageBound,
  REPLICA_CAPACITY,
  SQL_INTEGER_MAX,
  TEXT_BYTES,
} from "./limits.js";
import { KIND_NAMES, PATH_NAMES, type READER_KINDS } from "./record-kinds.js";
import {
  AIP_VERSION,
  CHECK_STATUSES,
  DIGEST_FORMAT,
  IMPLEMENTATION_CLAIMS,
  INSTANCE_STATUSES,
  LABEL_FORMAT,
  LIFECYCLE_OPERATIONS,
  REGISTRY_SDK_VERSION,
  REPLICA_STATUSES,
  SETTLEMENT_OUTCOMES,
  STORED_VERSION_STATUSES,
  VERSION_STATUSES,
} from "./vocabulary.js";

// Strings ---------------------------------------------------------------------------------------
// NUL cannot be stored, and an unpaired surrogate would be replaced by U+FFFD on its way to the
// database: two different IDs ("a\ud800", "a\ufffd") must never become the same one.
const noControl = (s: string) => !/[\u0000]|\p{Cs}/u.test(s);
/** Length as the database counts it (octet_length: UTF-8 bytes), not UTF-16 units; workerd has TextEncoder too. */
const utf8Bytes = (s: string) => new TextEncoder().encode(s).length;

/**
 * An integer query parameter, written in decimal digits with an optional minus sign, within
 * `bounds`. Anything else is "must be an integer": `abc`, `1.5`, and also what Number() would read
 * as a number (an empty value as 0, `1e3`, `0x10`, `+5`, ` 5`): a query means what it says or is
 * refused. The OpenAPI document shows an integer with its bounds.
 */
export const QueryInteger = (bounds: { min?: number; max?: number } = {}) => {
  let integer = z.number({ error: "must be an integer" }).int({ error: "must be an integer" });
  if (bounds.min !== undefined) integer = integer.min(bounds.min);
  if (bounds.max !== undefined) integer = integer.max(bounds.max);
  // Only a decimal string becomes a number; anything else reaches z.number() as it is, and is refused.
  return z.preprocess((value) => (typeof value === "string" && /^-?[0-9]{1,16}$/.test(value) ? Number(value) : value), integer);
};

/**
 * A page size query parameter (src/limits.ts): clamped to [1, max], never refused for its value
 * (the SQL function clamps it again). Absent stays absent: the function's default applies, and
 * the catalog's cache keys and ETags name exactly what was asked.
 */
export const PageSize = (page: PageBound, description: string) =>
  QueryInteger()
    .transform((value) => clampPage(value, page))
    .optional()
    .openapi({ description: `${description}, clamped to [1, ${page.max}]; default ${page.default}.` });

/** A non-empty (after trim) identifier of at most `max` bytes (src/limits.ts, TEXT_BYTES), without NUL. */
export const Id = (max: number = TEXT_BYTES.id) =>
  z
    .string()
    .min(1)
    .refine((s) => s.trim() !== "", "must be non-empty")
    .refine(noControl, "must not contain NUL or an unpaired surrogate")
    .refine((s) => utf8Bytes(s) <= max, `must be at most ${max} bytes`);

/**
 * Why a replica endpoint is refused, or null when it is accepted: an absolute http(s) URL that the
 * WHATWG URL parser accepts with a host (as the reference's url crate does: Docker and Compose
 * service names with `_` are fine), without credentials, query or fragment. Whitespace, control
 * characters and backslashes are refused too: the parser would silently drop or rewrite them, and
 * a route pins the endpoint string as given. The database applies the same structural rule
 * (functions/26_publish_replicas.sql, aip_check_endpoint).
 */
export function replicaEndpointProblem(value: string): string | null {
  const authority = /^https?:\/\/([^/]*)/i.exec(value)?.[1];
  if (!authority) return "must be an absolute http or https URL with a host";
  if (/[\s\u0000-\u001f\u007f\\]/.test(value)) return "must not contain whitespace, control characters or backslashes";
  if (/[?#]/.test(value)) return "must not have a query or fragment";
  if (authority.includes("@")) return "must not carry credentials";
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return "must be a URL the WHATWG URL parser accepts";
  }
  if ((url.protocol !== "http:" && url.protocol !== "https:") || url.hostname === "") return "must be an absolute http or https URL with a host";
  return null;
}

const Label = z.string().regex(new RegExp(LABEL_FORMAT.pattern), LABEL_FORMAT.message);
export const Digest = z.string().regex(new RegExp(DIGEST_FORMAT.pattern), DIGEST_FORMAT.message);
const Timestamp = z.string().openapi({ format: "date-time", example: "2026-12-01T10:15:30.123Z" });
const Count = z.number().int().nonnegative();
const Revision = z.number().int().min(0).max(JSON_INTEGER_MAX);

// Nesting ---------------------------------------------------------------------------------------
// The registry refuses JSON nested deeper than JSON_DEPTH_MAX (src/limits.ts; aip_canonical_json).

/** True when no array or object in `value` is nested more than `max` levels deep (`value` is level 1). */
function nestsAtMost(value: unknown, max: number): boolean {
  // Iterative: the point is to refuse input too deep for recursive code (JSON.stringify included).
  const stack: [unknown, number][] = [[value, 1]];
  while (stack.length > 0) {
    const [node, depth] = stack.pop()!;
    if (node === null || typeof node !== "object") continue;
    if (depth > max) return false;
    for (const child of Array.isArray(node) ? node : Object.values(node)) stack.push([child, depth + 1]);
  }
  return true;
}

const NESTING_MESSAGE = `must not nest objects and arrays more than ${JSON_DEPTH_MAX} levels deep`;

export const boundedNesting = <T extends z.ZodTypeAny>(schema: T) => schema.refine((value) => nestsAtMost(value, JSON_DEPTH_MAX), NESTING_MESSAGE);

/**
 * `shape`'s checks, with the nesting bound, on a value that is then passed on exactly as received
 * (and documented as `shape`). zod's parsed copy of an object is rebuilt by assignment, which
 * turns a `__proto__` member into a prototype and drops it; the nesting bound is checked on the
 * value itself, `__proto__` member included (a deep one would overflow JSON.stringify). Issues
 * come in the order zod gives them for `boundedNesting(shape)`: the shape's first, and the
 * nesting bound only when the shape holds.
 */
function asReceived<T extends z.ZodObject>(shape: T) {
  // The document shows `shape` itself (zod's JSON Schema of it, which is JSON Schema 2020-12 as OpenAPI 3.1's).
  const { $schema: _, ...documented } = z.toJSONSchema(shape, { io: "input" }) as Record<string, unknown>;
  return z
    .unknown()
    .transform((value, ctx) => {
      const checked = shape.safeParse(value);
      if (!checked.success) {
        for (const issue of checked.error.issues) ctx.addIssue({ ...issue });
        return z.NEVER;
      }
      if (!nestsAtMost(value, JSON_DEPTH_MAX)) {
        ctx.addIssue({ code: "custom", message: NESTING_MESSAGE });
        return z.NEVER;
      }
      return value as z.output<T>;
    })
    .openapi(documented as object);
}

// Problems --------------------------------------------------------------------------------------
export const Problem = z
  .object({
    type: z.string(),
    title: z.string(),
    status: z.number().int(),
    detail: z.string(),
    code: z.string().openapi({ example: "capacity-exceeded" }),
    request_id: z.string().optional(),
    errors: z.array(z.object({ field: z.string(), message: z.string() })).optional(),
    scope: z.string().optional(),
    retry_after_ms: z.number().int().optional(),
    instance_id: z.string().optional(),
    tenant_id: z.string().optional(),
    capability_id: z.string().optional(),
    field: z.string().optional().openapi({ description: "`admission` and `conflict`: the refused field, e.g. `attestation.owner` or `status`." }),
  })
  .passthrough()
  .openapi("Problem");

// Topology and routes ---------------------------------------------------------------------------
export const Topology = z
  .strictObject({ region: Label, zone: Label, capacity_class: Label })
  .openapi("Topology", { example: { region: "eu-west", zone: "eu-west-1a", capacity_class: "standard" } });

export const TopologyPreference = z
  .object({
    region: Label.optional(),
    zone: Label.optional(),
    capacity_class: Label.optional().openapi({ description: "A filter: only replicas of this class are eligible." }),
    allow_cross_region: z.boolean().optional().openapi({ description: "Default true; false restricts new routes to `region`." }),
  })
  .strict()
  .openapi("TopologyPreference");

export const AdmissionScope = z
  .object({
    kind: z.enum(["global", "tenant", "connector_type", "instance", "binding", "tenant_retry"]),
    key: z.string(),
    limit: z.number().int(),
  })
  .openapi("AdmissionScope");

export const AdmissionSnapshot = z
  .object({
    policy_ref: z.string().nullable(),
    policy_revision: z.number().int(),
    scopes: z.array(AdmissionScope),
    // A union, not .nullable(): zod-openapi renders that as allOf [$ref, {type: [object, null]}],
    // which no null satisfies (the $ref is an object).
    retry_scope: z.union([AdmissionScope, z.null()]),
    circuit_failure_threshold: z.number().int(),
    circuit_open_ms: z.number().int(),
  })
  .openapi("AdmissionSnapshot");

const ROUTE_EXAMPLE = {
  action_id: "act_0190f3a2c1d04b7e9f1a2b3c4d5e6f70",
  capability_id: "cap:crm.contacts.search",
  tenant_id: "tenant-a",
  instance_id: "cinst_tenant_a_crm",
  version_id: "cver_crm_1_5_0",
  manifest_digest: "sha256:5d1f0ac0e1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c",
  replica_id: "crepl_tenant_a_crm_euw1a",
  endpoint: "https://crm-euw1a.tenant-a.hosts.example/aip/v1/messages",
  peer_principal_id: "service:crm-euw1a.tenant-a",
  peer_principal_kind: "service",
  peer_did: "did:web:crm-euw1a.tenant-a.hosts.example",
  trust_domain: "hosts.example",
  transport_profile: "aip.native.http.v1",
  topology: { region: "eu-west", zone: "eu-west-1a", capacity_class: "standard" },
  catalog_revision: 7,
  binding_policy_revision: 1,
  credential_revision_ref: "credrev:tenant-a/crm/1",
  quota_policy_ref: "quota:standard",
  replica_health_revision: 12,
  fence_token: "route_0190f3a2c1d07c3e8b1f2a3b4c5d6e7f",
  admission: {
    policy_ref: "quota:standard",
    policy_revision: 1,
    scopes: [
      { kind: "tenant", key: "tenant-a", limit: 1000 },
      { kind: "instance", key: "cinst_tenant_a_crm", limit: 500 },
      { kind: "binding", key: "tenant-a|cap:crm.contacts.search|cinst_tenant_a_crm", limit: 250 },
    ],
    retry_scope: null,
    circuit_failure_threshold: 5,
    circuit_open_ms: 30000,
  },
  assigned_at: "2026-12-01T10:15:30.123Z",
};

export const RouteAssignment = z
  .object({
    action_id: z.string(),
    capability_id: z.string(),
    tenant_id: z.string(),
    instance_id: z.string(),
    version_id: z.string(),
    manifest_digest: z.string(),
    replica_id: z.string(),
    endpoint: z.string(),
    peer_principal_id: z.string(),
    peer_principal_kind: z.string(),
    peer_did: z.string(),
    trust_domain: z.string(),
    transport_profile: z.string(),
    topology: Topology,
    catalog_revision: z.number().int(),
    binding_policy_revision: z.number().int(),
    credential_revision_ref: z.string().nullable(),
    quota_policy_ref: z.string().nullable(),
    replica_health_revision: z.number().int(),
    fence_token: z.string().openapi({ description: "`route_` + UUIDv7: unique to this route; settlement must present it with the rest of the record." }),
    admission: AdmissionSnapshot.openapi({
      description: "The admission policy pinned at creation: retries reserve these scopes (plus `retry_scope`) under these limits.",
    }),
    assigned_at: Timestamp,
  })
  .openapi("RouteAssignment", {
    description: "An action's durable, pinned route: never changes once created, and is kept after settlement as evidence.",
    example: ROUTE_EXAMPLE,
  });
export type RouteAssignment = z.infer<typeof RouteAssignment>;

export const ResolveRequest = z
  .object({ capability_id: Id(), topology: TopologyPreference.optional() })
  .strict()
  .openapi("ResolveRequest", { example: { capability_id: "cap:crm.contacts.search", topology: { region: "eu-west" } } });

export const SettlementOutcome = z.enum(SETTLEMENT_OUTCOMES);
export type SettlementOutcome = z.infer<typeof SettlementOutcome>;

export const SettlementRequest = z
  .object({
    // Kept exactly as sent (unknown and `__proto__` members included): the registry compares it,
    // whole, with the pinned route, and any difference is fence-lost.
    assignment: asReceived(z.looseObject({ action_id: z.string(), fence_token: z.string() })).openapi({
      description: "The RouteAssignment exactly as returned by PUT or GET.",
    }),
    outcome: SettlementOutcome,
  })
  .strict()
  .openapi("SettlementRequest", { example: { assignment: ROUTE_EXAMPLE, outcome: "completed" } });

export const SettlementResult = z
  .object({ action_id: z.string(), released: z.boolean(), last_settlement: SettlementOutcome.nullable() })
  .openapi("SettlementResult", { example: { action_id: ROUTE_EXAMPLE.action_id, released: true, last_settlement: "completed" } });
export type SettlementResult = z.infer<typeof SettlementResult>;

/** How a resolve found its route: new, still reserved, or re-reserved after settlement (`AIP-Route-Outcome`). */
export const ResolveOutcome = z.enum(["created", "existing", "reacquired"]);
export type ResolveOutcome = z.infer<typeof ResolveOutcome>;

/** aip_resolve_route's answer; on the wire the assignment is the body and the outcome a header and the status. */
export const ResolveResult = z.object({ outcome: ResolveOutcome, assignment: RouteAssignment });
export type ResolveResult = z.infer<typeof ResolveResult>;

/** aip_get_route's answer; on the wire the assignment is the body, `reserved` and `last_settlement` headers. */
export const RouteState = z.object({
  assignment: RouteAssignment,
  reserved: z.boolean(),
  last_settlement: SettlementOutcome.nullable(),
  settled_at: Timestamp.nullable(),
});
export type RouteState = z.infer<typeof RouteState>;

// Route retention and export ----------------------------------------------------------------------
/** A time in a query or body: RFC 3339 with a UTC offset (`2026-11-01T00:00:00Z`). */
export const TimeInput = z.iso.datetime({ offset: true, error: "must be an RFC 3339 time with an offset, e.g. 2026-11-01T00:00:00Z" });

/** The database's route retention policy and watermarks (aip_route_retention_policy, functions/82_retention.sql). */
export const RouteRetentionPolicy = z
  .object({
    retention_days: Count.openapi({
      description:
        "The evidence window the database applies, whoever asks for a batch: a released route is removed this many days after its last settlement (0: every route is kept). Servers can only lengthen it; the owner alone shortens it.",
    }),
    require_export: z.boolean().openapi({ description: "Only routes an export covered (`exported_before`) are removed. Servers can only turn it on." }),
    removed_before: Timestamp.nullable().openapi({
      description:
        "Every route retention ever removed was settled before this time; a new route for an `act_` + UUIDv7 action minted before it (plus an hour) is refused `route-expired`. Null: nothing removed yet.",
    }),
    exported_before: Timestamp.nullable().openapi({ description: "An export covered every route settled before this time (null: none recorded)." }),
    export_read_before: Timestamp.nullable().openapi({
      description: "Export pages have handed out every released route settled before this time; `exported_before` never passes it.",
    }),
  })
  .openapi("RouteRetentionPolicy");
export type RouteRetentionPolicy = z.infer<typeof RouteRetentionPolicy>;

export const RouteRetentionResult = RouteRetentionPolicy.extend({
  removed: Count.openapi({ description: "Released routes removed; `limit` of them means more are due." }),
  next_due: Timestamp.nullable().openapi({
    description:
      "When the oldest released route left reaches the end of its window (with require_export: of the exported ones); null when there is none, or every route is kept.",
  }),
}).openapi("RouteRetentionResult", {
  example: {
    removed: 500,
    retention_days: 30,
    require_export: false,
    removed_before: "2026-11-01T09:12:44.318Z",
    exported_before: null,
    export_read_before: null,
    next_due: "2026-11-01T09:12:44.391Z",
  },
});
export type RouteRetentionResult = z.infer<typeof RouteRetentionResult>;

/** One exported route: what GET /v1/routes/{action_id} describes (the assignment and its reservation state). */
export const RouteEvidence = RouteState.openapi("RouteEvidence");

export const RoutesPage = z
  .object({
    settled_before: Timestamp.openapi({ description: "The upper bound applied: the one asked for, or an hour before now if that is earlier." }),
    settled_after: Timestamp.nullable(),
    routes: z.array(RouteEvidence).openapi({ description: "Released routes in (settled_at, action_id) order." }),
    next_cursor: z.string().nullable().openapi({ description: "Pass it back as `cursor` for the next page; null on the last." }),
  })
  .openapi("RoutesPage");
export type RoutesPage = z.infer<typeof RoutesPage>;

export const RouteExportRecord = z
  .object({
    settled_after: TimeInput.nullable()
      .optional()
      .openapi({ description: "Where the export started (absent or null: at the beginning); at or before the current `exported_before`." }),
    settled_before: TimeInput.openapi({ description: "The `settled_before` its pages answered." }),
  })
  .strict()
  .openapi("RouteExportRecord", { example: { settled_after: "2026-10-01T00:00:00Z", settled_before: "2026-11-01T00:00:00Z" } });

export const RouteExportWatermarks = z
  .object({ exported_before: Timestamp.nullable(), removed_before: Timestamp.nullable() })
  .openapi("RouteExportWatermarks", { example: { exported_before: "2026-11-01T00:00:00.000Z", removed_before: "2026-10-02T00:00:00.000Z" } });
export type RouteExportWatermarks = z.infer<typeof RouteExportWatermarks>;

// Catalog ---------------------------------------------------------------------------------------
export const CapabilityDefinition = z
  .object({
    capability: z.looseObject({ id: z.string(), name: z.string() }),
    contract_digest: Digest,
    schema_digest: Digest,
  })
  .openapi("CapabilityDefinition");

export const CatalogPage = z
  .object({
    catalog_revision: Revision.openapi({
      description:
        "For a tenant's page, the tenant's catalog revision: the publication at which what this tenant sees last changed (other tenants' " +
        "publications do not move it; it never decreases). Every item of the page was read at it. The internal read of every active " +
        "definition (`unbound=true`) carries the global catalog revision.",
    }),
    capabilities: z.array(CapabilityDefinition).openapi({ description: "In capability ID order." }),
    next_cursor: z.string().nullable().openapi({ description: "Opaque; pass it back as `cursor` with the same filters. Null on the last page." }),
    total: Count.openapi({ description: "Every match of the filters at `catalog_revision`, on all pages." }),
    page_bytes: Count.openapi({ description: "Summed canonical (RFC 8785) size of the page's definitions; at most `max_bytes`." }),
  })
  .openapi("CatalogPage");
export type CatalogPage = z.infer<typeof CatalogPage>;

export const CatalogEntry = z
  .object({
    catalog_revision: Revision.openapi({ description: "The tenant's catalog revision the definition was read at (see CatalogPage)." }),
    definition: CapabilityDefinition,
  })
  .openapi("CatalogEntry");
export type CatalogEntry = z.infer<typeof CatalogEntry>;

/**
 * A catalog read as aip_catalog_page / aip_catalog_get answer it: the revision it was read at and
 * the JSON text of the page (or of the CatalogEntry), which the serving layer forwards or caches
 * without parsing. `not_modified`: the caller's validator is current (a 304), and `text` is null;
 * `text` is null too for a definition the tenant may not see.
 */
export const CatalogText = z.object({ catalog_revision: Revision, text: z.string().nullable(), not_modified: z.boolean() });
export type CatalogText = z.infer<typeof CatalogText>;

/**
 * A catalog page request. Every member is part of the page's cache key and ETag (src/catalog/serve.ts,
 * pageKey: CATALOG_QUERY_MEMBERS, in this order), and every member but the paging ones of the SQL
 * cursor's fingerprint (functions/30_catalog.sql): a member added here reaches both without
 * another edit (test/db/catalog-query-members.test.ts).
 */
export const CatalogQuery = z.object({
  q: z
    .string()
    .refine((s) => utf8Bytes(s) <= TEXT_BYTES.catalog_q, `must be at most ${TEXT_BYTES.catalog_q} bytes`)
    .refine(noControl, "must not contain NUL or an unpaired surrogate")
    .optional()
    .openapi({
      maxLength: TEXT_BYTES.catalog_q,
      description: `Case-insensitive literal substring of "id name description" (\`%\` and \`_\` are ordinary characters); trimmed, blank means no filter. At most ${TEXT_BYTES.catalog_q} bytes of UTF-8.`,
    }),
  capability_id: Id().optional().openapi({ description: "Exact capability ID." }),
  profile: Id().optional().openapi({ description: "Only capabilities whose implementing version declares this profile." }),
  limit: PageSize(CATALOG_PAGE, "Items per page"),
  max_bytes: QueryInteger({ min: 1 })
    .transform((value) => clampPage(value, CATALOG_PAGE_BYTES))
    .optional()
    .openapi({
      description: `Page byte budget (canonical JSON of the definitions); at most ${CATALOG_PAGE_BYTES.max / 1024 / 1024} MiB, the default (larger asks get the maximum). Smaller than the next definition: 400.`,
    }),
  cursor: z
    .string()
    .refine((s) => utf8Bytes(s) <= TEXT_BYTES.catalog_cursor, `must be at most ${TEXT_BYTES.catalog_cursor} bytes`)
    .refine(noControl, "must not contain NUL or an unpaired surrogate")
    .optional()
    .openapi({ maxLength: TEXT_BYTES.catalog_cursor, description: "`next_cursor` of the previous page." }),
});

/** CatalogQuery's members, in the order cache keys name them. */
export const CATALOG_QUERY_MEMBERS = Object.keys(CatalogQuery.shape) as readonly (keyof z.output<typeof CatalogQuery>)[];

/**
 * The members that page through a walk rather than choose what it lists: a cursor keeps its
 * carried total across them. The SQL cursor fingerprint leaves out exactly these.
 */
export const CATALOG_PAGING_MEMBERS = ["limit", "max_bytes", "cursor"] as const satisfies readonly (typeof CATALOG_QUERY_MEMBERS)[number][];

/** GET /v1/catalog/changes: the tenant's catalog changes after a revision (functions/31_catalog_changes.sql). */
export const CatalogChangesQuery = z.object({
  since: QueryInteger({ min: 0, max: JSON_INTEGER_MAX }).openapi({
    description: "A `catalog_revision` the registry answered this tenant (a catalog page's, or the previous changes page's): the changes after it.",
  }),
  cursor: CatalogQuery.shape.cursor.openapi({ description: "`next_cursor` of the previous changes page, with the same `since`." }),
  limit: PageSize(CATALOG_PAGE, "Changes per page"),
  max_bytes: CatalogQuery.shape.max_bytes,
});

export const CatalogChange = z
  .object({
    capability_id: z.string(),
    change: z.enum(["added", "changed", "removed"]).openapi({
      description:
        "`added`: visible now and not at `since`; `changed`: visible at both, its implementing versions changed; `removed`: no longer visible (a tombstone, without a definition).",
    }),
    revision: Revision.openapi({ description: "The tenant's catalog revision at which it last changed (after `since`, at most `catalog_revision`)." }),
    // A union, not .nullable(): see AdmissionSnapshot.retry_scope.
    definition: z.union([CapabilityDefinition, z.null()]).openapi({ description: "The definition as the catalog serves it; null when removed." }),
  })
  .openapi("CatalogChange");

export const CatalogChanges = z
  .object({
    catalog_revision: Revision.openapi({
      description:
        "The tenant's catalog revision every page of this walk answers at (the cursor carries it). After the last page (next_cursor null), the caller holds the catalog at it: poll with since set to it.",
    }),
    since: Revision,
    changes: z.array(CatalogChange).openapi({ description: "In capability ID order, at most one per capability." }),
    next_cursor: z.string().nullable().openapi({ description: "Opaque; pass it back as `cursor` with the same `since`. Null on the last page." }),
  })
  .openapi("CatalogChanges");
export type CatalogChanges = z.infer<typeof CatalogChanges>;

// Replica lifecycle -----------------------------------------------------------------------------
export const LifecycleOperation = z.enum(LIFECYCLE_OPERATIONS);
export type LifecycleOperation = z.infer<typeof LifecycleOperation>;

export const LifecycleRequest = z
  .object({
    request_id: Id().openapi({
      description: "Idempotency key: replaying the replica's last request answers the same; reusing it with another payload is a 409.",
    }),
    previous_sequence: z.number().int().min(0).max(JSON_INTEGER_MAX).optional().openapi({
      description: "The sequence of the host's last answer. Required for heartbeat, drain and offline; register needs it only to re-register a live replica.",
    }),
    lease_ttl_ms: z
      .number()
      .int()
      .min(LEASE_TTL_MS.min)
      .max(LEASE_TTL_MS.max)
      .optional()
      .openapi({ description: `Lease length, counted from the database clock; default ${LEASE_TTL_MS.default}. Ignored by offline.` }),
    // Registration evidence: what the host runs, proven at register (and stated by register only).
    artifact_digest: Digest.optional().openapi({
      description: "register: the digest of the artifact the host runs; must be the replica's admitted version's `attestation.artifact_digest`.",
    }),
    manifest_digest: Digest.optional().openapi({ description: "register: the digest of the manifest the host loaded; must be the admitted version's." }),
    config_revision: Revision.optional().openapi({
      description: "register: the `config_revision` of the instance configuration the host loaded; must be the instance's current one.",
    }),
    capability_count: z
      .number()
      .int()
      .min(0)
      .max(MANIFEST_CAPABILITIES.max)
      .optional()
      .openapi({ description: "register: how many capabilities the host serves; must be the admitted manifest's count." }),
  })
  .strict()
  .openapi("LifecycleRequest", {
    description:
      "`register` must state `artifact_digest`, `manifest_digest`, `config_revision` and `capability_count`, which must equal the replica's " +
      "admitted version and its instance (else 422 `admission` naming the `field`; only with ALLOW_REGISTRATION_WITHOUT_EVIDENCE may it " +
      "state none of them); heartbeat, drain and offline state none of them (400).",
    example: { request_id: "msg_0190f3a2c1d04b7e9f1a2b3c4d5e6f70", previous_sequence: 3, lease_ttl_ms: 30000 },
  });

export const LifecycleResponse = z
  .object({
    replica_id: z.string(),
    status: z.enum(REPLICA_STATUSES),
    sequence: z.number().int().openapi({ description: "The replica's health revision after this transition: the next `previous_sequence`." }),
    lease_expires_at: Timestamp.nullable().openapi({ description: "Null for a replica that never held a lease." }),
  })
  .openapi("LifecycleResponse", {
    example: { replica_id: "crepl_tenant_a_crm_euw1a", status: "ready", sequence: 4, lease_expires_at: "2026-12-01T10:16:00.123Z" },
  });

// Publication -----------------------------------------------------------------------------------
const Capability = z
  .looseObject({
    id: Id(),
    name: z.string().refine((s) => utf8Bytes(s) <= TEXT_BYTES.capability_name, `must be at most ${TEXT_BYTES.capability_name} bytes`),
    input_schema: z.record(z.string(), z.unknown()),
    output_schema: z.record(z.string(), z.unknown()).nullable().optional(),
    description: z.string().nullable().optional(),
  })
  .openapi("Capability");

const Manifest = boundedNesting(z.looseObject({ capabilities: z.array(Capability), profiles: z.array(Id()).optional() })).openapi("Manifest");

const CheckStatus = z.enum(CHECK_STATUSES);
const Attestation = boundedNesting(
  z.looseObject({
    artifact_digest: Digest,
    schema_bundle_digest: Digest.openapi({
      description:
        'SHA-256 of the canonical `{"schemas": [{capability_id, input, output}, ...]}` of the manifest\'s capabilities, in manifest order; verified at admission.',
    }),
    sbom_digest: Digest,
    provenance_digest: Digest,
    conformance_report_digest: Digest,
    vulnerability_report_digest: Digest,
    license_report_digest: Digest,
    signature_ref: Id(TEXT_BYTES.attestation_signature_ref),
    signer_identity: Id(TEXT_BYTES.attestation_signer_identity),
    owner: Id(TEXT_BYTES.connector_type_owner).openapi({ description: "Must equal the connector type's owner." }),
    supported_aip_versions: z.array(z.string()).openapi({ description: `Must contain "${AIP_VERSION}".` }),
    sdk_version_requirement: Id().openapi({
      description: `A Cargo-style semver requirement (e.g. \`^1.0\`); it must include this registry's SDK version, ${REGISTRY_SDK_VERSION}.`,
      example: "^1.0",
    }),
    conformance_status: CheckStatus,
    vulnerability_policy_status: CheckStatus,
    license_policy_status: CheckStatus,
    revocation_status: CheckStatus,
  }),
).openapi("Attestation", { description: "Supply-chain evidence: every digest well-formed, every status `passed`." });

const Claim = z.boolean().optional();
/** What the implementation behind one capability supports; an absent member is false. */
const ImplementationSupport = z
  .object(Object.fromEntries(IMPLEMENTATION_CLAIMS.map((claim) => [claim, Claim])) as Record<(typeof IMPLEMENTATION_CLAIMS)[number], typeof Claim>)
  .strict()
  .openapi("ImplementationSupport");

const PositiveLimit = z.number().int().min(1).max(SQL_INTEGER_MAX).nullable().optional();

export const Change = z
  .discriminatedUnion("op", [
    z
      .object({
        op: z.literal("put_connector_type"),
        id: Id(),
        name: Id(TEXT_BYTES.connector_type_name),
        owner: Id(TEXT_BYTES.connector_type_owner),
        enabled: z
          .boolean()
          .optional()
          .openapi({
            description:
              "A new type's initial state (default true). On a re-put, another value than the stored one is a 409 `conflict`: " +
              "enablement moves only through `set_connector_type_enabled`.",
          }),
      })
      .strict(),
    z.object({ op: z.literal("set_connector_type_enabled"), id: Id(), enabled: z.boolean() }).strict(),
    z
      .object({
        op: z.literal("admit_version"),
        id: Id(),
        connector_type_id: Id(),
        version: Id(TEXT_BYTES.version),
        status: z
          .enum(VERSION_STATUSES)
          .optional()
          .openapi({
            description:
              "A new version's initial status (default `admitted`; never `candidate`). On a re-admission, another value than the stored " +
              "one is a 409 `conflict`: status moves only through `set_version_status`.",
          }),
        manifest: Manifest,
        manifest_digest: Digest,
        attestation: Attestation,
        implementation_support: z
          .record(z.string(), ImplementationSupport)
          .optional()
          .openapi({
            description:
              "Per capability ID: every callable capability (any `kind` but `resource`) needs an entry claiming `invocation`, " +
              "and each entry must support what its capability's contract declares (cancellation, streaming, retry, transaction, " +
              "reconciliation, compensation, approval, credentials).",
          }),
      })
      .strict(),
    z.object({ op: z.literal("set_version_status"), id: Id(), status: z.enum(VERSION_STATUSES) }).strict(),
    z
      .object({
        op: z.literal("set_version_qualification"),
        id: Id(),
        supply_chain_qualified: z.boolean().openapi({
          description:
            "false revokes the version's supply-chain qualification (it leaves every catalog and takes no route); true restores it after re-checking the stored evidence.",
        }),
        reason: Id(TEXT_BYTES.qualification_reason).nullable().optional(),
      })
      .strict(),
    z
      .object({
        op: z.literal("put_instance"),
        id: Id(),
        connector_type_id: Id(),
        version_id: Id(),
        tenant_id: Id(),
        config_revision: Revision,
        secret_provider_ref: Id(TEXT_BYTES.secret_provider_ref),
        status: z.enum(INSTANCE_STATUSES).optional(),
      })
      .strict(),
    z
      .object({
        op: z.literal("put_binding"),
        tenant_id: Id(),
        capability_id: Id(),
        instance_id: Id(),
        priority: z.number().int().min(0).max(SQL_INTEGER_MAX).optional(),
        policy_revision: Revision,
        credential_revision_ref: Id(TEXT_BYTES.credential_revision_ref).nullable().optional(),
        quota_policy_ref: Id().nullable().optional(),
        enabled: z.boolean().optional(),
      })
      .strict(),
    z
      .object({
        op: z.literal("put_admission_policy"),
        policy_ref: Id(),
        revision: z.number().int().min(1).max(JSON_INTEGER_MAX),
        enabled: z.boolean().optional(),
        max_global_in_flight: PositiveLimit,
        max_tenant_in_flight: PositiveLimit,
        max_connector_type_in_flight: PositiveLimit,
        max_instance_in_flight: PositiveLimit,
        max_binding_in_flight: PositiveLimit,
        max_tenant_retry_in_flight: PositiveLimit,
        circuit_failure_threshold: z.number().int().min(CIRCUIT_FAILURE_THRESHOLD.min).max(CIRCUIT_FAILURE_THRESHOLD.max).optional(),
        circuit_open_ms: z.number().int().min(CIRCUIT_OPEN_MS.min).max(CIRCUIT_OPEN_MS.max).optional(),
      })
      .strict(),
    z
      .object({
        op: z.literal("put_replica"),
        id: Id(),
        instance_id: Id(),
        version_id: Id(),
        endpoint: z
          .string()
          .refine((s) => utf8Bytes(s) <= TEXT_BYTES.endpoint, `must be at most ${TEXT_BYTES.endpoint} bytes`)
          .superRefine((value, ctx) => {
            const problem = replicaEndpointProblem(value);
            if (problem) ctx.addIssue({ code: "custom", message: problem });
          })
          .openapi({
            maxLength: TEXT_BYTES.endpoint,
            description: "An absolute http(s) URL with a host, without credentials, query or fragment.",
            example: "https://crm-euw1a.hosts.example/aip/v1/messages",
          }),
        peer_principal_id: Id(TEXT_BYTES.peer_principal_id),
        peer_principal_kind: Id(TEXT_BYTES.peer_principal_kind),
        peer_did: Id(TEXT_BYTES.peer_did),
        trust_domain: Id(),
        transport_profile: Id(),
        topology: z.object({ region: Label.optional(), zone: Label.optional(), capacity_class: Label.optional() }).strict().optional(),
        capacity: z.number().int().min(REPLICA_CAPACITY.min).max(REPLICA_CAPACITY.max),
      })
      .strict(),
  ])
  .openapi("Change");
export type Change = z.infer<typeof Change>;

export const PublicationRequest = z
  .object({ changes: z.array(Change).min(PUBLICATION_CHANGES.min).max(PUBLICATION_CHANGES.max) })
  .strict()
  .openapi("PublicationRequest", {
    example: {
      changes: [
        { op: "put_connector_type", id: "ctype_crm", name: "CRM contacts", owner: "org:acme-connectors", enabled: true },
        {
          op: "put_binding",
          tenant_id: "tenant-a",
          capability_id: "cap:crm.contacts.search",
          instance_id: "cinst_tenant_a_crm",
          priority: 10,
          policy_revision: 2,
          credential_revision_ref: "credrev:tenant-a/crm/2",
          quota_policy_ref: "quota:standard",
          enabled: true,
        },
      ],
    },
  });

export const PublicationResult = z
  .object({
    catalog_revision: Revision,
    changed: Count,
    dry_run: z.boolean(),
    results: z.array(z.looseObject({ op: z.string(), outcome: z.enum(["created", "updated", "unchanged"]), id: z.string().optional() })),
  })
  .openapi("PublicationResult", {
    example: {
      catalog_revision: 8,
      changed: 1,
      dry_run: false,
      results: [
        { op: "put_connector_type", outcome: "unchanged", id: "ctype_crm" },
        { op: "put_binding", outcome: "updated", tenant_id: "tenant-a", capability_id: "cap:crm.contacts.search", instance_id: "cinst_tenant_a_crm" },
      ],
    },
  });
export type PublicationResult = z.infer<typeof PublicationResult>;

// Registry reader -------------------------------------------------------------------------------
// Identity and state only: no credential or configuration reference, no manifest. What
// aip_registry_read answers (functions/75_reader.sql), member for member: strict, and
// test/db/record-shapes.test.ts parses every kind as the SQL builds it and checks that no member
// here is one the SQL never returns.
const CapabilityDigests = z.strictObject({ id: z.string(), contract_digest: Digest, schema_digest: Digest });
/** A JSON document stored as published (an attestation, a manifest): open, like the publication that wrote it. */
const StoredDocument = z.record(z.string(), z.unknown());
/** Per capability ID, what its implementation claims (ImplementationSupport as stored: absent claims are false). */
const StoredImplementationSupport = z.record(z.string(), z.record(z.string(), z.boolean()));

export const VersionIdentity = z
  .strictObject({
    id: z.string(),
    connector_type_id: z.string(),
    version: z.string(),
    status: z.enum(STORED_VERSION_STATUSES),
    supply_chain_qualified: z.boolean(),
    artifact_digest: Digest,
    manifest_digest: Digest,
    attestation: StoredDocument,
    implementation_support: StoredImplementationSupport,
    capabilities: z.array(CapabilityDigests).openapi({ description: "In capability ID order; the definitions are the catalog's." }),
    profiles: z.array(z.string()),
    admitted_at: Timestamp,
    updated_at: Timestamp,
  })
  .openapi("VersionIdentity");
export type VersionIdentity = z.infer<typeof VersionIdentity>;

export const InstanceIdentity = z
  .strictObject({
    id: z.string(),
    connector_type_id: z.string(),
    version_id: z.string().openapi({ description: "The instance's current rollout version." }),
    tenant_id: z.string(),
    config_revision: z.number().int(),
    status: z.enum(INSTANCE_STATUSES),
    updated_at: Timestamp,
  })
  .openapi("InstanceIdentity", { description: "An instance without its secret_provider_ref." });
export type InstanceIdentity = z.infer<typeof InstanceIdentity>;

export const ReplicaIdentity = z
  .strictObject({
    id: z.string(),
    instance_id: z.string(),
    version_id: z.string(),
    endpoint: z.string(),
    peer_principal_id: z.string(),
    peer_principal_kind: z.string(),
    peer_did: z.string(),
    trust_domain: z.string(),
    transport_profile: z.string(),
    topology: Topology,
    status: z.enum(REPLICA_STATUSES),
    lease_expires_at: Timestamp.nullable().openapi({ description: "A replica is live while this is in the future and it is not offline." }),
    capacity: z.number().int(),
    active_assignments: z.number().int(),
    health_revision: z.number().int().openapi({ description: "The sequence its host fences on." }),
    updated_at: Timestamp,
  })
  .openapi("ReplicaIdentity");
export type ReplicaIdentity = z.infer<typeof ReplicaIdentity>;

/** The registry reader's record of each kind it serves (src/record-kinds.ts, READER_KINDS). */
export const READER_RECORDS = {
  version: VersionIdentity,
  instance: InstanceIdentity,
  replica: ReplicaIdentity,
} as const satisfies Record<(typeof READER_KINDS)[number], z.ZodType>;
export type ReaderRecord<K extends keyof typeof READER_RECORDS = keyof typeof READER_RECORDS> = z.infer<(typeof READER_RECORDS)[K]>;

// Fleet -----------------------------------------------------------------------------------------
export const FleetStatus = z
  .object({
    catalog_revision: Revision,
    connector_types: Count,
    active_versions: Count,
    enabled_instances: Count,
    replicas: Count,
    ready_replicas: Count.openapi({ description: "Ready with a live lease." }),
    draining_replicas: Count.openapi({ description: "Draining with a live lease." }),
    offline_replicas: Count,
    expired_leases: Count.openapi({
      description:
        "Replicas not yet offline whose lease ended: lease maintenance's backlog. (The reference counts every replica whose lease ended, offline ones included: that is `expired_leases + offline_replicas`.)",
    }),
    open_circuits: Count,
    ready_capacity: Count.openapi({ description: "Summed capacity of the ready replicas with a live lease." }),
    active_assignments: Count.openapi({ description: "Reserved routes, summed over all replicas." }),
    observed_at: Timestamp.openapi({ description: "The database clock when the aggregate was read." }),
  })
  .openapi("FleetStatusSummary", {
    example: {
      catalog_revision: 8,
      connector_types: 3,
      active_versions: 4,
      enabled_instances: 4,
      replicas: 9,
      ready_replicas: 6,
      draining_replicas: 1,
      offline_replicas: 1,
      expired_leases: 1,
      open_circuits: 0,
      ready_capacity: 84,
      active_assignments: 23,
      observed_at: "2026-12-01T10:15:30.123Z",
    },
  });
export type FleetStatus = z.infer<typeof FleetStatus>;

export const FleetRegion = z
  .object({
    region: z.string(),
    replicas: Count,
    ready: Count.openapi({ description: "Ready with a live lease." }),
    draining: Count.openapi({ description: "Draining with a live lease." }),
    offline: Count,
    expired: Count.openapi({ description: "Not yet offline but the lease ended." }),
    open_circuits: Count,
    ready_capacity: Count,
    active_assignments: Count,
  })
  .openapi("FleetRegion");

export const FleetRegions = z
  .object({ regions: z.array(FleetRegion).openapi({ description: "In region label order; at most `limit` regions." }), observed_at: Timestamp })
  .openapi("FleetRegions", {
    example: {
      regions: [
        { region: "eu-west", replicas: 5, ready: 4, draining: 1, offline: 0, expired: 0, open_circuits: 0, ready_capacity: 56, active_assignments: 20 },
        { region: "us-east", replicas: 4, ready: 2, draining: 0, offline: 1, expired: 1, open_circuits: 0, ready_capacity: 28, active_assignments: 3 },
      ],
      observed_at: "2026-12-01T10:15:30.123Z",
    },
  });
export type FleetRegions = z.infer<typeof FleetRegions>;

export type FleetRegion = z.infer<typeof FleetRegion>;

export const LeaseExpiryResult = z
  .object({
    expired: Count.openapi({ description: "Replicas marked offline; fewer than `limit` means the backlog is drained." }),
    released: Count.openapi({ description: "Their reserved routes, settled as lease_expired." }),
    next_deadline: Timestamp.nullable().openapi({
      description: "The earliest lease end among replicas not yet offline after this batch (in the past while a backlog remains); null when no lease is live.",
    }),
  })
  .openapi("LeaseExpiryResult");
export type LeaseExpiryResult = z.infer<typeof LeaseExpiryResult>;

export const InvariantReport = z
  .object({
    checked_at: Timestamp,
    healthy: z.boolean(),
    violations: z.array(z.object({ kind: z.string(), detail: z.record(z.string(), z.unknown()) })),
  })
  .openapi("InvariantReport");
export type InvariantReport = z.infer<typeof InvariantReport>;

// Administrative reads ----------------------------------------------------------------------------
/** Record kinds as the SQL functions name them, and as admin paths do (src/record-kinds.ts). */
export const RecordKind = z.enum(KIND_NAMES);
export type RecordKind = z.infer<typeof RecordKind>;
export const AdminRecordKind = z.enum(PATH_NAMES);
export type AdminRecordKind = z.infer<typeof AdminRecordKind>;

// The stored records as aip_admin_get and aip_admin_bindings answer them (functions/10_records.sql),
// configuration references included, member for member: strict, and checked against the SQL's
// output like the reader's (test/db/record-shapes.test.ts).
const ConnectorTypeRecord = z
  .strictObject({ id: z.string(), name: z.string(), owner: z.string(), enabled: z.boolean(), created_at: Timestamp, updated_at: Timestamp })
  .openapi("ConnectorTypeRecord");

const VersionRecord = z
  .strictObject({
    id: z.string(),
    connector_type_id: z.string(),
    version: z.string(),
    status: z.enum(STORED_VERSION_STATUSES),
    manifest_digest: Digest,
    manifest: StoredDocument.openapi({ description: "The admitted manifest, as stored." }),
    attestation: StoredDocument,
    implementation_support: StoredImplementationSupport,
    supply_chain_qualified: z.boolean(),
    qualification_reason: z.string().nullable().openapi({ description: "Why the qualification was last revoked or restored (set_version_qualification)." }),
    capabilities: z.array(CapabilityDigests).openapi({ description: "In capability ID order." }),
    profiles: z.array(z.string()),
    admitted_at: Timestamp,
    updated_at: Timestamp,
  })
  .openapi("VersionRecord");

const InstanceRecord = z
  .strictObject({
    id: z.string(),
    connector_type_id: z.string(),
    version_id: z.string(),
    tenant_id: z.string(),
    config_revision: z.number().int(),
    secret_provider_ref: z.string(),
    status: z.enum(INSTANCE_STATUSES),
    created_at: Timestamp,
    updated_at: Timestamp,
  })
  .openapi("InstanceRecord");

const ReplicaRecord = z
  .strictObject({
    id: z.string(),
    instance_id: z.string(),
    version_id: z.string(),
    endpoint: z.string(),
    peer_principal_id: z.string(),
    peer_principal_kind: z.string(),
    peer_did: z.string(),
    trust_domain: z.string(),
    transport_profile: z.string(),
    topology: Topology,
    capacity: z.number().int(),
    status: z.enum(REPLICA_STATUSES),
    lease_expires_at: Timestamp.nullable().openapi({ description: "Null for a replica that never held a lease." }),
    active_assignments: z.number().int(),
    health_revision: z.number().int(),
    circuit: z
      .strictObject({ consecutive_failures: z.number().int(), open_until: Timestamp.nullable() })
      .openapi({ description: "The replica's circuit: `open_until` null or past when it is closed." }),
    created_at: Timestamp,
    updated_at: Timestamp,
  })
  .openapi("ReplicaRecord");

const InFlightLimit = z.number().int().nullable().openapi({ description: "Null: no limit (no counter kept)." });

const AdmissionPolicyRecord = z
  .strictObject({
    policy_ref: z.string(),
    revision: z.number().int(),
    enabled: z.boolean(),
    max_global_in_flight: InFlightLimit,
    max_tenant_in_flight: InFlightLimit,
    max_connector_type_in_flight: InFlightLimit,
    max_instance_in_flight: InFlightLimit,
    max_binding_in_flight: InFlightLimit,
    max_tenant_retry_in_flight: InFlightLimit,
    circuit_failure_threshold: z.number().int(),
    circuit_open_ms: z.number().int(),
    created_at: Timestamp,
    updated_at: Timestamp,
  })
  .openapi("AdmissionPolicyRecord");

const BindingRecord = z
  .strictObject({
    tenant_id: z.string(),
    capability_id: z.string(),
    instance_id: z.string(),
    priority: z.number().int(),
    policy_revision: z.number().int(),
    credential_revision_ref: z.string().nullable(),
    quota_policy_ref: z.string().nullable(),
    enabled: z.boolean(),
    created_at: Timestamp,
    updated_at: Timestamp,
  })
  .openapi("BindingRecord");

/** The stored record of each kind aip_admin_get reads (src/record-kinds.ts, RECORD_KINDS). */
export const ADMIN_RECORDS = {
  connector_type: ConnectorTypeRecord,
  version: VersionRecord,
  instance: InstanceRecord,
  replica: ReplicaRecord,
  admission_policy: AdmissionPolicyRecord,
} as const satisfies Record<RecordKind, z.ZodType>;
export type AdminRecord<K extends RecordKind = RecordKind> = z.infer<(typeof ADMIN_RECORDS)[K]>;

/** GET /v1/admin/{kind}/{id}: the record of the path's kind. */
export const AdminRecord = z
  .union([ConnectorTypeRecord, VersionRecord, InstanceRecord, ReplicaRecord, AdmissionPolicyRecord])
  .openapi("AdminRecord", { description: "The stored record of the path's kind." });

export const BindingsPage = z
  .strictObject({
    tenant_id: z.string(),
    bindings: z.array(BindingRecord),
    next_cursor: z.string().nullable(),
  })
  .openapi("BindingsPage");
export type BindingsPage = z.infer<typeof BindingsPage>;

// Operations ------------------------------------------------------------------------------------
const CatalogReplicaStatus = z
  .object({
    state: z.enum(["unknown", "ok", "lagging", "behind_floor", "unreachable"]).openapi({
      description:
        "What the last catalog read or readiness probe found on the catalog replica (CATALOG_DATABASE_URL): `ok` its answers are served; `lagging` its replay lag is above `max_lag_ms` (or unknown); `behind_floor` it answered a revision older than one this process already served; `unreachable` it could not be reached and is tried again after `retry_in_ms`. In every state but `ok` catalog reads go to the primary: degraded, still ready.",
    }),
    lag_ms: z.number().nullable().openapi({ description: "The replay lag last measured on the replica (null: unknown)." }),
    max_lag_ms: z.number().int().openapi({ description: "CATALOG_REPLICA_MAX_LAG_MS." }),
    retry_in_ms: z.number().optional(),
    error: z.string().optional(),
    fallbacks: z.record(z.string(), z.number().int()).openapi({
      description: "Catalog reads answered by the primary instead, since start, by reason (lagging, behind_floor, behind_request, unreachable, error).",
    }),
  })
  .openapi("CatalogReplicaStatus");

const FunctionSetInfo = z
  .object({
    name: z.string().openapi({ description: "The set's schema (`aip_fn_` + its checksum's first 12 hex digits; `public` for 0.1.0's)." }),
    release: z.string().openapi({ description: "The release whose build installed it." }),
    installed_at: z.string().nullable(),
    last_seen: z.string().nullable().openapi({ description: "When a server of that build last reported (null: never)." }),
    this: z.boolean().openapi({ description: "This server's own set." }),
  })
  .openapi("FunctionSetInfo");

const SessionInfo = z
  .object({
    role: z.string().openapi({ description: "The login role this server's data pool uses." }),
    superuser: z.boolean().nullable(),
    owner: z.boolean().nullable().openapi({ description: "Whether the role owns the registry's tables (or is a member of their owner)." }),
    runtime_role: z.boolean().nullable().openapi({ description: "Whether it is a member of this database's data or control role." }),
    other_registry_roles: z
      .array(z.string())
      .openapi({ description: "Group roles of other registry databases on the same server that this login also holds: it could use those registries too." }),
  })
  .openapi("SessionInfo");

export const Readiness = z
  .object({
    status: z.enum(["ready", "not_ready"]),
    reason: z.string().optional(),
    release: z.string().openapi({ description: "This build's release (package version)." }),
    function_set: z.string().openapi({ description: "The schema of this build's SQL functions, the only ones it calls (docs/upgrades.md)." }),
    schema_version: z.number().int().nullable().openapi({ description: "The database's schema version (its newest expand migration)." }),
    required_version: z.number().int().openapi({ description: "The schema version this build needs at least." }),
    functions_checksum: z.string().nullable(),
    catalog_revision: z.number().int().nullable(),
    statement_timeout: z
      .string()
      .nullable()
      .optional()
      .openapi({ description: 'The data role\'s statement_timeout; "0" means statements are unbounded: set it on the login role.' }),
    tables_intact: z.boolean().nullable().optional().openapi({
      description:
        "False when the registry's tables, columns or indexes differ from what the migrations made (changed by hand): the registry still serves, `aip-registry doctor` reports it.",
    }),
    function_sets: z.array(FunctionSetInfo).optional().openapi({
      description:
        "Every function set installed (this build's and those of other builds serving the same database), as information: other sets never make this server not ready.",
    }),
    session: SessionInfo.optional(),
    connect_public: z
      .boolean()
      .optional()
      .openapi({ description: "Whether every role may connect to this database (the migrator revokes CONNECT from PUBLIC)." }),
    role_warning: z.string().optional().openapi({
      description: "Set when the server's database role is a superuser or the tables' owner: it works, but a runtime role (docs/deploy.md) should be used.",
    }),
    catalog_replica: CatalogReplicaStatus.optional(),
  })
  .openapi("Readiness");
export type Readiness = z.infer<typeof Readiness>;

export const SchemaStatus = z.object({
  function_set: z.string(),
  schema_version: z.number().int().nullable(),
  required_version: z.number().int(),
  floor: z.number().int(),
  functions_checksum: z.string().nullable(),
  functions_intact: z.boolean().nullable(),
  tables_intact: z.boolean().nullable().optional(),
  catalog_revision: Revision,
  function_sets: z.array(FunctionSetInfo),
  session: SessionInfo,
  connect_public: z.boolean(),
  statement_timeout: z.string().optional(),
});
export type SchemaStatus = z.infer<typeof SchemaStatus>;
