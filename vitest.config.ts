import { defineConfig } from "vitest/config";

// One `vitest run` (npm test) runs every project; the root globalSetup starts PostgreSQL once.
// Projects in a higher sequence group run after the lower ones finish: the concurrency suites
// get the server's connection slots to themselves (the CI server allows only 100).
export default defineConfig({
  test: {
    globalSetup: ["./test/global-setup.ts"],
    projects: [
      {
        test: {
          name: "node",
          include: ["test/unit/**/*.test.ts", "test/db/**/*.test.ts", "test/http/**/*.test.ts", "test/dev/**/*.test.ts"],
          pool: "forks",
          maxWorkers: 2,
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
