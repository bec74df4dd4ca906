/**
 * Control plane (scope registry:admin): publication and administrative reads. These use the
 * control database role; a data-plane-only deployment answers them with 403. The invariant
 * checker is the exception: read-only and granted to the data role too, it answers in every
 * deployment, so `aip-registry doctor` can check a data-plane-only one.
 */
import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import type { AppEnv } from "../http/env.js";
import { requireScope } from "../http/guards.js";
import { RegistryError } from "../registry/errors.js";
import { BINDINGS_PAGE } from "../limits.js";
import { ADMIN_RECORD_KINDS } from "../record-kinds.js";
import type { Registry } from "../registry/registry.js";
import {
  AdminRecord,
  AdminRecordKind,
  BindingsPage,
  CatalogPage,
  CatalogQuery,
  Id,
  InvariantReport,
  PageSize,
  PublicationRequest,
  PublicationResult,
} from "../schemas.js";
import { bearer, bodyProblems, json, jsonBody, pathId, problems } from "./common.js";

const Flag = z.enum(["true", "false"]).transform((v) => v === "true");

export function registerAdminRoutes(app: OpenAPIHono<AppEnv>, registry: Registry): void {
  const admin = requireScope("registry:admin");

  app.openapi(
    createRoute({
      method: "post",
      path: "/v1/admin/publications",
      operationId: "publish",
      tags: ["admin"],
      summary: "Publish a batch of catalog and fleet changes, all or nothing",
      description:
        "Applies every change under the exclusive publication lock and advances the catalog revision once if anything " +
        "but replica provisioning changed; identical re-puts change nothing, and a re-put that differs from the stored record in a fixed " +
        "field is a 409 `conflict` naming it (`field`), a version's `status` and a type's `enabled` included: those move only through " +
        "`set_version_status` and `set_connector_type_enabled`. `?dry_run=true` reports what would happen and changes nothing.",
      security: bearer,
      middleware: admin,
      request: { query: z.object({ dry_run: Flag.optional() }), body: jsonBody(PublicationRequest) },
      responses: { 200: json(PublicationResult, "The resulting revision and each change's outcome"), ...bodyProblems("not-found", "conflict", "admission") },
    }),
    async (c) => {
      const { dry_run } = c.req.valid("query");
      return c.json(await registry.publish(c.req.valid("json").changes, { dryRun: dry_run ?? false }), 200);
    },
  );

  app.openapi(
    createRoute({
      method: "get",
      path: "/v1/admin/bindings",
      operationId: "adminBindings",
      tags: ["admin"],
      summary: "A tenant's capability bindings, in (capability, instance) order",
      security: bearer,
      middleware: admin,
      request: {
        query: z.object({
          tenant_id: Id(),
          cursor: z.string().max(2048).optional().openapi({ description: "`next_cursor` of the previous page." }),
          limit: PageSize(BINDINGS_PAGE, "Bindings per page"),
        }),
      },
      responses: {
        200: json(BindingsPage, "A page of bindings"),
        ...problems(),
      },
    }),
    async (c) => {
      const { tenant_id, cursor, limit } = c.req.valid("query");
      return c.json(await registry.adminBindings(tenant_id, cursor, limit), 200);
    },
  );

  app.openapi(
    createRoute({
      method: "get",
      path: "/v1/admin/catalog/capabilities",
      operationId: "adminCatalogPage",
      tags: ["admin"],
      summary: "The catalog as a given tenant sees it, or every active definition (unbound=true)",
      security: bearer,
      middleware: admin,
      request: { query: CatalogQuery.extend({ tenant_id: Id().optional(), unbound: Flag.optional() }) },
      responses: { 200: json(CatalogPage, "A catalog page"), ...problems("stale-cursor") },
    }),
    async (c) => {
      const { tenant_id, unbound, ...query } = c.req.valid("query");
      return c.json(await registry.adminCatalogPage(tenant_id ?? null, unbound ?? false, query), 200);
    },
  );

  app.openapi(
    createRoute({
      method: "get",
      path: "/v1/admin/invariants",
      operationId: "checkInvariants",
      tags: ["admin"],
      summary: "Check the registry's bookkeeping invariants",
      description:
        "Counters against reservations, replica counts against routes, pinned limits, revisions. Empty `violations` means healthy. " +
        "Read-only and executable by the data role, so a data-plane-only deployment answers it too (`aip-registry doctor` asks it).",
      security: bearer,
      middleware: admin,
      responses: { 200: json(InvariantReport, "The invariant report"), ...problems() },
    }),
    async (c) => c.json(await registry.checkInvariants(), 200),
  );

  app.openapi(
    createRoute({
      method: "get",
      path: "/v1/admin/{kind}/{id}",
      operationId: "adminGet",
      tags: ["admin"],
      summary: "Read one registry record",
      description: "Identifiers may contain any character; percent-encode them in the path (`/` as `%2F`).",
      security: bearer,
      middleware: admin,
      request: {
        params: z.object({
          kind: AdminRecordKind.openapi({ param: { name: "kind", in: "path" } }),
          id: pathId("id", "cinst_0190f3a2c1d04b7e9f1a2b3c4d5e6f70"),
        }),
      },
      responses: { 200: json(AdminRecord, "The record"), ...problems("not-found") },
    }),
    async (c) => {
      const { kind, id } = c.req.valid("param");
      const record = await registry.adminGet(ADMIN_RECORD_KINDS[kind], id);
      if (!record) throw new RegistryError("not-found", `${ADMIN_RECORD_KINDS[kind].replace("_", " ")} \`${id}\` was not found`);
      return c.json(record, 200);
    },
  );
}
