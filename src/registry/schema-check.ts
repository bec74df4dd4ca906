/**
 * Does the database run the schema this code was built for? A data-plane process (a Worker, or
 * Node with REGISTRY_MODE=data-plane or MIGRATE_ON_START=false) never migrates: it verifies and
 * refuses to serve a mismatch.
 *
 * A database that was never migrated, or was migrated by another build, is a deployment step
 * still to do, not an outage: the verdict says which step ("schema not installed: run migrate")
 * instead of failing like an unreachable database would. Only a database that cannot be asked at
 * all throws.
 */
import { RegistryError } from "./errors.js";
import type { Registry } from "./registry.js";
import { FUNCTIONS_CHECKSUM, SCHEMA_VERSION } from "../db/schema-version.js";
import { sqlstateFailure } from "../db/sqlstate.js";

export interface SchemaVerdict {
  ok: boolean;
  reason?: string;
  schema_version: number | null;
  functions_checksum: string | null;
  catalog_revision: number | null;
  /** The session's statement_timeout as PostgreSQL reports it ("0" means unbounded: configure the login role). */
  statement_timeout: string | null;
  /**
   * False when the tables, columns or indexes differ from what the migrations made (a hand-made
   * change): reported (aip-registry doctor), not a reason to stop serving, since no migration can
   * repair it. Null when unknown.
   */
  tables_intact: boolean | null;
}

const MIGRATE = "run migrate (`npx --no-install aip-registry migrate` with the database owner's URL)";

const SCHEMA_NOT_INSTALLED = `schema not installed: ${MIGRATE}`;

const unknown = { schema_version: null, functions_checksum: null, catalog_revision: null, statement_timeout: null, tables_intact: null };

export async function verifySchema(registry: Registry): Promise<SchemaVerdict> {
  let status: Awaited<ReturnType<Registry["schemaStatus"]>>;
  try {
    status = await registry.schemaStatus();
  } catch (error) {
    const failure = error instanceof RegistryError ? sqlstateFailure(error.extensions.sqlstate) : undefined;
    // aip_schema_status() is installed by the first migration.
    if (failure === "undefined-function") return { ok: false, reason: SCHEMA_NOT_INSTALLED, ...unknown };
    if (failure === "permission") {
      return {
        ok: false,
        reason: "this database role may not execute the registry's functions: log in with a member of aip_registry_data (docs/deploy.md, login roles)",
        ...unknown,
      };
    }
    throw error;
  }
  const verdict = {
    schema_version: status?.schema_version ?? null,
    functions_checksum: status?.functions_checksum ?? null,
    catalog_revision: status?.catalog_revision ?? null,
    statement_timeout: status?.statement_timeout ?? null,
    tables_intact: status?.tables_intact ?? null,
  };
  if (!status || verdict.schema_version === null) return { ok: false, reason: SCHEMA_NOT_INSTALLED, ...verdict };
  if (verdict.schema_version !== SCHEMA_VERSION) {
    const next = verdict.schema_version < SCHEMA_VERSION ? MIGRATE : "the database was migrated by a newer build: deploy that build";
    return { ok: false, reason: `database schema version ${verdict.schema_version} does not match required version ${SCHEMA_VERSION}: ${next}`, ...verdict };
  }
  if (status.functions_checksum !== FUNCTIONS_CHECKSUM) {
    return { ok: false, reason: "installed registry functions differ from this build: run the migrations", ...verdict };
  }
  if (!status.functions_intact) {
    return { ok: false, reason: "installed registry functions were modified after installation: run the migrations", ...verdict };
  }
  return { ok: true, ...verdict };
}
