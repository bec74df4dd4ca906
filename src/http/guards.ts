/**
 * Authentication and scope middleware, and the verified tenant of a request.
 */
import type { Context, MiddlewareHandler } from "hono";
import { RegistryError } from "../registry/errors.js";
import type { Authenticator, Scope } from "./auth.js";
import type { AppEnv } from "./env.js";
import { BearerRefusal } from "./problem.js";

export function authenticate(authenticator: Authenticator): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const header = c.req.header("authorization") ?? "";
    const match = /^Bearer\s+([A-Za-z0-9_\-.~+/=]+)\s*$/i.exec(header);
    if (!match?.[1]) throw new RegistryError("unauthorized", "a bearer token is required");
    c.set("principal", await authenticator(match[1]));
    await next();
  };
}

/** Passes when the principal holds any of the scopes. */
export function requireScope(...scopes: Scope[]): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const principal = c.get("principal");
    if (!scopes.some((scope) => principal.scopes.has(scope))) {
      // The challenge names the first scope: the least one that would do.
      throw new BearerRefusal("forbidden", `this operation needs the ${scopes.join(" or ")} scope`, "insufficient_scope", scopes[0]);
    }
    await next();
  };
}

/** The token's tenant; routing refuses to act without one (the catalog just shows nothing). */
export function requireTenant(c: Context<AppEnv>): string {
  const tenant = c.get("principal").tenantId;
  if (!tenant) throw new BearerRefusal("forbidden", "the token carries no tenant_id: routing needs a verified tenant", "insufficient_scope");
  return tenant;
}
