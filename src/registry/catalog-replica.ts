/**
 * Catalog reads on a read replica (CATALOG_DATABASE_URL: a hot standby or a Neon read replica)
 * that are bounded and never go backwards. One job: decide, per read, whether the replica's answer
 * may be served, and otherwise read the primary in the same request.
 *
 * A replica answer is served only when, measured in the same statement as the answer:
 * - its replay lag is known and at most `maxLagMs` (CATALOG_REPLICA_MAX_LAG_MS), and
 * - its revision is at least the floor of the read's key: the newest revision this process has
 *   served, or read from the primary, for that key (a tenant; `null` for reads without one).
 *   Floors are keyed by (key, revision) only, so a key's revision may be the global catalog
 *   revision or a tenant's own, whichever the catalog reads answer with.
 * Otherwise the read goes to the primary (`primary`), and its answer raises the floor.
 *
 * A replica that cannot be reached (no connection, a timeout, shutting down) is not asked again
 * until a backoff has passed (doubling per failed attempt, jittered, capped:
 * CATALOG_REPLICA_RETRY); meanwhile every read goes to the primary, and when the backoff has
 * passed, one read at a time tries the replica again. The catalog is never down while the
 * primary is up.
 *
 * The lag is the replica's own view: 0 when it is not in recovery (a primary), 0 when a WAL
 * receiver is connected and everything received is replayed (an idle primary sends nothing; after
 * a restart the receive position starts at the beginning of a segment, behind the replay
 * position, hence `<=`), otherwise the time since the last transaction it replayed committed (on
 * the primary's clock), which over-counts the lag of a replica that has replayed all the primary
 * wrote. Unknown (no transaction replayed since the replica started, while WAL is pending): too
 * far behind. It is measured first in the statement, lateral to the read, right after the
 * statement's snapshot. What a replica cannot see is WAL the primary has not sent it yet: a
 * replica catching up after a long disconnection may look caught up between two chunks of WAL
 * (the floors still keep this process from going backwards).
 *
 * The answer's `lagMs` is how long before now the replica's snapshot was known to be current:
 * whoever keeps the answer (src/catalog/serve.ts, the staleness bound) counts its age from
 * there, so a lagging replica never extends how long an old revision is served.
 */
import type { SqlExecutor } from "../db/executor.js";
import { databaseFailure, type DatabaseFailure } from "../db/sqlstate.js";
import { CATALOG_REPLICA_MAX_LAG_MS, CATALOG_REPLICA_RETRY } from "../limits.js";

/** What the last replica read or probe found. */
type ReplicaState = "unknown" | "ok" | "lagging" | "behind_floor" | "unreachable";
/** Why a catalog read went to the primary although a replica is configured. */
export type FallbackReason = "lagging" | "behind_floor" | "behind_request" | "unreachable" | "error";
const FALLBACK_REASONS: readonly FallbackReason[] = ["lagging", "behind_floor", "behind_request", "unreachable", "error"];

/** One catalog read: the columns of its answer and the function call it selects them from. */
export interface CatalogStatement {
  /** e.g. `catalog_revision::text AS revision, page AS text, not_modified`; must include `revision`. */
  columns: string;
  /**
   * The FROM item, e.g. `aip_catalog_page($1::text, $2::jsonb, $3::bigint${after})`. `after`
   * (` + replay.zero`, a bigint 0, appended to a bigint argument) makes the call lateral to the lag
   * measurement, so the lag is measured before the read runs; "" on the primary, where nothing is
   * measured. A call without a bigint argument may ignore it: the lag is then measured in the
   * same statement still, before or after the read as the planner orders them.
   */
  from: (after: string) => string;
}

export interface ReplicaStatus {
  state: ReplicaState;
  /** The replay lag the last replica read or probe measured (null: unknown or never measured). */
  lag_ms: number | null;
  max_lag_ms: number;
  /** While unreachable: when the replica will be tried again. */
  retry_in_ms?: number;
  /** While unreachable: the last connection error. */
  error?: string;
  /** Reads sent to the primary since start, by reason. */
  fallbacks: Record<FallbackReason, number>;
}

