/**
 * Tenant capability catalog (scope catalog:read): revision-consistent pages and single reads.
 * The tenant comes from the token; a token without one sees an empty catalog.
 */
import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import type { Context } from "hono";
import type { AppEnv } from "../http/env.js";
import { requireScope } from "../http/guards.js";
import { RegistryError } from "../registry/errors.js";
import type { Registry } from "../registry/registry.js";
import { CatalogEntry, CatalogPage, CatalogQuery } from "../schemas.js";
import { bearer, json, pathId, problems } from "./common.js";

/** Weak validator carrying the revision: a page for the same URL and token is stable within one. */
export function revisionEtag(revision: number): string {
  return `W/"catalog-${revision}"`;
}

function notModified(c: Context, revision: number): boolean {
  const etag = revisionEtag(revision);
  c.header("etag", etag);
  c.header("cache-control", "private, no-cache");
  c.header("vary", "authorization");
  const match = c.req.header("if-none-match");
  return match !== undefined && match.split(",").some((candidate) => candidate.trim() === etag);
}

export function registerCatalogRoutes(app: OpenAPIHono<AppEnv>, registry: Registry): void {
  app.openapi(
    createRoute({
      method: "get",
      path: "/v1/catalog/capabilities",
      tags: ["catalog"],
      summary: "A page of the capabilities the token's tenant may call",
      description:
        "Ordered by capability ID, bounded by item count and serialized bytes, all at one catalog revision. " +
        "Pass `next_cursor` back as `cursor`; after a publication the cursor is stale (409 `stale-cursor`): restart from the first page.",
      security: bearer,
      middleware: [requireScope("catalog:read")],
      request: { query: CatalogQuery },
      responses: {
        200: json(CatalogPage, "A catalog page"),
        304: { description: "Not modified: the catalog revision still matches If-None-Match" },
        ...problems("stale-cursor"),
      },
    }),
    async (c) => {
      const page = await registry.catalogPage(c.get("principal").tenantId, c.req.valid("query"));
      if (notModified(c, page.catalog_revision)) return c.body(null, 304);
      return c.json(page, 200);
    },
  );

  app.openapi(
    createRoute({
      method: "get",
      path: "/v1/catalog/capabilities/{capability_id}",
      tags: ["catalog"],
      summary: "One capability definition, if the token's tenant may call it",
      security: bearer,
      middleware: [requireScope("catalog:read")],
      request: { params: z.object({ capability_id: pathId("capability_id", "cap:crm.contacts.search") }) },
      responses: {
        200: json(CatalogEntry, "The definition and the revision it was read at"),
        304: { description: "Not modified" },
        ...problems("not-found"),
      },
    }),
    async (c) => {
      const { capability_id } = c.req.valid("param");
      const entry = await registry.catalogGet(c.get("principal").tenantId, capability_id);
      if (!entry.definition) {
        throw new RegistryError("not-found", `capability \`${capability_id}\` is not in this tenant's catalog`, { catalog_revision: entry.catalog_revision });
      }
      if (notModified(c, entry.catalog_revision)) return c.body(null, 304);
      return c.json(entry as z.infer<typeof CatalogEntry>, 200);
    },
  );
}
