/**
 * Where a resolve + settle cycle's database time goes, line by line.
 *
 *   npx tsx bench/profile-routing.ts [--cycles=2000] [--replicas=1000] [--functions-at=<commit>] [--rounds=6]
 *
 * A fresh database (`aip_bench_profile`) seeded like the bench's, one owner session running cycles
 * one at a time (new action: resolve, then settle the assignment exactly as received) with
 * plprofiler collecting per-line PL/pgSQL time in that session only. Needs the plprofiler
 * extension on the server (Debian: postgresql-15-plprofiler) and a superuser URL.
 *
 * Prints, per entry point, the lines that took the most time (a line's time includes the functions
 * it calls, so nested lines are also listed under their own function), and the session's CPU per
 * cycle with the profiler on and off (its own overhead). plprofiler times lines by the clock, so a
 * machine busy with other work inflates them: with --functions-at, a second database runs the
 * function set of that commit and the two are profiled alternately, in chunks (--rounds), so that
 * their lines compare within one run.
 */
import pg from "pg";
import { Registry } from "../src/registry/registry.js";
import type { Layout } from "../fixtures/layout.js";
import { seedFleet, seedRouteHistory } from "../fixtures/seed.js";
import { dropDatabase, externalServer, freshDatabase, MACHINE_URL } from "./lib/target.js";
import { functionSetAt } from "./lib/functions-at.js";
import { backendCpuMs } from "./workloads/cost.js";
import { resolveNew, settle } from "./workloads/routing.js";

const args = new Map(
  process.argv
    .slice(2)
    .map((a) => /^--([a-z-]+)=(.*)$/.exec(a.includes("=") ? a : `${a}=true`)?.slice(1, 3) as [string, string])
    .filter(Boolean),
);
const cycles = Number(args.get("cycles") ?? 2000);
const replicas = Number(args.get("replicas") ?? 1000);
/** A: the function set at this commit, profiled beside the working tree's (B), alternating. */
const functionsAt = args.get("functions-at");
const rounds = Number(args.get("rounds") ?? 6);

interface LineStat {
  fn: string;
  line: number;
  calls: number;
  totalUs: number;
  source: string;
}

/** One profiled database: a plain session (CPU per cycle as shipped) and a profiled one. */
interface Side {
  label: string;
  runPlain: (n: number) => Promise<number>;
  runProfiled: (n: number) => Promise<number>;
  plainCpu: number[];
  profiledCpu: number[];
  client: pg.Client;
}

async function openSide(label: string, ownerUrl: string, l: Layout): Promise<{ side: Side; close: () => Promise<void> }> {
  const client = new pg.Client({ connectionString: ownerUrl, application_name: "aip-bench-profile" });
  const plain = new pg.Client({ connectionString: ownerUrl, application_name: "aip-bench-profile-plain" });
  // Two sessions: one plain (the cycle's CPU as shipped), one with the profiler. The profiler
  // must be on before a function's first call in the session, or it never instruments it.
  const cpuPerCycle = async (c: pg.Client) => {
    const executor = {
      query: async <R extends Record<string, unknown>>(text: string, params: readonly unknown[] = []) => (await c.query<R>(text, params as unknown[])).rows,
    };
    const registry = new Registry({ data: executor, control: executor });
    const pid = Number((await c.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]?.pid);
    return async (n: number) => {
      const cpu0 = await backendCpuMs(pid);
      for (let i = 0; i < n; i++) await settle(registry, await resolveNew(registry, l, "p"));
      const cpu1 = await backendCpuMs(pid);
      return cpu0 !== null && cpu1 !== null ? (cpu1 - cpu0) / n : Number.NaN;
    };
  };
  await plain.connect();
  const runPlain = await cpuPerCycle(plain);
  await runPlain(200); // compile and plan
  await client.connect();
  await client.query("CREATE EXTENSION IF NOT EXISTS plprofiler");
  await client.query("LOAD 'plprofiler'");
  await client.query("SELECT pl_profiler_set_enabled_local(true)");
  const runProfiled = await cpuPerCycle(client);
  await runProfiled(200);
  await client.query("SELECT pl_profiler_reset_local()");
  return {
    side: { label, runPlain, runProfiled, plainCpu: [], profiledCpu: [], client },
    close: async () => {
      await client.end().catch(() => {});
      await plain.end().catch(() => {});
    },
  };
}