export interface CatalogReplicaOptions {
  maxLagMs?: number;
  retryBaseMs?: number;
  retryMaxMs?: number;
  /** Keys whose floor is kept; older ones are forgotten (see RevisionFloors). */
  maxKeys?: number;
  now?: () => number;
  random?: () => number;
}

/**
 * The replay lag, in milliseconds, as a FROM item `replay(lag_ms, zero)`. OFFSET 0 keeps the
 * planner from folding it into the read, and `zero` is not a constant the planner could substitute
 * (pg_backend_pid() is STABLE), so the read, lateral to `zero`, runs after the measurement.
 */
const MEASURE = `(SELECT CASE
    WHEN NOT pg_is_in_recovery() THEN 0::float8
    WHEN pg_last_wal_receive_lsn() <= pg_last_wal_replay_lsn() AND EXISTS (SELECT FROM pg_stat_wal_receiver) THEN 0::float8
    ELSE greatest(0, 1000 * extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp()))::float8
  END AS lag_ms, 0 * pg_backend_pid()::bigint AS zero OFFSET 0) replay`;

export const primaryStatement = (s: CatalogStatement) => `SELECT ${s.columns} FROM ${s.from("")}`;
export const replicaStatement = (s: CatalogStatement) =>
  `SELECT ${s.columns}, replay.lag_ms AS replay_lag_ms FROM ${MEASURE} CROSS JOIN LATERAL ${s.from(" + replay.zero")}`;

/**
 * Per key, the newest revision served or read from the primary. Bounded: the least recently used
 * key is forgotten beyond `maxKeys`, and then no key without a floor is served from a replica
 * whose snapshot is older than the newest moment a forgotten floor was observed (a replica known
 * current at that moment holds every forgotten revision).
 */
export class RevisionFloors {
  private readonly floors = new Map<string, { revision: number; at: number }>();
  private forgottenAt = Number.NEGATIVE_INFINITY;

  constructor(private readonly maxKeys: number) {}

  /** May an answer at `revision`, from a snapshot known current at `asOf`, be served for `key`? */
  admits(key: string | null, revision: number, asOf: number): boolean {
    const floor = this.floors.get(keyOf(key));
    return floor ? revision >= floor.revision : asOf >= this.forgottenAt;
  }

  observe(key: string | null, revision: number, at: number): void {
    const k = keyOf(key);
    const floor = this.floors.get(k);
    this.floors.delete(k);
    this.floors.set(k, floor && floor.revision > revision ? floor : { revision, at: Math.max(at, floor?.at ?? at) });
    if (this.floors.size > this.maxKeys) {
      const [oldest, entry] = this.floors.entries().next().value as [string, { at: number }];
      this.floors.delete(oldest);
      this.forgottenAt = Math.max(this.forgottenAt, entry.at);
    }
  }

  floor(key: string | null): number | null {
    return this.floors.get(keyOf(key))?.revision ?? null;
  }
}

const keyOf = (key: string | null) => (key === null ? "\u0000" : `t${key}`);

/** The replica's answer to the request itself (a refusal of the request), not a failure of the replica. */
const ANSWERS: ReadonlySet<DatabaseFailure> = new Set(["problem", "data", "too-deep"]);

/**
 * The replica could not be asked: no connection (driver and socket errors carry no SQLSTATE),
 * shutting down, too many connections, a timeout.
 */
const UNREACHABLE: ReadonlySet<DatabaseFailure> = new Set([
  "no-sqlstate",
  "connection",
  "resources",
  "cancelled",
  "cannot-connect-now",
  "session-ended",
  "intervention",
]);

export interface ReplicaRows<R> {
  rows: R[];
  /** 0 on the primary; on the replica, how long before now its snapshot was known current. */
  lagMs: number;
  from: "replica" | "primary";
}

