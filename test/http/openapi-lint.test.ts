/**
 * The published document through Redocly CLI's `recommended` ruleset (the linter most OpenAPI
 * tooling uses): no errors, and no warnings but the four listed here with their reasons. Any new
 * problem fails this test.
 */
import { execFile } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, expect, it } from "vitest";
import { writeOpenApiDocument } from "../../scripts/openapi.js";

interface LintProblem {
  ruleId: string;
  severity: "error" | "warn";
  message: string;
  location: { pointer: string }[];
}

/** Warnings we accept, by rule and location. */
const ACCEPTED_WARNINGS = [
  // The project has not chosen a license yet; the document names one as soon as it does.
  "info-license #/info",
  // These take no input and no token: no 4xx answer exists to document.
  "operation-4xx-response #/paths/~1healthz/get/responses",
  "operation-4xx-response #/paths/~1readyz/get/responses",
  "operation-4xx-response #/paths/~1dashboard/get/responses",
];

let dir: string;
let report: { totals: { errors: number; warnings: number }; problems: LintProblem[] };

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "aip-openapi-lint-"));
  const document = join(dir, "openapi.json");
  await writeOpenApiDocument(document);
  const cli = join(dirname(createRequire(import.meta.url).resolve("@redocly/cli/package.json")), "bin", "cli.js");
  // Exit status 1 means errors were found; the JSON report says which.
  const { stdout } = await promisify(execFile)(process.execPath, [cli, "lint", "--extends", "recommended", "--format", "json", document], {
    cwd: dir,
    env: { ...process.env, REDOCLY_TELEMETRY: "off", REDOCLY_SUPPRESS_UPDATE_NOTICE: "true" },
    maxBuffer: 16 * 1024 * 1024,
  }).catch((error: { stdout?: string }) => ({ stdout: error.stdout ?? "" }));
  report = JSON.parse(stdout.slice(stdout.indexOf("{")));
}, 60_000);
afterAll(() => rm(dir, { recursive: true, force: true }));

const describeProblem = (problem: LintProblem) => `${problem.ruleId} ${problem.location[0]?.pointer}`;

it("reports no errors", () => {
  expect(report.problems.filter((p) => p.severity === "error").map((p) => `${describeProblem(p)}: ${p.message}`)).toEqual([]);
  expect(report.totals.errors).toBe(0);
});

it("reports no warnings but the accepted ones", () => {
  expect(
    report.problems
      .filter((p) => p.severity === "warn")
      .map(describeProblem)
      .sort(),
  ).toEqual([...ACCEPTED_WARNINGS].sort());
});
