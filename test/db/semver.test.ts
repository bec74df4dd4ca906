/**
 * aip_semver_matches: the Cargo-style requirement matcher behind sdk_version_requirement,
 * called as the owner (it is a helper, granted to no runtime role). Cases follow Cargo's
 * documented semantics for partial versions, wildcards and pre-release bounds.
 */
import { describe, expect, it } from "vitest";
import { useTestDatabase } from "../support/database.js";

const db = useTestDatabase();

async function matches(requirement: string, version: string): Promise<boolean | null> {
  const { rows } = await db.owner.query<{ m: boolean | null }>("SELECT aip_semver_matches($1, $2) AS m", [requirement, version]);
  return rows[0]!.m;
}

// [requirement, versions it includes, versions it excludes]
const CASES: [string, string[], string[]][] = [
  ["^1.2.3", ["1.2.3", "1.9.0"], ["1.2.2", "2.0.0", "0.9.9"]],
  ["^1.2", ["1.2.0", "1.99.99"], ["1.1.9", "2.0.0"]],
  ["^1", ["1.0.0", "1.5.2"], ["0.9.9", "2.0.0"]],
  ["^0.2.3", ["0.2.3", "0.2.9"], ["0.2.2", "0.3.0"]],
  ["^0.0.3", ["0.0.3"], ["0.0.4", "0.0.2", "0.1.0"]],
  ["^0.0", ["0.0.0", "0.0.9"], ["0.1.0"]],
  ["^0", ["0.0.0", "0.9.9"], ["1.0.0"]],
  ["1.2.3", ["1.2.3", "1.3.0"], ["2.0.0"]],
  ["~1.2.3", ["1.2.3", "1.2.9"], ["1.3.0", "1.2.2"]],
  ["~1.2", ["1.2.0", "1.2.9"], ["1.3.0", "1.1.0"]],
  ["~1", ["1.0.0", "1.9.9"], ["2.0.0"]],
  ["=1.2.3", ["1.2.3"], ["1.2.4"]],
  ["=1.2", ["1.2.0", "1.2.7"], ["1.3.0"]],
  [">1.2.3", ["1.2.4", "2.0.0"], ["1.2.3"]],
  [">1.2", ["1.3.0"], ["1.2.9"]],
  [">1", ["2.0.0"], ["1.9.9"]],
  [">=1.2", ["1.2.0"], ["1.1.9"]],
  ["<1.2.3", ["1.2.2"], ["1.2.3"]],
  ["<1.2", ["1.1.9"], ["1.2.0"]],
  ["<=1.2", ["1.2.9"], ["1.3.0"]],
  ["<=1.2.3", ["1.2.3"], ["1.2.4"]],
  ["1.*", ["1.0.0", "1.9.0"], ["2.0.0"]],
  ["1.2.x", ["1.2.0", "1.2.5"], ["1.3.0"]],
  ["=1.*.*", ["1.4.4"], ["2.0.0"]],
  ["*", ["0.0.0", "99.0.0"], []],
  [">=1.0.0-alpha", ["1.0.0"], ["0.9.9"]],
  ["<1.0.0-rc.1", ["0.9.9"], ["1.0.0"]],
  [">=1.2, <1.5", ["1.2.0", "1.4.9"], ["1.5.0", "1.1.0"]],
];

describe("aip_semver_matches", () => {
  it.each(CASES)("%s", async (requirement, included, excluded) => {
    for (const version of included) expect(await matches(requirement, version), `${requirement} includes ${version}`).toBe(true);
    for (const version of excluded) expect(await matches(requirement, version), `${requirement} excludes ${version}`).toBe(false);
  });

  it.each([
    "",
    ",",
    "1.0,",
    "latest",
    "v1",
    "1.0.0.0",
    "01.0",
    "1.01",
    ">=1.*",
    "^1.*",
    "*.1",
    "1.*.2",
    "1.0.0+build",
    "1 || 2",
    "1.0 - 2.0",
    "1.*-rc",
    "> =1",
  ])("does not parse %j", async (requirement) => {
    expect(await matches(requirement, "1.0.0")).toBeNull();
  });

  it("parses at most 32 comparators", async () => {
    expect(await matches(Array(32).fill(">=0.1").join(","), "1.0.0")).toBe(true);
    expect(await matches(Array(33).fill(">=0.1").join(","), "1.0.0")).toBeNull();
  });
});
