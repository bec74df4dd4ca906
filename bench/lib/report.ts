/**
 * The run's results: one JSON document (everything measured) and a markdown report (printed and
 * written next to it) with the machine, the servers, every figure, and the closing summary
 * against the reference's acceptance thresholds.
 */
import { mkdir, writeFile } from "node:fs/promises";
import type { Figure } from "./figures.js";
import type { MachineInfo, ServerInfo } from "./machine.js";
import type { SeedReport } from "../../fixtures/seed.js";
import type { Cost } from "../workloads/cost.js";

export interface Results {
  startedAt: string;
  mode: "quick" | "full";
  durationSeconds: number;
  machine: MachineInfo;
  loadAverageAtEnd: number[];
  servers: ServerInfo[];
  seeds: { target: string; seed: SeedReport }[];
  figures: Figure[];
  scale: { throughputRatio: number | null; p99Ratio: number | null } | null;
  tableWrites: { target: string; table: string; inserts: number; updates: number; hotPct: number | null }[];
  costs: (Cost & { target: string })[];
  /** Suites that could not run, with the reason. */
  failures: { suite: string; error: string }[];
}

/** The reference's acceptance thresholds, and ours (ten times better). */
const REFERENCE = { routesPerSecond: 100, routeP99Ms: 3000, catalogP99Ms: 2000 };
const GOAL = { routesPerSecond: 1000, routeP99Ms: 300, catalogP99Ms: 200 };

const n = (value: number, digits = 1) => (Number.isFinite(value) ? value.toFixed(digits) : "-");
const times = (ratio: number | undefined) => (ratio === undefined ? "-" : `${ratio.toFixed(2)}x`);
const ratios = (f: Figure) => (f.ratios ? `${times(f.ratios["SELECT 1"])} / ${times(f.ratios["one-row write"])} / ${times(f.ratios["graphile-worker"])}` : "");
const wal = (f: Figure | undefined) => (f?.walBytesPerOp === undefined ? "-" : n(f.walBytesPerOp, 0));
const errors = (f: Figure) =>
  Object.entries(f.errors)
    .map(([code, count]) => `${code} ${count}`)
    .join(", ");
const waits = (f: Figure) =>
  Object.entries(f.observation?.waits ?? {})
    .slice(0, 3)
    .map(([w, count]) => `${w} ${count}`)
    .join(", ");

function figureTable(figures: Figure[]): string[] {
  const rows = [
    "| workload | target | conc. | conns | ops/s | p50 ms | p95 ms | p99 ms | vs SELECT 1 / one-row write / graphile-worker | WAL B/op | CPU % machine (client) | top waits (avg backends) | errors | invariants |",
    "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|---|---|",
  ];
  for (const f of figures) {
    rows.push(
      `| ${f.suite}: ${f.name} | ${f.target} | ${f.concurrency} | ${f.pool} | ${n(f.throughput)} | ${n(f.latency.p50)} | ${n(f.latency.p95)} | ${n(f.latency.p99)} | ${ratios(f)} | ${wal(f)} | ${f.observation ? `${f.observation.machineCpuPct ?? "-"} (${f.observation.clientCpuPct})` : ""} | ${waits(f)} | ${errors(f)} | ${f.invariants ?? ""} |`,
    );
  }
  const notes = figures.filter((f) => f.note).map((f) => `- ${f.suite}: ${f.name} (c=${f.concurrency}): ${f.note}`);
  return notes.length ? [...rows, "", ...[...new Set(notes)]] : rows;
}

const find = (r: Results, suite: string, target: string, concurrency?: number) =>
  r.figures.find((f) => f.suite === suite && f.target === target && (concurrency === undefined || f.concurrency === concurrency));

