/**
 * Lease maintenance on Workers without a clock that ticks while nothing happens: one Durable
 * Object (the `LeaseClock`, a single instance by name) owns an alarm set to the earliest lease
 * deadline it knows. Its alarm runs one bounded maintenance cycle and sets the next alarm from the
 * cycle's `next_deadline`; with no live lease it sets none, and an idle deployment neither wakes
 * the object nor sends the database anything.
 *
 * The invariant: while any lease is live, an alarm exists at or before its end (plus at most the
 * minimum interval between cycles). It holds because
 * - every lifecycle answer that starts or may shorten a lease is told to the clock, which keeps
 *   the earlier of its alarm and that deadline (`LeaseClockNotifier`, after the response);
 * - every cycle reads the database's earliest live deadline and keeps the earlier of it and any
 *   alarm set meanwhile, so a lease once covered stays covered while it is extended; an alarm
 *   that fires early (heartbeats extended the lease) finds nothing and moves to the new deadline;
 * - a failed cycle never ends the chain: it retries with backoff (it does not throw, so the
 *   platform's six alarm retries are never exhausted).
 *
 * Written against the structural types below (fetch-based, no `cloudflare:workers` import) so the
 * Node type check and bundle rules hold; src/entry/worker.ts exports the concrete class.
 */
import type { LeaseNotice } from "./lease-events.js";
import { backoff, DEFAULT_MIN_INTERVAL_MS, planNextCycle, type MaintenanceCycle } from "./cycle.js";
import { log } from "../telemetry/log.js";

/** The one instance's name: every isolate of a deployment talks to the same clock. */
export const LEASE_CLOCK_NAME = "lease-clock";
const DEADLINE_URL = "https://lease-clock/deadline";

interface ClockStorage {
  getAlarm(): Promise<number | null>;
  setAlarm(scheduledTime: number): Promise<void>;
}

export interface ClockState {
  storage: ClockStorage;
}

/** What a clock needs from the Worker: a maintenance cycle on its database, and the spacing between cycles. */
export interface ClockHost {
  minIntervalMs: number;
  maintain(): Promise<MaintenanceCycle>;
}

interface ClockStub {
  fetch(input: string, init?: RequestInit): Promise<Response>;
}
export interface ClockNamespace {
  idFromName(name: string): unknown;
  get(id: never): ClockStub;
}

/** The Durable Object. `host` is resolved lazily: bindings are parsed once per isolate. */
export class LeaseClockObject {
  /** Deadlines told, cycles run and cycles failed since this instance started (observability; tests read them). */
  received = 0;
  cycles = 0;
  failed = 0;
  private failures = 0;
  private stalled = 0;
  private lastCycleEnd = -Infinity;

  constructor(
    private readonly state: ClockState,
    private readonly host: () => ClockHost,
  ) {}

  async fetch(request: Request): Promise<Response> {
    const { pathname } = new URL(request.url);
    if (pathname !== "/deadline" || request.method !== "POST") return new Response(null, { status: 404 });
    const body = (await request.json().catch(() => null)) as { at?: unknown } | null;
    if (typeof body?.at !== "number" || !Number.isFinite(body.at)) return new Response(null, { status: 400 });
    return Response.json({ alarm_at: await this.note(body.at) });
  }

  /** A lease ends at `at`: a cycle is due no later than that (spaced after the last one). */
  async note(at: number): Promise<number> {
    this.received++;
    const due = Math.max(at, this.lastCycleEnd + this.host().minIntervalMs);
    const current = await this.state.storage.getAlarm();
    if (current !== null && current <= due) return current;
    await this.state.storage.setAlarm(due);
    return due;
  }

  async alarm(): Promise<void> {
    let next: number | null;
    let ok = true;
    try {
      const host = this.host();
      const cycle = await host.maintain();
      this.failures = 0;
      const planned = planNextCycle(cycle, Date.now(), host.minIntervalMs, this.stalled);
      this.stalled = planned.stalled;
      next = planned.at;
    } catch (error) {
      ok = false;
      this.failures++;
      next = Date.now() + backoff(DEFAULT_MIN_INTERVAL_MS, this.failures);
      log.warn("lease maintenance failed", { attempt: this.failures, error: String(error) });
    }
    this.lastCycleEnd = Date.now();
    if (next !== null) {
      // A deadline told while the cycle ran has set an alarm already: keep the earlier one.
      const current = await this.state.storage.getAlarm();
      if (current === null || next < current) await this.state.storage.setAlarm(next);
    }
    // Counted once the next alarm is in place: whoever reads them sees the cycle complete.
    if (ok) this.cycles++;
    else this.failed++;
  }
}

/** Replicas whose lease this isolate knows to be covered, at most this many (oldest forgotten first). */
const MAX_COVERED = 10_000;

/**
 * The Worker's side: tells the clock the deadlines of lifecycle answers, skipping only those it
 * can prove covered. A heartbeat or drain answer at sequence s+1 whose lease ends no earlier
 * than the covered lease at sequence s (acknowledged by the clock, or itself covered this way)
 * extends a lease the clock already covers: nothing between s and s+1 changed the replica, and a
 * covered lease stays covered while it is extended. Registers, shortened leases, sequence gaps
 * and replays are always told.
 */
export class LeaseClockNotifier {
  private readonly covered = new Map<string, { sequence: number; expiresAt: number }>();

  constructor(private readonly namespace: ClockNamespace) {}

  readonly notify = (notice: LeaseNotice): Promise<void> | undefined => {
    const at = Date.parse(notice.expires_at);
    if (Number.isNaN(at)) return undefined;
    if (notice.source === "expiry") return this.send(at);
    const known = this.covered.get(notice.replica_id);
    if (notice.operation !== "register" && known && known.sequence === notice.sequence - 1 && at >= known.expiresAt) {
      this.cover(notice.replica_id, notice.sequence, at);
      return undefined;
    }
    return this.send(at).then(() => this.cover(notice.replica_id, notice.sequence, at));
  };

  private cover(replicaId: string, sequence: number, expiresAt: number): void {
    const known = this.covered.get(replicaId);
    if (known && known.sequence >= sequence) return;
    this.covered.delete(replicaId);
    this.covered.set(replicaId, { sequence, expiresAt });
    if (this.covered.size > MAX_COVERED) this.covered.delete(this.covered.keys().next().value as string);
  }

  /** Up to three attempts: a Durable Object call can fail transiently (the object restarting). */
  private async send(at: number): Promise<void> {
    let lastError: unknown;
    for (let attempt = 1; attempt <= 3; attempt++) {
      try {
        const stub = this.namespace.get(this.namespace.idFromName(LEASE_CLOCK_NAME) as never);
        const response = await stub.fetch(DEADLINE_URL, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ at }) });
        await response.arrayBuffer();
        if (response.ok) return;
        lastError = new Error(`the lease clock answered ${response.status}`);
      } catch (error) {
        lastError = error;
      }
    }
    throw lastError;
  }
}
