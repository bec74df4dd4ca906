/**
 * RFC 9457 problem details: every error response of the API goes through here.
 */
import type { Context } from "hono";
import { PROBLEM_STATUS, PROBLEM_TITLES, RegistryError, type ProblemCode } from "../registry/errors.js";

export const PROBLEM_CONTENT_TYPE = "application/problem+json";

/** RFC 9457's members and ours: an extension member (from a function's DETAIL) never replaces them. */
const STANDARD_MEMBERS = new Set(["type", "title", "status", "detail", "instance", "code", "request_id"]);

export function problemBody(c: Context, error: RegistryError): Record<string, unknown> {
  return {
    type: `https://aip.dev/problems/${error.code}`,
    title: PROBLEM_TITLES[error.code],
    status: error.status,
    detail: error.message,
    code: error.code,
    request_id: c.get("requestId" as never) as string | undefined,
    ...Object.fromEntries(Object.entries(error.extensions).filter(([name]) => !STANDARD_MEMBERS.has(name))),
  };
}

export function problemResponse(c: Context, error: RegistryError): Response {
  const headers: Record<string, string> = { "content-type": PROBLEM_CONTENT_TYPE };
  const retryAfterMs = error.extensions.retry_after_ms;
  if (typeof retryAfterMs === "number" && (error.status === 429 || error.status === 503)) {
    headers["retry-after"] = String(Math.max(1, Math.ceil(retryAfterMs / 1000)));
  } else if (error.code === "storage" && error.retryable) {
    headers["retry-after"] = "1";
  }
  if (error.status === 401) headers["www-authenticate"] = 'Bearer realm="aip-registry"';
  return c.body(JSON.stringify(problemBody(c, error)), error.status as never, headers);
}

export function problem(code: ProblemCode, detail: string, extensions: Record<string, unknown> = {}): RegistryError {
  return new RegistryError(code, detail, extensions);
}

export { PROBLEM_STATUS };
