/**
 * Workers metrics: one Workers Analytics Engine data point per request, when the Worker has an
 * Analytics Engine dataset bound as AIP_ANALYTICS (wrangler.toml, optional). The figures the Node
 * server's /metrics gives (request latency by route and status, problem answers by code, resolve
 * outcomes, catalog cache outcomes) are queried from it with the SQL API (docs/observability.md).
 * writeDataPoint does not block and cannot fail the request.
 *
 * The data point, in the order of the SQL API's columns:
 * - index1: the verified tenant ("" without one): the sampling key, so one tenant's figures stay exact;
 * - blob1 kind (resolve, settle, publish, catalog, lifecycle, other), blob2 outcome (the problem
 *   code of a refusal, else created / existing / reacquired / hit / revalidated / miss / ok),
 *   blob3 route template, blob4 method, blob5 status, blob6 tenant;
 * - double1 latency (ms), double2 status, double3 1 for a refusal else 0.
 */
import type { ActivitySample } from "./activity.js";

/** The part of the Workers AnalyticsEngineDataset binding used here. */
export interface AnalyticsDataset {
  writeDataPoint(point: { indexes?: string[]; blobs?: string[]; doubles?: number[] }): void;
}

export function writeDataPoint(dataset: AnalyticsDataset, sample: ActivitySample): void {
  const tenant = sample.tenantId ?? "";
  dataset.writeDataPoint({
    // An index holds at most 96 bytes.
    indexes: [tenant.slice(0, 96)],
    blobs: [sample.kind, sample.outcome, sample.route, sample.method, String(sample.status), tenant],
    doubles: [Math.round(sample.latencyMs * 1000) / 1000, sample.status, sample.refused ? 1 : 0],
  });
}
