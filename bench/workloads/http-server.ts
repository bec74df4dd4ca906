/**
 * The Node server as a separate process for the HTTP workload (so the load generator does not
 * share its event loop): src/entry/node.ts startServer with the environment it was given. Prints one
 * JSON line with its URL once listening; exits on SIGTERM.
 */
import { startServer } from "../../src/entry/node.js";

const running = await startServer(process.env, () => {});
process.stdout.write(`${JSON.stringify({ url: running.url })}\n`);
process.once("SIGTERM", () => {
  running.close().then(
    () => process.exit(0),
    () => process.exit(1),
  );
});
