/**
 * What the observers of a finished request (access log, metrics, activity history, the span) know
 * about it, without reading bodies: the matched route template (bounded cardinality, no
 * identifiers), the problem code of an error response (recorded where the app turns an error into
 * problem+json), the tenant, the latency, and how a catalog answer or a resolution came about.
 */
import type { Context } from "hono";
import { matchedRoutes } from "hono/route";
import type { AppEnv } from "../http/env.js";
import type { RequestFacts } from "../telemetry/request-facts.js";

export type { RequestFacts };

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
