/**
 * The registry's record kinds, once: the singular name the SQL functions take (aip_admin_get) and
 * the plural path segment of the admin API (`GET /v1/admin/{kind}/{id}`). The admin routes map
 * paths to kinds; the CLI's HTTP transport maps kinds back to paths. The zod enums of both names
 * (src/schemas.ts: RecordKind, AdminRecordKind) are built from this table, and so are the kinds the
 * SQL functions accept (aip_record_kinds(), aip_reader_kinds(): functions/01_constants.sql).
 */
export const RECORD_KINDS = {
  connector_type: "connector-types",
  version: "versions",
  instance: "instances",
  replica: "replicas",
  admission_policy: "admission-policies",
} as const;

type Kind = keyof typeof RECORD_KINDS;

/** The kinds the registry reader serves (aip_registry_read): identity and state, never configuration. */
export const READER_KINDS = ["version", "instance", "replica"] as const satisfies readonly Kind[];
type Path = (typeof RECORD_KINDS)[Kind];

/** The kind an admin path segment names (`admission-policies` -> `admission_policy`). */
export const ADMIN_RECORD_KINDS = Object.fromEntries(Object.entries(RECORD_KINDS).map(([kind, path]) => [path, kind])) as {
  readonly [K in Kind as (typeof RECORD_KINDS)[K]]: K;
};

/** The kinds and paths as zod enum arguments. */
export const KIND_NAMES = Object.keys(RECORD_KINDS) as [Kind, ...Kind[]];
export const PATH_NAMES = Object.values(RECORD_KINDS) as [Path, ...Path[]];
