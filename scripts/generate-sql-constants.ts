/**
 * Writes functions/01_constants.sql: every number, list and code the SQL functions share with
 * TypeScript, each as a small SQL function generated from the TypeScript module that owns the
 * value (src/limits.ts, src/vocabulary.ts, src/record-kinds.ts, src/registry/errors.ts). A rule
 * is then written once: zod and the SQL readers, the error classifier and aip_fail, read the same
 * value. Run after changing one of those values (`npm run db:constants`, which also refreshes
 * src/db/schema-version.ts); test/unit/sql-constants.test.ts fails when the file is stale.
 *
 * Each function is `LANGUAGE sql STABLE` with a literal body, so the planner inlines it into its
 * caller's plan as a constant (test/db/plans.test.ts checks that none is really called on a hot
 * path). IMMUTABLE would not do that: PostgreSQL folds an IMMUTABLE function with constant
 * arguments by calling it while it plans, which parses and runs its body as a query each time.
 */
import { writeFile } from "node:fs/promises";
import { packageRoot } from "../src/db/sql-files.js";
import * as L from "../src/limits.js";
import { KIND_NAMES, READER_KINDS } from "../src/record-kinds.js";
import { DATABASE_PROBLEMS, PROBLEM_SQLSTATE, REPLICA_BEHIND_SQLSTATE, RETRY_AFTER_MS } from "../src/registry/errors.js";
import * as V from "../src/vocabulary.js";

type Value = number | string | readonly string[];

interface Constant {
  /** The SQL function's name, without the aip_ prefix. */
  name: string;
  value: Value;
  /** Where the value lives in TypeScript. */
  source: string;
}

interface Section {
  title: string;
  module: string;
  constants: Constant[];
}

const c = (name: string, value: Value, source: string): Constant => ({ name, value, source });

