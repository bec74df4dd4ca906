/**
 * The facts of a finished request that its span and every observer record (read once, by
 * src/observability/request-info.ts).
 */
export interface RequestFacts {
  method: string;
  /** The route template (`/v1/routes/:action_id`), or `unmatched`. */
  route: string;
  status: number;
  latencyMs: number;
  /** The request id of the answer (X-Request-Id). */
  requestId: string;
  /** The problem code of an error answer. */
  code: string | undefined;
  /** The verified tenant of the caller; unset when authentication failed or the route needs none. */
  tenantId: string | undefined;
  /** Catalog answers: `hit`, `revalidated` or `miss` (the AIP-Catalog-Cache header). */
  catalogCache: string | undefined;
  /** Route resolutions: `created`, `existing` or `reacquired` (the AIP-Route-Outcome header). */
  routeOutcome: string | undefined;
}