function summary(r: Results): string[] {
  const lines = ["## Summary", ""];
  for (const target of [...new Set(r.figures.filter((f) => f.suite === "cycle").map((f) => f.target))]) {
    lines.push(`**${target}**: resolve+settle cycles per concurrency:`, "");
    lines.push(
      "| concurrency | conns | cycles/s | cycle p99 ms | new routes/s | route p99 ms | cycle vs SELECT 1 | vs one-row write | vs graphile-worker (jobs/s) | vs graphile-worker, queue 5,000 (jobs/s) | WAL B/cycle (graphile-worker B/job) |",
      "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    );
    for (const cycle of r.figures.filter((f) => f.suite === "cycle" && f.target === target)) {
      const resolve = find(r, "resolve", target, cycle.concurrency);
      const peer = find(r, "peer", target, cycle.concurrency);
      const shortQueue = find(r, "peer-short-queue", target, cycle.concurrency);
      lines.push(
        `| ${cycle.concurrency} | ${cycle.pool} | ${n(cycle.throughput)} | ${n(cycle.latency.p99)} | ${resolve ? n(resolve.throughput) : "-"} | ${resolve ? n(resolve.latency.p99) : "-"} | ${times(cycle.ratios?.["SELECT 1"])} | ${times(cycle.ratios?.["one-row write"])} | ${times(cycle.ratios?.["graphile-worker"])}${peer ? ` (${n(peer.throughput, 0)})` : ""} | ${times(cycle.ratios?.["graphile-worker (queue 5,000)"])}${shortQueue ? ` (${n(shortQueue.throughput, 0)})` : ""} | ${wal(cycle)} (${wal(peer)}) |`,
      );
    }
    lines.push("");
  }
  const pools = r.figures.filter((f) => f.suite === "limits" && f.name.startsWith("pool size"));
  const best = pools.reduce<Figure | undefined>((b, f) => (!b || f.throughput > b.throughput ? f : b), undefined);
  if (best) {
    lines.push(
      `- 500 in flight over pools of ${pools.map((f) => f.pool).join(", ")} connections: best ${best.pool} (${n(best.throughput)} cycles/s, p99 ${n(best.latency.p99)} ms); ${pools.map((f) => `${f.pool}: ${n(f.throughput)}/s`).join(", ")}.`,
    );
  }
  const catalog = r.figures.filter((f) => f.suite === "catalog");
  if (catalog.length) lines.push(`- Catalog p99 (32 readers): ${catalog.map((f) => `${f.name} ${n(f.latency.p99)} ms (${n(f.throughput)}/s)`).join("; ")}.`);
  if (r.scale) lines.push(`- Scale ratio, largest/smallest fleet: throughput x${n(r.scale.throughputRatio ?? NaN, 2)}, p99 x${n(r.scale.p99Ratio ?? NaN, 2)}.`);
  for (const http of r.figures.filter((f) => f.suite === "http" && f.name.includes("cycle"))) {
    lines.push(
      `- HTTP (Node server, autocannon, ${http.concurrency} connections): ${n(http.throughput)} cycles/s, cycle p99 ${n(http.latency.p99)} ms; ${times(http.ratios?.["SQL cycle"])} the SQL entry points' cycles at ${http.concurrency}.`,
    );
  }
  const partitions = r.figures.find((f) => f.suite === "partition" && f.name.startsWith("both"));
  if (partitions) {
    lines.push(
      `- Two databases with half the tenants each, driven together (${partitions.concurrency} in flight): ${n(partitions.throughput)} cycles/s, p99 ${n(partitions.latency.p99)} ms; ${times(partitions.ratios?.["SQL cycle"])} one database with every tenant at ${partitions.concurrency}.`,
    );
  }
  const pglite = r.figures.find((f) => f.suite === "pglite");
  if (pglite) lines.push(`- Embedded PGlite: ${n(pglite.throughput)} cycles/s single-session, p99 ${n(pglite.latency.p99)} ms.`);

  lines.push("", "Against the reference's acceptance (500 concurrent new routes; catalog pages):", "");
  lines.push(
    "| target | new routes/s at 500 | route p99 ms at 500 | catalog p99 ms | reference (>= 100/s, <= 3000 ms, <= 2000 ms) | 10x goal (>= 1000/s, <= 300 ms, <= 200 ms) |",
    "|---|--:|--:|--:|---|---|",
  );
  for (const resolve of r.figures.filter((f) => f.suite === "resolve" && f.concurrency === 500)) {
    // The catalog is measured on the main target only; other targets are judged on routing.
    const pages = catalog.filter((f) => f.target === resolve.target);
    const catalogP99 = Math.max(...pages.map((f) => f.latency.p99), 0);
    const meets = (goal: typeof REFERENCE) =>
      resolve.throughput >= goal.routesPerSecond && resolve.latency.p99 <= goal.routeP99Ms && catalogP99 <= goal.catalogP99Ms ? "met" : "NOT met";
    lines.push(
      `| ${resolve.target} (${resolve.pool} conns) | ${n(resolve.throughput)} | ${n(resolve.latency.p99)} | ${pages.length ? n(catalogP99) : "-"} | ${meets(REFERENCE)} | ${meets(GOAL)} |`,
    );
  }
  return lines;
}

function markdown(r: Results): string {
  const m = r.machine;
  const lines = [
    `# AIP registry benchmark: ${r.startedAt} (${r.mode})`,
    "",
    `Machine: ${m.cores} cores (${m.cpuModel}), ${m.memoryGiB} GiB, ${m.platform}; Node ${m.node}. Load average at start ${m.loadAverage.join(" / ")}, at end ${r.loadAverageAtEnd.join(" / ")}. Run took ${n(r.durationSeconds, 0)} s.`,
    "",
    "| server | version | settings | other sessions at start |",
    "|---|---|---|--:|",
    ...r.servers.map(
      (s) =>
        `| ${s.label} | ${s.version.split(" on ")[0]} | ${Object.entries(s.settings)
          .map(([k, v]) => `${k}=${v}`)
          .join(", ")} | ${s.otherSessions} |`,
    ),
    "",
    "Seeded fleets (set-based SQL as the owner, then ANALYZE):",
    "",
    "| target | replicas | bindings | tenants | types | seed s | analyze s |",
    "|---|--:|--:|--:|--:|--:|--:|",
    ...r.seeds.map(
      ({ target, seed }) =>
        `| ${target} | ${seed.rows.replicas} | ${seed.rows.bindings} | ${seed.rows.tenants} | ${seed.rows.connector_types} | ${n(seed.seedMs / 1000)} | ${n(seed.analyzeMs / 1000)} |`,
    ),
    "",
    ...summary(r),
    "",
    ...(r.costs.length
      ? [
          "Cost per operation (serial, one warm session; barely moved by other load):",
          "",
          "| target | operation | server CPU ms | CPU-bound ceiling ops/s (all cores) | WAL records / full-page images / bytes | relation locks (fast-path) |",
          "|---|---|--:|--:|--:|--:|",
          ...r.costs.map(
            (c) =>
              `| ${c.target} | ${c.operation} | ${c.serverCpuMs === null ? "-" : n(c.serverCpuMs, 2)} | ${c.cpuBoundOpsPerSecond === null ? "-" : n(c.cpuBoundOpsPerSecond, 0)} | ${c.wal ? `${n(c.wal.records)} / ${n(c.wal.fullPageImages)} / ${n(c.wal.bytes, 0)}` : "-"} | ${c.relationLocks ? `${c.relationLocks} (${c.fastPathLocks})` : "-"} |`,
          ),
          "",
        ]
      : []),
    ...(r.failures.length ? ["Suites that failed:", "", ...r.failures.map((f) => `- ${f.suite}: ${f.error}`), ""] : []),
    "## All figures",
    "",
    "Latencies are per operation as the client sees them, pool queueing included; a cycle is two",
    "round trips. `vs SELECT 1` is throughput over the same target's `SELECT 1` throughput at the",
    "same concurrency, through the same driver (and the routing suite's pool for it), in this run.",
    "",
    ...figureTable(r.figures),
  ];
  if (r.tableWrites.length) {
    lines.push("", "Writes to the hot tables over the run (HOT = heap-only updates, no index maintenance):", "");
    lines.push("| target | table | inserts | updates | HOT % |", "|---|---|--:|--:|--:|");
    for (const w of r.tableWrites) lines.push(`| ${w.target} | ${w.table} | ${w.inserts} | ${w.updates} | ${w.hotPct ?? "-"} |`);
  }
  return `${lines.join("\n")}\n`;
}

export async function writeResults(dir: string, r: Results): Promise<{ json: string; md: string; text: string }> {
  await mkdir(dir, { recursive: true });
  const stamp = r.startedAt.replace(/[:.]/g, "-");
  const json = `${dir}/${stamp}.json`;
  const md = `${dir}/${stamp}.md`;
  const text = markdown(r);
  await writeFile(json, `${JSON.stringify(r, null, 2)}\n`);
  await writeFile(md, text);
  return { json, md, text };
}
