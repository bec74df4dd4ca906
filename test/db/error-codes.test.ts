/**
 * The seam between the SQL functions' errors and TypeScript's problem codes. The functions raise
 * every problem one way (aip_fail: PROBLEM_SQLSTATE, the code and extension members in DETAIL),
 * and src/registry/errors.ts reads the code from the error: every code the database may raise
 * must come back to TypeScript as itself, a code it may not raise must not, and no function may
 * raise a problem, or leak a private SQLSTATE of class AR, any other way.
 */
import { readdirSync, readFileSync } from "node:fs";
import { expect, it } from "vitest";
import {
  DATABASE_PROBLEMS,
  fromDatabaseError,
  PROBLEM_SQLSTATE,
  PROBLEM_STATUS,
  REPLICA_BEHIND_SQLSTATE,
  type ProblemCode,
} from "../../src/registry/errors.js";
import { useTestDatabase } from "../support/database.js";

const db = useTestDatabase();

/** The error a statement fails with. */
async function failure(text: string, params: unknown[] = []): Promise<{ code: string; message: string; detail?: string }> {
  return db.owner.query(text, params).then(
    () => expect.unreachable(`${text} succeeded`),
    (e: unknown) => e as { code: string; message: string; detail?: string },
  );
}

const functionsDir = new URL("../../functions/", import.meta.url).pathname;
const sources = readdirSync(functionsDir)
  .filter((f) => f.endsWith(".sql"))
  .map((f) => readFileSync(functionsDir + f, "utf8"));

it("the installed functions raise with TypeScript's SQLSTATEs and codes", async () => {
  const { rows } = await db.owner.query("SELECT aip_problem_sqlstate() AS problem, aip_replica_behind_sqlstate() AS behind, aip_problem_codes() AS codes");
  expect(rows[0]).toEqual({ problem: PROBLEM_SQLSTATE, behind: REPLICA_BEHIND_SQLSTATE, codes: [...DATABASE_PROBLEMS] });
});

it("every problem code the database raises comes back as itself, with its message and extension members", async () => {
  for (const code of DATABASE_PROBLEMS) {
    const error = await failure("SELECT aip_fail($1, 'seam test', $2::jsonb)", [code, JSON.stringify({ instance_id: "i", retry_after_ms: 100 })]);
    expect(error.code).toBe(PROBLEM_SQLSTATE);
    const problem = fromDatabaseError(error);
    expect({ code: problem.code, message: problem.message, extensions: problem.extensions }).toEqual({
      code,
      message: "seam test",
      extensions: { instance_id: "i", retry_after_ms: 100 },
    });
  }
});

it("a code the database may not raise is refused by aip_fail, and never trusted from the database: storage", async () => {
  const others = [...(Object.keys(PROBLEM_STATUS) as ProblemCode[]).filter((code) => !(DATABASE_PROBLEMS as readonly string[]).includes(code)), "no-such-code"];
  expect(others).toContain("unauthorized");
  for (const code of others) {
    const error = await failure("SELECT aip_fail($1, 'seam test')", [code]);
    expect(error.code).not.toBe(PROBLEM_SQLSTATE);
    expect(fromDatabaseError(error).code).toBe("storage");
  }
  // Even raised by hand with the problem SQLSTATE, a code outside DATABASE_PROBLEMS is not a problem.
  const forged = await failure(`DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = '${PROBLEM_SQLSTATE}', MESSAGE = 'x', DETAIL = '{"code": "unauthorized"}'; END $$`);
  expect(fromDatabaseError(forged).code).toBe("storage");
});

it("every code the functions raise with aip_fail is one the database may raise", () => {
  const used = new Set(sources.flatMap((source) => [...source.matchAll(/aip_fail\('([a-z-]+)'/g)].map((m) => m[1]!)));
  expect(used.size).toBeGreaterThan(5);
  expect([...used].filter((code) => !(DATABASE_PROBLEMS as readonly string[]).includes(code))).toEqual([]);
});

it("no function raises class AR but through the generated SQLSTATEs, except private signals it catches itself", () => {
  // Every function's whole definition, as written (each is dollar-quoted with $$, names are unique).
  const definitions = sources.flatMap((source) =>
    [...source.matchAll(/^CREATE FUNCTION (\w+)\([\s\S]*?\$\$[\s\S]*?\$\$;/gm)].map((m) => ({ name: m[1]!, text: m[0] })),
  );
  expect(definitions.length).toBeGreaterThan(100);
  const signals = new Map<string, string[]>();
  for (const { name, text } of definitions) {
    if (name === "aip_problem_sqlstate" || name === "aip_replica_behind_sqlstate") continue;
    for (const [, state] of text.matchAll(/'(AR[0-9A-Z]{3})'/g)) signals.set(state!, [...(signals.get(state!) ?? []), name]);
    for (const [, state] of text.matchAll(/SQLSTATE '(AR[0-9A-Z]{3})'/g)) {
      // Caught where it is raised, and raised where it is caught.
      expect({ name, state, raised: new RegExp(`(RAISE SQLSTATE|ERRCODE =) '${state}'`).test(text) }).toEqual({ name, state, raised: true });
    }
    for (const [, state] of text.matchAll(/(?:RAISE SQLSTATE|ERRCODE =) '(AR[0-9A-Z]{3})'/g)) {
      expect({ name, state, caught: text.includes(`WHEN SQLSTATE '${state}'`) }).toEqual({ name, state, caught: true });
    }
  }
  expect(Object.fromEntries([...signals].map(([state, names]) => [state, [...new Set(names)]]))).toEqual({
    ARDRY: ["aip_publish"],
    ARSKP: ["aip_resolve_route"],
    ARPUB: ["aip_resolve_route"],
    ARREL: ["aip_settle_route"],
  });
});

it("errors of PostgreSQL itself are classified by their SQLSTATE: lock waits, deadlocks and serialization failures are contention", async () => {
  expect(fromDatabaseError(await failure("SELECT 'x'::integer")).code).toBe("invalid");
  expect(fromDatabaseError(await failure("SELECT 1 / 0")).code).toBe("invalid");
  for (const [code, problem, retryable] of [
    ["55P03", "busy", true], // lock_timeout: contention, never storage
    ["57014", "storage", true], // statement_timeout
    ["40001", "busy", true], // serialization failure
    ["40P01", "busy", true], // deadlock
    ["08006", "storage", true], // connection failure
    ["42501", "forbidden", false],
    ["54001", "invalid", false],
    ["23505", "conflict", false],
  ] as const) {
    const error = fromDatabaseError({ code, message: "m" });
    expect({ code, problem: error.code, retryable: error.retryable }).toEqual({ code, problem, retryable });
  }
  expect(fromDatabaseError(new Error("connection terminated")).code).toBe("storage");
});
