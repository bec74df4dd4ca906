/**
 * Latency summaries. Percentiles are exact (nearest rank over every recorded sample), not
 * histogram approximations: a phase records at most a few hundred thousand samples.
 */
export interface LatencySummary {
  count: number;
  mean: number;
  p50: number;
  p95: number;
  p99: number;
  max: number;
}

export class Samples {
  private values = new Float64Array(1024);
  private n = 0;

  add(ms: number): void {
    if (this.n === this.values.length) {
      const grown = new Float64Array(this.values.length * 2);
      grown.set(this.values);
      this.values = grown;
    }
    this.values[this.n++] = ms;
  }

  get count(): number {
    return this.n;
  }

  summary(): LatencySummary {
    const sorted = this.values.slice(0, this.n).sort();
    const rank = (p: number) => (this.n === 0 ? 0 : (sorted[Math.min(this.n - 1, Math.ceil((p / 100) * this.n) - 1)] ?? 0));
    let sum = 0;
    for (const v of sorted) sum += v;
    return {
      count: this.n,
      mean: this.n ? sum / this.n : 0,
      p50: rank(50),
      p95: rank(95),
      p99: rank(99),
      max: this.n ? (sorted[this.n - 1] ?? 0) : 0,
    };
  }
}

export const round = (value: number, digits = 2) => Math.round(value * 10 ** digits) / 10 ** digits;
