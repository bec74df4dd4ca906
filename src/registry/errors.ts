/**
 * Registry errors and the one place where database failures become problem codes.
 *
 * The SQL functions raise every refusal the same way (aip_fail, functions/00_errors.sql): SQLSTATE
 * PROBLEM_SQLSTATE, a human message, and a DETAIL that is the problem's JSON members: its `code`
 * and its extension members. The code travels with the error, so no table maps SQLSTATEs to
 * codes. Anything else the database or the driver reports is classified here, by the kind of
 * failure its SQLSTATE names (src/db/sqlstate.ts, the one module that names SQLSTATEs): data
 * errors are the caller's input (invalid), privilege errors are forbidden, contention is busy, and
 * everything else is `storage` (503): the state transition stopped and nothing may be inferred to
 * have committed.
 *
 * The constants the SQL functions share with this file are generated into
 * functions/01_constants.sql (scripts/generate-sql-constants.ts).
 */
import { sqlstateFailure } from "../db/sqlstate.js";

export const PROBLEM_STATUS = {
  invalid: 400,
  unauthorized: 401,
  forbidden: 403,
  "not-found": 404,
  "binding-unavailable": 404,
  "method-not-allowed": 405,
  "request-timeout": 408,
  conflict: 409,
  "stale-cursor": 409,
  "fence-lost": 409,
  /** The action's route may have been removed by route retention: it is not routed afresh (functions/82_retention.sql). */
  "route-expired": 410,
  /** A change feed from a revision older than the history kept (functions/31_catalog_changes.sql): list the catalog again. */
  "changes-expired": 410,
  "payload-too-large": 413,
  "unsupported-media-type": 415,
  admission: 422,
  "capacity-exceeded": 429,
  "header-fields-too-large": 431,
  /** Never sent: the client left before its request was complete (logged as nginx does). */
  "client-closed": 499,
  /** Refused by the HTTP layer below the app (Node's parser, src/node/transport.ts). */
  "malformed-request": 400,
  internal: 500,
  "replica-unavailable": 503,
  /** Contention: a row or lock the operation needed stayed held by concurrent work past lock_timeout. */
  busy: 503,
  storage: 503,
  /** The identity provider's key set cannot be fetched and the last good one is past its grace (src/http/jwks.ts). */
  "auth-unavailable": 503,
} as const;

export type ProblemCode = keyof typeof PROBLEM_STATUS;

export const PROBLEM_TITLES: Record<ProblemCode, string> = {
  invalid: "Invalid request",
  unauthorized: "Unauthorized",
  forbidden: "Forbidden",
  "not-found": "Not found",
  "binding-unavailable": "No enabled binding",
  "method-not-allowed": "Method not allowed",
  "request-timeout": "Request timeout",
  conflict: "Conflict",
  "stale-cursor": "Stale catalog cursor",
  "fence-lost": "Route fence lost",
  "route-expired": "Route evidence expired",
  "changes-expired": "Catalog changes no longer kept",
  "payload-too-large": "Payload too large",
  "unsupported-media-type": "Unsupported media type",
  admission: "Admission refused",
  "capacity-exceeded": "Admission capacity exceeded",
  "header-fields-too-large": "Request header fields too large",
  "client-closed": "Client closed the connection",
  "malformed-request": "Malformed HTTP request",
  internal: "Internal error",
  "replica-unavailable": "No replica available",
  busy: "Registry busy",
  storage: "Registry storage unavailable",
  "auth-unavailable": "Token verification unavailable",
};

/** The problem codes the SQL functions raise (aip_problem_codes()); aip_fail refuses any other. */
export const DATABASE_PROBLEMS = [
  "invalid",
  "forbidden",
  "not-found",
  "binding-unavailable",
  "conflict",
  "stale-cursor",
  "fence-lost",
  "route-expired",
  "changes-expired",
  "admission",
  "capacity-exceeded",
  "replica-unavailable",
  "busy",
] as const satisfies readonly ProblemCode[];

/** The SQLSTATEs of the registry's own errors (src/db/sqlstate.ts, generated into functions/01_constants.sql). */
export { PROBLEM_SQLSTATE, REPLICA_BEHIND_SQLSTATE } from "../db/sqlstate.js";

