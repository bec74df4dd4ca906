/**
 * Production runs compiled JavaScript: `npm start` and the bin run dist/ (built by `npm install`'s
 * `prepare`, and again by `prestart` or the bin when src/ changed since), with nothing between npm
 * and node that could swallow a signal, and nothing at run time that is a development dependency.
 */
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { builtinModules } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { promisify } from "node:util";
import * as esbuild from "esbuild";
import { describe, expect, it } from "vitest";
import { fingerprint, isCurrent } from "../../scripts/build.mjs";

const root = new URL("../../", import.meta.url);
const pkg = JSON.parse(readFileSync(new URL("package.json", root), "utf8")) as {
  scripts: Record<string, string>;
  bin: Record<string, string>;
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
};

describe("npm scripts", () => {
  it("start execs node on the compiled server: npm's signal reaches it, no shell or tsx in between", () => {
    expect(pkg.scripts.start).toBe("exec node dist/entry/node.js");
  });

  it("build on install (prepare) and before start (prestart) only when src/ changed; the package build adds declarations", () => {
    expect(pkg.scripts.prepare).toBe("node scripts/build.mjs --if-stale");
    expect(pkg.scripts.prestart).toBe("node scripts/build.mjs --if-stale");
    expect(pkg.scripts.prepack).toBe("node scripts/build.mjs --declarations");
  });

  it("keeps tsx, esbuild and typescript out of the runtime dependencies", () => {
    for (const tool of ["tsx", "esbuild", "typescript"]) {
      expect(pkg.dependencies[tool], tool).toBeUndefined();
      expect(pkg.devDependencies[tool], tool).toBeDefined();
    }
  });
});

describe("the build", () => {
  it("finds src/ from any working directory (the bin runs it from wherever the user is)", async () => {
    const outdir = await mkdtemp(join(tmpdir(), "aip-build-"));
    try {
      const script = pathToFileURL(fileURLToPath(new URL("scripts/build.mjs", root))).href;
      const { stdout } = await promisify(execFile)(
        process.execPath,
        [
          "--input-type=module",
          "-e",
          `const { build } = await import(${JSON.stringify(script)}); console.log(JSON.stringify((await build(process.argv[1])).outputs));`,
          outdir,
        ],
        { cwd: tmpdir() },
      );
      const outputs = JSON.parse(stdout) as string[];
      expect(outputs).toEqual(expect.arrayContaining(["entry/cli.js", "entry/node.js", "client/index.js", "db/sql-files.js", "cli/server.js"]));
      expect(outputs.length).toBeGreaterThan(40);
    } finally {
      await rm(outdir, { recursive: true, force: true });
    }
  });
});

describe("dist/", () => {
  it("is built from the current src/ (the test setup builds it when it is not)", () => {
    expect(fingerprint()).toMatch(/^[0-9a-f]{64}$/);
    expect(isCurrent()).toBe(true);
  });

  it("imports nothing at run time but Node built-ins and the runtime dependencies", async () => {
    const entries = ["dist/entry/node.js", "dist/entry/cli.js", "dist/client/index.js", fileURLToPath(new URL(pkg.bin["aip-registry"] as string, root))];
    const result = await esbuild.build({
      entryPoints: entries.map((entry) => fileURLToPath(new URL(entry, root))),
      bundle: true,
      packages: "external",
      platform: "node",
      format: "esm",
      write: false,
      outdir: "/nonexistent",
      metafile: true,
      logLevel: "silent",
      // The bin rebuilds dist/ in a clone only, through this script: it is not shipped.
      external: ["../scripts/build.mjs"],
    });
    const packages = new Set<string>();
    for (const input of Object.values(result.metafile.inputs)) {
      for (const imported of input.imports) {
        if (!imported.external || imported.path.startsWith(".")) continue;
        const name = imported.path.startsWith("@") ? imported.path.split("/").slice(0, 2).join("/") : (imported.path.split("/")[0] as string);
        packages.add(name);
      }
    }
    const builtins = new Set(builtinModules.flatMap((name) => [name, `node:${name}`]));
    const foreign = [...packages].filter((name) => !builtins.has(name) && !name.startsWith("node:") && pkg.dependencies[name] === undefined);
    expect(foreign).toEqual([]);
    // The server and the CLI really are in the graph (a wrong entry would make this test vacuous).
    expect([...packages]).toEqual(expect.arrayContaining(["pg", "@electric-sql/pglite", "hono"]));
  });
});
