/**
 * Shared pieces of the route definitions: problem responses for the OpenAPI document, the bearer
 * security requirement, and small helpers.
 */
import type { z } from "@hono/zod-openapi";
import { PROBLEM_STATUS, PROBLEM_TITLES, type ProblemCode, RegistryError, RETRY_AFTER_MS } from "../registry/errors.js";
import { Id, Problem } from "../schemas.js";
import { PROBLEM_CONTENT_TYPE, problemDocument } from "../http/problem.js";

export const bearer = [{ bearer: [] as string[] }];

/** An example answer for every problem code: its detail and extension members. */
const PROBLEM_EXAMPLES: Record<ProblemCode, { detail: string } & Record<string, unknown>> = {
  invalid: { detail: "request validation failed: capability_id: must be non-empty", errors: [{ field: "capability_id", message: "must be non-empty" }] },
  unauthorized: { detail: "a bearer token is required" },
  forbidden: { detail: "this operation needs the routes:write scope" },
  "not-found": { detail: "route for action `act_0190f3a2c1d04b7e9f1a2b3c4d5e6f70` was not found" },
  "binding-unavailable": {
    detail: "no enabled binding for tenant `tenant-a` and capability `cap:crm.contacts.search`",
    tenant_id: "tenant-a",
    capability_id: "cap:crm.contacts.search",
  },
  "method-not-allowed": { detail: "DELETE is not allowed here" },
  "request-timeout": { detail: "the request was not received completely in time" },
  "header-fields-too-large": { detail: "the request's header fields exceed the server's limit (16 KiB in total by default)" },
  "client-closed": { detail: "the client closed the connection before its request was complete" },
  "malformed-request": { detail: "the request is not valid HTTP/1.1 (HPE_INVALID_CHUNK_SIZE: Invalid character in chunk size)" },
  conflict: { detail: "binding for `tenant-a` and `cap:crm.contacts.search` requires a newer policy revision than 3" },
  "stale-cursor": {
    detail: "the catalog changed for this tenant since this cursor was issued: restart from the first page",
    cursor_revision: 4511,
    catalog_revision: 4630,
  },
  "fence-lost": { detail: "the presented assignment does not match the pinned route of action `act_0190f3a2c1d04b7e9f1a2b3c4d5e6f70`" },
  "route-expired": {
    detail:
      "action `act_018f9c2ab3d47c1e9a2b3c4d5e6f7081` is older than the route evidence the registry keeps: its route may have been removed, and the registry will not route it afresh",
    action_id: "act_018f9c2ab3d47c1e9a2b3c4d5e6f7081",
    removed_before: "2026-11-02T00:00:00.000Z",
  },
  "changes-expired": {
    detail: "the changes after revision 120 are no longer kept (the oldest since this tenant's feed answers is 4512): list the catalog again",
    since: 120,
    oldest_since: 4512,
    catalog_revision: 4630,
  },
  "payload-too-large": { detail: "the request body exceeds the size limit" },
  "unsupported-media-type": { detail: "request bodies must be application/json" },
  admission: { detail: "changes[3]: artifact owner `org:other` does not match connector type owner `org:acme`", field: "attestation.owner", change_index: 3 },
  "capacity-exceeded": {
    detail: "connector admission capacity is exhausted for scope `tenant`",
    scope: "tenant",
    limit: 1000,
    retry_after_ms: RETRY_AFTER_MS.soon,
  },
  internal: { detail: "internal error" },
  "replica-unavailable": {
    detail: "no ready connector replica for instance `cinst_tenant_a_crm`",
    instance_id: "cinst_tenant_a_crm",
    retry_after_ms: RETRY_AFTER_MS.later,
  },
  busy: {
    detail:
      "settlement of action `act_0190f3a2c1d04b7e9f1a2b3c4d5e6f70` waited too long for its replica `crepl_tenant_a_crm_euw1a`, busy with other routes; nothing was released, retry",
    action_id: "act_0190f3a2c1d04b7e9f1a2b3c4d5e6f70",
    retry_after_ms: RETRY_AFTER_MS.soon,
  },
  storage: { detail: "the registry database is unavailable or failed; nothing is inferred to have committed" },
  "auth-unavailable": {
    detail: "bearer tokens cannot be verified right now: the identity provider's key set is unavailable; retry later",
    retry_after_ms: 4000,
  },
};

function problemExample(code: ProblemCode) {
  const { detail, ...extensions } = PROBLEM_EXAMPLES[code];
  return {
    summary: `${code}: ${PROBLEM_TITLES[code]}`,
    value: problemDocument(new RegistryError(code, detail, extensions), "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"),
  };
}

const BEARER_CHALLENGE = {
  description:
    'RFC 6750 bearer challenge: `Bearer realm="aip-registry"` without a token; with `error="invalid_token"` for a ' +
    'token that failed verification (401) and `error="insufficient_scope"` (plus the `scope` that would do) for one that ' +
    "may not do this (403). Absent on a 403 that is not about the token.",
  schema: { type: "string" as const },
};

/** OpenAPI responses for the given problem codes, grouped by status. */
export function problems(...codes: ProblemCode[]) {
  const byStatus = new Map<number, ProblemCode[]>();
  for (const code of ["invalid", "unauthorized", "forbidden", "busy", "storage", "auth-unavailable", ...codes] as ProblemCode[]) {
    const status = PROBLEM_STATUS[code];
    const list = byStatus.get(status) ?? [];
    if (!list.includes(code)) list.push(code);
    byStatus.set(status, list);
  }
  return Object.fromEntries(
    [...byStatus].map(([status, list]) => [
      status,
      {
        description: list.map((code) => `\`${code}\`: ${PROBLEM_TITLES[code]}`).join("; "),
        ...(status === 401 || status === 403 ? { headers: { "WWW-Authenticate": BEARER_CHALLENGE } } : {}),
        content: { [PROBLEM_CONTENT_TYPE]: { schema: Problem, examples: Object.fromEntries(list.map((code) => [code, problemExample(code)])) } },
      },
    ]),
  );
}

/** The problems of an operation with a JSON request body: its own, plus a body over the limit or not JSON. */
export const bodyProblems = (...codes: ProblemCode[]) => problems("payload-too-large", "unsupported-media-type", ...codes);

export const json = <T extends z.ZodTypeAny>(schema: T, description: string) => ({
  description,
  content: { "application/json": { schema } },
});

export const jsonBody = <T extends z.ZodTypeAny>(schema: T) => ({
  required: true,
  content: { "application/json": { schema } },
});

export const pathId = (name: string, example: string) => Id().openapi({ param: { name, in: "path" }, example });
