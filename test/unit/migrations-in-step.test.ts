/**
 * The committed migrations are exactly what drizzle-kit generates from drizzle/schema.ts: a change
 * to the schema without its migration (or the reverse) fails here, not in a deployment whose
 * tables differ from what the code was written for. drizzle-kit generate works offline: it diffs
 * the schema against the last snapshot in drizzle/meta, so it runs on a copy of drizzle/.
 */
import { execFile } from "node:child_process";
import { cp, mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, expect, it } from "vitest";
import { packageRoot } from "../../src/db/sql-files.js";

let out: string;
beforeAll(async () => {
  out = await mkdtemp(join(tmpdir(), "aip-drizzle-"));
  await cp(`${packageRoot}drizzle`, out, { recursive: true, filter: (source) => !source.endsWith(".ts") });
});
afterAll(() => rm(out, { recursive: true, force: true }));

it("drizzle-kit generate finds nothing to migrate in drizzle/schema.ts", async () => {
  const before = (await readdir(out, { recursive: true })).sort();
  const journal = await readFile(join(out, "meta/_journal.json"), "utf8");
  // The output folder relative to the package: drizzle-kit prefixes `./` to it.
  const { stdout, stderr } = await promisify(execFile)(
    process.execPath,
    [
      `${packageRoot}node_modules/drizzle-kit/bin.cjs`,
      "generate",
      "--dialect=postgresql",
      "--schema=./drizzle/schema.ts",
      `--out=${relative(packageRoot, out)}`,
    ],
    { cwd: packageRoot, timeout: 60_000 },
  );
  expect({ stdout, stderr }).toEqual({ stdout: expect.stringContaining("No schema changes"), stderr: "" });
  expect((await readdir(out, { recursive: true })).sort()).toEqual(before);
  expect(await readFile(join(out, "meta/_journal.json"), "utf8")).toBe(journal);
}, 90_000);
