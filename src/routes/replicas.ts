/**
 * Connector-host lifecycle (scope replicas:write): register, heartbeat, drain, offline.
 */
import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import type { AppEnv } from "../http/env.js";
import { requireScope } from "../http/guards.js";
import type { Registry } from "../registry/registry.js";
import { LifecycleOperation, LifecycleRequest, LifecycleResponse } from "../schemas.js";
import { bearer, json, jsonBody, pathId, problems } from "./common.js";

export function registerReplicaRoutes(app: OpenAPIHono<AppEnv>, registry: Registry): void {
  app.openapi(
    createRoute({
      method: "post",
      path: "/v1/replicas/{replica_id}/{operation}",
      tags: ["replicas"],
      summary: "A connector-host lifecycle transition",
      description:
        "`register` (a pre-provisioned replica: offline or lease expired, or live with its current sequence), " +
        "`heartbeat` (extends a live lease), `drain` (no new routes; pinned retries still served while the lease lasts), " +
        "`offline` (ends the lease; reserved routes are settled as lease_expired). Every transition is fenced on " +
        "`previous_sequence` and advances the sequence. Replaying a `request_id` with the same payload returns the same answer.",
      security: bearer,
      middleware: [requireScope("replicas:write")],
      request: {
        params: z.object({
          replica_id: pathId("replica_id", "crepl_0190f3a2c1d04b7e9f1a2b3c4d5e6f70"),
          operation: LifecycleOperation.openapi({ param: { name: "operation", in: "path" } }),
        }),
        body: jsonBody(LifecycleRequest),
      },
      responses: { 200: json(LifecycleResponse, "The replica's new lease and sequence"), ...problems("not-found", "conflict") },
    }),
    async (c) => {
      const { replica_id, operation } = c.req.valid("param");
      return c.json(await registry.replicaLifecycle(replica_id, operation, c.req.valid("json")), 200);
    },
  );
}
