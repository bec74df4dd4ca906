/**
 * bench/ab.ts refuses a candidate whose base functions changed since it was written
 * (bench/lib/candidate-base.ts): the digests must cover every production function, and a
 * recorded digest must be checked for each function the candidate replaces or alters.
 */
import { readdirSync, readFileSync } from "node:fs";
import { expect, it } from "vitest";
import { baseProblem, functionDigests, readFunctionSources, recordedBases, stamp, touchedFunctions } from "../../bench/lib/candidate-base.js";

const functionsDir = new URL("../../functions/", import.meta.url).pathname;
const sources = readFunctionSources(functionsDir);
const digests = functionDigests(sources);

it("finds every function of functions/*.sql, one digest each", () => {
  const created = sources.flatMap((s) => [...s.matchAll(/^CREATE FUNCTION (\w+)\(/gm)].map((m) => m[1]));
  expect(created.length).toBeGreaterThan(100);
  expect([...digests.keys()].sort()).toEqual([...created].sort());
});

it("accepts a freshly stamped candidate and refuses one whose base changed, naming the function", () => {
  const candidate =
    "-- Candidate: settle differently.\nALTER FUNCTION aip_get_route(text, text) RESET plan_cache_mode;\nCREATE OR REPLACE FUNCTION aip_settle_route() RETURNS json LANGUAGE sql AS $$ SELECT null::json $$;\n";
  expect(touchedFunctions(candidate)).toEqual(["aip_get_route", "aip_settle_route"]);
  expect(baseProblem(candidate, digests)).toMatch(/records no base digest for aip_get_route/);

  const stamped = stamp(candidate, digests);
  expect(stamped.endsWith(candidate)).toBe(true);
  expect(baseProblem(stamped, digests)).toBeNull();
  expect(stamp(stamped, digests)).toBe(stamped); // re-stamping replaces the header, never stacks it

  const changed = new Map(digests).set("aip_settle_route", `sha256:${"0".repeat(64)}`);
  expect(baseProblem(stamped, changed)).toMatch(/base function aip_settle_route changed since the candidate was written/);
  const gone = new Map(digests);
  gone.delete("aip_get_route");
  expect(baseProblem(stamped, gone)).toMatch(/aip_get_route no longer exists/);
});

it("every function candidate in bench/candidates records a base for each function it touches", () => {
  const dir = new URL("../../bench/candidates/", import.meta.url).pathname;
  for (const file of readdirSync(dir).filter((f) => f.endsWith(".sql"))) {
    const text = readFileSync(dir + file, "utf8");
    expect([...recordedBases(text).keys()].sort(), file).toEqual(touchedFunctions(text).sort());
  }
});
