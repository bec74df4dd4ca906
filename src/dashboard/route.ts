/**
 * GET /dashboard: the fleet dashboard page (no auth: the page holds no data; it asks the API for
 * /v1/fleet/status with the operator's token).
 */
import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import type { AppEnv } from "../http/env.js";
import { dashboardCsp, dashboardPage } from "./page.js";

function nonce(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return btoa(String.fromCharCode(...bytes));
}

export function registerDashboardRoute(app: OpenAPIHono<AppEnv>): void {
  app.openapi(
    createRoute({
      method: "get",
      path: "/dashboard",
      operationId: "dashboard",
      tags: ["operations"],
      summary: "Fleet dashboard (HTML)",
      security: [],
      description:
        "A self-refreshing page of the fleet status: replicas by status, capacity used, open circuits, expired leases. " +
        "It calls `GET /v1/fleet/status` with a bearer token (scope `fleet:read`) entered on the page and kept in the tab's sessionStorage.",
      responses: { 200: { description: "The dashboard page", content: { "text/html": { schema: z.string() } } } },
    }),
    (c) => {
      const value = nonce();
      c.header("content-security-policy", dashboardCsp(value));
      c.header("cache-control", "no-store");
      c.header("x-content-type-options", "nosniff");
      return c.html(dashboardPage(value), 200);
    },
  );
}
