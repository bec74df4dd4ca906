import { cloudflareTest } from "@cloudflare/vitest-pool-workers";
import { defineConfig } from "vitest/config";
import { TEST_SECRET } from "./test/support/http.js";
import { type LOGIN_ROLES, TEST_ROLE_PASSWORD } from "./test/support/server.js";

/** A connection string the way a Worker holds one: a fake host that only the local proxy serves. */
function workerDatabaseUrl(database: string, login: keyof typeof LOGIN_ROLES): string {
  return `postgres://${login}:${TEST_ROLE_PASSWORD}@db.localtest.me:5432/${database}`;
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
          ],
          pool: "forks",
          maxWorkers: 2,
          testTimeout: 30_000,
          hookTimeout: 60_000,
          sequence: { groupOrder: 0 },
        },
      },
      {
        // The Worker (src/worker.ts, wrangler.toml) inside workerd, on the Neon driver, against the
        // test PostgreSQL through the local Neon proxy. Its files share one database, so they run
        // one at a time.
        plugins: [
          cloudflareTest(({ inject }) => ({
            wrangler: { configPath: "./wrangler.toml" },
            miniflare: {
              bindings: {
                DATABASE_URL: workerDatabaseUrl(inject("workerDatabase"), "aip_test_data"),
                CONTROL_DATABASE_URL: workerDatabaseUrl(inject("workerDatabase"), "aip_test_control"),
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
