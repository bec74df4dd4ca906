/**
 * The app's own CPU per request, before and after a change to its hot path, A B alternated:
 *
 *   npx tsx bench/app-overhead.ts [--base=37e72cb] [--rounds=8] [--requests=40000]
 *
 * Each measurement is a fresh process (bench/workloads/app-request.ts) running the app of one
 * source tree over a stub executor, no network and no database: `base` is the tree at --base
 * (default 37e72cb, the release before trace context and the activity history), `this` the
 * working tree with no OTEL_* variables. Workloads: a warm catalog page hit and a route resolution.
 * Rounds alternate base, this, this, base, ...; the medians and the difference per request are
 * reported. It isolates what the end-to-end figures (bench/tracing.ts) cannot resolve on a busy
 * machine: a few microseconds per request.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const args = new Map(
  process.argv
    .slice(2)
    .filter((arg) => arg.startsWith("--"))
    .map((arg) => {
      const [key, value] = arg.replace(/^--/, "").split("=");
      return [key as string, value ?? "true"];
    }),
);
const base = args.get("base") ?? "37e72cb";
const rounds = Number(args.get("rounds") ?? 8);
const requests = Number(args.get("requests") ?? 40_000);
const ROOT = fileURLToPath(new URL("../", import.meta.url));
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? Number.NaN;

const baseDir = mkdtempSync(join(tmpdir(), "aip-bench-app-"));
try {
  execFileSync("tar", ["-x", "-C", baseDir], { input: execFileSync("git", ["-C", ROOT, "archive", base, "src", "package.json"], { maxBuffer: 256 << 20 }) });
  symlinkSync(join(ROOT, "node_modules"), join(baseDir, "node_modules"));
  const trees = { base: baseDir, this: ROOT.replace(/\/$/, "") };
  const measure = (tree: keyof typeof trees, workload: string) => {
    const out = execFileSync(
      process.execPath,
      ["--import", "tsx", fileURLToPath(new URL("./workloads/app-request.ts", import.meta.url)), trees[tree], workload, String(requests)],
      {
        cwd: ROOT,
        env: { PATH: process.env.PATH ?? "" },
        encoding: "utf8",
      },
    );
    return (JSON.parse(out.trim().split("\n").at(-1) as string) as { cpuUsPerRequest: number }).cpuUsPerRequest;
  };
  console.log(`app CPU per request, ${base} (base) and the working tree (this), ${rounds} rounds of ${requests} requests, alternated`);
  for (const workload of ["catalog", "resolve"]) {
    const results: Record<keyof typeof trees, number[]> = { base: [], this: [] };
    for (let r = 0; r < rounds; r++) {
      for (const tree of (r % 2 === 0 ? ["base", "this"] : ["this", "base"]) as (keyof typeof trees)[]) {
        const us = measure(tree, workload);
        results[tree].push(us);
        console.log(`  ${workload.padEnd(7)} round ${r + 1} ${tree.padEnd(4)} ${us.toFixed(1)} µs/request`);
      }
    }
    const b = median(results.base);
    const t = median(results.this);
    console.log(
      `  ${workload.padEnd(7)} median: base ${b.toFixed(1)} µs, this ${t.toFixed(1)} µs: ${t >= b ? "+" : ""}${(t - b).toFixed(1)} µs per request (x${(t / b).toFixed(2)})`,
    );
  }
} finally {
  rmSync(baseDir, { recursive: true, force: true });
}
