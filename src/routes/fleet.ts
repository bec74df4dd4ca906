/**
 * Fleet status (fleet:read) and on-demand maintenance (registry:admin): lease expiry and route
 * retention.
 */
import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import type { AppEnv } from "../http/env.js";
import { requireScope } from "../http/guards.js";
import { announceLease, type LeaseListener } from "../maintenance/lease-events.js";
import { LEASE_EXPIRY_BATCH, REGIONS_PAGE, ROUTE_RETENTION_BATCH } from "../limits.js";
import { RegistryError } from "../registry/errors.js";
import type { Registry } from "../registry/registry.js";
import type { RetentionSettings } from "../maintenance/route-retention.js";
import { FleetRegions, FleetStatus, LeaseExpiryResult, PageSize, QueryInteger, RouteRetentionResult } from "../schemas.js";
import { bearer, json, problems } from "./common.js";

export function registerFleetRoutes(
  app: OpenAPIHono<AppEnv>,
  registry: Registry,
  onLease?: LeaseListener,
  retention?: Pick<RetentionSettings, "days" | "requireExport">,
): void {
  app.openapi(
    createRoute({
      method: "get",
      path: "/v1/fleet/status",
      operationId: "fleetStatus",
      tags: ["fleet"],
      summary: "Fixed-size fleet aggregate (no identifiers)",
      security: bearer,
      middleware: [requireScope("fleet:read", "registry:admin")],
      responses: { 200: json(FleetStatus, "The fleet status summary"), ...problems() },
    }),
    async (c) => c.json(await registry.fleetStatus(), 200),
  );

  app.openapi(
    createRoute({
      method: "get",
      path: "/v1/fleet/regions",
      operationId: "fleetRegions",
      tags: ["fleet"],
      summary: "The fleet status per topology region (no identifiers)",
      security: bearer,
      middleware: [requireScope("fleet:read", "registry:admin")],
      request: { query: z.object({ limit: PageSize(REGIONS_PAGE, "Regions per answer") }) },
      responses: { 200: json(FleetRegions, "Replica counts, capacity and circuits per region"), ...problems() },
    }),
    async (c) => c.json(await registry.fleetRegions(c.req.valid("query").limit), 200),
  );

  app.openapi(
    createRoute({
      method: "post",
      path: "/v1/fleet/lease-expiry",
      operationId: "expireLeases",
      tags: ["fleet"],
      summary: "Expire a bounded batch of stale replica leases now",
      description:
        `Marks up to \`limit\` (default ${LEASE_EXPIRY_BATCH.default}, at most ${LEASE_EXPIRY_BATCH.max}) replicas whose lease ended offline, earliest lease first, and settles ` +
        "their reserved routes as lease_expired, releasing capacity. Destinations recorded in routes are never rewritten and no " +
        "endpoint is contacted. Concurrent calls take disjoint batches. Routing already ignores an ended lease, so this only " +
        "returns capacity; the Node server's timer and the Worker's LeaseClock alarm run it on their own at lease deadlines. " +
        "`next_deadline` also re-arms them: a cycle is then due no later than that time.",
      security: bearer,
      middleware: [requireScope("registry:admin")],
      request: { query: z.object({ limit: QueryInteger({ min: LEASE_EXPIRY_BATCH.min, max: LEASE_EXPIRY_BATCH.max }).optional() }) },
      responses: { 200: json(LeaseExpiryResult, "How many replicas expired and routes were released"), ...problems() },
    }),
    async (c) => {
      const result = await registry.expireLeases(c.req.valid("query").limit ?? LEASE_EXPIRY_BATCH.default);
      if (result.next_deadline !== null) announceLease(c, onLease, { source: "expiry", expires_at: result.next_deadline });
      return c.json(result, 200);
    },
  );

  app.openapi(
    createRoute({
      method: "post",
      path: "/v1/fleet/route-retention",
      operationId: "removeSettledRoutes",
      tags: ["fleet"],
      summary: "Remove a bounded batch of released routes past the evidence window now",
      description:
        `Removes up to \`limit\` (default ${ROUTE_RETENTION_BATCH.default}, at most ${ROUTE_RETENTION_BATCH.max}) released routes whose last settlement ` +
        "is older than the database's evidence window (`retention_days`), oldest first, and when it requires export only those an " +
        "export covered (`exported_before`). The policy is the database's: this server's ROUTE_RETENTION_DAYS and " +
        "ROUTE_RETENTION_REQUIRE_EXPORT can only make it stricter, and only the database owner relaxes it (`aip-registry routes " +
        "policy`). A reserved route is never removed. Lease maintenance runs the same batches on its own; this is for an operator " +
        "who wants them now (a deployment that was idle, or a backlog). A resolve of a removed action is then refused " +
        "`route-expired` (410). 409 `conflict` when retention is off on this server (ROUTE_RETENTION_DAYS=0).",
      security: bearer,
      middleware: [requireScope("registry:admin")],
      request: { query: z.object({ limit: QueryInteger({ min: ROUTE_RETENTION_BATCH.min, max: ROUTE_RETENTION_BATCH.max }).optional() }) },
      responses: { 200: json(RouteRetentionResult, "How many routes were removed, and the watermarks"), ...problems("conflict") },
    }),
    async (c) => {
      if (!retention) throw new RegistryError("conflict", "route retention is off on this server (ROUTE_RETENTION_DAYS=0): every route is kept");
      const limit = c.req.valid("query").limit ?? ROUTE_RETENTION_BATCH.default;
      return c.json(await registry.removeSettledRoutes(retention.days, retention.requireExport, limit), 200);
    },
  );
}
