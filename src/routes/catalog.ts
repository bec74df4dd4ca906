/**
 * Tenant capability catalog (scope catalog:read): revision-consistent pages, single reads, and the
 * tenant's change feed (functions/31_catalog_changes.sql). The tenant comes from the token; a
 * token without one sees an empty catalog.
 *
 * Answers are served through the cache of src/catalog/serve.ts, keyed on the tenant's catalog
 * revision: at most one statement per request, which on a warm cache only confirms that revision
 * (shared among concurrent requests on Node). Every answer carries a strong ETag naming the
 * tenant's revision and the tenant's request, and `Cache-Control: private,
 * no-cache`: private because the answer is one tenant's, no-cache because only the registry can
 * tell whether a publication has happened since (a 304 costs one tiny statement). `Vary:
 * Authorization` keeps shared caches that ignore `private` from mixing tenants. Where the server
 * compresses (Node), answers are compressed once per cached answer and coding (src/catalog/serve.ts)
 * and also vary on Accept-Encoding.
 */
import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import type { Context } from "hono";
import type { CatalogOutcome, CatalogRequest, CatalogServer, Defer } from "../catalog/serve.js";
import type { AppEnv } from "../http/env.js";
import { requireScope } from "../http/guards.js";
import { CATALOG_PAGE, CATALOG_PAGE_BYTES } from "../limits.js";
import { CATALOG_CACHE_HEADER } from "../observability/request-info.js";
import { RegistryError } from "../registry/errors.js";
import { CatalogChanges, CatalogChangesQuery, CatalogEntry, CatalogPage, CatalogQuery } from "../schemas.js";
import { bearer, json, pathId, problems } from "./common.js";

const IfNoneMatch = z.object({
  "if-none-match": z.string().optional().openapi({ description: "ETag of an earlier response to the same request, or `*`." }),
});

const CacheHeaders = {
  ETag: {
    description:
      "Strong validator: the catalog revision and a digest of the tenant and the request, and the content coding of a compressed answer " +
      '(`"<revision>-<digest>-br"`). `If-None-Match` with any of them for the same request answers 304 while the revision is unchanged.',
    schema: { type: "string" as const },
  },
  "Cache-Control": { description: "`private, no-cache`: one tenant's answer, revalidated on every use.", schema: { type: "string" as const } },
};
const NotModified = { description: "Not modified: the tenant's catalog revision still matches If-None-Match", headers: CacheHeaders };

/**
 * Where a Worker must be told about work that outlives the response; nowhere on Node. Looked up
 * only when there is such work (a cache write after a miss): Hono's executionCtx getter throws
 * where there is none, and an Error per warm hit is measurable CPU (docs/decisions.md).
 */
function deferOf(c: Context<AppEnv>): Defer {
  return (work) => {
    let ctx: { waitUntil(work: Promise<unknown>): void };
    try {
      ctx = c.executionCtx;
    } catch {
      return; // Node: the write runs unawaited.
    }
    ctx.waitUntil(work);
  };
}

function respond(c: Context<AppEnv>, catalog: CatalogServer, outcome: CatalogOutcome, notFound: () => RegistryError) {
  c.header(CATALOG_CACHE_HEADER, outcome.cache);
  if (outcome.status === 404) throw notFound();
  c.header("etag", outcome.etag);
  c.header("cache-control", "private, no-cache");
  c.header("vary", catalog.compresses ? "authorization, accept-encoding" : "authorization");
  if (outcome.status === 304) return c.body(null, 304);
  c.header("content-type", "application/json");
  if (outcome.coding) c.header("content-encoding", outcome.coding);
  // The kept bytes themselves, not a copy (zlib's Buffers are views of a plain ArrayBuffer).
  return c.body(outcome.body as string | Uint8Array<ArrayBuffer>, 200);
}

/** What of the request the catalog server needs besides the tenant and the query. */
function catalogRequest(c: Context<AppEnv>): CatalogRequest {
  return { ifNoneMatch: c.req.header("if-none-match"), acceptEncoding: c.req.header("accept-encoding"), defer: deferOf(c) };
}

