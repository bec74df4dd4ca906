/**
 * The methods an app serves at a path, from its route table: a known path asked with another
 * method is 405 with `Allow` (RFC 9110 section 15.5.6), not 404.
 */
interface RouteEntry {
  method: string;
  path: string;
}

const escapeRegExp = (text: string) => text.replace(/[.+?^${}()|[\]\\]/g, "\\$&");

/** Hono's path syntax (`/v1/routes/:action_id`, `*`) as an anchored regular expression. */
function pattern(path: string): RegExp {
  const source = path
    .split("/")
    .map((segment) => (segment.startsWith(":") ? "[^/]+" : segment === "*" ? ".*" : escapeRegExp(segment)))
    .join("/");
  return new RegExp(`^${source}$`);
}

export function allowedMethodsOf(routes: readonly RouteEntry[]): (path: string) => string[] {
  // Middleware registers as ALL; only handlers define what a path serves.
  const handlers = routes.filter((route) => route.method !== "ALL").map((route) => ({ method: route.method, pattern: pattern(route.path) }));
  return (path) => {
    const methods = new Set(handlers.filter((route) => route.pattern.test(path)).map((route) => route.method));
    // Hono answers HEAD with the GET handler.
    if (methods.has("GET")) methods.add("HEAD");
    return [...methods].sort();
  };
}
