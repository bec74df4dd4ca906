/**
 * The Worker toolchain stays current together: wrangler.toml's compatibility date is the newest
 * the installed wrangler's own workerd supports (what `wrangler deploy` and `npm run dev` run), so
 * upgrading wrangler without moving the date (or the reverse) fails here.
 */
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { expect, it } from "vitest";

const root = new URL("../../", import.meta.url);
const here = createRequire(import.meta.url);

/** A package's directory as Node would find it from `from` (some packages export no package.json). */
function packageDir(name: string, from = here): string {
  const manifest = (from.resolve.paths(name) ?? []).map((dir) => join(dir, name, "package.json")).find((path) => existsSync(path));
  if (!manifest) throw new Error(`${name} is not installed`);
  return dirname(manifest);
}

it("deploys at the newest compatibility date of the installed wrangler's workerd", () => {
  const wrangler = createRequire(join(packageDir("wrangler"), "package.json"));
  const { compatibilityDate } = wrangler("workerd") as { compatibilityDate: string };
  const toml = readFileSync(new URL("wrangler.toml", root), "utf8");
  expect(/^compatibility_date\s*=\s*"([^"]+)"/m.exec(toml)?.[1]).toBe(compatibilityDate);
});

it("keeps nodejs_compat off (on by default from 2026-08-04 dates): the Worker imports no Node module but AsyncLocalStorage (nodejs_als)", () => {
  const toml = readFileSync(new URL("wrangler.toml", root), "utf8");
  expect(toml).toMatch(/^compatibility_flags\s*=\s*\["no_nodejs_compat", "nodejs_als"\]/m);
});