/**
 * `retry_after_ms` of the refusals that name one (aip_retry_after_soon_ms(), _later_ms()): `soon`
 * where a slot or a row lock frees when another action settles or commits (capacity exceeded,
 * every eligible replica busy, a settlement or lifecycle call or lease expiry kept waiting for a
 * row: `busy`), `later` where something slower must happen first (a replica comes back, a
 * publication or a duplicate request finishes, the publication lock is free again).
 */
export const RETRY_AFTER_MS = { soon: 100, later: 1000 } as const;

const DATABASE_PROBLEM_SET: ReadonlySet<string> = new Set(DATABASE_PROBLEMS);

export class RegistryError extends Error {
  readonly status: number;
  constructor(
    readonly code: ProblemCode,
    message: string,
    readonly extensions: Record<string, unknown> = {},
    /** True when the same request may succeed if retried (storage hiccups, lock timeouts). */
    readonly retryable = false,
  ) {
    super(message);
    this.name = "RegistryError";
    this.status = PROBLEM_STATUS[code];
  }
}

interface DatabaseErrorLike {
  code?: unknown;
  message?: unknown;
  detail?: unknown;
}

function parseDetail(detail: unknown): Record<string, unknown> {
  if (typeof detail !== "string" || detail === "") return {};
  try {
    const parsed = JSON.parse(detail) as unknown;
    return parsed && typeof parsed === "object" && !Array.isArray(parsed) ? (parsed as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

/**
 * Classify any error thrown by a driver while calling a registry function, by the kind of failure
 * its SQLSTATE names (src/db/sqlstate.ts).
 */
export function fromDatabaseError(error: unknown): RegistryError {
  if (error instanceof RegistryError) return error;
  const e = (error ?? {}) as DatabaseErrorLike;
  const sqlstate = typeof e.code === "string" ? e.code : "";
  const message = typeof e.message === "string" ? e.message : "database error";
  const failure = sqlstateFailure(e.code);
  if (failure === "problem") {
    const { code, ...extensions } = parseDetail(e.detail);
    // `busy` is contention the function named itself: like a lock timeout, retrying may succeed.
    if (typeof code === "string" && DATABASE_PROBLEM_SET.has(code)) return new RegistryError(code as ProblemCode, message, extensions, code === "busy");
  }
  switch (failure) {
    case "contention":
      // Lock timeout, serialization failure, deadlock: concurrent work held what this statement
      // needed. The entry points that wait on locks say so themselves (busy, or resolve's
      // replica-unavailable and capacity-exceeded, naming what was busy); this covers every other
      // path, so contention is never reported as a broken database. Nothing committed.
      return new RegistryError(
        "busy",
        "the registry is busy: a row or lock this operation needs is held by concurrent work; nothing was committed, retry",
        { sqlstate, retry_after_ms: RETRY_AFTER_MS.later },
        true,
      );
    case "cancelled":
      // Statement timeout (or a cancelled statement): the work itself took too long. Nothing committed.
      return new RegistryError("storage", "the registry could not complete the operation in time; retry", { sqlstate }, true);
    case "permission":
      return new RegistryError("forbidden", "this process's database role may not perform this operation", { sqlstate });
    case "too-deep":
      // Stack depth exceeded: only deeply nested input (a JSON document parsed or walked by the
      // database) gets a registry statement there.
      return new RegistryError("invalid", "the input is nested too deeply for the registry to process", { sqlstate });
    case "data":
      return new RegistryError("invalid", `the database refused a value: ${message}`, { sqlstate });
    case "integrity":
      return new RegistryError("conflict", "the change conflicts with a stored record", { sqlstate });
  }
  // Connection failures, shutdown, resource exhaustion, schema drift, a problem with a code the
  // database may not raise: do not leak internals to clients. The cause stays on the error for
  // the server's own messages (start-up, logs).
  const storage = new RegistryError(
    "storage",
    "the registry database is unavailable or failed; nothing is inferred to have committed",
    sqlstate ? { sqlstate } : {},
    true,
  );
  storage.cause = error;
  return storage;
}
