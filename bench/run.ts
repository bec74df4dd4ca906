/**
 * `npm run bench`: seeds the reference's scale dataset on real PostgreSQL and measures the
 * registry's data plane, with a `SELECT 1` baseline in the same run. See bench/README.md.
 */
import { fileURLToPath } from "node:url";
import { OWN_DATABASE_SUITES, parseArgs, type Options } from "./lib/args.js";
import { Recorder, invariants } from "./lib/figures.js";
import { machineInfo, serverInfo } from "./lib/machine.js";
import { tableWrites, writesBetween } from "./lib/observe.js";
import { writeResults, type Results } from "./lib/report.js";
import { publishProbe, seedFleet, seedRouteHistory, verifySeed } from "../fixtures/seed.js";
import { connectionBudget, embeddedServer, externalServer, freshDatabase, MACHINE_URL, type Server } from "./lib/target.js";
import { runCatalog } from "./workloads/catalog.js";
import { runCatalogChurn } from "./workloads/catalog-churn.js";
import { runCatalogHttp } from "./workloads/catalog-http.js";
import { runContention } from "./workloads/contention.js";
import { measureCosts } from "./workloads/cost.js";
import { runHttp } from "./workloads/http.js";
import { runLimits } from "./workloads/limits.js";
import { runPglite } from "./workloads/pglite.js";
import { runRouting } from "./workloads/routing.js";
import { runPartition } from "./workloads/partition.js";
import { runPublication } from "./workloads/publication.js";
import { runScale } from "./workloads/scale.js";

const log = (line: string) => console.log(line);

/**
 * Runs one suite, logging its duration. A suite that fails (e.g. the HTTP server refusing a
 * schema mismatch) is reported, not fatal.
 */
async function attempt(results: Results, suite: string, fn: () => Promise<void>): Promise<void> {
  const started = performance.now();
  try {
    await fn();
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    results.failures.push({ suite, error: message });
    console.error(`  ${suite} failed: ${message}`);
  } finally {
    log(`  (${suite}: ${((performance.now() - started) / 1000).toFixed(0)} s)`);
  }
}

const REFERENCE_SCALE = { replicas: 10_000, types: 1_000 };
/** Settled routes seeded before any suite runs (one per binding, up to this many). */
const ROUTE_HISTORY = 20_000;

