/**
 * RFC 9457 problem details: every error response of the API goes through here. `problemDocument`
 * is the one place a body is built: the app's error handler, the Node transport's refusals of
 * requests Hono never sees, the Worker's misconfiguration answer and the OpenAPI examples.
 */
import type { Context } from "hono";
import { PROBLEM_TITLES, RegistryError } from "../registry/errors.js";

export const PROBLEM_CONTENT_TYPE = "application/problem+json";

/** RFC 6750 section 3.1: why a bearer token was refused. */
export type BearerError = "invalid_token" | "insufficient_scope";

/** A 401 or 403 about the bearer token itself: its answer carries an RFC 6750 challenge. */
export class BearerRefusal extends RegistryError {
  constructor(
    code: "unauthorized" | "forbidden",
    detail: string,
    readonly bearerError: BearerError,
    /** The scope that would have been enough (insufficient_scope). */
    readonly requiredScope?: string,
  ) {
    super(code, detail);
  }
}

/** A quoted-string value of the header: RFC 6750 allows printable ASCII but `"` and `\`. */
const quoted = (value: string) => `"${value.replace(/[^\x20-\x7e]|["\\]/g, "'")}"`;

/** WWW-Authenticate of a 401 or 403; a request without any token gets no error code (section 3.1). */
function bearerChallenge(error: RegistryError): string | undefined {
  if (!(error instanceof BearerRefusal)) return error.status === 401 ? 'Bearer realm="aip-registry"' : undefined;
  const parts = [`realm="aip-registry"`, `error="${error.bearerError}"`, `error_description=${quoted(error.message)}`];
  if (error.requiredScope) parts.push(`scope=${quoted(error.requiredScope)}`);
  return `Bearer ${parts.join(", ")}`;
}

/** RFC 9457's members and ours: an extension member (from a function's DETAIL) never replaces them. */
const STANDARD_MEMBERS = new Set(["type", "title", "status", "detail", "instance", "code", "request_id"]);

/** The problem+json body of `error`; `requestId` is left out when there is none. */
export function problemDocument(error: RegistryError, requestId?: string): Record<string, unknown> {
  return {
    type: `https://aip.dev/problems/${error.code}`,
    title: PROBLEM_TITLES[error.code],
    status: error.status,
    detail: error.message,
    code: error.code,
    ...(requestId === undefined ? {} : { request_id: requestId }),
    ...Object.fromEntries(Object.entries(error.extensions).filter(([name]) => !STANDARD_MEMBERS.has(name))),
  };
}

function problemBody(c: Context, error: RegistryError): Record<string, unknown> {
  return problemDocument(error, c.get("requestId" as never) as string | undefined);
}

export function problemResponse(c: Context, error: RegistryError): Response {
  const headers: Record<string, string> = { "content-type": PROBLEM_CONTENT_TYPE };
  const retryAfterMs = error.extensions.retry_after_ms;
  if (typeof retryAfterMs === "number" && (error.status === 429 || error.status === 503)) {
    headers["retry-after"] = String(Math.max(1, Math.ceil(retryAfterMs / 1000)));
  } else if (error.code === "storage" && error.retryable) {
    headers["retry-after"] = "1";
  }
  const challenge = bearerChallenge(error);
  if (challenge) headers["www-authenticate"] = challenge;
  return c.body(JSON.stringify(problemBody(c, error)), error.status as never, headers);
}