export function registerCatalogRoutes(app: OpenAPIHono<AppEnv>, catalog: CatalogServer): void {
  app.openapi(
    createRoute({
      method: "get",
      path: "/v1/catalog/capabilities",
      operationId: "catalogPage",
      tags: ["catalog"],
      summary: "A page of the capabilities the token's tenant may call",
      description:
        `Ordered by capability ID, bounded by item count (\`limit\`, default ${CATALOG_PAGE.default}, clamped to [1, ${CATALOG_PAGE.max}]) and by the summed ` +
        `canonical size of the definitions (\`page_bytes\` at most \`max_bytes\`, default and maximum ${CATALOG_PAGE_BYTES.max / 1024 / 1024} MiB), all read at one ` +
        "catalog revision, the tenant's: the publication at which what this tenant sees last changed. `total` counts every match " +
        "at that revision. Pass `next_cursor` back as `cursor` with the same filters; after a publication that changes what the " +
        "tenant sees the cursor is stale (409 `stale-cursor`): restart from the first page. Other tenants' publications, replica " +
        "heartbeats, leases and capacity never change the tenant's revision. `If-None-Match` with the ETag answers 304 while the " +
        "tenant's revision is unchanged.",
      security: bearer,
      middleware: [requireScope("catalog:read")],
      request: { query: CatalogQuery, headers: IfNoneMatch },
      responses: {
        200: { ...json(CatalogPage, "A catalog page"), headers: CacheHeaders },
        304: NotModified,
        ...problems("stale-cursor"),
      },
    }),
    async (c) => {
      const outcome = await catalog.page(c.get("principal").tenantId, c.req.valid("query"), catalogRequest(c));
      return respond(c, catalog, outcome, () => new RegistryError("internal", "a catalog page is never missing"));
    },
  );

  app.openapi(
    createRoute({
      method: "get",
      path: "/v1/catalog/changes",
      operationId: "catalogChanges",
      tags: ["catalog"],
      summary: "What changed in the token's tenant's catalog after a revision",
      description:
        "The capabilities of the tenant that were added, changed (with their definitions) or removed (tombstones) after `since`, " +
        "a `catalog_revision` the registry answered this tenant (a catalog page's, or the last changes page's), in pages ordered by " +
        "capability ID, all at one revision. After the last page the caller holds the catalog at `catalog_revision`: poll " +
        "again with `since` set to it. When nothing changed after `since` the answer is an empty last page (`changes` empty, " +
        "`next_cursor` null; one index lookup, none at all within the server's staleness bound). `If-None-Match` with the ETag " +
        "of an earlier answer to the same request answers 304 while the tenant's revision is unchanged. `next_cursor` is bound " +
        "to the tenant and to `since`: pass it back unchanged with the same `since` (another tenant's cursor, or a catalog " +
        "page's, is 400). 410 `changes-expired` when `since` is older than the history kept (`CATALOG_CHANGES_KEEP_REVISIONS`, " +
        "`CATALOG_CHANGES_KEEP_SECONDS`): list the catalog again. Gateway sync recipe: docs/catalog-sync.md.",
      security: bearer,
      middleware: [requireScope("catalog:read")],
      request: { query: CatalogChangesQuery, headers: IfNoneMatch },
      responses: {
        200: { ...json(CatalogChanges, "The changes after `since` (none: an empty last page)"), headers: CacheHeaders },
        304: NotModified,
        ...problems("changes-expired"),
      },
    }),
    async (c) => {
      const outcome = await catalog.changes(c.get("principal").tenantId, c.req.valid("query"), catalogRequest(c));
      return respond(c, catalog, outcome, () => new RegistryError("internal", "a change feed page is never missing"));
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
        200: { ...json(CatalogEntry, "The definition and the revision it was read at"), headers: CacheHeaders },
        304: NotModified,
        ...problems("not-found"),
      },
    }),
    async (c) => {
      const { capability_id } = c.req.valid("param");
      const outcome = await catalog.definition(c.get("principal").tenantId, capability_id, catalogRequest(c));
      return respond(
        c,
        catalog,
        outcome,
        () => new RegistryError("not-found", `capability \`${capability_id}\` is not in this tenant's catalog`, { catalog_revision: outcome.revision }),
      );
    },
  );
}