export interface ReplicaRead<R> {
  row: R | undefined;
  /** 0 on the primary; on the replica, how long before now its snapshot was known current. */
  lagMs: number;
  from: "replica" | "primary";
}

/** What every view of one replica shares (CatalogReplica.over). */
interface SharedState {
  readonly maxLagMs: number;
  readonly retryBaseMs: number;
  readonly retryMaxMs: number;
  readonly floors: RevisionFloors;
  readonly now: () => number;
  readonly random: () => number;
  readonly fallbacks: Record<FallbackReason, number>;
  state: ReplicaState;
  lagMs: number | null;
  failures: number;
  retryAt: number;
  probing: boolean;
  lastError: string | undefined;
}

export class CatalogReplica {
  private readonly s: SharedState;

  constructor(
    private readonly replica: SqlExecutor,
    options: CatalogReplicaOptions | SharedState = {},
  ) {
    this.s =
      "floors" in options
        ? options
        : {
            maxLagMs: options.maxLagMs ?? CATALOG_REPLICA_MAX_LAG_MS.default,
            retryBaseMs: options.retryBaseMs ?? CATALOG_REPLICA_RETRY.base_ms,
            retryMaxMs: options.retryMaxMs ?? CATALOG_REPLICA_RETRY.max_ms,
            floors: new RevisionFloors(options.maxKeys ?? 50_000),
            now: options.now ?? Date.now,
            random: options.random ?? Math.random,
            fallbacks: Object.fromEntries(FALLBACK_REASONS.map((r) => [r, 0])) as Record<FallbackReason, number>,
            state: "unknown",
            lagMs: null,
            failures: 0,
            retryAt: 0,
            probing: false,
            lastError: undefined,
          };
  }

  /** The same replica's state, read through another executor (a Worker request's own connection). */
  over(replica: SqlExecutor): CatalogReplica {
    return new CatalogReplica(replica, this.s);
  }

  get maxLagMs(): number {
    return this.s.maxLagMs;
  }

  /**
   * One catalog read for `key`: the replica's answer when it is recent enough, else the
   * primary's. Errors that answer the request (a refusal) are thrown as they are, from either.
   */
  async read<R extends { revision: string | number }>(
    key: string | null,
    statement: CatalogStatement,
    params: unknown[],
    primary: SqlExecutor,
  ): Promise<ReplicaRead<R>> {
    const { rows, lagMs, from } = await this.readRows<R>(() => key, statement, params, primary);
    return { row: rows[0], lagMs, from };
  }

  /**
   * A catalog read of several rows, each with its own key and revision (the revisions of several
   * tenants in one statement): the replica's rows only when its lag is within the bound and every
   * row's revision is at least its key's floor; otherwise all of the primary's.
   */
  async readRows<R extends { revision: string | number }>(
    keyOf: (row: R) => string | null,
    statement: CatalogStatement,
    params: unknown[],
    primary: SqlExecutor,
  ): Promise<ReplicaRows<R>> {
    const reason = await this.tryReplica<R>(keyOf, statement, params);
    if (typeof reason !== "string") return reason;
    this.s.fallbacks[reason]++;
    const rows = await primary.query<R>(primaryStatement(statement), params);
    const now = this.s.now();
    for (const row of rows) this.s.floors.observe(keyOf(row), Number(row.revision), now);
    return { rows, lagMs: 0, from: "primary" };
  }

