/**
 * Model-based concurrency test (see test/support/model.ts for the commands and the oracle).
 *
 * fast-check generates, per run, one command list for each of 8 workers: publications (binding,
 * instance, policy, version and capacity changes, new bindings), host register / heartbeat /
 * drain / offline on 1 s or 30 s leases, leases that lapse, lease expiry, new resolves, retries,
 * settlements with all four outcomes, forged settlements, conflicting resolves and catalog walks,
 * across 4 tenants. The workers run their lists at the same time, each on its own connections
 * (every third one through the HTTP app), while a sampler checks the bookkeeping.
 *
 * Runs do not shrink (endOnFailure): an interleaving is not reproducible, the failing plan and
 * every violation are printed instead. MODEL_RUNS / MODEL_COMMANDS / MODEL_WORKERS scale it;
 * `npm run soak` runs it for as long as asked.
 */
import fc from "fast-check";
import { expect, it } from "vitest";
import { useTestDatabase } from "../support/database.js";
import { expectHealthy } from "../support/invariants.js";
import { DEFAULT_SHAPE, planArbitrary, runModel, summarize, type ModelReport, type ModelShape } from "../support/model.js";

const RUNS = Number(process.env.MODEL_RUNS ?? 20);
const shape: ModelShape = {
  ...DEFAULT_SHAPE,
  workers: Number(process.env.MODEL_WORKERS ?? DEFAULT_SHAPE.workers),
  commandsPerWorker: Number(process.env.MODEL_COMMANDS ?? DEFAULT_SHAPE.commandsPerWorker),
};

const db = useTestDatabase();

it(`random interleavings of ${shape.workers} parallel clients keep one destination per action, revision-consistent pages and exact capacity (${RUNS} runs)`, async () => {
  const env = { ownerUrl: db.ownerUrl, dataUrl: db.dataUrl, controlUrl: db.controlUrl };
  const reports: ModelReport[] = [];
  await fc.assert(
    fc.asyncProperty(planArbitrary(shape), async (plan) => {
      const report = await runModel(env, plan, { shape, prefix: `m${reports.length}` });
      reports.push(report);
      if (process.env.MODEL_VERBOSE) console.log(report.prefix, report.notes.join("; "));
      expect(report.violations, `run ${report.prefix}: ${JSON.stringify(report.outcomes)}`).toEqual([]);
    }),
    { numRuns: RUNS, endOnFailure: true },
  );
  const summary = summarize(reports);
  console.log(`model: ${JSON.stringify(summary)}`);
  await expectHealthy(db.registry);

  // The runs exercised what they claim to: without these, an empty oracle would pass.
  const o = summary.outcomes;
  expect(o.resolve?.created).toBeGreaterThan(0);
  expect((o.retry?.existing ?? 0) + (o.resolve?.existing ?? 0)).toBeGreaterThan(0);
  expect(o.retry?.reacquired ?? 0).toBeGreaterThan(0);
  expect(Object.keys(o.settle ?? {}).filter((k) => k.startsWith("released")).length).toBeGreaterThanOrEqual(3);
  expect(o.forged?.["fence-lost"] ?? 0).toBeGreaterThan(0);
  expect(o.catalog?.continued ?? 0).toBeGreaterThan(0);
  // Tenant-scoped validity was exercised: walks went on across other tenants' publications.
  expect(o.catalog?.["continued past newer publications"] ?? 0).toBeGreaterThan(0);
  expect(summary.checks.pages).toBeGreaterThan(0);
  expect(summary.checks.decisions).toBeGreaterThan(0);
  expect(summary.samples).toBeGreaterThan(0);
  expect(o.expire?.["expired some"] ?? 0).toBeGreaterThan(0);
});
