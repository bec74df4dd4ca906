/**
 * What a database error's SQLSTATE says: the one module that names SQLSTATEs. Every other module
 * asks `databaseFailure(error)` (or `sqlstateFailure(code)`) and decides on the answer's kind, never
 * on a code (test/unit/layers.test.ts): `fromDatabaseError` (src/registry/errors.ts) turns kinds
 * into problems, the catalog replica tells a refusal of the request from an unreachable replica,
 * the executors and the CLI tell a broken connection, the schema check and the migrator a missing
 * function or privilege.
 *
 * No dependencies: the CLI's error module loads it before anything else.
 */

/**
 * The SQLSTATE of a registry problem (aip_problem_sqlstate()), in class AR, "AIP registry": the
 * DETAIL carries the problem's JSON members. The class holds three more codes that never leave the
 * function that raises them (ARDRY, ARSKP and ARPUB, functions/00_errors.sql) and
 * REPLICA_BEHIND_SQLSTATE. Generated into functions/01_constants.sql.
 */
export const PROBLEM_SQLSTATE = "AR000";

/**
 * A catalog replica (a hot standby) has not replayed the revision a request comes from
 * (aip_replica_behind_sqlstate()). Not a problem: the catalog read asks the primary instead.
 */
export const REPLICA_BEHIND_SQLSTATE = "ARLAG";

/** The kinds of database failure the registry tells apart. */
export type DatabaseFailure =
  /** AR000: a refusal a registry function raised (aip_fail). */
  | "problem"
  /** ARLAG: a catalog replica behind the revision the request names. */
  | "replica-behind"
  /** A lock wait given up (55P03), a serialization failure (40001), a deadlock (40P01): concurrent work held what was needed. */
  | "contention"
  /** 57014: the statement was cancelled, by statement_timeout or a cancel request. */
  | "cancelled"
  /** 57P03: the server is starting up or recovering and accepts no connection yet. */
  | "cannot-connect-now"
  /** The rest of 57P (administrator or crash shutdown, database dropped, idle session timeout): the session is gone. */
  | "session-ended"
  /** The rest of class 57, operator intervention. */
  | "intervention"
  /** Class 08: the connection failed or broke. */
  | "connection"
  /** Class 53: insufficient resources (too many connections, disk full, out of memory). */
  | "resources"
  /** 42501: the role lacks a privilege. */
  | "permission"
  /** 42883, 3F000: no such function or schema (this build's function set is not installed). */
  | "undefined-function"
  /** 54001: stack depth exceeded (deeply nested input). */
  | "too-deep"
  /** Class 22: a data exception (a value the database refused). */
  | "data"
  /** Class 23: an integrity constraint violation. */
  | "integrity"
  /** Another SQLSTATE. */
  | "other"
  /** No SQLSTATE: a driver, socket or other error (no code, or a Node code such as ECONNREFUSED or EPIPE). */
  | "no-sqlstate";

const BY_CODE: Readonly<Record<string, DatabaseFailure>> = {
  [PROBLEM_SQLSTATE]: "problem",
  [REPLICA_BEHIND_SQLSTATE]: "replica-behind",
  "55P03": "contention",
  "40001": "contention",
  "40P01": "contention",
  "57014": "cancelled",
  "57P03": "cannot-connect-now",
  "42501": "permission",
  "42883": "undefined-function",
  "3F000": "undefined-function",
  "54001": "too-deep",
};

/** Longest prefix first: a code's own entry, then its subclass, then its class. */
const BY_PREFIX: readonly [string, DatabaseFailure][] = [
  ["57P", "session-ended"],
  ["57", "intervention"],
  ["08", "connection"],
  ["53", "resources"],
  ["22", "data"],
  ["23", "integrity"],
];

/**
 * The kind of failure a SQLSTATE names. `code` is whatever an error carried: anything but a
 * five-character SQLSTATE (a Node error code such as ECONNREFUSED, EPIPE; nothing) is `no-sqlstate`.
 */
export function sqlstateFailure(code: unknown): DatabaseFailure {
  if (typeof code !== "string" || !/^[0-9A-Z]{5}$/.test(code) || /^E[A-Z]+$/.test(code)) return "no-sqlstate";
  return BY_CODE[code] ?? BY_PREFIX.find(([prefix]) => code.startsWith(prefix))?.[1] ?? "other";
}

/** The kind of failure an error thrown by a driver (pg, PGlite, Neon) reports. */
export const databaseFailure = (error: unknown): DatabaseFailure => sqlstateFailure((error as { code?: unknown } | null | undefined)?.code);
