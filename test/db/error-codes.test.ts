/**
 * The seam between the SQL functions' errors and TypeScript's problem codes: aip_sqlstate
 * (functions/00_support.sql) and SQLSTATE_CODES (src/registry/errors.ts) are two tables of one
 * mapping, compared here both ways against the function as installed, and every code the
 * functions raise must come back to TypeScript as itself.
 */
import { readFileSync, readdirSync } from "node:fs";
import { afterAll, beforeAll, expect, it } from "vitest";
import { fromDatabaseError, PROBLEM_STATUS, SQLSTATE_CODES, type ProblemCode } from "../../src/registry/errors.js";
import { createTestDatabase, type TestDatabase } from "../support/database.js";

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db?.close());

/** aip_sqlstate's CASE as installed: problem code -> SQLSTATE, plus its fallback. */
async function installedMapping(): Promise<{ pairs: [string, string][]; fallback: string }> {
  const { rows } = await db.owner.query<{ src: string }>("SELECT prosrc AS src FROM pg_proc WHERE proname = 'aip_sqlstate'");
  expect(rows).toHaveLength(1);
  const src = rows[0]!.src;
  const pairs = [...src.matchAll(/WHEN '([^']+)' THEN '([^']+)'/g)].map((m) => [m[1]!, m[2]!] as [string, string]);
  const fallback = /ELSE '([^']+)'/.exec(src)?.[1] ?? "";
  return { pairs, fallback };
}

/** The problem a call of aip_fail(code) arrives as in TypeScript. */
async function raised(code: string): Promise<{ sqlstate: string; problem: ProblemCode }> {
  const error = await db.owner.query("SELECT aip_fail($1, 'seam test')", [code]).then(
    () => expect.unreachable("aip_fail returned"),
    (e: unknown) => e as { code: string },
  );
  return { sqlstate: error.code, problem: fromDatabaseError(error).code };
}

it("aip_sqlstate and SQLSTATE_CODES are the same mapping, both ways", async () => {
  const { pairs, fallback } = await installedMapping();
  expect(pairs.length).toBeGreaterThan(0);
  const sqlInverse = Object.fromEntries(pairs.map(([code, state]) => [state, code]));
  expect(Object.keys(sqlInverse)).toHaveLength(pairs.length); // one SQLSTATE per code
  expect(sqlInverse).toEqual(SQLSTATE_CODES);
  // The fallback is not a mapped code: an unknown code surfaces as a storage failure, not as a
  // problem it is not.
  expect(fallback).toMatch(/^AR/);
  expect(SQLSTATE_CODES[fallback]).toBeUndefined();
});

it("every problem code raised by aip_fail comes back as itself; others as storage", async () => {
  const mapped = new Set(Object.values(SQLSTATE_CODES));
  for (const code of Object.keys(PROBLEM_STATUS) as ProblemCode[]) {
    const { sqlstate, problem } = await raised(code);
    if (mapped.has(code)) expect({ code, problem }).toEqual({ code, problem: code });
    else expect({ code, sqlstate, problem }).toEqual({ code, sqlstate: "AR500", problem: "storage" });
  }
});

it("every code the functions raise is one TypeScript maps", () => {
  const dir = new URL("../../functions/", import.meta.url).pathname;
  const used = new Set(
    readdirSync(dir)
      .filter((f) => f.endsWith(".sql"))
      .flatMap((f) => [...readFileSync(dir + f, "utf8").matchAll(/aip_fail\('([a-z-]+)'/g)].map((m) => m[1]!)),
  );
  expect(used.size).toBeGreaterThan(5);
  const mapped = new Set<string>(Object.values(SQLSTATE_CODES));
  expect([...used].filter((code) => !mapped.has(code))).toEqual([]);
});
