/**
 * One measured figure and the session that records them: every figure carries its concurrency,
 * its connection count, what the server was waiting on, whether the registry's invariants still
 * held afterwards, and its throughput as a ratio to the same run's `SELECT 1` ceiling.
 */
import type { Registry } from "../../src/registry/registry.js";
import { closedLoop, type LoadOptions, type Measurement, type Operation } from "./load.js";
import { observe, type Observation } from "./observe.js";
import type { BenchDatabase } from "./target.js";

export interface Figure extends Measurement {
  suite: string;
  name: string;
  target: string;
  /** Database connections serving the `concurrency` in-flight requests. */
  pool: number;
  /** Throughput / the same target's SELECT 1 throughput at the same concurrency. */
  ratioToSelect1?: number;
  observation?: Observation;
  /** "healthy", or the violated invariant kinds, checked right after the phase. */
  invariants?: string;
  note?: string;
}

export interface Spec extends LoadOptions {
  suite: string;
  name: string;
  pool: number;
  note?: string;
  /** Skip the invariant check (the phase leaves nothing new to check, e.g. SELECT 1). */
  skipInvariants?: boolean;
  /** Run the operation this long first, untimed, so fresh sessions have compiled and planned. */
  warmupMs?: number;
}

export class Recorder {
  readonly figures: Figure[] = [];
  private readonly baselines = new Map<string, number>();

  constructor(private readonly log: (line: string) => void) {}

  /** Runs a closed-loop phase against `db`, observed, and records it. */
  async measure(db: BenchDatabase, target: string, spec: Spec, op: Operation, checker?: Registry): Promise<Figure> {
    if (spec.warmupMs) await closedLoop({ concurrency: spec.concurrency, durationMs: spec.warmupMs }, op);
    const observer = await observe(db.server.adminUrl, db.name);
    const measurement = await closedLoop(spec, op);
    const observation = await observer.stop();
    const figure: Figure = {
      ...measurement,
      suite: spec.suite,
      name: spec.name,
      target,
      pool: spec.pool,
      observation,
      ...(spec.note ? { note: spec.note } : {}),
    };
    if (checker && !spec.skipInvariants) figure.invariants = await invariants(checker);
    return this.add(figure);
  }

  add(figure: Figure): Figure {
    const key = `${figure.target}/${figure.concurrency}`;
    if (figure.suite === "baseline") this.baselines.set(key, figure.throughput);
    const ceiling = this.baselines.get(key);
    if (ceiling && figure.suite !== "baseline") figure.ratioToSelect1 = figure.throughput / ceiling;
    this.figures.push(figure);
    this.log(describe(figure));
    return figure;
  }
}

export async function invariants(registry: Registry): Promise<string> {
  const report = await registry.checkInvariants();
  if (report.healthy) return "healthy";
  const kinds = [...new Set(report.violations.map((v: { kind: string }) => v.kind))];
  return `VIOLATED: ${kinds.join(", ")} (${report.violations.length})`;
}

const fixed = (n: number, d = 1) => n.toFixed(d);

export function describe(f: Figure): string {
  const errors = Object.entries(f.errors).map(([code, n]) => `${code}=${n}`).join(" ");
  const waits = Object.entries(f.observation?.waits ?? {}).slice(0, 3).map(([w, n]) => `${w} ${n}`).join(", ");
  return [
    `  ${f.suite}/${f.name} [${f.target}] c=${f.concurrency} pool=${f.pool}:`,
    `${fixed(f.throughput)} ops/s`,
    `p50 ${fixed(f.latency.p50)} p95 ${fixed(f.latency.p95)} p99 ${fixed(f.latency.p99)} ms`,
    f.ratioToSelect1 !== undefined ? `(${(100 * f.ratioToSelect1).toFixed(1)}% of SELECT 1)` : "",
    errors ? `errors: ${errors}` : "",
    waits ? `waits: ${waits}` : "",
    f.observation?.machineCpuPct != null ? `cpu ${f.observation.machineCpuPct}%` : "",
    f.invariants && f.invariants !== "healthy" ? f.invariants : "",
  ]
    .filter(Boolean)
    .join(" ");
}
