/**
 * One measured figure and the session that records them: every figure carries its concurrency,
 * its connection count, what the server was waiting on, the WAL written per operation, whether
 * the registry's invariants still held afterwards, and its throughput as a ratio to each
 * reference measured in the same run at the same concurrency (see REFERENCES).
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
  /** Throughput / each reference's throughput on the same target at the same concurrency. */
  ratios?: Partial<Record<Reference, number>>;
  /** Server-wide WAL over the phase / operations (see Observation.walBytes). */
  walBytesPerOp?: number;
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
  /** Another phase runs at the same time: the server-wide WAL is not this phase's alone. */
  overlapping?: boolean;
}

/**
 * The references every other figure is a ratio to, by the suite that measures them: the no-op
 * round trip, the one-row durable write (workloads/peers.ts), a peer job queue's claim+complete
 * (graphile-worker), and for the HTTP figures the registry's own cycle through its SQL entry
 * points (what the HTTP layer costs on top).
 */
const REFERENCES = {
  baseline: "SELECT 1",
  ceiling: "one-row write",
  peer: "graphile-worker",
  "peer-short-queue": "graphile-worker (queue 5,000)",
  cycle: "SQL cycle",
} as const;
const MEASURES_ONLY = new Set(["baseline", "ceiling", "peer", "peer-short-queue"]);
export type Reference = (typeof REFERENCES)[keyof typeof REFERENCES];
const referenceOf = (suite: string): Reference | undefined => REFERENCES[suite as keyof typeof REFERENCES];

export class Recorder {
  readonly figures: Figure[] = [];
  private readonly references = new Map<string, Map<Reference, number>>();

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
      ...(observation.walBytes !== undefined && measurement.ops && !spec.overlapping ? { walBytesPerOp: observation.walBytes / measurement.ops } : {}),
      ...(spec.note ? { note: spec.note } : {}),
    };
    if (checker && !spec.skipInvariants) figure.invariants = await invariants(checker);
    return this.add(figure);
  }

  add(figure: Figure): Figure {
    const key = `${figure.target}/${figure.concurrency}`;
    const references = this.references.get(key) ?? new Map<Reference, number>();
    this.references.set(key, references);
    if (!MEASURES_ONLY.has(figure.suite) && references.size) {
      figure.ratios = Object.fromEntries([...references].map(([name, throughput]) => [name, figure.throughput / throughput]));
    }
    const own = referenceOf(figure.suite);
    if (own) references.set(own, figure.throughput);
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

function describe(f: Figure): string {
  const errors = Object.entries(f.errors)
    .map(([code, n]) => `${code}=${n}`)
    .join(" ");
  const waits = Object.entries(f.observation?.waits ?? {})
    .slice(0, 3)
    .map(([w, n]) => `${w} ${n}`)
    .join(", ");
  return [
    `  ${f.suite}/${f.name} [${f.target}] c=${f.concurrency} pool=${f.pool}:`,
    `${fixed(f.throughput)} ops/s`,
    `p50 ${fixed(f.latency.p50)} p95 ${fixed(f.latency.p95)} p99 ${fixed(f.latency.p99)} ms`,
    f.walBytesPerOp !== undefined ? `WAL ${f.walBytesPerOp.toFixed(0)} B/op` : "",
    f.ratios
      ? `(${Object.entries(f.ratios)
          .map(([name, r]) => `${r.toFixed(2)}x ${name}`)
          .join(", ")})`
      : "",
    errors ? `errors: ${errors}` : "",
    waits ? `waits: ${waits}` : "",
    f.observation?.machineCpuPct != null ? `cpu ${f.observation.machineCpuPct}%` : "",
    f.invariants && f.invariants !== "healthy" ? f.invariants : "",
  ]
    .filter(Boolean)
    .join(" ");
}
