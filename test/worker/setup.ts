/**
 * Before any workerd test file: the Worker must find the schema it was built for, or every test
 * would fail with a 503 of its own. Say once, plainly, what is wrong.
 */
import { beforeAll } from "vitest";
import { callWorker, workerEnv } from "./support.js";

beforeAll(async () => {
  const response = await callWorker(workerEnv(), "/readyz");
  if (response.status !== 200) {
    const { reason } = (await response.json()) as { reason?: string };
    throw new Error(`the Worker refuses the test database (${reason}): if functions/ or drizzle/ changed, run \`npx tsx scripts/generate-schema-version.ts\``);
  }
});
