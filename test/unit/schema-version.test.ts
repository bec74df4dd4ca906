/**
 * src/db/schema-version.ts is generated from drizzle/ and functions/: a data-plane process (a
 * Worker cannot read files) refuses to serve a database whose schema differs from these
 * constants, so a stale file would make every deployment of this build not ready.
 */
import { readFile } from "node:fs/promises";
import { expect, it } from "vitest";
import { renderSchemaVersion } from "../../scripts/generate-schema-version.js";
import { packageRoot } from "../../src/db/sql-files.js";

it("src/db/schema-version.ts matches drizzle/ and functions/ (run npx tsx scripts/generate-schema-version.ts)", async () => {
  expect(await readFile(`${packageRoot}src/db/schema-version.ts`, "utf8")).toBe(await renderSchemaVersion());
});
