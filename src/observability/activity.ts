/**
 * What the registry served, minute by minute: the history behind the dashboard's rates, refusals
 * and latency percentiles (GET /v1/fleet/activity, src/observability/activity-route.ts).
 *
 * Each request is one sample: its kind (resolve, settle, publish, catalog, lifecycle, other), its
 * outcome (`created`, `existing`, `ok`, a catalog cache outcome, or the problem code of a
 * refusal), its latency and the verified tenant. Samples are added to the current minute's
 * bucket: counts per kind and outcome, a latency histogram per kind, and the same per tenant
 * (at most MAX_TENANTS_PER_MINUTE tenants a minute; the rest are counted under OTHER_TENANTS).
 * Recording is a few counter increments: no clock read beyond the request's own, no I/O.
 *
 * Buckets merge by adding (histograms have fixed bounds), so a store may hold them in memory
 * (the Node server, one process: MemoryActivity) or receive them from many isolates and keep them
 * durably (the Worker's Durable Object, src/observability/activity-store.ts); `summarize` turns
 * the buckets of a window into the report either way. docs/observability.md says why each lives
 * where it does.
 */

import { PROBLEM_STATUS } from "../registry/errors.js";

const ACTIVITY_KINDS = ["resolve", "settle", "publish", "catalog", "lifecycle", "other"] as const;
export type ActivityKind = (typeof ACTIVITY_KINDS)[number];

/** One finished request. */
export interface ActivitySample {
  kind: ActivityKind;
  /** The problem code of a refusal, else how it was served (`created`, `existing`, `reacquired`, `hit`, ..., `ok`). */
  outcome: string;
  refused: boolean;
  latencyMs: number;
  tenantId?: string | undefined;
  /** The route template, method and status: kept by the Worker's Analytics Engine data points, not by the buckets. */
  route: string;
  method: string;
  status: number;
}

/** Upper bounds (ms) of the latency histogram's buckets; the last bucket is everything above. */
const LATENCY_BOUNDS_MS = [0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 50, 75, 100, 150, 200, 300, 500, 750, 1000, 2000, 5000, 10000] as const;
const BUCKETS = LATENCY_BOUNDS_MS.length + 1;

/** Sparse latency histogram: bucket index -> count. */
type Histogram = Record<number, number>;

interface OpStats {
  count: number;
  refused: number;
  latency: Histogram;
}

interface TenantStats {
  /** `<kind>:<outcome>` -> count. */
  outcomes: Record<string, number>;
  /** All kinds together. */
  latency: Histogram;
}

/** One minute of activity; plain JSON, so it can be sent to a store and kept there. */
export interface ActivityBucket {
  /** The minute, as Unix epoch minutes. */
  minute: number;
  ops: Partial<Record<ActivityKind, OpStats>>;
  /** `<kind>:<outcome>` -> count. */
  outcomes: Record<string, number>;
  tenants: Record<string, TenantStats>;
}

export const MAX_TENANTS_PER_MINUTE = 500;
/** Where a minute's tenants beyond MAX_TENANTS_PER_MINUTE are counted. */
export const OTHER_TENANTS = "(other tenants)";
/** How far back a store keeps minutes (and the longest window a report covers). */
export const HISTORY_MINUTES = 180;

/** The kind of a request, by its route template and method (src/observability/request-info.ts routeLabel). */
export function activityKind(method: string, route: string): ActivityKind {
  if (route === "/v1/routes/:action_id") return method === "PUT" ? "resolve" : "other";
  if (route === "/v1/routes/:action_id/settlement") return "settle";
  if (route === "/v1/admin/publications") return "publish";
  if (route.startsWith("/v1/catalog/")) return "catalog";
  if (route === "/v1/replicas/:replica_id/:operation") return "lifecycle";
  return "other";
}

function bucketIndex(ms: number): number {
  for (let i = 0; i < LATENCY_BOUNDS_MS.length; i++) if (ms <= (LATENCY_BOUNDS_MS[i] as number)) return i;
  return BUCKETS - 1;
}

const emptyBucket = (minute: number): ActivityBucket => ({ minute, ops: {}, outcomes: {}, tenants: {} });

/** Adds one sample to `bucket`. */
export function addSample(bucket: ActivityBucket, sample: ActivitySample): void {
  const index = bucketIndex(sample.latencyMs);
  let op = bucket.ops[sample.kind];
  if (!op) {
    op = { count: 0, refused: 0, latency: {} };
    bucket.ops[sample.kind] = op;
  }
  op.count++;
  if (sample.refused) op.refused++;
  op.latency[index] = (op.latency[index] ?? 0) + 1;
  const key = `${sample.kind}:${sample.outcome}`;
  bucket.outcomes[key] = (bucket.outcomes[key] ?? 0) + 1;
  if (sample.tenantId) {
    let tenant = bucket.tenants[sample.tenantId];
    if (!tenant) {
      const id = Object.keys(bucket.tenants).length < MAX_TENANTS_PER_MINUTE ? sample.tenantId : OTHER_TENANTS;
      tenant = bucket.tenants[id] ?? { outcomes: {}, latency: {} };
      bucket.tenants[id] = tenant;
    }
    tenant.outcomes[key] = (tenant.outcomes[key] ?? 0) + 1;
    tenant.latency[index] = (tenant.latency[index] ?? 0) + 1;
  }
}