/** Every constant, by the module that owns it. */
export function sqlConstants(): Section[] {
  return [
    {
      title: "Page sizes and batch bounds",
      module: "src/limits.ts",
      constants: [
        c("catalog_page_default", L.CATALOG_PAGE.default, "CATALOG_PAGE.default"),
        c("catalog_page_max", L.CATALOG_PAGE.max, "CATALOG_PAGE.max"),
        c("catalog_page_bytes_max", L.CATALOG_PAGE_BYTES.max, "CATALOG_PAGE_BYTES.max"),
        c("bindings_page_default", L.BINDINGS_PAGE.default, "BINDINGS_PAGE.default"),
        c("bindings_page_max", L.BINDINGS_PAGE.max, "BINDINGS_PAGE.max"),
        c("regions_page_default", L.REGIONS_PAGE.default, "REGIONS_PAGE.default"),
        c("regions_page_max", L.REGIONS_PAGE.max, "REGIONS_PAGE.max"),
        c("lease_expiry_batch_min", L.LEASE_EXPIRY_BATCH.min, "LEASE_EXPIRY_BATCH.min"),
        c("lease_expiry_batch_max", L.LEASE_EXPIRY_BATCH.max, "LEASE_EXPIRY_BATCH.max"),
        c("lease_ttl_ms_default", L.LEASE_TTL_MS.default, "LEASE_TTL_MS.default"),
        c("lease_ttl_ms_min", L.LEASE_TTL_MS.min, "LEASE_TTL_MS.min"),
        c("lease_ttl_ms_max", L.LEASE_TTL_MS.max, "LEASE_TTL_MS.max"),
        c("publication_changes_max", L.PUBLICATION_CHANGES.max, "PUBLICATION_CHANGES.max"),
      ],
    },
    {
      title: "Route retention",
      module: "src/limits.ts",
      constants: [
        c("route_retention_days_max", L.ROUTE_RETENTION_DAYS.max, "ROUTE_RETENTION_DAYS.max"),
        c("route_retention_batch_min", L.ROUTE_RETENTION_BATCH.min, "ROUTE_RETENTION_BATCH.min"),
        c("route_retention_batch_max", L.ROUTE_RETENTION_BATCH.max, "ROUTE_RETENTION_BATCH.max"),
        c("catalog_changes_trim_batch_min", L.CATALOG_CHANGES_TRIM_BATCH.min, "CATALOG_CHANGES_TRIM_BATCH.min"),
        c("catalog_changes_trim_batch_max", L.CATALOG_CHANGES_TRIM_BATCH.max, "CATALOG_CHANGES_TRIM_BATCH.max"),
        c("routes_export_page_default", L.ROUTES_EXPORT_PAGE.default, "ROUTES_EXPORT_PAGE.default"),
        c("routes_export_page_max", L.ROUTES_EXPORT_PAGE.max, "ROUTES_EXPORT_PAGE.max"),
        c("action_clock_allowance_ms", L.ACTION_CLOCK_ALLOWANCE_MS, "ACTION_CLOCK_ALLOWANCE_MS"),
        c("route_export_lag_ms", L.ROUTE_EXPORT_LAG_MS, "ROUTE_EXPORT_LAG_MS"),
      ],
    },
    {
      title: "Field bounds",
      module: "src/limits.ts",
      constants: [
        ...Object.entries(L.TEXT_BYTES).map(([field, bytes]) => c(`text_bytes_${field}`, bytes, `TEXT_BYTES.${field}`)),
        c("json_integer_max", L.JSON_INTEGER_MAX, "JSON_INTEGER_MAX"),
        c("sql_integer_max", L.SQL_INTEGER_MAX, "SQL_INTEGER_MAX"),
        c("json_depth_max", L.JSON_DEPTH_MAX, "JSON_DEPTH_MAX"),
        c("replica_capacity_min", L.REPLICA_CAPACITY.min, "REPLICA_CAPACITY.min"),
        c("replica_capacity_max", L.REPLICA_CAPACITY.max, "REPLICA_CAPACITY.max"),
        c("manifest_capabilities_max", L.MANIFEST_CAPABILITIES.max, "MANIFEST_CAPABILITIES.max"),
        c("manifest_bytes_max", L.MANIFEST_BYTES.max, "MANIFEST_BYTES.max"),
        c("definition_bytes_max", L.DEFINITION_BYTES.max, "DEFINITION_BYTES.max"),
      ],
    },
    {
      title: "Admission policies",
      module: "src/limits.ts",
      constants: [
        c("circuit_failure_threshold_default", L.CIRCUIT_FAILURE_THRESHOLD.default, "CIRCUIT_FAILURE_THRESHOLD.default"),
        c("circuit_failure_threshold_min", L.CIRCUIT_FAILURE_THRESHOLD.min, "CIRCUIT_FAILURE_THRESHOLD.min"),
        c("circuit_failure_threshold_max", L.CIRCUIT_FAILURE_THRESHOLD.max, "CIRCUIT_FAILURE_THRESHOLD.max"),
        c("circuit_open_ms_default", L.CIRCUIT_OPEN_MS.default, "CIRCUIT_OPEN_MS.default"),
        c("circuit_open_ms_min", L.CIRCUIT_OPEN_MS.min, "CIRCUIT_OPEN_MS.min"),
        c("circuit_open_ms_max", L.CIRCUIT_OPEN_MS.max, "CIRCUIT_OPEN_MS.max"),
        ...Object.entries(L.DEFAULT_ADMISSION_POLICY).map(([member, value]) => c(`default_policy_${member}`, value, `DEFAULT_ADMISSION_POLICY.${member}`)),
      ],
    },
    {
      title: "Enumerations and formats",
      module: "src/vocabulary.ts",
      constants: [
        c("version_statuses", V.VERSION_STATUSES, "VERSION_STATUSES"),
        c("instance_statuses", V.INSTANCE_STATUSES, "INSTANCE_STATUSES"),
        c("lifecycle_operations", V.LIFECYCLE_OPERATIONS, "LIFECYCLE_OPERATIONS"),
        c("settlement_outcomes", V.SETTLEMENT_OUTCOMES, "SETTLEMENT_OUTCOMES"),
        c("check_statuses", V.CHECK_STATUSES, "CHECK_STATUSES"),
        c("implementation_claims", V.IMPLEMENTATION_CLAIMS, "IMPLEMENTATION_CLAIMS"),
        c("publication_ops", V.PUBLICATION_OPS, "PUBLICATION_OPS"),
        c("registry_sdk_version", V.REGISTRY_SDK_VERSION, "REGISTRY_SDK_VERSION"),
        c("protocol_version", V.AIP_VERSION, "AIP_VERSION"),
        c("label_pattern", V.LABEL_FORMAT.pattern, "LABEL_FORMAT.pattern"),
        c("label_message", V.LABEL_FORMAT.message, "LABEL_FORMAT.message"),
        c("digest_pattern", V.DIGEST_FORMAT.pattern, "DIGEST_FORMAT.pattern"),
        c("digest_message", V.DIGEST_FORMAT.message, "DIGEST_FORMAT.message"),
      ],
    },
    {
      title: "Record kinds",
      module: "src/record-kinds.ts",
      constants: [c("record_kinds", KIND_NAMES, "KIND_NAMES"), c("reader_kinds", READER_KINDS, "READER_KINDS")],
    },
    {
      title: "Problems",
      module: "src/registry/errors.ts",
      constants: [
        c("problem_sqlstate", PROBLEM_SQLSTATE, "PROBLEM_SQLSTATE"),
        c("problem_codes", DATABASE_PROBLEMS, "DATABASE_PROBLEMS"),
        c("replica_behind_sqlstate", REPLICA_BEHIND_SQLSTATE, "REPLICA_BEHIND_SQLSTATE"),
        c("retry_after_soon_ms", RETRY_AFTER_MS.soon, "RETRY_AFTER_MS.soon"),
        c("retry_after_later_ms", RETRY_AFTER_MS.later, "RETRY_AFTER_MS.later"),
      ],
    },
  ];
}