/** The suites that run on the seeded reference fleet. */
async function seededSuites(
  server: Server,
  target: string,
  options: Options,
  results: Results,
  recorder: Recorder,
  embedded: boolean,
  maxPool: number,
  poolFor: (concurrency: number) => number,
) {
  // BENCH_DATABASE_NAME: another name, so that two runs on one server cannot drop each other's database.
  const db = await freshDatabase(server, process.env.BENCH_DATABASE_NAME ?? "aip_bench");
  try {
    const seed = await db.withOwner((session) => seedFleet(session, REFERENCE_SCALE));
    results.seeds.push({ target, seed });
    log(
      `  seeded ${seed.rows.replicas} replicas, ${seed.rows.bindings} bindings, ${seed.rows.tenants} tenants in ${(seed.seedMs / 1000).toFixed(1)} s (+ ANALYZE ${(seed.analyzeMs / 1000).toFixed(1)} s)`,
    );
    // A registry's route table is mostly history. Planned against an empty one, the routing
    // statements scan it until autovacuum's first ANALYZE replans them: a cold-start artifact
    // that grew with every route a phase made (it inflated this suite's cycle cost to 2.2 ms).
    await db.withOwner((session) => seedRouteHistory(session, ROUTE_HISTORY));
    const problems = await db.withOwner((session) => verifySeed(session, seed.layout));
    if (problems.length) throw new Error(`the seeded fleet is inconsistent:\n  ${problems.join("\n  ")}`);
    const checker = await db.registry(1);
    try {
      await db.withOwner((session) => publishProbe(checker.registry, session));
      log(`  seed verified (digests, sizes, foreign keys, publication probe); invariants: ${await invariants(checker.registry)}`);
    } finally {
      await checker.close();
    }
    const writesBefore = await db.withOwner((s) => tableWrites((q) => s.query(q)));
    const layout = seed.layout;

    if (options.suites.has("cost") && !embedded) {
      log("cost per operation (serial, one session)");
      await attempt(results, "cost", async () => {
        const costs = await measureCosts(db, layout, options.quick ? 50 : 300);
        results.costs.push(...costs.map((c) => ({ target, ...c })));
        for (const c of costs) {
          const wal = c.wal ? `, WAL ${c.wal.records.toFixed(1)} records (${c.wal.fullPageImages.toFixed(1)} full pages) ${c.wal.bytes.toFixed(0)} B` : "";
          log(`  ${c.operation}: server CPU ${c.serverCpuMs?.toFixed(2) ?? "-"} ms${wal}, relation locks ${c.relationLocks} (${c.fastPathLocks} fast-path)`);
        }
      });
    }
    if (options.suites.has("routing")) {
      log("routing (registry client over a pg pool)");
      await attempt(results, "routing", () =>
        runRouting(recorder, db, layout, {
          target,
          concurrencies: embedded ? [500] : options.concurrencies,
          poolFor,
          durationMs: options.phaseMs,
          baselineMs: options.baselineMs,
          // 500 connections x 6 lifecycles would take longer than the phases themselves.
          warmRounds: embedded ? 1 : options.warmRounds,
          ...(embedded ? { phases: ["resolve", "cycle"] as const } : {}),
        }),
      );
    }
    // The embedded server is there for 500 real connections: routing only.
    if (embedded) return;
    if (options.suites.has("catalog")) {
      log("catalog");
      await attempt(results, "catalog", () =>
        runCatalog(recorder, db, layout, { target, readers: Math.min(32, maxPool), durationMs: options.phaseMs, sampledTenants: options.quick ? 8 : 32 }),
      );
    }
    if (options.suites.has("catalog-http")) {
      log("catalog over HTTP (Node server under autocannon: cache warm, 304, staleness, uncached)");
      await attempt(results, "catalog-http", () =>
        runCatalogHttp(recorder, db, layout, {
          target,
          connections: 32,
          poolMax: Math.min(16, maxPool),
          durationMs: options.phaseMs,
          sampledTenants: options.quick ? 8 : 32,
        }),
      );
    }
    if (options.suites.has("contention")) {
      log("contention");
      await attempt(results, "contention", () =>
        runContention(recorder, db, {
          target,
          durationMs: options.phaseMs,
          hotConcurrency: 64,
          hotPool: poolFor(64),
          noisyConcurrency: options.quick ? 64 : 128,
          noisyPool: Math.min(32, maxPool),
        }),
      );
    }
    if (options.suites.has("limits")) {
      log("limits (what bounds throughput)");
      await attempt(results, "limits", () =>
        runLimits(recorder, db, layout, {
          target,
          durationMs: options.phaseMs,
          concurrency: 500,
          poolSizes: [...new Set([8, 16, maxPool])].filter((p) => p <= maxPool),
          pool: poolFor(64),
          experimentConcurrency: 64,
          warmRounds: options.warmRounds,
        }),
      );
    }
    if (options.suites.has("http")) {
      log("http (Node server under autocannon)");
      await attempt(results, "http", () =>
        runHttp(recorder, db, layout, { target, connections: [16, 64], poolMax: Math.min(32, maxPool), durationMs: options.phaseMs }),
      );
    }
    if (options.suites.has("publication")) {
      log("publication (resolves and catalog reads while large versions are published)");
      await attempt(results, "publication", () => runPublication(recorder, db, layout, { target, durationMs: Math.max(options.phaseMs, 8000), log }));
    }
    const writesAfter = await db.withOwner((s) => tableWrites((q) => s.query(q)));
    results.tableWrites.push(...writesBetween(writesBefore, writesAfter).map((w) => ({ target, ...w })));
  } finally {
    await db.closePools();
  }
}

