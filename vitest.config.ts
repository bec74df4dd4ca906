import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { cloudflareTest } from "@cloudflare/vitest-plugin";
import { defineConfig } from "vitest/config";
import { TEST_SECRET } from "./test/support/http.js";
import { type LOGIN_ROLES, TEST_ROLE_PASSWORD } from "./test/support/server.js";

/** A connection string the way a Worker holds one: a fake host that only the local proxy serves. */
function workerDatabaseUrl(database: string, login: keyof typeof LOGIN_ROLES): string {
  return `postgres://${login}:${TEST_ROLE_PASSWORD}@db.localtest.me:5432/${database}`;
}

/**
 * wrangler.toml's compatibility date, or the newest the test pool's workerd supports when that is
 * older. The pool pins its own miniflare and workerd, resolved here the way the pool resolves them.
 */
function testCompatibilityDate(): string {
  const here = createRequire(import.meta.url);
  // The pool exports no package.json and no require condition: find its directory on the lookup path.
  const poolManifest = (here.resolve.paths("@cloudflare/vitest-plugin") ?? [])
    .map((dir) => `${dir}/@cloudflare/vitest-plugin/package.json`)
    .find((path) => existsSync(path));
  if (!poolManifest) throw new Error("@cloudflare/vitest-plugin is not installed");
  const fromPool = createRequire(poolManifest);
  const fromMiniflare = createRequire(fromPool.resolve("miniflare"));
  const { compatibilityDate: testRuntimeNewestDate } = fromMiniflare("workerd") as { compatibilityDate: string };
  const configured = /^compatibility_date\s*=\s*"([^"]+)"/m.exec(readFileSync(new URL("./wrangler.toml", import.meta.url), "utf8"))?.[1];
  if (!configured) throw new Error("wrangler.toml has no compatibility_date");
  // The earlier of the two (YYYY-MM-DD strings sort as dates).
  return [configured, testRuntimeNewestDate].sort()[0] as string;
}

// One `vitest run` (npm test) runs every project; the root globalSetup starts PostgreSQL and the
// local Neon proxy once. Projects in a higher sequence group run after the lower ones finish: the
// concurrency suites get the server's connection slots to themselves (the CI server allows only 100).
// No project sets `extends: true`: the root globalSetup would run again for it.
export default defineConfig({
  test: {
    globalSetup: ["./test/global-setup.ts"],
    projects: [
      {
        test: {
          name: "node",
          include: [
            "test/unit/**/*.test.ts",
            "test/db/**/*.test.ts",
            "test/http/**/*.test.ts",
            "test/dev/**/*.test.ts",
            "test/cli/**/*.test.ts",
            "test/browser/**/*.test.ts",
            "test/upgrade/**/*.test.ts",
          ],
          pool: "forks",
          maxWorkers: 2,
          testTimeout: 30_000,
          hookTimeout: 60_000,
          sequence: { groupOrder: 0 },
        },
      },
      {
        // The Worker (src/entry/worker.ts, wrangler.toml) inside workerd, on the Neon driver, against the
        // test PostgreSQL through the local Neon proxy. Its files share one database, so they run
        // one at a time.
        plugins: [
          cloudflareTest(({ inject }) => ({
            wrangler: { configPath: "./wrangler.toml" },
            // The production Worker pointed at the local Neon proxy (NEON_LOCAL_PROXY below).
            main: "./dev/worker.ts",
            miniflare: {
              // wrangler.toml's date is the deploy runtime's (wrangler's own workerd); the test pool
              // pins an older workerd, which refuses newer dates. Its newest date is used here, and
              // test/dev/dev-worker.test.ts runs the Worker at wrangler.toml's date in wrangler dev.
              compatibilityDate: testCompatibilityDate(),
              bindings: {
                DATABASE_URL: workerDatabaseUrl(inject("workerDatabase"), "aip_tests_data"),
                CONTROL_DATABASE_URL: workerDatabaseUrl(inject("workerDatabase"), "aip_tests_control"),
                AUTH_HS256_SECRET: TEST_SECRET,
                NEON_LOCAL_PROXY: inject("neonProxyUrl"),
                NEON_TRANSPORT: "http",
                ACCESS_LOG: "false",
                // The lease clock is off for the suite (its alarms would expire other files'
                // leases under them); test/worker/lease-clock.test.ts turns it on per call.
                LEASE_MAINTENANCE_INTERVAL_MS: "0",
              },
            },
          })),
        ],
        test: {
          name: "worker",
          include: ["test/worker/**/*.test.ts"],
          setupFiles: ["./test/worker/setup.ts"],
          fileParallelism: false,
          testTimeout: 30_000,
          hookTimeout: 60_000,
          sequence: { groupOrder: 0 },
        },
      },
      {
        test: {
          name: "concurrency",
          include: ["test/concurrency/**/*.test.ts"],
          pool: "forks",
          fileParallelism: false,
          testTimeout: 120_000,
          hookTimeout: 60_000,
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});
