/**
 * Durable action routes (scopes routes:write / routes:read). The tenant comes from the token only.
 */
import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import type { AppEnv } from "../http/env.js";
import { requireScope, requireTenant } from "../http/guards.js";
import { RegistryError } from "../registry/errors.js";
import type { Registry } from "../registry/registry.js";
import { ResolveOutcome, ResolveRequest, RouteAssignment, SettlementRequest, SettlementResult } from "../schemas.js";
import { bearer, bodyProblems, json, jsonBody, pathId, problems } from "./common.js";

const ActionParams = z.object({ action_id: pathId("action_id", "act_0190f3a2c1d04b7e9f1a2b3c4d5e6f70") });

const RouteOutcomeHeader = {
  "AIP-Route-Outcome": {
    description:
      "`created` (a new route), `existing` (the route is still reserved: returned as is) or `reacquired` (a retry after settlement took the same replica again)",
    schema: { type: "string" as const, enum: ResolveOutcome.options },
  },
};
const RouteStateHeaders = {
  "AIP-Route-Reserved": { description: "`true` while the route holds its reservation", schema: { type: "string" as const, enum: ["true", "false"] } },
  "AIP-Last-Settlement": { description: "The last settlement outcome, when the route is released", schema: { type: "string" as const } },
};

export function registerRoutingRoutes(app: OpenAPIHono<AppEnv>, registry: Registry): void {
  app.openapi(
    createRoute({
      method: "put",
      path: "/v1/routes/{action_id}",
      operationId: "resolveRoute",
      tags: ["routes"],
      summary: "Resolve an action to its durable route",
      description:
        "Creates the action's route (201) or returns the existing one (200), byte for byte the same record. A retry after " +
        "settlement reacquires the same replica under the pinned admission scopes plus the tenant retry budget, or fails: " +
        "a route never moves to another replica or instance. `AIP-Route-Outcome` says which of created, existing or " +
        "reacquired happened. Refusals: `binding-unavailable` (no enabled binding chain), `replica-unavailable` (503 with " +
        "`Retry-After`: no eligible replica, or the pinned one cannot serve again), `admission` (the binding's policy is " +
        "disabled), `capacity-exceeded` (429 with `Retry-After`, `scope` and `retry_after_ms`), `conflict` (the action " +
        "exists under another capability or tenant), `busy` (503 with `Retry-After`: another request for the same action " +
        "held it past the lock timeout), `route-expired` (410: the action's route may have been removed by route " +
        "retention: an `act_` + UUIDv7, in any spelling, minted before routes were removed, or any other action whose " +
        "route was removed; it is not routed afresh, do not retry).",
      security: bearer,
      middleware: [requireScope("routes:write")],
      request: { params: ActionParams, body: jsonBody(ResolveRequest) },
      responses: {
        200: { ...json(RouteAssignment, "The existing (or reacquired) route"), headers: RouteOutcomeHeader },
        201: { ...json(RouteAssignment, "A new route"), headers: RouteOutcomeHeader },
        ...bodyProblems("binding-unavailable", "conflict", "route-expired", "admission", "capacity-exceeded", "replica-unavailable"),
      },
    }),
    async (c) => {
      const tenant = requireTenant(c);
      const { action_id } = c.req.valid("param");
      const body = c.req.valid("json");
      const result = await registry.resolveRoute(action_id, tenant, body.capability_id, body.topology ?? {});
      c.header("aip-route-outcome", result.outcome);
      return result.outcome === "created" ? c.json(result.assignment, 201) : c.json(result.assignment, 200);
    },
  );

  app.openapi(
    createRoute({
      method: "get",
      path: "/v1/routes/{action_id}",
      operationId: "getRoute",
      tags: ["routes"],
      summary: "Read an action's pinned route",
      description: "Only the owning tenant sees it. `AIP-Route-Reserved` and `AIP-Last-Settlement` report its reservation state.",
      security: bearer,
      middleware: [requireScope("routes:read", "routes:write")],
      request: { params: ActionParams },
      responses: { 200: { ...json(RouteAssignment, "The pinned route"), headers: RouteStateHeaders }, ...problems("not-found") },
    }),
    async (c) => {
      const tenant = requireTenant(c);
      const { action_id } = c.req.valid("param");
      const state = await registry.getRoute(action_id, tenant);
      if (!state) throw new RegistryError("not-found", `route for action \`${action_id}\` was not found`);
      c.header("aip-route-reserved", String(state.reserved));
      if (state.last_settlement) c.header("aip-last-settlement", state.last_settlement);
      return c.json(state.assignment, 200);
    },
  );

  app.openapi(
    createRoute({
      method: "post",
      path: "/v1/routes/{action_id}/settlement",
      operationId: "settleRoute",
      tags: ["routes"],
      summary: "Settle an action's reservation",
      description:
        "Present the route exactly as received: any difference from the pinned record (fence token, admission snapshot, " +
        "an extra or missing member) is `fence-lost`. Releases every reserved counter and the replica slot once; a repeat " +
        "returns `released: false` and changes nothing. `completed` closes the replica circuit and resets its failure " +
        "count, `outcome_unknown` counts toward the pinned threshold and opens the circuit for the pinned window, " +
        "`cancelled` and `lease_expired` leave the circuit alone. Another tenant's action is `not-found`.",
      security: bearer,
      middleware: [requireScope("routes:write")],
      request: { params: ActionParams, body: jsonBody(SettlementRequest) },
      responses: { 200: json(SettlementResult, "Settled (or already settled)"), ...bodyProblems("not-found", "fence-lost") },
    }),
    async (c) => {
      const tenant = requireTenant(c);
      const { action_id } = c.req.valid("param");
      // The assignment exactly as sent (SettlementRequest keeps it, `__proto__` member included):
      // any difference from the pinned route, an extra member too, must be fence-lost.
      const { assignment, outcome } = c.req.valid("json");
      return c.json(await registry.settleRoute(action_id, tenant, assignment, outcome), 200);
    },
  );
}
