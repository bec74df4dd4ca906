/**
 * Does the database run the schema this code was built for? A data-plane process (a Worker, or
 * Node with MIGRATE_ON_START=false) never migrates: it verifies and refuses to serve a mismatch.
 */
import type { Registry } from "../registry/registry.js";
import { FUNCTIONS_CHECKSUM, SCHEMA_VERSION } from "./schema-version.js";

export interface SchemaVerdict {
  ok: boolean;
  reason?: string;
  schema_version: number | null;
  functions_checksum: string | null;
  catalog_revision: number | null;
  /** The session's statement_timeout as PostgreSQL reports it ("0" means unbounded: configure the login role). */
  statement_timeout: string | null;
}

export async function verifySchema(registry: Registry): Promise<SchemaVerdict> {
  const status = await registry.schemaStatus();
  const verdict = {
    schema_version: status?.schema_version ?? null,
    functions_checksum: status?.functions_checksum ?? null,
    catalog_revision: status?.catalog_revision ?? null,
    statement_timeout: status?.statement_timeout ?? null,
  };
  if (!status || status.schema_version !== SCHEMA_VERSION) {
    return { ok: false, reason: `database schema version ${verdict.schema_version} does not match required version ${SCHEMA_VERSION}`, ...verdict };
  }
  if (status.functions_checksum !== FUNCTIONS_CHECKSUM) {
    return { ok: false, reason: "installed registry functions differ from this build: run the migrations", ...verdict };
  }
  if (!status.functions_intact) {
    return { ok: false, reason: "installed registry functions were modified after installation: run the migrations", ...verdict };
  }
  return { ok: true, ...verdict };
}