  private async tryReplica<R extends { revision: string | number }>(
    keyOf: (row: R) => string | null,
    statement: CatalogStatement,
    params: unknown[],
  ): Promise<ReplicaRows<R> | FallbackReason> {
    // Backing off: only one read at a time tries again, once the backoff has passed.
    const probe = this.s.failures > 0;
    if (probe) {
      if (this.s.probing || this.s.now() < this.s.retryAt) return "unreachable";
      this.s.probing = true;
    }
    type Measured = R & { replay_lag_ms?: number | string | null };
    let measured: Measured[];
    try {
      measured = await this.replica.query<Measured>(replicaStatement(statement), params);
    } catch (error) {
      const failure = databaseFailure(error);
      if (ANSWERS.has(failure)) {
        this.reached();
        throw error;
      }
      if (failure === "replica-behind") {
        // The request names a revision (a cursor, a validator) the replica has not replayed.
        this.reached();
        return "behind_request";
      }
      this.failed(error);
      return UNREACHABLE.has(failure) ? "unreachable" : "error";
    } finally {
      if (probe) this.s.probing = false;
    }
    this.reached();
    // No row: nothing to bound (every read here answers one row per key it was asked).
    if (measured.length === 0) return { rows: [], lagMs: 0, from: "replica" };
    const reported = measured[0]!.replay_lag_ms;
    const lag = reported === null || reported === undefined ? null : Number(reported);
    this.s.lagMs = lag;
    const rows = measured.map(({ replay_lag_ms: _, ...row }) => row as unknown as R);
    if (lag === null || !(lag <= this.maxLagMs)) {
      this.s.state = "lagging";
      return "lagging";
    }
    const asOf = this.s.now() - lag;
    if (!rows.every((row) => this.s.floors.admits(keyOf(row), Number(row.revision), asOf))) {
      this.s.state = "behind_floor";
      return "behind_floor";
    }
    this.s.state = "ok";
    for (const row of rows) this.s.floors.observe(keyOf(row), Number(row.revision), asOf);
    return { rows, lagMs: lag, from: "replica" };
  }

  /**
   * Asks the replica for its lag alone (readiness), unless it is backing off. Never throws; a
   * replica that cannot be reached starts (or continues) its backoff.
   */
  async probe(): Promise<ReplicaStatus> {
    const retry = this.s.failures > 0;
    if (!retry || (!this.s.probing && this.s.now() >= this.s.retryAt)) {
      if (retry) this.s.probing = true;
      try {
        const [row] = await this.replica.query<{ lag_ms: number | string | null }>(`SELECT replay.lag_ms FROM ${MEASURE}`);
        this.reached();
        this.s.lagMs = row?.lag_ms === null || row?.lag_ms === undefined ? null : Number(row.lag_ms);
        const lagging = this.s.lagMs === null || !(this.s.lagMs <= this.maxLagMs);
        if (lagging) this.s.state = "lagging";
        else if (this.s.state !== "behind_floor") this.s.state = "ok";
      } catch (error) {
        this.failed(error);
      } finally {
        if (retry) this.s.probing = false;
      }
    }
    return this.status();
  }

  status(): ReplicaStatus {
    const status: ReplicaStatus = { state: this.s.state, lag_ms: this.s.lagMs, max_lag_ms: this.maxLagMs, fallbacks: { ...this.s.fallbacks } };
    if (this.s.state === "unreachable") {
      status.retry_in_ms = Math.max(0, this.s.retryAt - this.s.now());
      if (this.s.lastError) status.error = this.s.lastError;
    }
    return status;
  }

  /** The floor of `key` (tests, diagnostics). */
  floor(key: string | null): number | null {
    return this.s.floors.floor(key);
  }

  private reached(): void {
    this.s.failures = 0;
    this.s.lastError = undefined;
    if (this.s.state === "unreachable") this.s.state = "unknown";
  }

  /** Exponential backoff with equal jitter: half the doubled delay fixed, half random. */
  private failed(error: unknown): void {
    this.s.failures++;
    const delay = Math.min(this.s.retryMaxMs, this.s.retryBaseMs * 2 ** Math.min(this.s.failures - 1, 30));
    this.s.retryAt = this.s.now() + delay / 2 + (this.s.random() * delay) / 2;
    this.s.state = "unreachable";
    this.s.lastError = error instanceof Error ? error.message : String(error);
  }
}