const INT4_MAX = 2 ** 31 - 1;
const quote = (text: string) => `'${text.replaceAll("'", "''")}'`;

function sqlOf(value: Value): { type: string; literal: string } {
  if (typeof value === "number") {
    if (!Number.isSafeInteger(value)) throw new Error(`${value} is not an integer`);
    return { type: Math.abs(value) <= INT4_MAX ? "integer" : "bigint", literal: String(value) };
  }
  if (typeof value === "string") return { type: "text", literal: quote(value) };
  return { type: "text[]", literal: `ARRAY[${value.map(quote).join(", ")}]::text[]` };
}

export function renderSqlConstants(): string {
  const lines = [
    "-- Generated by scripts/generate-sql-constants.ts from the TypeScript modules named below: do not",
    "-- edit. Change the value there and run `npm run db:constants`.",
    "--",
    "-- Every number, list and code the functions share with TypeScript, one SQL function each:",
    "-- STABLE with a literal body, so the planner inlines it into its caller as a constant.",
  ];
  for (const section of sqlConstants()) {
    lines.push("", `-- ${section.title} (${section.module})`);
    for (const constant of section.constants) {
      const { type, literal } = sqlOf(constant.value);
      lines.push(`CREATE FUNCTION aip_${constant.name}() RETURNS ${type} LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT ${literal} $$; -- ${constant.source}`);
    }
  }
  return `${lines.join("\n")}\n`;
}

export const SQL_CONSTANTS_FILE = `${packageRoot}functions/01_constants.sql`;

if (import.meta.url === `file://${process.argv[1]}`) {
  await writeFile(SQL_CONSTANTS_FILE, renderSqlConstants());
  console.log("wrote functions/01_constants.sql");
}
