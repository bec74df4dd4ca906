/**
 * The layout's import rules (docs/architecture.md): the product (src/) imports nothing of the
 * development tree; tests and the bench share fixtures/ and never import each other.
 */
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, normalize, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { expect, it } from "vitest";

const root = fileURLToPath(new URL("../../", import.meta.url));

/** Every relative import of the TypeScript files under `dir`, as repository paths. */
function importsUnder(dir: string): { file: string; target: string }[] {
  const files = (readdirSync(join(root, dir), { recursive: true }) as string[]).filter((name) => name.endsWith(".ts")).map((name) => join(dir, name));
  return files.flatMap((file) =>
    [...readFileSync(join(root, file), "utf8").matchAll(/(?:from|import)\s*\(?\s*"(\.{1,2}\/[^"]+)"/g)].map((m) => ({
      file,
      target: relative(root, normalize(join(root, dirname(file), m[1] as string))),
    })),
  );
}

const crossing = (dir: string, forbidden: string[]) =>
  importsUnder(dir)
    .filter(({ target }) => forbidden.some((top) => target === top || target.startsWith(`${top}/`)))
    .map(({ file, target }) => `${file} -> ${target}`);

it("src/ imports nothing from dev/, fixtures/, test/, bench/ or scripts/", () => {
  expect(crossing("src", ["dev", "fixtures", "test", "bench", "scripts"])).toEqual([]);
});

it("test/ and bench/ do not import each other; what they share is in fixtures/", () => {
  expect(crossing("test", ["bench"])).toEqual([]);
  expect(crossing("bench", ["test"])).toEqual([]);
  expect(crossing("fixtures", ["test", "bench"])).toEqual([]);
  expect(crossing("test", ["fixtures"]).length).toBeGreaterThan(0); // the check sees imports at all
});
