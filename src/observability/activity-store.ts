/**
 * The Worker's activity history (src/observability/activity.ts), which must outlive isolates: a
 * Worker runs as many isolates, in many locations, each evicted at any time, so no isolate's
 * memory holds "the last hour". One Durable Object (`ActivityHistory`, a single instance by name,
 * SQLite-backed) keeps the deployment's minute buckets durably, HISTORY_MINUTES of them.
 *
 * - Each isolate adds its requests to its own bucket of the current minute (`EdgeActivity`) and
 *   sends what it gathered to the object at most every FLUSH_MS, or when the minute changes, after
 *   the response that filled it (waitUntil): a few object calls per isolate per minute, never one
 *   per request, and no request waits for one. An isolate evicted between two sends loses at most
 *   FLUSH_MS of its samples.
 * - The object adds each part into the minute's stored bucket (one storage write per part) and
 *   deletes minutes older than HISTORY_MINUTES.
 * - GET /v1/fleet/activity asks the object for the report; the isolate's unsent part is not in it.
 *
 * Written against structural types (fetch-based, no `cloudflare:workers` import), as the lease
 * clock is, so the Node type check and the bundle rules hold; src/entry/worker.ts exports the class.
 */
import { RegistryError } from "../registry/errors.js";
import type { ActivityRecorder } from "./activity-route.js";
import {
  addSample,
  HISTORY_MINUTES,
  mergeBucket,
  summarize,
  type ActivityBucket,
  type ActivityQuery,
  type ActivityReport,
  type ActivitySample,
} from "./activity.js";

/** The one instance's name: every isolate of a deployment reports to the same history. */
const ACTIVITY_HISTORY_NAME = "activity-history";
/** The longest an isolate keeps samples before sending them. */
export const FLUSH_MS = 10_000;

interface HistoryStorage {
  get<T>(key: string): Promise<T | undefined>;
  put<T>(key: string, value: T): Promise<void>;
  delete(keys: string[]): Promise<number>;
  list<T>(options: { prefix: string; start?: string; end?: string }): Promise<Map<string, T>>;
}

export interface HistoryState {
  storage: HistoryStorage;
}

interface HistoryStub {
  fetch(input: string, init?: RequestInit): Promise<Response>;
}
export interface HistoryNamespace {
  idFromName(name: string): unknown;
  get(id: never): HistoryStub;
}

const key = (minute: number) => `m:${String(minute).padStart(12, "0")}`;

/** The Durable Object: POST /record adds an isolate's buckets; GET /report?minutes=&tenant_id= answers a report. */
export class ActivityHistoryObject {
  constructor(
    private readonly state: HistoryState,
    private readonly now: () => number = Date.now,
  ) {}

  async fetch(request: Request): Promise<Response> {
    const url = new URL(request.url);
    if (url.pathname === "/record" && request.method === "POST") {
      const buckets = (await request.json().catch(() => null)) as ActivityBucket[] | null;
      if (!Array.isArray(buckets)) return new Response(null, { status: 400 });
      await this.record(buckets);
      return new Response(null, { status: 204 });
    }
    if (url.pathname === "/report" && request.method === "GET") {
      const minutes = Math.min(HISTORY_MINUTES, Math.max(1, Number(url.searchParams.get("minutes")) || 60));
      const tenantId = url.searchParams.get("tenant_id") ?? undefined;
      return Response.json(await this.report({ minutes, tenantId }));
    }
    return new Response(null, { status: 404 });
  }

  async record(parts: ActivityBucket[]): Promise<void> {
    const oldest = Math.floor(this.now() / 60_000) - HISTORY_MINUTES + 1;
    for (const part of parts) {
      if (!Number.isInteger(part?.minute) || part.minute < oldest) continue;
      const stored = (await this.state.storage.get<ActivityBucket>(key(part.minute))) ?? { minute: part.minute, ops: {}, outcomes: {}, tenants: {} };
      mergeBucket(stored, part);
      await this.state.storage.put(key(part.minute), stored);
    }
    const expired = await this.state.storage.list<ActivityBucket>({ prefix: "m:", end: key(oldest) });
    if (expired.size > 0) await this.state.storage.delete([...expired.keys()]);
  }

  async report(query: ActivityQuery): Promise<ActivityReport> {
    const first = Math.floor(this.now() / 60_000) - query.minutes + 1;
    const stored = await this.state.storage.list<ActivityBucket>({ prefix: "m:", start: key(first) });
    return summarize(stored.values(), query, this.now());
  }
}

/**
 * The isolate's side: gathers samples into its own minute bucket and hands the part to the object
 * when due (the returned promise: the app passes it to waitUntil).
 */
export class EdgeActivity implements ActivityRecorder {
  readonly scope = "deployment";
  private pending = new Map<number, ActivityBucket>();
  private lastSent: number;
  /** Sends under way: a report waits for them, so an isolate always sees its own requests. */
  private readonly sending = new Set<Promise<void>>();

  constructor(
    private readonly namespace: HistoryNamespace,
    private readonly now: () => number = Date.now,
  ) {
    this.lastSent = now();
  }

  record(sample: ActivitySample): Promise<void> | undefined {
    const at = this.now();
    const minute = Math.floor(at / 60_000);
    const bucket = this.pending.get(minute) ?? { minute, ops: {}, outcomes: {}, tenants: {} };
    this.pending.set(minute, bucket);
    addSample(bucket, sample);
    // Due: FLUSH_MS since the last send, or a finished minute waiting.
    if (at - this.lastSent < FLUSH_MS && this.pending.size === 1) return undefined;
    return this.send();
  }

  /** Sends what is pending (also before a report, so an isolate sees its own requests). */
  send(): Promise<void> {
    if (this.pending.size === 0) return Promise.resolve();
    const parts = [...this.pending.values()];
    this.pending = new Map();
    this.lastSent = this.now();
    const sent = this.post(parts).finally(() => this.sending.delete(sent));
    this.sending.add(sent);
    return sent;
  }

  private async post(parts: ActivityBucket[]): Promise<void> {
    const response = await this.stub().fetch("https://activity-history/record", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(parts),
    });
    await response.arrayBuffer();
    if (!response.ok) throw new Error(`the activity history answered ${response.status}`);
  }

  async report(query: ActivityQuery): Promise<ActivityReport> {
    this.send().catch(() => {});
    await Promise.allSettled([...this.sending]);
    const params = new URLSearchParams({ minutes: String(query.minutes), ...(query.tenantId ? { tenant_id: query.tenantId } : {}) });
    const response = await this.stub().fetch(`https://activity-history/report?${params}`);
    if (!response.ok) throw new RegistryError("storage", `the activity history answered ${response.status}`, {}, true);
    return (await response.json()) as ActivityReport;
  }

  private stub(): HistoryStub {
    return this.namespace.get(this.namespace.idFromName(ACTIVITY_HISTORY_NAME) as never);
  }
}
