/**
 * What the routing figures are compared with, measured on the same server, at the same
 * concurrency and in the same run (the machine is shared and noisy, so only same-run ratios mean
 * anything):
 * - `ceiling/one-row write`: a durable transaction that updates one row (one of 10,000, so no
 *   two workers collide), through the project's own `pg` executor: the most a writing round trip
 *   can do on this server, commit flush included. A cycle is two such writes.
 * - `peer/graphile-worker`: graphile-worker (pinned dev dependency, its own schema in the bench
 *   database) claiming and completing no-op jobs one at a time (its defaults: no local queue, no
 *   batched completion), `concurrency` workers over a pool of the same size (plus its LISTEN
 *   connection). A claim+complete is
 *   the job queue's equivalent of a resolve+settle: two writing round trips per unit of work. Its
 *   latency is each worker's time from one completion to the next (claim, no-op, complete).
 */
import { Logger, makeWorkerUtils, run, type Runner } from "graphile-worker";
import { EventEmitter } from "node:events";
import { createPgPool, pgExecutor } from "../../src/db/pg.js";
import type { Recorder } from "../lib/figures.js";
import type { Measurement } from "../lib/load.js";
import { observe, type Observation } from "../lib/observe.js";
import { Samples } from "../lib/stats.js";
import type { BenchDatabase } from "../lib/target.js";

const CEILING_ROWS = 10_000;
const PEER_SCHEMA = "graphile_worker_bench";

export interface PeerPlan {
  target: string;
  concurrency: number;
  pool: number;
  durationMs: number;
  /**
   * graphile-worker only: measure while the queue drains from this many jobs to 1,000 (or for
   * durationMs), its rate with a short queue. (Jobs for the warm-up are queued on top.) By
   * default the queue holds more jobs than the phase can take (about 72,000 for a 10 s phase),
   * which slows its claims.
   */
  queue?: number;
}

/** Creates the write ceiling's table (idempotent; owned by the bench database's owner). */
async function ceilingTable(db: BenchDatabase): Promise<void> {
  await db.withOwner(async (session) => {
    await session.query(`CREATE TABLE IF NOT EXISTS aip_bench_write_ceiling (id int PRIMARY KEY, n bigint NOT NULL)`);
    await session.query(`INSERT INTO aip_bench_write_ceiling SELECT g, 0 FROM generate_series(1, ${CEILING_ROWS}) g ON CONFLICT DO NOTHING`);
  });
}

export async function measureWriteCeiling(recorder: Recorder, db: BenchDatabase, plan: PeerPlan): Promise<void> {
  await ceilingTable(db);
  const pool = createPgPool(db.ownerUrl, { max: plan.pool, applicationName: "aip-bench-ceiling", statementTimeoutMs: 120_000, connectionTimeoutMs: 120_000 });
  const executor = pgExecutor(pool);
  try {
    const write = async () => {
      await executor.query("UPDATE aip_bench_write_ceiling SET n = n + 1 WHERE id = $1", [1 + Math.floor(Math.random() * CEILING_ROWS)]);
    };
    await recorder.measure(
      db,
      plan.target,
      {
        suite: "ceiling",
        name: "one-row write",
        concurrency: plan.concurrency,
        pool: plan.pool,
        durationMs: plan.durationMs,
        warmupMs: 300,
        skipInvariants: true,
      },
      write,
    );
  } finally {
    await pool.end();
  }
}

/** Jobs queued on top of a short queue for the warm-up (500 ms, at most a few thousand jobs/s here). */
const SHORT_QUEUE_WARM_UP_JOBS = 2_000;

/** Jobs enough for the phase at a rate well above anything this server reaches. */
const jobsFor = (durationMs: number) => Math.max(5_000, Math.ceil((durationMs / 1000 + 2) * 6_000));

