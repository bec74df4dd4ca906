/**
 * What the Node server adds to /metrics beyond the app's own metrics (src/observability/metrics.ts):
 * process and runtime metrics, the build it runs, its pools, its transport refusals and its lease
 * maintenance. Node only: the Worker never imports this module (its bundle must not carry
 * prom-client, and a Worker has no process to describe; scripts/bundle-size.ts enforces it).
 */
import { collectDefaultMetrics, Registry } from "prom-client";
import type { Config } from "../config.js";
import { FUNCTION_SET, FUNCTIONS_CHECKSUM, RELEASE, SCHEMA_VERSION } from "../db/schema-version.js";
import type { MaintenanceStats } from "../maintenance/cycle.js";
import type { KeySetSource } from "./key-set-metrics.js";
import type { MetricsOptions, PoolUsage } from "./metrics.js";

let processRegistry: Registry | undefined;

/**
 * prom-client names three gauges `_total`, a suffix Prometheus reserves for counters (`promtool
 * check metrics` refuses them). They are renamed `_all` (docs/observability.md); each is also the
 * sum over `type` of the gauge of the same name without the suffix.
 */
const GAUGES_NAMED_TOTAL = /^(# (?:HELP|TYPE) )?nodejs_active_(handles|requests|resources)_total(?=[ {])/gm;

/**
 * `process_*` and `nodejs_*` (CPU, memory, heap, event-loop lag, GC, handles, file descriptors)
 * from prom-client's default collectors: the names every Node dashboard expects, but for the three
 * above. One collector set per process, shared by every server in it: they observe the process (a
 * GC observer, an event-loop delay histogram), not a server.
 */
async function processMetricsText(): Promise<string> {
  if (!processRegistry) {
    processRegistry = new Registry();
    collectDefaultMetrics({ register: processRegistry });
  }
  return (await processRegistry.metrics()).replace(GAUGES_NAMED_TOTAL, "$1nodejs_active_$2_all");
}

/** The labels of `aip_build_info`: what runs here, for dashboards that compare a fleet of servers. */
function buildInfo(config: Pick<Config, "DATABASE_URL" | "REGISTRY_MODE">): Record<string, string> {
  return {
    version: RELEASE,
    runtime: "node",
    node_version: process.versions.node,
    schema_version: String(SCHEMA_VERSION),
    functions_checksum: FUNCTIONS_CHECKSUM,
    function_set: FUNCTION_SET,
    database: config.DATABASE_URL ? "postgres" : "pglite",
    registry_mode: config.REGISTRY_MODE,
  };
}

/** The Node server's metrics options. */
export function nodeMetrics(
  config: Pick<Config, "DATABASE_URL" | "REGISTRY_MODE" | "METRICS_PUBLIC">,
  sources: {
    pools: () => PoolUsage[];
    transportRefusals: () => Record<string, number>;
    /** Absent when lease maintenance is off. */
    maintenance: { readonly stats: MaintenanceStats } | undefined;
    /** The identity provider's key set, when tokens are verified against one (AUTH_JWKS_URL). */
    keySet?: KeySetSource;
  },
): MetricsOptions {
  const { maintenance, keySet } = sources;
  return {
    pools: sources.pools,
    public: config.METRICS_PUBLIC,
    transportRefusals: sources.transportRefusals,
    ...(maintenance ? { maintenance: () => maintenance.stats } : {}),
    ...(keySet ? { keySet } : {}),
    buildInfo: buildInfo(config),
    extraText: processMetricsText,
  };
}
