/**
 * functions/01_constants.sql is generated from the TypeScript modules that own the rules it
 * carries (scripts/generate-sql-constants.ts): a stale file would let the SQL functions enforce
 * one bound and zod another.
 */
import { readdirSync, readFileSync } from "node:fs";
import { expect, it } from "vitest";
import { renderSqlConstants, SQL_CONSTANTS_FILE, sqlConstants } from "../../scripts/generate-sql-constants.js";

it("functions/01_constants.sql matches its TypeScript sources (run npm run db:constants)", () => {
  expect(readFileSync(SQL_CONSTANTS_FILE, "utf8")).toBe(renderSqlConstants());
});

it("every generated constant is used by a function", () => {
  const dir = new URL("../../functions/", import.meta.url).pathname;
  const sources = readdirSync(dir)
    .filter((f) => f.endsWith(".sql") && f !== "01_constants.sql")
    .map((f) => readFileSync(dir + f, "utf8"))
    .join("\n");
  const names = sqlConstants().flatMap((section) => section.constants.map((constant) => `aip_${constant.name}`));
  expect(new Set(names).size).toBe(names.length);
  expect(names.filter((name) => !sources.includes(`${name}()`))).toEqual([]);
});