const addInto = (into: Record<string | number, number>, from: Record<string | number, number>) => {
  for (const [key, n] of Object.entries(from)) into[key] = (into[key] ?? 0) + n;
};

/** Adds `from` (the same minute, e.g. an isolate's share of it) into `into`. */
export function mergeBucket(into: ActivityBucket, from: ActivityBucket): void {
  for (const [kind, op] of Object.entries(from.ops) as [ActivityKind, OpStats][]) {
    const target = into.ops[kind] ?? { count: 0, refused: 0, latency: {} };
    into.ops[kind] = target;
    target.count += op.count;
    target.refused += op.refused;
    addInto(target.latency, op.latency);
  }
  addInto(into.outcomes, from.outcomes);
  for (const [id, stats] of Object.entries(from.tenants)) {
    let target = into.tenants[id];
    if (!target) {
      const key = Object.keys(into.tenants).length < MAX_TENANTS_PER_MINUTE ? id : OTHER_TENANTS;
      target = into.tenants[key] ?? { outcomes: {}, latency: {} };
      into.tenants[key] = target;
    }
    addInto(target.outcomes, stats.outcomes);
    addInto(target.latency, stats.latency);
  }
}

/** The value below which `q` of the histogram's samples fall, interpolated within its bucket (ms). */
export function quantile(histogram: Histogram, q: number): number | null {
  let total = 0;
  for (let i = 0; i < BUCKETS; i++) total += histogram[i] ?? 0;
  if (total === 0) return null;
  const rank = q * total;
  let seen = 0;
  for (let i = 0; i < BUCKETS; i++) {
    const n = histogram[i] ?? 0;
    if (n === 0) continue;
    if (seen + n >= rank) {
      const lower = i === 0 ? 0 : (LATENCY_BOUNDS_MS[i - 1] as number);
      // Above the last bound nothing is known but the bound.
      if (i === BUCKETS - 1) return lower;
      const upper = LATENCY_BOUNDS_MS[i] as number;
      return Math.round((lower + ((rank - seen) / n) * (upper - lower)) * 100) / 100;
    }
    seen += n;
  }
  return LATENCY_BOUNDS_MS[LATENCY_BOUNDS_MS.length - 1] as number;
}

interface LatencySummary {
  p50: number | null;
  p95: number | null;
  p99: number | null;
}

const latencyOf = (histogram: Histogram): LatencySummary => ({ p50: quantile(histogram, 0.5), p95: quantile(histogram, 0.95), p99: quantile(histogram, 0.99) });

/** One minute of the report. */
interface ActivityPoint {
  /** The minute's start (ISO 8601). */
  at: string;
  /** Requests per kind. */
  requests: Partial<Record<ActivityKind, number>>;
  /** Refusals by problem code (every kind). */
  refusals: Record<string, number>;
  /** Latency percentiles (ms) per kind that had requests; a tenant's report has them for all its requests, under `all`. */
  latency_ms: Record<string, LatencySummary>;
}

interface ActivityTotals {
  requests: Partial<Record<ActivityKind, number>>;
  refused: Partial<Record<ActivityKind, number>>;
  /** Outcomes per kind over the window: `{resolve: {created: 10, "capacity-exceeded": 2}}`. */
  outcomes: Partial<Record<ActivityKind, Record<string, number>>>;
  refusals: Record<string, number>;
  latency_ms: Record<string, LatencySummary>;
}

interface TenantRow {
  tenant_id: string;
  requests: number;
  resolves: number;
  settlements: number;
  refusals: number;
  p99_ms: number | null;
}

export interface ActivityReport {
  /** The first and last minute covered (ISO 8601), one point per minute. */
  from: string;
  to: string;
  step_seconds: 60;
  /** The tenant the report is limited to, when asked. */
  tenant_id: string | null;
  series: ActivityPoint[];
  totals: ActivityTotals;
  /** The busiest tenants of the window (all tenants' report only). */
  tenants: TenantRow[];
}

export interface ActivityQuery {
  /** The window, in minutes up to now (1 to HISTORY_MINUTES). */
  minutes: number;
  tenantId?: string | undefined;
}

/** A refusal's outcome is its problem code; every other outcome (`created`, `hit`, `ok`, ...) is not one. */
const isRefusal = (outcome: string) => Object.hasOwn(PROBLEM_STATUS, outcome);