export async function measureGraphileWorker(recorder: Recorder, db: BenchDatabase, plan: PeerPlan): Promise<void> {
  const { ops, observation, ...measurement } = await runGraphileWorker(db, plan);
  recorder.add({
    suite: plan.queue === undefined ? "peer" : "peer-short-queue",
    name: plan.queue === undefined ? "graphile-worker claim+complete" : `graphile-worker claim+complete (queue ${plan.queue})`,
    target: plan.target,
    pool: plan.pool,
    ops,
    ...measurement,
    observation,
    ...(observation.walBytes !== undefined && ops ? { walBytesPerOp: observation.walBytes / ops } : {}),
    ...(plan.queue === undefined && ops >= jobsFor(plan.durationMs) - plan.concurrency
      ? { note: "ran out of jobs: a lower bound" }
      : plan.concurrency > plan.pool
        ? { note: `graphile-worker runs ${plan.pool} workers, one per connection` }
        : {}),
  });
}

/**
 * One graphile-worker phase on `db` (its schema migrated and its queue filled first): claim+complete
 * of no-op jobs by `concurrency` workers. Also bench/ab.ts's peer rounds (`--peer`).
 */
export async function runGraphileWorker(db: BenchDatabase, plan: Omit<PeerPlan, "target">): Promise<Measurement & { observation: Observation }> {
  const utils = await makeWorkerUtils({ connectionString: db.ownerUrl, schema: PEER_SCHEMA, maxPoolSize: 2, logger: quietLogger });
  try {
    await utils.migrate();
    // TRUNCATE, not DELETE: each phase starts from a fresh table. Deleting tens of thousands of
    // jobs per phase left their dead rows in the table and its indexes, and bench/ab.ts --peer,
    // which runs a phase per round, measured graphile-worker slower round after round (its
    // ratio to the routing cycle went from 0.25 to 1.22 over six rounds).
    await utils.withPgClient((client) => client.query(`TRUNCATE ${PEER_SCHEMA}._private_jobs`));
    const jobs = plan.queue === undefined ? jobsFor(plan.durationMs) : plan.queue + SHORT_QUEUE_WARM_UP_JOBS;
    for (let added = 0; added < jobs; added += 5_000) {
      await utils.addJobs(Array.from({ length: Math.min(5_000, jobs - added) }, () => ({ identifier: "noop", payload: {} })));
    }
  } finally {
    await utils.release();
  }

  const events = new EventEmitter();
  const samples = new Samples();
  const lastDone = new Map<string, number>();
  let measuring = false;
  let ops = 0;
  let done = 0;
  events.on("job:success", ({ worker }: { worker: { workerId: string } }) => {
    const now = performance.now();
    const previous = lastDone.get(worker.workerId);
    lastDone.set(worker.workerId, now);
    done++;
    if (!measuring) return;
    ops++;
    if (previous !== undefined) samples.add(now - previous);
  });
  const errors: Record<string, number> = {};
  events.on("job:error", () => {
    errors["job-error"] = (errors["job-error"] ?? 0) + 1;
  });

  const runner: Runner = await run({
    connectionString: db.ownerUrl,
    schema: PEER_SCHEMA,
    // More workers than connections would only queue them in the pool (graphile-worker warns so).
    concurrency: Math.min(plan.concurrency, plan.pool),
    // One more than the workers': graphile-worker keeps a connection of its own LISTENing for new
    // jobs (idle here), and with a pool of one it would never get one to work on.
    maxPoolSize: plan.pool + 1,
    noHandleSignals: true,
    pollInterval: 1000,
    events: events as never,
    logger: quietLogger,
    taskList: { noop: async () => {} },
  });
  try {
    await sleep(500); // every worker has claimed, so each has a previous completion
    // A short queue: start when it is down to plan.queue (the warm-up jobs done).
    while (plan.queue !== undefined && done < SHORT_QUEUE_WARM_UP_JOBS) await sleep(5);
    const observer = await observe(db.server.adminUrl, db.name);
    measuring = true;
    const t0 = performance.now();
    if (plan.queue === undefined) await sleep(plan.durationMs);
    else {
      const stopAt = plan.queue - 1_000;
      while (ops < stopAt && performance.now() - t0 < plan.durationMs) await sleep(10);
    }
    measuring = false;
    const seconds = (performance.now() - t0) / 1000;
    const observation = await observer.stop();
    return { concurrency: plan.concurrency, ops, errors, seconds, throughput: ops / seconds, latency: samples.summary(), observation };
  } finally {
    await runner.stop();
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** graphile-worker logs every job at info; the bench keeps its warnings and errors. */
const quietLogger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") console.error(`  graphile-worker ${level}: ${message}`);
});
