/**
 * GET /metrics (Prometheus text format). Registered only when the app is given metrics options
 * (the Node server); a Worker has no process to scrape.
 */
import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import type { Authenticator } from "../http/auth.js";
import type { AppEnv } from "../http/env.js";
import { authenticate, requireScope } from "../http/guards.js";
import type { Registry } from "../registry/registry.js";
import { bearer, problems } from "../routes/common.js";
import type { MetricsOptions, RegistryMetrics } from "./metrics.js";
import { PROMETHEUS_CONTENT_TYPE } from "./prometheus.js";

export function registerMetricsRoute(
  app: OpenAPIHono<AppEnv>,
  deps: { registry: Registry; metrics: RegistryMetrics; authenticator: Authenticator; options: MetricsOptions },
): void {
  const guarded = !deps.options.public;
  app.openapi(
    createRoute({
      method: "get",
      path: "/metrics",
      operationId: "metrics",
      tags: ["operations"],
      summary: "Prometheus metrics (Node server)",
      description:
        "Request latency histograms by route template and status, resolve outcomes by problem code, catalog cache outcomes, " +
        "lease-maintenance runs and failures, database pool usage, the build, process and runtime metrics, and fleet gauges read " +
        "from the fleet status at scrape time. Needs a bearer token with `fleet:read` unless the server runs with public metrics.",
      ...(guarded
        ? { security: bearer, middleware: [authenticate(deps.authenticator), requireScope("fleet:read", "registry:admin")] as const }
        : { security: [] }),
      responses: {
        200: { description: "Prometheus text exposition format 0.0.4", content: { [PROMETHEUS_CONTENT_TYPE]: { schema: z.string() } } },
        ...(guarded ? problems() : {}),
      },
    }),
    async (c) => c.text(await deps.metrics.scrape(deps.registry), 200, { "content-type": PROMETHEUS_CONTENT_TYPE, "cache-control": "no-store" }),
  );
}
