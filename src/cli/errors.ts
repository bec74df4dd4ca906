/**
 * The CLI's own errors, in a module with no dependencies but the SQLSTATE classifier (itself
 * without any): the entry point classifies failures without loading what the commands need.
 */
import { databaseFailure } from "../db/sqlstate.js";

/** Bad arguments or a missing token or secret: exit 2. */
export class UsageError extends Error {
  override name = "UsageError";
}

/** An invalid fleet file, with one line per problem and its place in the file: exit 2. */
export class FleetFileError extends Error {
  override name = "FleetFileError";
  constructor(
    message: string,
    readonly issues: string[] = [],
  ) {
    super(message);
  }
}

/**
 * The API or database could not be reached at all (refused, DNS, timeout). Exit 3. Given the
 * bound that ran out (`timeoutMs`), a timeout says so: "did not answer within 10 s".
 */
export class RegistryUnreachable extends Error {
  override name = "RegistryUnreachable";
  constructor(target: string, cause: unknown, what = "the registry", timeoutMs?: number) {
    const reason = (cause as { cause?: { message?: string } })?.cause?.message ?? (cause as Error)?.message ?? String(cause);
    const timedOut = isTimeout(cause);
    super(
      timedOut && timeoutMs !== undefined
        ? `${what} at ${target} did not answer within ${timeoutMs / 1000} s`
        : `${what} at ${target} is unreachable: ${timedOut ? "timed out" : reason}`,
    );
  }
}

/**
 * A socket-level failure to connect (as opposed to a refusal by a reachable server), a timeout
 * included; or a server that broke the connection or accepts none yet (starting, recovering).
 */
export function isConnectionFailure(error: unknown): boolean {
  const code = (error as { code?: unknown })?.code;
  const failure = databaseFailure(error);
  return (
    isTimeout(error) ||
    (typeof code === "string" && /^(ECONNREFUSED|ECONNRESET|ENOTFOUND|EAI_AGAIN|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH)$/.test(code)) ||
    failure === "connection" ||
    failure === "cannot-connect-now"
  );
}

/** fetch's AbortSignal.timeout, or pg giving up on connecting or on an answer (its errors carry no code). */
function isTimeout(error: unknown): boolean {
  const { name, message, cause } = (error ?? {}) as { name?: string; message?: string; cause?: unknown };
  if (name === "TimeoutError") return true;
  if (/^(timeout expired|Connection terminated due to connection timeout|Query read timeout)$/.test(message ?? "")) return true;
  return cause !== undefined && cause !== error && isTimeout(cause);
}

/** An error with notes that locate it (e.g. the fleet-file record a refused change came from). */
export class Annotated extends Error {
  override name = "Annotated";
  constructor(
    readonly original: unknown,
    readonly notes: string[],
  ) {
    super(original instanceof Error ? original.message : String(original));
  }
}
