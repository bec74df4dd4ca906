/**
 * The activity history's two ends in the app: a middleware that turns every finished request into
 * one sample (src/observability/activity.ts) and GET /v1/fleet/activity (fleet:read), which
 * answers the history the dashboard draws: requests per minute by kind, refusals by problem
 * code, latency percentiles, the busiest tenants or one tenant's own view, and the build.
 */
import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import type { AppEnv } from "../http/env.js";
import { requireScope } from "../http/guards.js";
import { bearer, json, problems } from "../routes/common.js";
import { activityKind, HISTORY_MINUTES, type ActivityQuery, type ActivityReport, type ActivitySample } from "./activity.js";
import type { RequestObserver } from "./request-trace.js";

/** Where samples go and reports come from: memory on Node, a Durable Object on Workers. */
export interface ActivityRecorder {
  /** A returned promise is work the platform must let finish after the response (a Worker's waitUntil). */
  record(sample: ActivitySample): Promise<unknown> | undefined;
  /** Absent: the history is recorded elsewhere only (a Worker with Analytics Engine and no ActivityHistory object), and not served. */
  report?(query: ActivityQuery): ActivityReport | Promise<ActivityReport>;
  /** `process` (this Node process's requests) or `deployment` (every isolate of a Worker). */
  readonly scope: "process" | "deployment";
}

/** What runs: shown on the dashboard beside what happened. */
export interface BuildInfo {
  version: string;
  runtime: "node" | "workers";
  schema_version: number;
  functions_checksum: string;
}

/** The activity history as an observer of finished requests (src/observability/request-trace.ts). */
export function activityObserver(recorder: ActivityRecorder): RequestObserver {
  return (facts, _span, c) => {
    const kind = activityKind(facts.method, facts.route);
    const outcome = facts.code ?? (kind === "resolve" ? (facts.routeOutcome ?? "ok") : kind === "catalog" ? (facts.catalogCache ?? "ok") : "ok");
    const pending = recorder.record({
      kind,
      outcome,
      refused: facts.code !== undefined,
      latencyMs: facts.latencyMs,
      tenantId: facts.tenantId,
      route: facts.route,
      method: facts.method,
      status: facts.status,
    });
    // A Worker's send to its ActivityHistory object runs after the response; Node has no execution context.
    if (pending) {
      const guarded = pending.catch(() => {});
      try {
        c.executionCtx.waitUntil(guarded);
      } catch {
        // No execution context: the promise runs on its own.
      }
    }
  };
}

const LatencySummary = z.object({ p50: z.number().nullable(), p95: z.number().nullable(), p99: z.number().nullable() });
const PerKind = <T extends z.ZodTypeAny>(schema: T) => z.record(z.string(), schema);

const ActivityAnswer = z
  .object({
    from: z.string().openapi({ description: "The first minute covered (ISO 8601)" }),
    to: z.string().openapi({ description: "The last minute covered (the current one)" }),
    step_seconds: z.literal(60),
    tenant_id: z.string().nullable().openapi({ description: "The tenant the report is limited to (null: every tenant)" }),
    scope: z.enum(["process", "deployment"]).openapi({
      description: "`process`: this Node server's requests since it started (each server keeps its own); `deployment`: every isolate of the Worker",
    }),
    build: z.object({ version: z.string(), runtime: z.enum(["node", "workers"]), schema_version: z.number(), functions_checksum: z.string() }),
    series: z.array(
      z.object({
        at: z.string(),
        requests: PerKind(z.number()).openapi({ description: "Requests per kind: resolve, settle, publish, catalog, lifecycle, other" }),
        refusals: PerKind(z.number()).openapi({ description: "Refusals by problem code" }),
        latency_ms: PerKind(LatencySummary),
      }),
    ),
    totals: z.object({
      requests: PerKind(z.number()),
      refused: PerKind(z.number()),
      outcomes: PerKind(PerKind(z.number())),
      refusals: PerKind(z.number()),
      latency_ms: PerKind(LatencySummary),
    }),
    tenants: z.array(
      z.object({
        tenant_id: z.string(),
        requests: z.number(),
        resolves: z.number(),
        settlements: z.number(),
        refusals: z.number(),
        p99_ms: z.number().nullable(),
      }),
    ),
  })
  .openapi("FleetActivity");

/** Where the route reads the history from. */
export interface ActivitySource {
  report(query: ActivityQuery): ActivityReport | Promise<ActivityReport>;
  readonly scope: ActivityRecorder["scope"];
}

export function registerActivityRoute(app: OpenAPIHono<AppEnv>, source: ActivitySource, build: BuildInfo): void {
  app.openapi(
    createRoute({
      method: "get",
      path: "/v1/fleet/activity",
      operationId: "fleetActivity",
      tags: ["fleet"],
      summary: "What the registry served, minute by minute (the dashboard's history)",
      description:
        "Requests per minute by kind (resolve, settle, publish, catalog, lifecycle, other), refusals by problem code and latency " +
        `percentiles over the last \`minutes\` (default 60, at most ${HISTORY_MINUTES}), with the busiest tenants, or one tenant's own ` +
        "view with `tenant_id`. The Node server answers for its own process (kept in memory); a Worker for the whole deployment " +
        "(kept in a Durable Object). docs/observability.md.",
      security: bearer,
      middleware: [requireScope("fleet:read", "registry:admin")],
      request: {
        query: z.object({
          minutes: z.coerce.number().int().min(1).max(HISTORY_MINUTES).optional().openapi({ description: "The window, in minutes up to now (default 60)" }),
          tenant_id: z.string().min(1).max(256).optional().openapi({ description: "Limit the report to this tenant" }),
        }),
      },
      responses: { 200: json(ActivityAnswer, "The activity history"), ...problems() },
    }),
    async (c) => {
      const query = c.req.valid("query");
      const report = await source.report({ minutes: query.minutes ?? 60, tenantId: query.tenant_id });
      return c.json({ ...report, scope: source.scope, build }, 200);
    },
  );
}