async function report(side: Side, total: number): Promise<void> {
  const { rows } = await side.client.query<{ fn: string; line: string; calls: string; total_us: string; src: string }>(
    `SELECT p.proname AS fn, s.line_number AS line, s.exec_count AS calls, s.total_time AS total_us,
            CASE WHEN s.line_number > 0 THEN split_part(p.prosrc, E'\\n', s.line_number::int) ELSE '' END AS src
     FROM pl_profiler_linestats_local() s JOIN pg_proc p ON p.oid = s.func_oid
     WHERE s.exec_count > 0`,
  );
  const stats: LineStat[] = rows.map((r) => ({ fn: r.fn, line: Number(r.line), calls: Number(r.calls), totalUs: Number(r.total_us), source: r.src.trim() }));
  const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? Number.NaN;
  console.log(
    `\n=== ${side.label}: ${total} cycles, ${replicas} replicas: session CPU per cycle ${median(side.plainCpu).toFixed(3)} ms without the profiler ` +
      `(chunks ${side.plainCpu.map((c) => c.toFixed(3)).join(", ")}), ${median(side.profiledCpu).toFixed(3)} with it`,
  );
  const byFn = new Map<string, LineStat[]>();
  for (const s of stats) byFn.set(s.fn, [...(byFn.get(s.fn) ?? []), s]);
  // Line 0 is the whole function (plprofiler's convention).
  const totals = [...byFn.entries()]
    .map(([fn, lines]) => ({ fn, us: lines.find((x) => x.line === 0)?.totalUs ?? 0, calls: lines.find((x) => x.line === 0)?.calls ?? 0 }))
    .sort((a, b) => b.us - a.us);
  console.log("\nfunction                           calls/cycle  us/cycle");
  for (const t of totals) console.log(`${t.fn.padEnd(34)} ${(t.calls / total).toFixed(2).padStart(10)} ${(t.us / total).toFixed(1).padStart(9)}`);
  for (const t of totals.slice(0, 8)) {
    console.log(`\n${t.fn}: ${(t.us / total).toFixed(1)} us/cycle`);
    const lines = (byFn.get(t.fn) ?? []).filter((x) => x.line > 0 && x.totalUs / total >= 1).sort((a, b) => b.totalUs - a.totalUs);
    for (const x of lines.slice(0, 14)) {
      console.log(
        `  ${String(x.line).padStart(4)} ${(x.totalUs / total).toFixed(1).padStart(7)} us ${(x.calls / total).toFixed(2).padStart(5)}x  ${x.source.slice(0, 110)}`,
      );
    }
  }
}

async function main() {
  const server = await externalServer(process.env.BENCH_DATABASE_URL ?? MACHINE_URL, "machine");
  const names = functionsAt ? ["aip_bench_profile_a", "aip_bench_profile"] : ["aip_bench_profile"];
  const dbs = await Promise.all(names.map((name) => freshDatabase(server, name)));
  const closers: (() => Promise<void>)[] = [];
  try {
    const sides: Side[] = [];
    for (const [i, db] of dbs.entries()) {
      const { layout: l } = await db.withOwner((s) => seedFleet(s, { replicas, types: Math.min(1000, replicas) }));
      // A registry's route table holds its history: plans chosen against an empty one would scan it.
      await db.withOwner((s) => seedRouteHistory(s, 10_000));
      const before = functionsAt && i === 0;
      if (before) await db.withOwner((s) => s.exec(functionSetAt(functionsAt)));
      await db.withOwner((s) => s.exec("ANALYZE"));
      const opened = await openSide(before ? `functions/ at ${functionsAt}` : "functions/ in the working tree", db.ownerUrl, l as Layout);
      closers.push(opened.close);
      sides.push(opened.side);
    }
    // Alternate the sides in chunks, so that other load on the machine hits them alike.
    const chunk = Math.max(100, Math.round(cycles / rounds));
    for (let r = 0; r < rounds; r++) {
      for (const side of r % 2 === 0 ? sides : [...sides].reverse()) {
        side.plainCpu.push(await side.runPlain(chunk));
        side.profiledCpu.push(await side.runProfiled(chunk));
      }
    }
    for (const side of sides) await report(side, chunk * rounds);
  } finally {
    for (const close of closers) await close();
    for (const db of dbs) {
      await db.closePools();
      if (!args.has("keep")) await dropDatabase(server, db.name);
    }
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