/** The seeded reference fleet on one server, and every suite that needs it. */
async function benchServer(server: Server, target: string, options: Options, results: Results, recorder: Recorder, embedded: boolean) {
  results.servers.push(await serverInfo(server.label, server.adminUrl));
  // Leave room for the observer, the control pool and the other engineers using the server.
  const budget = await connectionBudget(server);
  const maxPool = embedded ? 500 : Math.max(8, Math.min(options.maxPool, budget - 12));
  const poolFor = (concurrency: number) => Math.min(concurrency, maxPool);
  log(`\n== ${server.label}: data pool up to ${maxPool} connections (server budget ${budget})`);

  if (!embedded && options.suites.has("catalog-churn")) {
    log("catalog under other tenants' churn (20 tenants x 500 capabilities, own database)");
    await attempt(results, "catalog-churn", () =>
      runCatalogChurn(recorder, server, { target, durationMs: options.phaseMs, poolMax: Math.min(16, maxPool), rounds: 2, log }),
    );
  }
  if ([...options.suites].some((suite) => !OWN_DATABASE_SUITES.includes(suite)))
    await seededSuites(server, target, options, results, recorder, embedded, maxPool, poolFor);
  // The embedded server is there for 500 real connections: routing only.
  if (embedded) return;
  if (options.suites.has("partition")) {
    log("partition (half the tenants in each of two databases, driven together)");
    await attempt(results, "partition", () =>
      runPartition(recorder, server, {
        target,
        concurrency: 64,
        pool: poolFor(32),
        durationMs: options.phaseMs,
        warmRounds: options.warmRounds,
        replicas: REFERENCE_SCALE.replicas,
        log,
      }),
    );
  }
  if (options.suites.has("scale")) {
    log("scale curve");
    await attempt(results, "scale", async () => {
      results.scale = await runScale(recorder, server, {
        target,
        replicas: options.scaleReplicas,
        concurrency: 64,
        pool: poolFor(64),
        durationMs: options.phaseMs,
        warmRounds: options.warmRounds,
        log,
      });
    });
  }
}

async function main() {
  const options = parseArgs(process.argv.slice(2));
  const startedAt = new Date();
  const results: Results = {
    startedAt: startedAt.toISOString(),
    mode: options.quick ? "quick" : "full",
    durationSeconds: 0,
    machine: machineInfo(),
    loadAverageAtEnd: [],
    servers: [],
    seeds: [],
    figures: [],
    scale: null,
    tableWrites: [],
    costs: [],
    failures: [],
  };
  const recorder = new Recorder(log);
  results.figures = recorder.figures;
  log(`AIP registry benchmark (${results.mode}): ${results.machine.cores} cores, load average ${results.machine.loadAverage.join(" / ")}`);

  if (options.targets.machine) {
    const url = process.env.BENCH_DATABASE_URL;
    const server = await externalServer(url ?? MACHINE_URL, url ? "BENCH_DATABASE_URL server" : "machine PostgreSQL");
    await benchServer(server, url ? "external" : "machine", options, results, recorder, false);
  }
  if (options.targets.embedded && options.suites.has("routing")) {
    const server = await embeddedServer({ maxConnections: 600, sharedBuffers: "128MB" });
    try {
      await benchServer(server, "embedded", options, results, recorder, true);
    } finally {
      await server.stop();
    }
  }
  if (options.suites.has("pglite")) {
    log("\n== embedded default: PGlite");
    await attempt(results, "pglite", () => runPglite(recorder, { durationMs: options.phaseMs, log }));
  }

  results.durationSeconds = (Date.now() - startedAt.getTime()) / 1000;
  results.loadAverageAtEnd = machineInfo().loadAverage;
  const written = await writeResults(fileURLToPath(new URL("./results", import.meta.url)), results);
  log(`\n${written.text}`);
  log(`results: ${written.json}\n         ${written.md}`);
  const broken = results.figures.filter((f) => f.invariants && f.invariants !== "healthy");
  if (broken.length) console.error(`invariants were violated after ${broken.length} phase(s)`);
  if (broken.length || results.failures.length) process.exitCode = 1;
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
