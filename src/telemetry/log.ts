/**
 * One log format for every line the server writes, start-up and shutdown included: a JSON object
 * per line with `time` (ISO 8601, UTC), `level` (`error`, `warn`, `info`, `debug`) and `msg`,
 * then `trace_id` and `span_id` when the line is written for a request
 * (src/telemetry/request-context.ts), then the line's own fields. `error` and `warn` go to
 * stderr, `info` and `debug` to stdout. LOG_LEVEL sets the lowest level written (default `info`);
 * the access log (src/observability/access-log.ts) writes at `info`, `error` for 5xx answers.
 */
import { currentSpan } from "./request-context.js";

export const LOG_LEVELS = ["error", "warn", "info", "debug"] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

const RANK: Record<LogLevel, number> = { error: 0, warn: 1, info: 2, debug: 3 };

/** Where a formatted line goes; by default stdout or stderr by level. */
export type LineWriter = (line: string, level: LogLevel) => void;

const consoleWriter: LineWriter = (line, level) => {
  if (level === "error" || level === "warn") console.error(line);
  else console.log(line);
};

/** The line for `msg` at `level`: its time, level and message, the request's trace ids, its fields. */
export function formatLine(level: LogLevel, msg: string, fields?: Record<string, unknown>): string {
  const span = currentSpan();
  return JSON.stringify({
    time: new Date().toISOString(),
    level,
    msg,
    ...(span ? { trace_id: span.traceId, span_id: span.spanId } : {}),
    ...fields,
  });
}

export class Logger {
  constructor(
    private threshold: LogLevel = "info",
    private readonly write: LineWriter = consoleWriter,
  ) {}

  /** Whether a line at `level` would be written (check before building costly fields). */
  enabled(level: LogLevel): boolean {
    return RANK[level] <= RANK[this.threshold];
  }

  setLevel(level: LogLevel): void {
    this.threshold = level;
  }

  line(level: LogLevel, msg: string, fields?: Record<string, unknown>): void {
    if (!this.enabled(level)) return;
    try {
      this.write(formatLine(level, msg, fields), level);
    } catch {
      // A failing sink must never fail what was being logged.
    }
  }

  error(msg: string, fields?: Record<string, unknown>): void {
    this.line("error", msg, fields);
  }

  warn(msg: string, fields?: Record<string, unknown>): void {
    this.line("warn", msg, fields);
  }

  info(msg: string, fields?: Record<string, unknown>): void {
    this.line("info", msg, fields);
  }

  debug(msg: string, fields?: Record<string, unknown>): void {
    this.line("debug", msg, fields);
  }
}

/**
 * The process's logger (each isolate's on Workers): what code without a logger of its own writes
 * to. The entry points set its level from LOG_LEVEL.
 */
export const log = new Logger();
