/**
 * How a Node server process stops: SIGTERM (what Docker, Kubernetes and systemd send) or SIGINT
 * (Ctrl-C) starts the graceful stop of RunningServer.close(); another signal while it runs ends
 * the process at once. `npm start` and `aip-registry serve` both stop this way.
 *
 * A signal repeated within REPEAT_WINDOW_MS is the same stop, not an impatient second one: Ctrl-C
 * in a terminal reaches node twice under `npm start`, from the terminal (the whole process group)
 * and from npm, which forwards SIGINT and SIGTERM to the process it runs.
 *
 * Under npm a signal may not reach node at all. npm forwards SIGTERM and SIGINT to its child
 * only, and for `npx --no-install aip-registry serve` (and any npm script without `exec`) that
 * child is `sh -c`, which runs node as its own child: where /bin/sh is dash (Debian, Ubuntu, the
 * node images) the shell dies of SIGTERM and leaves node running, orphaned and holding its port.
 * So a process npm started also stops when its parent goes away (PARENT_POLL_MS): the one trace
 * the signal leaves. `npm start` and `npm run cli` use `exec` (npm signals node itself), and a
 * signal sent to node, or to the process group, is heard directly as always. Not covered: SIGINT
 * to the npx process alone, which dash holds until its child exits (it expects the child to have
 * had the terminal's SIGINT too), so nothing reaches node; send SIGTERM, as process managers do
 * (docs/deploy.md).
 */
import type { RunningServer } from "../entry/node.js";
import { log } from "../telemetry/log.js";

const REPEAT_WINDOW_MS = 1000;
/** How often a process npm started checks that its parent is still there (a getppid call). */
const PARENT_POLL_MS = 250;

/** What stopped the server: a signal, or (under npm) the exit of the process that started it. */
type StopReason = NodeJS.Signals | "parent-exit";

/**
 * Resolves when the parent of a process npm started exits (the process is reparented); never for
 * a process npm did not start (a `nohup` server may outlive the shell that started it on purpose),
 * nor for one whose parent is already init. The timer does not keep the process alive.
 */
function parentExit(env: Record<string, string | undefined>): { exited: Promise<void>; stop(): void } {
  const parent = process.ppid;
  if (!env.npm_lifecycle_event || parent <= 1) return { exited: new Promise<void>(() => {}), stop: () => {} };
  let timer: ReturnType<typeof setInterval> | undefined;
  const exited = new Promise<void>((resolve) => {
    timer = setInterval(() => {
      if (process.ppid !== parent) resolve();
    }, PARENT_POLL_MS);
    timer.unref();
  });
  return { exited, stop: () => clearInterval(timer) };
}

/**
 * Starts the server and serves until the first SIGTERM or SIGINT, then stops it gracefully;
 * resolves with the exit code. The handlers are installed before `start` runs: a signal during
 * start-up (Node would otherwise die of it at once) stops the server as soon as it is up.
 */
export async function serveUntilSignal(start: () => Promise<RunningServer>, env: Record<string, string | undefined> = process.env): Promise<number> {
  let running: RunningServer | undefined;
  const orphaned = parentExit(env);
  const stopSignal = new Promise<StopReason>((resolve) => {
    let receivedAt: number | undefined;
    const onStop = (reason: StopReason) => {
      const signal = reason === "parent-exit" ? undefined : reason;
      if (receivedAt === undefined) {
        receivedAt = Date.now();
        orphaned.stop();
        if (!running) line("info", "stopping as soon as start-up completes (send it again to exit now)", fields(reason));
        resolve(reason);
      } else if (signal && Date.now() - receivedAt > REPEAT_WINDOW_MS) {
        line("warn", `${signal} during the graceful stop: exiting now`, { signal });
        process.exit(1);
      }
    };
    process.on("SIGTERM", onStop);
    process.on("SIGINT", onStop);
    void orphaned.exited.then(() => onStop("parent-exit"));
  });
  running = await start();
  const reason = await stopSignal;
  line("info", "stopping", {
    ...fields(reason),
    in_flight: running.inFlight,
    drain_ms: running.config.SHUTDOWN_DRAIN_MS,
  });
  try {
    const report = await running.close();
    if (report.cut > 0)
      line("warn", "requests still in flight at the drain deadline were cut", { cut: report.cut, drain_ms: running.config.SHUTDOWN_DRAIN_MS });
    if (!report.databaseClosed) line("warn", "the database did not close in time; exiting anyway (the data directory is released with the process)", {});
    line("info", "stopped", { ...fields(reason), drained_ms: report.ms, cut: report.cut });
    // The data directory lock lost while serving sets exit code 1 (src/entry/node.ts).
    return typeof process.exitCode === "number" ? process.exitCode : 0;
  } catch (error) {
    line("error", "graceful stop failed", { error: String(error) });
    return 1;
  }
}

/** The log fields naming why the server stops: `signal`, or `reason` when no signal reached it. */
function fields(reason: StopReason): Record<string, unknown> {
  return reason === "parent-exit" ? { reason: "the process that started it (npm) exited" } : { signal: reason };
}

function line(level: "info" | "warn" | "error", msg: string, fields: Record<string, unknown>): void {
  log.line(level, msg, fields);
}
