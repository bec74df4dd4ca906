/**
 * Connector-host lifecycle (scope replicas:write): register, heartbeat, drain, offline.
 *
 * A host token speaks for one peer principal (its `peer_principal_id` claim) and can drive only
 * the replicas provisioned for that principal; any other replica is 404, as if it did not exist.
 * An operator (registry:admin) may drive any replica, e.g. to take a misbehaving one offline.
 */
import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import type { AppEnv } from "../http/env.js";
import { requireScope } from "../http/guards.js";
import { BearerRefusal } from "../http/problem.js";
import { announceLease, type LeaseListener } from "../maintenance/lease-events.js";
import { LEASE_TTL_MS } from "../limits.js";
import type { LifecycleOptions, LifecycleResult, Registry } from "../registry/registry.js";
import { LifecycleOperation, LifecycleRequest, LifecycleResponse } from "../schemas.js";
import { bearer, bodyProblems, json, jsonBody, pathId } from "./common.js";

export function registerReplicaRoutes(
  app: OpenAPIHono<AppEnv>,
  registry: Registry,
  options: { onLease?: LeaseListener | undefined; lifecycle?: LifecycleOptions | undefined } = {},
): void {
  const { onLease } = options;
  const lifecycle = options.lifecycle ?? {};
  app.openapi(
    createRoute({
      method: "post",
      path: "/v1/replicas/{replica_id}/{operation}",
      operationId: "replicaLifecycle",
      tags: ["replicas"],
      summary: "A connector-host lifecycle transition",
      description:
        "`register` (a pre-provisioned replica of its instance's active rollout version: offline or lease expired, " +
        "or live with its current sequence; the registry-owned active assignments are kept; the host proves what it runs: " +
        "`artifact_digest`, `manifest_digest`, `config_revision` and `capability_count` must equal the admitted version and " +
        "the instance, else 422 `admission` naming the `field`), " +
        "`heartbeat` (extends a live lease, keeps `ready` or `draining`), `drain` (no new routes; pinned retries still " +
        "served while the lease lasts), `offline` (ends the lease; reserved routes are settled as lease_expired). " +
        "`heartbeat`, `drain` and `offline` need `previous_sequence`; a stale one is a 409 carrying the current `sequence`. " +
        `Every transition advances the sequence by one; leases (\`lease_ttl_ms\`, ${LEASE_TTL_MS.min} to ${LEASE_TTL_MS.max}, default ${LEASE_TTL_MS.default}) run on the ` +
        "database clock; the catalog revision never moves. Replaying the last `request_id` with the same payload returns " +
        "the same answer and changes nothing; with another payload it is a 409. A host token (`replicas:write`) must carry " +
        "`peer_principal_id` and reaches only the replicas provisioned for that principal (others are 404); an operator " +
        "token (`registry:admin`) may drive any replica.",
      security: bearer,
      middleware: [requireScope("replicas:write", "registry:admin")],
      request: {
        params: z.object({
          replica_id: pathId("replica_id", "crepl_0190f3a2c1d04b7e9f1a2b3c4d5e6f70"),
          operation: LifecycleOperation.openapi({ param: { name: "operation", in: "path" } }),
        }),
        body: jsonBody(LifecycleRequest),
      },
      responses: { 200: json(LifecycleResponse, "The replica's new lease and sequence"), ...bodyProblems("not-found", "conflict", "admission") },
    }),
    async (c) => {
      const { replica_id, operation } = c.req.valid("param");
      const principal = c.get("principal");
      const request = c.req.valid("json");
      let answer: LifecycleResult;
      if (principal.peerPrincipalId) {
        answer = await registry.replicaLifecycle(replica_id, operation, request, principal.peerPrincipalId, lifecycle);
      } else if (!principal.scopes.has("registry:admin")) {
        throw new BearerRefusal("forbidden", "a connector-host token must carry peer_principal_id: it may drive only its own replicas", "insufficient_scope");
      } else {
        // Operator authority lives in the control role: a data-plane-only process refuses it (403).
        answer = await registry.operatorReplicaLifecycle(replica_id, operation, request, lifecycle);
      }
      // A live lease: lease maintenance must be due no later than its end.
      if (operation !== "offline" && answer.status !== "offline" && answer.lease_expires_at !== null) {
        announceLease(c, onLease, {
          source: "lifecycle",
          operation,
          replica_id: answer.replica_id,
          sequence: answer.sequence,
          expires_at: answer.lease_expires_at,
        });
      }
      return c.json(answer, 200);
    },
  );
}
