import { defineConfig } from "drizzle-kit";

// drizzle-kit only generates migrations from drizzle/schema.ts; they are applied by our own
// runner (src/db/migrate.ts), which adds the advisory lock, timeouts, checksums and the
// function install step.
export default defineConfig({
  dialect: "postgresql",
  schema: "./drizzle/schema.ts",
  out: "./drizzle",
});