/** The report of `query` over `buckets` (any order, at most one per minute), up to the minute of `now`. */
export function summarize(buckets: Iterable<ActivityBucket>, query: ActivityQuery, now: number): ActivityReport {
  const last = Math.floor(now / 60_000);
  const first = last - query.minutes + 1;
  const byMinute = new Map<number, ActivityBucket>();
  for (const bucket of buckets) if (bucket.minute >= first && bucket.minute <= last) byMinute.set(bucket.minute, bucket);

  const totals: ActivityTotals = { requests: {}, refused: {}, outcomes: {}, refusals: {}, latency_ms: {} };
  const totalLatency: Record<string, Histogram> = {};
  const tenantRows = new Map<string, TenantRow & { latency: Histogram }>();
  const series: ActivityPoint[] = [];
  for (let minute = first; minute <= last; minute++) {
    const bucket = byMinute.get(minute);
    const point: ActivityPoint = { at: new Date(minute * 60_000).toISOString(), requests: {}, refusals: {}, latency_ms: {} };
    series.push(point);
    if (!bucket) continue;
    // One tenant's report reads the tenant's part of the bucket: its outcomes and its latency.
    const view = query.tenantId ? tenantView(bucket, query.tenantId) : wholeView(bucket);
    if (!view) continue;
    for (const [key, n] of Object.entries(view.outcomes)) {
      const colon = key.indexOf(":");
      const kind = key.slice(0, colon) as ActivityKind;
      const outcome = key.slice(colon + 1);
      point.requests[kind] = (point.requests[kind] ?? 0) + n;
      totals.requests[kind] = (totals.requests[kind] ?? 0) + n;
      const outcomes = totals.outcomes[kind] ?? {};
      totals.outcomes[kind] = outcomes;
      outcomes[outcome] = (outcomes[outcome] ?? 0) + n;
      if (isRefusal(outcome)) {
        point.refusals[outcome] = (point.refusals[outcome] ?? 0) + n;
        totals.refusals[outcome] = (totals.refusals[outcome] ?? 0) + n;
        totals.refused[kind] = (totals.refused[kind] ?? 0) + n;
      }
    }
    for (const [kind, histogram] of Object.entries(view.latency)) {
      point.latency_ms[kind] = latencyOf(histogram);
      const total = totalLatency[kind] ?? {};
      totalLatency[kind] = total;
      addInto(total, histogram);
    }
    if (!query.tenantId) {
      for (const [id, stats] of Object.entries(bucket.tenants)) {
        const row = tenantRows.get(id) ?? { tenant_id: id, requests: 0, resolves: 0, settlements: 0, refusals: 0, p99_ms: null, latency: {} };
        tenantRows.set(id, row);
        for (const [key, n] of Object.entries(stats.outcomes)) {
          const kind = key.slice(0, key.indexOf(":"));
          row.requests += n;
          if (kind === "resolve") row.resolves += n;
          if (kind === "settle") row.settlements += n;
          if (isRefusal(key.slice(kind.length + 1))) row.refusals += n;
        }
        addInto(row.latency, stats.latency);
      }
    }
  }
  for (const [kind, histogram] of Object.entries(totalLatency)) totals.latency_ms[kind] = latencyOf(histogram);
  const tenants = [...tenantRows.values()]
    .sort((a, b) => b.requests - a.requests || (a.tenant_id < b.tenant_id ? -1 : 1))
    .slice(0, 25)
    .map(({ latency, ...row }) => ({ ...row, p99_ms: quantile(latency, 0.99) }));
  return {
    from: new Date(first * 60_000).toISOString(),
    to: new Date(last * 60_000).toISOString(),
    step_seconds: 60,
    tenant_id: query.tenantId ?? null,
    series,
    totals,
    tenants,
  };
}

type BucketView = { outcomes: Record<string, number>; latency: Record<string, Histogram> };

const wholeView = (bucket: ActivityBucket): BucketView => ({
  outcomes: bucket.outcomes,
  latency: Object.fromEntries(Object.entries(bucket.ops).map(([kind, op]) => [kind, op.latency])),
});

/** A tenant's part of a bucket, shaped like the whole: outcomes, and its latency (all kinds) under `all`. */
function tenantView(bucket: ActivityBucket, tenantId: string): BucketView | undefined {
  const stats = bucket.tenants[tenantId];
  return stats ? { outcomes: stats.outcomes, latency: { all: stats.latency } } : undefined;
}

/**
 * The Node server's history: the last HISTORY_MINUTES minutes in memory, this process's requests
 * only (a fleet of servers is summed by Prometheus, not here).
 */
export class MemoryActivity {
  readonly scope = "process";
  private readonly buckets: ActivityBucket[] = [];

  constructor(private readonly now: () => number = Date.now) {}

  record(sample: ActivitySample): undefined {
    const minute = Math.floor(this.now() / 60_000);
    let bucket = this.buckets.at(-1);
    if (!bucket || bucket.minute !== minute) {
      bucket = emptyBucket(minute);
      this.buckets.push(bucket);
      while ((this.buckets[0] as ActivityBucket).minute <= minute - HISTORY_MINUTES) this.buckets.shift();
    }
    addSample(bucket, sample);
    return undefined;
  }

  report(query: ActivityQuery): ActivityReport {
    return summarize(this.buckets, query, this.now());
  }
}
