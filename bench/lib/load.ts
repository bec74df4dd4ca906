/**
 * A closed-loop load driver: `concurrency` workers each issue one operation at a time, back to
 * back, until the deadline (or the operation budget) runs out. With more workers than pool
 * connections, requests queue in the pool exactly as a gateway's would, and that wait is part of
 * the latency recorded.
 */
import { Samples, type LatencySummary } from "./stats.js";

export interface Measurement {
  concurrency: number;
  ops: number;
  errors: Record<string, number>;
  seconds: number;
  /** Successful operations per second. */
  throughput: number;
  /** Latency of successful operations, in milliseconds. */
  latency: LatencySummary;
}

export interface LoadOptions {
  concurrency: number;
  durationMs: number;
  /** Stop after this many operations were started, even before the deadline. */
  maxOps?: number;
  /** Stop starting operations once this says so, even before the deadline. */
  until?: () => boolean;
}

/**
 * `op(worker, index)` performs one operation. It may return the latency to record (for an
 * operation that times only part of its work); otherwise its whole duration is recorded.
 */
// biome-ignore lint/suspicious/noConfusingVoidType: operations that time their whole duration return nothing
export type Operation = (worker: number, index: number) => Promise<number | void>;

function errorCode(error: unknown): string {
  const e = error as { code?: unknown; name?: unknown; message?: unknown };
  if (typeof e?.code === "string") return e.code;
  return typeof e?.name === "string" ? e.name : String(error);
}

export async function closedLoop(options: LoadOptions, op: Operation): Promise<Measurement> {
  const samples = new Samples();
  const errors: Record<string, number> = {};
  const maxOps = options.maxOps ?? Number.POSITIVE_INFINITY;
  let started = 0;
  const begin = performance.now();
  const deadline = begin + options.durationMs;

  const worker = async (id: number) => {
    while (started < maxOps && performance.now() < deadline && !options.until?.()) {
      const index = started++;
      const t0 = performance.now();
      try {
        const own = await op(id, index);
        samples.add(typeof own === "number" ? own : performance.now() - t0);
      } catch (error) {
        const code = errorCode(error);
        errors[code] = (errors[code] ?? 0) + 1;
      }
    }
  };
  await Promise.all(Array.from({ length: options.concurrency }, (_, id) => worker(id)));
  const seconds = (performance.now() - begin) / 1000;
  return {
    concurrency: options.concurrency,
    ops: samples.count,
    errors,
    seconds,
    throughput: samples.count / seconds,
    latency: samples.summary(),
  };
}
