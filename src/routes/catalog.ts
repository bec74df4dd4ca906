/**
 * Tenant capability catalog (scope catalog:read): revision-consistent pages and single reads.
 * The tenant comes from the token; a token without one sees an empty catalog.
 *
 * Caching: the visible catalog is a function of the catalog revision, so a response for one
 * (tenant, request) is stable for as long as the revision is. The weak ETag carries the revision
 * plus a digest of the tenant and the request, so a validator can only ever match the response it
 * was issued for. A page request passes a matching validator's revision to the database, which
 * answers "not modified" without materializing the page.
 */
import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import type { Context } from "hono";
import type { AppEnv } from "../http/env.js";
import { requireScope } from "../http/guards.js";
import { RegistryError } from "../registry/errors.js";
import type { Registry } from "../registry/registry.js";
import { CatalogEntry, CatalogPage, CatalogQuery } from "../schemas.js";
import { bearer, json, pathId, problems } from "./common.js";

/** 32-bit FNV-1a of the UTF-8 bytes, as 8 hex digits: a cache key, not a security boundary. */
function fnv1a(text: string): string {
  let hash = 0x811c9dc5;
  for (const byte of new TextEncoder().encode(text)) {
    hash ^= byte;
    hash = Math.imul(hash, 0x01000193);
  }
  return (hash >>> 0).toString(16).padStart(8, "0");
}

/** Identifies one request of one tenant; with the revision it makes the response's ETag. */
const requestDigest = (tenantId: string | null, request: unknown) => fnv1a(JSON.stringify([tenantId, request]));
const etag = (revision: number, digest: string) => `W/"${revision}-${digest}"`;

const ETAG = /^(?:W\/)?"(\d{1,16})-([0-9a-f]{8})"$/;

/**
 * What If-None-Match says about this request: `any` for `*`, otherwise the newest revision among
 * the validators issued for this very request (digest match), or null.
 */
function validatorRevision(c: Context<AppEnv>, digest: string): number | "any" | null {
  const header = c.req.header("if-none-match");
  if (!header) return null;
  let newest: number | null = null;
  for (const candidate of header.split(",")) {
    const tag = candidate.trim();
    if (tag === "*") return "any";
    const match = ETAG.exec(tag);
    if (match?.[2] === digest && Number.isSafeInteger(Number(match[1]))) newest = Math.max(newest ?? 0, Number(match[1]));
  }
  return newest;
}

function cacheHeaders(c: Context<AppEnv>, revision: number, digest: string): void {
  c.header("etag", etag(revision, digest));
  // Per-tenant content: private caches only, revalidated on every use (a 304 costs one lock).
  c.header("cache-control", "private, no-cache");
  c.header("vary", "authorization");
}

const IfNoneMatch = z.object({
  "if-none-match": z.string().optional().openapi({ description: "ETag of an earlier response to the same request." }),
});

export function registerCatalogRoutes(app: OpenAPIHono<AppEnv>, registry: Registry): void {
  app.openapi(
    createRoute({
      method: "get",
      path: "/v1/catalog/capabilities",
      operationId: "catalogPage",
      tags: ["catalog"],
      summary: "A page of the capabilities the token's tenant may call",
      description:
        "Ordered by capability ID, bounded by item count (`limit`, default 100, clamped to [1, 200]) and by the summed " +
        "canonical size of the definitions (`page_bytes` at most `max_bytes`, default and maximum 4 MiB), all read at one " +
        "catalog revision; `total` counts every match at that revision. Pass `next_cursor` back as `cursor` with the same " +
        "filters; after a publication the cursor is stale (409 `stale-cursor`): restart from the first page. Replica " +
        "heartbeats, leases and capacity never change the revision. `If-None-Match` with the ETag answers 304 while the " +
        "revision is unchanged.",
      security: bearer,
      middleware: [requireScope("catalog:read")],
      request: { query: CatalogQuery, headers: IfNoneMatch },
      responses: {
        200: json(CatalogPage, "A catalog page"),
        304: { description: "Not modified: the catalog revision still matches If-None-Match" },
        ...problems("stale-cursor"),
      },
    }),
    async (c) => {
      const tenantId = c.get("principal").tenantId;
      const query = c.req.valid("query");
      const digest = requestDigest(tenantId, query);
      const known = validatorRevision(c, digest);
      const page = await registry.catalogPage(tenantId, { ...query, ...(typeof known === "number" ? { if_revision: known } : {}) });
      cacheHeaders(c, page.catalog_revision, digest);
      if (known === "any" || "not_modified" in page) return c.body(null, 304);
      return c.json(page, 200);
    },
  );

  app.openapi(
    createRoute({
      method: "get",
      path: "/v1/catalog/capabilities/{capability_id}",
      operationId: "catalogGet",
      tags: ["catalog"],
      summary: "One capability definition, if the token's tenant may call it",
      description: "No profile filter. 404 when the capability is not in the tenant's catalog (always without a tenant).",
      security: bearer,
      middleware: [requireScope("catalog:read")],
      request: { params: z.object({ capability_id: pathId("capability_id", "cap:crm.contacts.search") }), headers: IfNoneMatch },
      responses: {
        200: json(CatalogEntry, "The definition and the revision it was read at"),
        304: { description: "Not modified: the catalog revision still matches If-None-Match" },
        ...problems("not-found"),
      },
    }),
    async (c) => {
      const tenantId = c.get("principal").tenantId;
      const { capability_id } = c.req.valid("param");
      const entry = await registry.catalogGet(tenantId, capability_id);
      if (!entry.definition) {
        throw new RegistryError("not-found", `capability \`${capability_id}\` is not in this tenant's catalog`, { catalog_revision: entry.catalog_revision });
      }
      const digest = requestDigest(tenantId, capability_id);
      cacheHeaders(c, entry.catalog_revision, digest);
      const known = validatorRevision(c, digest);
      if (known === "any" || known === entry.catalog_revision) return c.body(null, 304);
      return c.json(entry as z.infer<typeof CatalogEntry>, 200);
    },
  );
}
