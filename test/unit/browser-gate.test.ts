/** The browser suite's gate (test/support/browser.ts): run, skip loudly, or fail when required. */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { browserGate } from "../support/browser.js";

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "aip-browser-gate-"));
  await writeFile(join(dir, "chromium"), "#!/bin/sh\n", { mode: 0o755 });
  await writeFile(join(dir, "not-executable"), "", { mode: 0o644 });
});
afterAll(() => rm(dir, { recursive: true, force: true }));

it("runs with an executable file at CHROMIUM_PATH", () => {
  expect(browserGate({ CHROMIUM_PATH: join(dir, "chromium") })).toEqual({ run: true, chromium: join(dir, "chromium") });
});

it("skips, saying so and how to fix it, when the browser is missing or not an executable file", () => {
  for (const path of [join(dir, "missing"), join(dir, "not-executable"), dir, "/dev/null"]) {
    const gate = browserGate({ CHROMIUM_PATH: path });
    expect(gate, path).toMatchObject({ run: false, required: false, chromium: path });
    expect(gate.run ? "" : gate.reason).toMatch(/SKIPPED.*apt-get install -y chromium.*CHROMIUM_PATH/);
  }
});

it("turns a missing browser into a failure under REQUIRE_BROWSER=1 (CI)", () => {
  const gate = browserGate({ CHROMIUM_PATH: join(dir, "missing"), REQUIRE_BROWSER: "1" });
  expect(gate).toMatchObject({ run: false, required: true });
  expect(gate.run ? "" : gate.reason).toMatch(/REQUIRE_BROWSER=1 makes that a failure/);
});

it("defaults to Debian's /usr/bin/chromium", () => {
  expect(browserGate({}).chromium).toBe("/usr/bin/chromium");
});
