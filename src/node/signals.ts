/**
 * How a Node server process stops: SIGTERM (what Docker, Kubernetes and systemd send) or SIGINT
 * (Ctrl-C) starts the graceful stop of RunningServer.close(); another signal while it runs ends
 * the process at once. `npm start` and `aip-registry serve` both stop this way.
 *
 * A signal repeated within REPEAT_WINDOW_MS is the same stop, not an impatient second one: Ctrl-C
 * in a terminal reaches node twice under `npm start`, from the terminal (the whole process group)
 * and from npm, which forwards SIGINT and SIGTERM to the process it runs.
 */
import type { RunningServer } from "../entry/node.js";
import { log } from "../observability/log.js";

const REPEAT_WINDOW_MS = 1000;

/**
 * Starts the server and serves until the first SIGTERM or SIGINT, then stops it gracefully;
 * resolves with the exit code. The handlers are installed before `start` runs: a signal during
 * start-up (Node would otherwise die of it at once) stops the server as soon as it is up.
 */
export async function serveUntilSignal(start: () => Promise<RunningServer>): Promise<number> {
  let running: RunningServer | undefined;
  const stopSignal = new Promise<NodeJS.Signals>((resolve) => {
    let receivedAt: number | undefined;
    const onSignal = (signal: NodeJS.Signals) => {
      if (receivedAt === undefined) {
        receivedAt = Date.now();
        if (!running) line("info", "stopping as soon as start-up completes (send it again to exit now)", { signal });
        resolve(signal);
      } else if (Date.now() - receivedAt > REPEAT_WINDOW_MS) {
        line("warn", `${signal} during the graceful stop: exiting now`, { signal });
        process.exit(1);
      }
    };
    process.on("SIGTERM", onSignal);
    process.on("SIGINT", onSignal);
  });
  running = await start();
  const signal = await stopSignal;
  line("info", "stopping", {
    signal,
    in_flight: running.inFlight,
    drain_ms: running.config.SHUTDOWN_DRAIN_MS,
  });
  try {
    const report = await running.close();
    if (report.cut > 0)
      line("warn", "requests still in flight at the drain deadline were cut", { cut: report.cut, drain_ms: running.config.SHUTDOWN_DRAIN_MS });
    if (!report.databaseClosed) line("warn", "the database did not close in time; exiting anyway (the data directory is released with the process)", {});
    line("info", "stopped", { signal, drained_ms: report.ms, cut: report.cut });
    // The data directory lock lost while serving sets exit code 1 (src/entry/node.ts).
    return typeof process.exitCode === "number" ? process.exitCode : 0;
  } catch (error) {
    line("error", "graceful stop failed", { error: String(error) });
    return 1;
  }
}

function line(level: "info" | "warn" | "error", msg: string, fields: Record<string, unknown>): void {
  log.line(level, msg, fields);
}
