#!/usr/bin/env node
/**
 * Builds @aip-registry/client from src/client/ (`npm pack` here runs it: prepack): dist/index.js,
 * one ES module bundled by esbuild for any runtime with fetch, and the type declarations tsc writes
 * as tsconfig.json says; the repository's LICENSE beside them. The tools come from the repository's
 * development dependencies (`npm install` at the root first).
 */
import { copyFileSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..", "..");
const dist = join(here, "dist");

/** @template T @param {() => Promise<T>} load @returns {Promise<T>} */
async function devDependency(load) {
  try {
    return await load();
  } catch {
    throw new Error("building the client needs the repository's development dependencies (esbuild, typescript): run `npm install` at its root");
  }
}

export async function buildClient() {
  const esbuild = await devDependency(() => import("esbuild"));
  const ts = (await devDependency(() => import("typescript"))).default;
  rmSync(dist, { recursive: true, force: true });
  await esbuild.build({
    entryPoints: [join(root, "src", "client", "index.ts")],
    outfile: join(dist, "index.js"),
    bundle: true,
    format: "esm",
    platform: "neutral",
    target: "es2022",
    logLevel: "warning",
  });
  const config = ts.getParsedCommandLineOfConfigFile(join(here, "tsconfig.json"), {}, { ...ts.sys, onUnRecoverableConfigFileDiagnostic: () => {} });
  if (!config) throw new Error("packages/client/tsconfig.json could not be read");
  const program = ts.createProgram({ rootNames: config.fileNames, options: config.options });
  const diagnostics = [...ts.getPreEmitDiagnostics(program), ...program.emit().diagnostics];
  if (diagnostics.length > 0) {
    throw new Error(ts.formatDiagnostics(diagnostics, { getCanonicalFileName: (f) => f, getCurrentDirectory: () => here, getNewLine: () => "\n" }));
  }
  copyFileSync(join(root, "LICENSE"), join(here, "LICENSE"));
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  try {
    await buildClient();
    process.stderr.write("@aip-registry/client: built dist/\n");
  } catch (error) {
    process.stderr.write(`error: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exitCode = 1;
  }
}
