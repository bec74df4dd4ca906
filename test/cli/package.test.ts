/**
 * The published package, as someone who installs it gets it: `npm pack` (which builds dist/ and
 * the client's declarations), then `npm install <tarball>` into an empty directory (the tarball
 * from disk, its dependencies from the registry; development dependencies such as tsx are not
 * installed), and there the CLI runs, finds its migrations and SQL functions, and a TypeScript
 * file importing `aip-registry/client` type-checks.
 */
import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { cleanEnv, ROOT } from "./support.js";

vi.setConfig({ testTimeout: 300_000, hookTimeout: 300_000 });

const run = promisify(execFile);
const pkg = JSON.parse(await readFile(join(ROOT, "package.json"), "utf8")) as { name: string; version: string; license?: string };
let work: string;
let consumer: string;
let tarball: string;

/** npm as a user runs it: its output, and no warnings. */
async function npm(args: string[], cwd: string): Promise<string> {
  const { stdout, stderr } = await run("npm", args, { cwd, env: cleanEnv({ npm_config_audit: "false", npm_config_fund: "false" }), maxBuffer: 16 << 20 });
  expect(stderr.split("\n").filter((line) => /^npm (warn|err)/i.test(line))).toEqual([]);
  return stdout;
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "aip-package-"));
  consumer = join(work, "consumer");
  const packed = JSON.parse(await npm(["pack", "--json", "--pack-destination", work], ROOT)) as { filename: string; files: { path: string }[] }[];
  tarball = join(work, packed[0]?.filename as string);
  await run("mkdir", ["-p", consumer]);
  // npm 11 asks every project to decide about its dependencies' install scripts: Swagger UI's
  // telemetry (@scarf/scarf) is declined. This package's own `prepare` (the clone's build) is
  // listed only because the tarball is a file, as a git dependency's would be (installed from a
  // registry, `prepare` never runs): declined too, by the tarball's path, as npm matches files.
  const allowScripts = { "@scarf/scarf": false, [`file:${tarball}`]: false };
  await writeFile(join(consumer, "package.json"), `${JSON.stringify({ name: "consumer", version: "1.0.0", private: true, type: "module", allowScripts })}\n`);
  await npm(["install", "--prefer-offline", tarball], consumer);
});
afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

// Independent checks of one installed package: side by side.
describe.concurrent("the package", () => {
  it("ships dist/, the SQL, the docs, an example and the alert rules and dashboard, and no tests, benchmarks or TypeScript sources", async () => {
    const { files } = (JSON.parse(await npm(["pack", "--dry-run", "--json", "--ignore-scripts"], ROOT)) as { files: { path: string }[] }[])[0] as {
      files: { path: string }[];
    };
    const paths = files.map((file) => file.path);
    for (const expected of [
      "bin/aip-registry.mjs",
      "dist/entry/cli.js",
      "dist/entry/node.js",
      "dist/client/index.js",
      "dist/client/index.d.ts",
      "dist/client/wire.d.ts",
      "dist/db/sql-files.js",
      "drizzle/meta/_journal.json",
      "drizzle/0000_registry_tables.sql",
      "functions/90_grants.sql",
      "docs/deploy.md",
      "docs/node.md",
      "README.md",
      "LICENSE",
      "examples/fleet.yaml",
      "ops/prometheus/aip-registry.rules.yml",
      "ops/grafana/aip-registry.json",
    ])
      expect(paths, expected).toContain(expected);
    // The licence: the file, and the SPDX identifier npm and scanners read.
    expect(pkg.license).toBe("Apache-2.0");
    expect(await readFile(join(ROOT, "LICENSE"), "utf8")).toMatch(/^Copyright The AIP registry authors\n\n\s+Apache License\n\s+Version 2\.0, January 2004\n/);
    const unwanted = paths.filter((path) => /^(test|bench|src|scripts|dev|\.ci)\/|^dist\/worker\/|\.ts$/.test(path) && !path.endsWith(".d.ts"));
    expect(unwanted).toEqual([]);
  });

  it("installs from the tarball and runs its CLI without any development dependency", async () => {
    const bin = join(consumer, "node_modules", ".bin", "aip-registry");
    const { stdout } = await run(bin, ["--version"], { cwd: consumer, env: cleanEnv() });
    expect(stdout.trim()).toBe(pkg.version);
    // Nothing of the build or test toolchain came along.
    for (const tool of ["tsx", "esbuild", "typescript", "vitest"]) {
      await expect(readFile(join(consumer, "node_modules", tool, "package.json")), tool).rejects.toThrow();
    }
    // The installed package finds its own migrations and functions: a fresh embedded database is migrated.
    const migrated = await run(bin, ["migrate", "--data-dir", join(work, "data")], { cwd: consumer, env: cleanEnv() });
    expect(migrated.stdout).toMatch(/^schema version \d+: applied 0000_registry_tables, .*; functions installed$/m);
  });

  it("gives TypeScript users the typed client at aip-registry/client", async () => {
    await writeFile(
      join(consumer, "check.ts"),
      [
        `import { RegistryClient, RegistryProblem, type RouteAssignment } from "${pkg.name}/client";`,
        `const client = new RegistryClient({ baseUrl: "http://127.0.0.1:8787", token: "t" });`,
        `export async function route(): Promise<string> {`,
        `  try {`,
        `    const { outcome, assignment } = await client.resolveRoute("act_1", { capability_id: "cap:x" });`,
        `    const route: RouteAssignment = assignment;`,
        `    return \`\${outcome} \${route.fence_token}\`;`,
        `  } catch (error) {`,
        `    if (error instanceof RegistryProblem) return error.code;`,
        `    throw error;`,
        `  }`,
        `}`,
        // A wrong type must fail: the declarations are real, not `any`.
        `// @ts-expect-error fence_token is a string`,
        `export const wrong: number = ({} as RouteAssignment).fence_token;`,
        "",
      ].join("\n"),
    );
    await writeFile(
      join(consumer, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: { module: "nodenext", moduleResolution: "nodenext", target: "es2022", lib: ["es2023", "dom"], types: [], strict: true, noEmit: true },
        files: ["check.ts"],
      }),
    );
    const tsc = join(ROOT, "node_modules", "typescript", "bin", "tsc");
    const result = await run(process.execPath, [tsc, "-p", "tsconfig.json"], { cwd: consumer }).catch((error: { stdout: string }) => error);
    expect(result.stdout).toBe("");
  });
});
