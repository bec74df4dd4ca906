#!/usr/bin/env node
/**
 * The Node build: the TypeScript under src/ that the Node server, the CLI and the typed client
 * run becomes plain JavaScript under dist/, one file per source file in the same layout (so
 * dist/db/sql-files.js finds functions/ and drizzle/ two levels up, exactly as src/db/ does).
 *
 *   node scripts/build.mjs --if-stale      the JavaScript, only if an input changed since the last
 *                                          build: `npm install` (prepare), `npm start` (prestart),
 *                                          the bin in a clone, the test setup. About 0.2 s to build,
 *                                          a few milliseconds to find it current.
 *   node scripts/build.mjs --declarations  the JavaScript and the client's type declarations
 *                                          (dist/client/*.d.ts: the client imports nothing else): `npm run
 *                                          build`, `npm pack` (prepack). tsc takes seconds, so only
 *                                          the package needs it.
 *
 * esbuild transpiles (no type check: `npm run typecheck` does that), tsc writes the declarations.
 * A build records a fingerprint of its inputs (every file under src/, the tsconfigs, this script)
 * and the files it wrote; the next build removes outputs whose source is gone. The Worker is not
 * built here: wrangler bundles src/entry/worker.ts itself (`npm run build:worker`).
 */
import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, relative, sep } from "node:path";
import { fileURLToPath } from "node:url";

const root = dirname(dirname(fileURLToPath(import.meta.url)));
const DIST = join(root, "dist");
const stampPath = (outdir = DIST) => join(outdir, "build-stamp.json");
/** What Node runs: the server, the CLI (its commands are loaded on demand) and the published client. */
const ENTRY_POINTS = ["src/entry/node.ts", "src/entry/cli.ts", "src/client/index.ts"];
/** Syntax is lowered to what Node 20 runs: the server still starts there, though only 22 and 24 are promised. */
const TARGET = "node20";

/** @param {string} dir @returns {string[]} */
function filesUnder(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    return entry.isDirectory() ? filesUnder(path) : [path];
  });
}

/** SHA-256 over every input's path and bytes: a checkout, an edit or a pull changes it, a touch does not. */
export function fingerprint() {
  const inputs = [...filesUnder(join(root, "src")), join(root, "tsconfig.json"), join(root, "tsconfig.build.json"), fileURLToPath(import.meta.url)].sort();
  const hash = createHash("sha256");
  for (const path of inputs) hash.update(`${relative(root, path).split(sep).join("/")}\n`).update(readFileSync(path));
  return hash.digest("hex");
}

/** @returns {{ fingerprint: string, outputs: string[] } | undefined} */
function readStamp(outdir = DIST) {
  try {
    return JSON.parse(readFileSync(stampPath(outdir), "utf8"));
  } catch {
    return undefined;
  }
}

/** True when dist/ was built from exactly the current inputs. */
export function isCurrent() {
  const stamp = readStamp();
  return stamp !== undefined && stamp.fingerprint === fingerprint() && stamp.outputs.every((path) => existsSync(join(DIST, path)));
}

/**
 * @template T
 * @param {() => Promise<T>} load
 * @returns {Promise<T>}
 */
async function devDependency(load) {
  try {
    return await load();
  } catch {
    throw new Error(
      "building dist/ needs the development dependencies (esbuild, typescript): run `npm install` (or `npm ci`) without --omit=dev, " +
        "then `npm prune --omit=dev` if the machine should keep only what the server runs",
    );
  }
}

/**
 * Writes dist/'s JavaScript (or `outdir`'s); returns the files written (relative to it). Paths
 * are resolved from the package root, wherever the process runs (the bin runs from any directory).
 */
export async function build(outdir = DIST) {
  const esbuild = await devDependency(() => import("esbuild"));
  const started = Date.now();
  // The source files the entry points reach, dynamic imports included (the CLI loads its commands on demand).
  const graph = await esbuild.build({
    entryPoints: ENTRY_POINTS.map((path) => join(root, path)),
    bundle: true,
    packages: "external",
    platform: "node",
    format: "esm",
    absWorkingDir: root,
    outdir, // required with several entry points; nothing is written
    write: false,
    metafile: true,
    logLevel: "silent",
  });
  const sources = Object.keys(graph.metafile.inputs)
    .filter((path) => path.startsWith("src/") && path.endsWith(".ts"))
    .map((path) => join(root, path));
  if (!sources.some((path) => path.endsWith(join("src", "entry", "cli.ts")))) throw new Error(`the build found no sources under ${join(root, "src")}`);
  const transpiled = await esbuild.build({
    absWorkingDir: root,
    entryPoints: sources,
    outbase: join(root, "src"),
    outdir,
    bundle: false,
    platform: "node",
    format: "esm",
    target: TARGET,
    metafile: true,
    logLevel: "warning",
  });
  const outputs = Object.keys(transpiled.metafile.outputs).map((path) => relative(outdir, join(root, path)));
  // Outputs of an earlier build whose source is gone would still be importable: remove them.
  for (const stale of readStamp(outdir)?.outputs ?? []) {
    if (!outputs.includes(stale)) rmSync(join(outdir, stale), { force: true });
  }
  writeFileSync(stampPath(outdir), `${JSON.stringify({ fingerprint: fingerprint(), outputs: outputs.sort() }, null, 2)}\n`);
  return { outputs, ms: Date.now() - started };
}

/** The client's declarations and those of the modules its types come from (tsconfig.build.json). */
export async function buildDeclarations() {
  const ts = (await devDependency(() => import("typescript"))).default;
  const started = Date.now();
  const config = ts.getParsedCommandLineOfConfigFile(join(root, "tsconfig.build.json"), {}, { ...ts.sys, onUnRecoverableConfigFileDiagnostic: () => {} });
  if (!config) throw new Error("tsconfig.build.json could not be read");
  /** @type {string[]} */
  const outputs = [];
  const emitted = ts.createProgram({ rootNames: config.fileNames, options: config.options }).emit(undefined, (path, text) => {
    writeFileSync(path, text);
    outputs.push(relative(DIST, path));
  });
  if (emitted.diagnostics.length > 0) {
    throw new Error(ts.formatDiagnostics(emitted.diagnostics, { getCanonicalFileName: (f) => f, getCurrentDirectory: () => root, getNewLine: () => "\n" }));
  }
  return { outputs, ms: Date.now() - started };
}

/** Builds the JavaScript unless dist/ is current; `log` hears about a build. */
export async function ensureBuilt(log = (/** @type {string} */ line) => process.stderr.write(`${line}\n`)) {
  if (isCurrent()) return false;
  const { outputs, ms } = await build();
  log(`aip-registry: built dist/ from src/ (${outputs.length} files, ${ms} ms)`);
  return true;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  try {
    if (process.argv.includes("--declarations")) {
      await ensureBuilt();
      const { outputs, ms } = await buildDeclarations();
      process.stderr.write(`aip-registry: wrote the client's type declarations (${outputs.length} files, ${ms} ms)\n`);
    } else if (process.argv.includes("--if-stale")) {
      await ensureBuilt();
    } else {
      process.stderr.write("usage: node scripts/build.mjs --if-stale | --declarations\n");
      process.exitCode = 2;
    }
  } catch (error) {
    process.stderr.write(`error: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exitCode = 1;
  }
}
