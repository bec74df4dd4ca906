/**
 * Route export (scope registry:admin, the control role): every tenant's released routes, page by
 * page, so that evidence can be archived before route retention removes it, and the record of how
 * far an export went (which a retention policy requiring export waits for; it moves only over
 * what the pages handed out). `aip-registry routes export` drives both.
 */
import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import type { AppEnv } from "../http/env.js";
import { requireScope } from "../http/guards.js";
import { ROUTES_EXPORT_PAGE } from "../limits.js";
import type { Registry } from "../registry/registry.js";
import { PageSize, RouteExportRecord, RouteExportWatermarks, RoutesPage, TimeInput } from "../schemas.js";
import { bearer, bodyProblems, json, jsonBody, problems } from "./common.js";

export function registerRouteExportRoutes(app: OpenAPIHono<AppEnv>, registry: Registry): void {
  const admin = requireScope("registry:admin");

  app.openapi(
    createRoute({
      method: "get",
      path: "/v1/admin/routes",
      operationId: "exportRoutes",
      tags: ["admin"],
      summary: "Released routes of every tenant settled in a time range, for export",
      description:
        "Released routes whose last settlement is in [`settled_after`, `settled_before`), in (settled_at, action_id) order, " +
        "each as `GET /v1/routes/{action_id}` describes it. `settled_before` is applied as an hour before now at the latest, " +
        "so that every route settled before it has committed before the page is read (the answer says which bound applied). " +
        "A route reserved again after settlement is left out until it is released. Pass `next_cursor` back as `cursor` " +
        "with the same range until it is null. Pages that continue from where earlier pages reached (from the beginning, or " +
        "from the export watermark on) extend `export_read_before`: the record of what exports handed out, which the export " +
        "watermark cannot pass.",
      security: bearer,
      middleware: admin,
      request: {
        query: z.object({
          settled_before: TimeInput.openapi({ description: "Exclusive upper bound of the last settlement." }),
          settled_after: TimeInput.optional().openapi({ description: "Inclusive lower bound (absent: from the oldest route kept)." }),
          cursor: z.string().max(2048).optional().openapi({ description: "`next_cursor` of the previous page." }),
          limit: PageSize(ROUTES_EXPORT_PAGE, "Routes per page"),
        }),
      },
      responses: { 200: json(RoutesPage, "A page of routes"), ...problems() },
    }),
    async (c) => {
      const query = c.req.valid("query");
      return c.json(
        await registry.routesPage({
          settledBefore: query.settled_before,
          settledAfter: query.settled_after ?? null,
          cursor: query.cursor ?? null,
          ...(query.limit !== undefined ? { limit: query.limit } : {}),
        }),
        200,
      );
    },
  );

  app.openapi(
    createRoute({
      method: "post",
      path: "/v1/admin/route-exports",
      operationId: "recordRouteExport",
      tags: ["admin"],
      summary: "Record that an export covered every route settled before a time",
      description:
        "Moves the export watermark (`exported_before`) to `settled_before` (at most an hour before now) once an export of " +
        "[`settled_after`, `settled_before`) is safely stored. When the retention policy requires export, retention removes only " +
        "routes settled before it. It moves only over routes that export pages (`GET /v1/admin/routes`) handed out: no " +
        "further than `export_read_before`, and an export none of whose pages were read past the watermark is 409 `conflict`. " +
        "An export that started after the current watermark left routes out: 409 `conflict`, naming it. The watermark never " +
        "moves back.",
      security: bearer,
      middleware: admin,
      request: { body: jsonBody(RouteExportRecord) },
      responses: { 200: json(RouteExportWatermarks, "The watermarks after the record"), ...bodyProblems("conflict") },
    }),
    async (c) => {
      const body = c.req.valid("json");
      return c.json(await registry.recordRouteExport(body.settled_after ?? null, body.settled_before), 200);
    },
  );
}
