/**
 * The SQLSTATE classifier (src/db/sqlstate.ts) and the decisions made from it: each code gets the
 * kind of failure it names, and every consumer decides as it did when it matched codes itself
 * (the predicates below are those it had, verbatim).
 */
import { describe, expect, it } from "vitest";
import { isConnectionFailure } from "../../src/cli/errors.js";
import { databaseFailure, sqlstateFailure, type DatabaseFailure } from "../../src/db/sqlstate.js";
import type { SqlExecutor } from "../../src/db/executor.js";
import { CatalogReplica } from "../../src/registry/catalog-replica.js";
import { fromDatabaseError } from "../../src/registry/errors.js";

const CODES: [unknown, DatabaseFailure][] = [
  ["AR000", "problem"],
  ["ARLAG", "replica-behind"],
  ["ARDRY", "other"],
  ["55P03", "contention"],
  ["40001", "contention"],
  ["40P01", "contention"],
  ["57014", "cancelled"],
  ["57P01", "session-ended"],
  ["57P02", "session-ended"],
  ["57P03", "cannot-connect-now"],
  ["57P04", "session-ended"],
  ["57P05", "session-ended"],
  ["57000", "intervention"],
  ["08000", "connection"],
  ["08006", "connection"],
  ["08P01", "connection"],
  ["53300", "resources"],
  ["53100", "resources"],
  ["42501", "permission"],
  ["42883", "undefined-function"],
  ["42P01", "other"],
  ["54001", "too-deep"],
  ["54000", "other"],
  ["22P02", "data"],
  ["22012", "data"],
  ["23505", "integrity"],
  ["XX000", "other"],
  ["ECONNREFUSED", "no-sqlstate"],
  ["EPIPE", "no-sqlstate"],
  ["EPERM", "no-sqlstate"],
  ["ETIMEDOUT", "no-sqlstate"],
  ["08", "no-sqlstate"],
  [undefined, "no-sqlstate"],
  [42501, "no-sqlstate"],
];

it("names the kind of failure of every SQLSTATE the registry tells apart", () => {
  expect(CODES.map(([code]) => [code, sqlstateFailure(code)])).toEqual(CODES);
  expect(databaseFailure({ code: "40P01" })).toBe("contention");
  expect(databaseFailure(new Error("connection terminated"))).toBe("no-sqlstate");
  expect(databaseFailure(null)).toBe("no-sqlstate");
});

describe("each consumer decides as it did with its own patterns", () => {
  const codes = CODES.map(([code]) => code);

  it("fromDatabaseError", () => {
    const former = (code: unknown) => {
      const sqlstate = typeof code === "string" ? code : "";
      if (/^(55P03|40001|40P01)$/.test(sqlstate)) return "busy";
      if (sqlstate === "57014") return "storage";
      if (sqlstate === "42501") return "forbidden";
      if (sqlstate === "54001") return "invalid";
      if (sqlstate.startsWith("22")) return "invalid";
      if (sqlstate.startsWith("23")) return "conflict";
      return "storage";
    };
    for (const code of codes) expect([code, fromDatabaseError({ code, message: "m" }).code]).toEqual([code, former(code)]);
    expect(fromDatabaseError({ code: "AR000", message: "m", detail: '{"code": "stale-cursor"}' }).code).toBe("stale-cursor");
    expect(fromDatabaseError({ code: "AR000", message: "m", detail: '{"code": "unauthorized"}' }).code).toBe("storage");
  });

  it("the catalog replica: a refusal of the request, behind the request, unreachable, or another error", async () => {
    const former = (code: unknown) => {
      if (typeof code === "string" && (code === "AR000" || code.startsWith("22") || code === "54001")) return "answer";
      if (code === "ARLAG") return "behind_request";
      const unreachable = typeof code !== "string" || /^E[A-Z]+$/.test(code) || !/^[0-9A-Z]{5}$/.test(code) || /^(08|53|57)/.test(code);
      return unreachable ? "unreachable" : "error";
    };
    const primary: SqlExecutor = { query: async <R>() => [{ revision: "1" }] as R[] };
    const statement = { columns: "1 AS revision", from: () => "x" };
    for (const code of codes) {
      const replica = new CatalogReplica({ query: () => Promise.reject({ code, message: "m" }) });
      const decided = await replica.read("t", statement, [], primary).then(
        () => Object.entries(replica.status().fallbacks).find(([, count]) => count > 0)?.[0] ?? "none",
        () => "answer",
      );
      expect([code, decided]).toEqual([code, former(code)]);
    }
  });

  it("the pg executor: a session to drop after a server-reported error", () => {
    const former = (code: string) => /^(08|57P)/.test(code);
    const decided = (code: string) => ["connection", "cannot-connect-now", "session-ended"].includes(sqlstateFailure(code));
    for (const code of codes.filter((code): code is string => typeof code === "string" && /^[0-9A-Z]{5}$/.test(code) && !/^E/.test(code)))
      expect([code, decided(code)]).toEqual([code, former(code)]);
  });

  it("the CLI: a connection failure", () => {
    const former = (code: unknown) =>
      typeof code === "string" && /^(ECONNREFUSED|ECONNRESET|ENOTFOUND|EAI_AGAIN|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH|57P03|08\w{3})$/.test(code);
    for (const code of codes) expect([code, isConnectionFailure({ code })]).toEqual([code, former(code)]);
  });
});
