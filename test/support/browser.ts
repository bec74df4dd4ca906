/**
 * Whether the browser suite can run: it drives Debian's Chromium (`apt-get install chromium`)
 * with playwright-core and downloads no browser of its own. Without Chromium the suite is skipped
 * with a warning, so `npm install && npm test` passes on a machine that has only Node; with
 * REQUIRE_BROWSER=1 (CI) a missing browser fails the run instead.
 */
import { accessSync, constants, statSync } from "node:fs";

const DEFAULT_CHROMIUM = "/usr/bin/chromium";

export type BrowserGate = { run: true; chromium: string } | { run: false; chromium: string; required: boolean; reason: string };

function executable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return statSync(path).isFile();
  } catch {
    return false;
  }
}

export function browserGate(env: Record<string, string | undefined> = process.env): BrowserGate {
  const chromium = env.CHROMIUM_PATH || DEFAULT_CHROMIUM;
  if (executable(chromium)) return { run: true, chromium };
  const required = env.REQUIRE_BROWSER === "1";
  return {
    run: false,
    chromium,
    required,
    reason:
      `no executable Chromium at ${chromium}: ` +
      (required ? "REQUIRE_BROWSER=1 makes that a failure. " : "the browser tests are SKIPPED. ") +
      "Install Debian's package (apt-get install -y chromium) or point CHROMIUM_PATH at a Chromium binary.",
  };
}
