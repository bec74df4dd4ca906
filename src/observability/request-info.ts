/**
 * What the access log and the metrics know about a finished request, without reading bodies:
 * the matched route template (bounded cardinality, no identifiers) and the problem code of an
 * error response, recorded where the app turns an error into problem+json.
 */
import type { Context } from "hono";
import { matchedRoutes } from "hono/route";

/** The response header of a catalog answer (src/routes/catalog.ts): `hit`, `revalidated` or `miss`. */
export const CATALOG_CACHE_HEADER = "aip-catalog-cache";

const problemCodes = new WeakMap<Context, string>();

export function recordProblemCode(c: Context, code: string): void {
  problemCodes.set(c, code);
}

export function problemCodeOf(c: Context): string | undefined {
  return problemCodes.get(c);
}

/**
 * The route template that handled the request (`/v1/routes/:action_id`), or `unmatched` when only
 * middleware matched: a label that never carries an action, replica or tenant identifier.
 */
export function routeLabel(c: Context): string {
  const last = matchedRoutes(c).at(-1);
  return last && last.method !== "ALL" ? last.path : "unmatched";
}
