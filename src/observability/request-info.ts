/**
 * What the observers of a finished request (access log, metrics, activity history, the span) know
 * about it, without reading bodies: the matched route template (bounded cardinality, no
 * identifiers), the problem code of an error response (recorded where the app turns an error into
 * problem+json), the tenant, the latency, and how a catalog answer or a resolution came about.
 */
import type { Context } from "hono";
import { matchedRoutes } from "hono/route";
import type { AppEnv } from "../http/env.js";

/** The response header of a catalog answer (src/routes/catalog.ts): `hit`, `revalidated` or `miss`. */
export const CATALOG_CACHE_HEADER = "aip-catalog-cache";

const problemCodes = new WeakMap<Context, string>();

export function recordProblemCode(c: Context, code: string): void {
  problemCodes.set(c, code);
}

/**
 * The route template that handled the request (`/v1/routes/:action_id`), or `unmatched` when only
 * middleware matched: a label that never carries an action, replica or tenant identifier.
 */
function routeLabel(c: Context): string {
  const last = matchedRoutes(c).at(-1);
  return last && last.method !== "ALL" ? last.path : "unmatched";
}

/** What a finished request was: read once, for every observer (src/observability/request-trace.ts). */
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

export function requestFacts(c: Context<AppEnv>, startedAt: number): RequestFacts {
  const route = routeLabel(c);
  // Only the routes that set them: reading a response's headers has a cost on Node.
  const headers = route.startsWith("/v1/catalog/") || route === "/v1/routes/:action_id" ? c.res.headers : undefined;
  return {
    method: c.req.method,
    route,
    status: c.res.status,
    latencyMs: performance.now() - startedAt,
    requestId: c.get("requestId"),
    code: problemCodes.get(c),
    tenantId: (c.get("principal") as AppEnv["Variables"]["principal"] | undefined)?.tenantId ?? undefined,
    catalogCache: headers?.get(CATALOG_CACHE_HEADER) ?? undefined,
    routeOutcome: headers?.get("aip-route-outcome") ?? undefined,
  };
}
