/**
 * Operations endpoints (no auth): liveness, readiness and the OpenAPI document (its reference page
 * is src/docs/route.ts). The document is a function of the registered routes only: it is built
 * once per process, on its first request (when every route is registered), and compressed once
 * per coding: building it per request cost tens of milliseconds (docs/decisions.md).
 */
import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import { UNKNOWN_SCHEMA, verifySchema } from "../registry/schema-check.js";
import type { AppEnv } from "../http/env.js";
import { FixedBody, type Compressor } from "../http/compression.js";
import { fromDatabaseError } from "../registry/errors.js";
import type { Registry } from "../registry/registry.js";
import { Readiness } from "../schemas.js";
import { json } from "./common.js";

export function registerOpsRoutes(app: OpenAPIHono<AppEnv>, registry: Registry, compressor?: Compressor): void {
  app.openapi(
    createRoute({
      method: "get",
      path: "/healthz",
      operationId: "health",
      tags: ["operations"],
      summary: "Liveness: the process serves requests",
      security: [],
      responses: { 200: json(z.object({ status: z.literal("ok") }), "Alive") },
    }),
    (c) => c.json({ status: "ok" as const }, 200),
  );

  app.openapi(
    createRoute({
      method: "get",
      path: "/readyz",
      operationId: "readiness",
      tags: ["operations"],
      summary: "Readiness: the database answers, holds this build's function set and tables it can serve",
      security: [],
      responses: { 200: json(Readiness, "Ready"), 503: json(Readiness, "Not ready") },
    }),
    async (c) => {
      // A catalog replica's state is detail, never a reason to be not ready: the primary answers
      // every catalog read the replica cannot (src/registry/catalog-replica.ts).
      const replica = replicaStatus(registry);
      try {
        const verdict = await verifySchema(registry);
        const { ok, ...rest } = verdict;
        const detail = { ...rest, ...(await replica) };
        return ok ? c.json({ status: "ready" as const, ...detail }, 200) : c.json({ status: "not_ready" as const, ...detail }, 503);
      } catch (error) {
        const reason = fromDatabaseError(error).message;
        return c.json(
          {
            status: "not_ready" as const,
            reason,
            ...UNKNOWN_SCHEMA,
            ...(await replica),
          },
          503,
        );
      }
    },
  );

  let document: FixedBody | undefined;
  app.get("/openapi.json", (c) => {
    document ??= new FixedBody(JSON.stringify(app.getOpenAPI31Document(OPENAPI_DOCUMENT)), "application/json");
    return document.respond(c, compressor);
  });
  app.openAPIRegistry.registerComponent("securitySchemes", "bearer", { type: "http", scheme: "bearer", bearerFormat: "JWT" });
}

/** The catalog replica's state, probed for its lag unless that takes longer than a second. */
async function replicaStatus(registry: Registry) {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<null>((resolve) => {
    timer = setTimeout(() => resolve(null), READINESS_REPLICA_PROBE_MS);
  });
  try {
    const status = (await Promise.race([registry.catalogReplicaStatus({ probe: true }), late])) ?? (await registry.catalogReplicaStatus());
    return status ? { catalog_replica: status } : {};
  } finally {
    if (timer !== undefined) clearTimeout(timer);
  }
}

const READINESS_REPLICA_PROBE_MS = 1_000;

const OPENAPI_DOCUMENT = {
  openapi: "3.1.0",
  info: {
    title: "AIP connector registry and router",
    version: "1.0.0",
    description:
      "Revision-consistent, tenant-scoped capability catalog and durable, pinned action routes. " + "Errors are RFC 9457 problem details with a stable `code`.",
    // No `license` yet: the project has not chosen one (package.json names none either).
  },
  // Relative: every deployment serves its own document, so the API is wherever this came from.
  servers: [{ url: "/", description: "The registry that serves this document" }],
  tags: [
    { name: "catalog", description: "Tenant capability catalog" },
    { name: "routes", description: "Durable action routes" },
    { name: "replicas", description: "Connector-host lifecycle" },
    { name: "registry", description: "Registry reader: version, instance and replica identities" },
    { name: "admin", description: "Control plane" },
    { name: "fleet", description: "Fleet status and lease maintenance" },
    { name: "operations", description: "Health, readiness and documentation" },
  ],
} satisfies Parameters<OpenAPIHono<AppEnv>["getOpenAPI31Document"]>[0];
