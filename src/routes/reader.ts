/**
 * The registry reader (scope registry:read): the identity and state of one connector version,
 * instance or replica, for host admission and callback and event ingress. Data role; never a
 * credential or configuration reference. A tenant-scoped token sees only its tenant's instances,
 * their replicas and the versions they run; a host token (peer_principal_id) only its own
 * replicas, their instances and versions; anything else is 404, as if it did not exist.
 */
import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import type { AppEnv } from "../http/env.js";
import { requireScope } from "../http/guards.js";
import { RegistryError } from "../registry/errors.js";
import type { ReaderKind, Registry } from "../registry/registry.js";
import { READER_RECORDS } from "../schemas.js";
import { bearer, json, pathId, problems } from "./common.js";

const READS: { path: string; kind: ReaderKind; operationId: string; example: string }[] = [
  { path: "versions", kind: "version", operationId: "readVersion", example: "cver_crm_1_5_0" },
  { path: "instances", kind: "instance", operationId: "readInstance", example: "cinst_tenant_a_crm" },
  { path: "replicas", kind: "replica", operationId: "readReplica", example: "crepl_tenant_a_crm_euw1a" },
];

export function registerReaderRoutes(app: OpenAPIHono<AppEnv>, registry: Registry): void {
  for (const read of READS) {
    app.openapi(
      createRoute({
        method: "get",
        path: `/v1/registry/${read.path}/{id}`,
        operationId: read.operationId,
        tags: ["registry"],
        summary: `A connector ${read.kind}'s identity and state`,
        description:
          "The registry reader of the specification (host admission, callback and event ingress). A token with `tenant_id` " +
          "sees its tenant's instances, their replicas and the versions they run; a token with `peer_principal_id` its own " +
          "replicas, their instances and versions; a token with neither every record. Anything else is 404.",
        security: bearer,
        middleware: [requireScope("registry:read")],
        request: { params: z.object({ id: pathId("id", read.example) }) },
        responses: { 200: json(READER_RECORDS[read.kind], `The ${read.kind}`), ...problems("not-found") },
      }),
      async (c) => {
        const { id } = c.req.valid("param");
        const principal = c.get("principal");
        const record = await registry.registryRead(read.kind, id, { tenantId: principal.tenantId, peerPrincipalId: principal.peerPrincipalId });
        if (!record) throw new RegistryError("not-found", `connector ${read.kind} \`${id}\` was not found`);
        return c.json(record, 200);
      },
    );
  }
}
