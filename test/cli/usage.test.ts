/**
 * The CLI without a command is a usage error (exit 2, the usage on stderr), so a script that lost
 * its command fails instead of succeeding; asking for help (`help`, `--help`, `-h`) prints the
 * same usage on stdout with exit 0.
 */
import { expect, it, vi } from "vitest";
import { runCli } from "./support.js";

vi.setConfig({ testTimeout: 120_000 });

it("exits 2 with the usage on stderr when no command is given", async () => {
  const result = await runCli([]);
  expect(result.code).toBe(2);
  expect(result.stdout).toBe("");
  expect(result.stderr).toMatch(/^error: no command given\n\nUsage: aip-registry <command> \[options\]/);
  expect(result.stderr).toContain("Commands:");
});

it("prints the usage on stdout with exit 0 when asked for help", async () => {
  for (const args of [["help"], ["--help"], ["-h"]]) {
    const result = await runCli(args);
    expect(result.code, args[0]).toBe(0);
    expect(result.stdout, args[0]).toMatch(/^Usage: aip-registry <command> \[options\]/);
    expect(result.stderr, args[0]).toBe("");
  }
  const serve = await runCli(["help", "serve"]);
  expect(serve.stdout).toMatch(/^Usage: aip-registry serve /);
});
