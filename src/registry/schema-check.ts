/**
 * Can this build serve this database? Builds serve one database side by side (docs/upgrades.md):
 * each calls only its own function set, so a server is ready when its set is installed and
 * intact and the tables are at least at the schema version it needs, and not finalized past it,
 * whatever other sets are installed beside it (they are reported, as information).
 *
 * A database never migrated with this build, or finalized past it, is a deployment step still to
 * do, not an outage: the verdict says which step instead of failing like an unreachable database
 * would. Only a database that cannot be asked at all throws.
 */
import { RegistryError } from "./errors.js";
import type { Registry } from "./registry.js";
import { FUNCTIONS_CHECKSUM, FUNCTION_SET, RELEASE, SCHEMA_VERSION } from "../db/schema-version.js";
import { sqlstateFailure } from "../db/sqlstate.js";
import type { Readiness, SchemaStatus } from "../schemas.js";

export type SchemaVerdict = Omit<Readiness, "status" | "catalog_replica"> & { ok: boolean };

const MIGRATE = "run migrate (`npx --no-install aip-registry migrate` with the database owner's URL)";

/** The set of this build is not there: never installed, or dropped by a newer build's finalize. */
export const SET_NOT_INSTALLED = `schema not installed: ${MIGRATE}: this build's function set ${FUNCTION_SET} (release ${RELEASE}) is not in this database (if a newer build's finalize removed it, deploy that build instead)`;

/** What a verdict says when the database could not tell (it is not asked, or cannot answer). */
export const UNKNOWN_SCHEMA = {
  release: RELEASE,
  function_set: FUNCTION_SET,
  schema_version: null,
  required_version: SCHEMA_VERSION,
  functions_checksum: null,
  catalog_revision: null,
  statement_timeout: null,
  tables_intact: null,
};

export async function verifySchema(registry: Registry): Promise<SchemaVerdict> {
  let status: SchemaStatus | null;
  try {
    status = await registry.schemaStatus();
  } catch (error) {
    const failure = error instanceof RegistryError ? sqlstateFailure(error.extensions.sqlstate) : undefined;
    // No such function or schema: this build's set is not installed.
    if (failure === "undefined-function") return { ok: false, reason: SET_NOT_INSTALLED, ...UNKNOWN_SCHEMA };
    if (failure === "permission") {
      return {
        ok: false,
        reason:
          "this database role may not execute the registry's functions: log in with a member of this database's data role (`<database>_aip_data`: `aip-registry migrate` and `doctor` name it; docs/deploy.md, login roles)",
        ...UNKNOWN_SCHEMA,
      };
    }
    throw error;
  }
  if (!status) return { ok: false, reason: SET_NOT_INSTALLED, ...UNKNOWN_SCHEMA };
  const verdict = {
    release: RELEASE,
    function_set: status.function_set,
    schema_version: status.schema_version,
    required_version: SCHEMA_VERSION,
    functions_checksum: status.functions_checksum,
    catalog_revision: status.catalog_revision,
    statement_timeout: status.statement_timeout ?? null,
    tables_intact: status.tables_intact ?? null,
    function_sets: status.function_sets,
    session: status.session,
    connect_public: status.connect_public,
    ...roleWarning(status.session),
  };
  const notReady = (reason: string) => ({ ok: false, reason, ...verdict });
  if (status.schema_version === null || status.schema_version < SCHEMA_VERSION) {
    return notReady(`the database is at schema version ${status.schema_version ?? "none"}; this build needs ${SCHEMA_VERSION}: ${MIGRATE}`);
  }
  if (status.floor > SCHEMA_VERSION) {
    return notReady(`the database was finalized for builds of schema version ${status.floor} and later (this build: ${SCHEMA_VERSION}): deploy a newer build`);
  }
  if (status.functions_checksum !== FUNCTIONS_CHECKSUM) {
    return notReady(`function set ${status.function_set} holds other functions than this build's: ${MIGRATE}`);
  }
  if (!status.functions_intact) return notReady(`the functions of set ${status.function_set} were modified after installation: ${MIGRATE}`);
  return { ok: true, ...verdict };
}

/** A superuser or the tables' owner works, but bypasses every boundary the runtime roles draw. */
function roleWarning(session: SchemaStatus["session"]): { role_warning?: string } {
  if (session.superuser) {
    return { role_warning: `this server's database role ${session.role} is a superuser: use a login role in this database's data role (docs/deploy.md)` };
  }
  if (session.owner) {
    return {
      role_warning: `this server's database role ${session.role} owns the registry's tables: use a login role in this database's data role (docs/deploy.md)`,
    };
  }
  return {};
}
