/**
 * A minimal Prometheus registry: counters, gauges and histograms with labels, rendered in the
 * text exposition format (version 0.0.4). Small enough to own; no client library needed.
 */
export const PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

type Labels = Record<string, string>;

const escapeLabel = (value: string) => value.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"');
const escapeHelp = (value: string) => value.replace(/\\/g, "\\\\").replace(/\n/g, "\\n");

function formatNumber(value: number): string {
  if (Number.isNaN(value)) return "NaN";
  if (value === Infinity) return "+Inf";
  if (value === -Infinity) return "-Inf";
  return String(value);
}

function formatLabels(names: readonly string[], values: readonly string[], extra?: [string, string]): string {
  const pairs = names.map((name, i) => `${name}="${escapeLabel(values[i] ?? "")}"`);
  if (extra) pairs.push(`${extra[0]}="${escapeLabel(extra[1])}"`);
  return pairs.length ? `{${pairs.join(",")}}` : "";
}

abstract class Family<Child> {
  protected readonly children = new Map<string, { values: string[]; child: Child }>();
  constructor(
    readonly name: string,
    readonly help: string,
    readonly labelNames: readonly string[],
  ) {
    if (!/^[a-zA-Z_:][a-zA-Z0-9_:]*$/.test(name)) throw new Error(`invalid metric name ${name}`);
  }

  protected child(labels: Labels, create: () => Child): Child {
    const values = this.labelNames.map((name) => {
      const value = labels[name];
      if (value === undefined) throw new Error(`metric ${this.name} needs label ${name}`);
      return value;
    });
    const key = values.join("\u0000");
    let entry = this.children.get(key);
    if (!entry) {
      entry = { values, child: create() };
      this.children.set(key, entry);
    }
    return entry.child;
  }

  reset(): void {
    this.children.clear();
  }

  abstract readonly type: "counter" | "gauge" | "histogram";
  protected abstract samples(values: string[], child: Child): string[];

  render(): string {
    const lines = [`# HELP ${this.name} ${escapeHelp(this.help)}`, `# TYPE ${this.name} ${this.type}`];
    for (const { values, child } of this.children.values()) lines.push(...this.samples(values, child));
    return lines.join("\n");
  }
}

export class Counter extends Family<{ value: number }> {
  readonly type = "counter";
  inc(labels: Labels = {}, by = 1): void {
    if (by < 0) throw new Error("a counter only goes up");
    this.child(labels, () => ({ value: 0 })).value += by;
  }
  /**
   * A total counted elsewhere (a transport, the lease-maintenance timer), read at scrape time. It
   * only moves forward: a source that restarted its count is not allowed to make the counter fall.
   */
  setTotal(labels: Labels, total: number): void {
    const child = this.child(labels, () => ({ value: 0 }));
    child.value = Math.max(child.value, total);
  }
  protected samples(values: string[], child: { value: number }) {
    return [`${this.name}${formatLabels(this.labelNames, values)} ${formatNumber(child.value)}`];
  }
}

export class Gauge extends Family<{ value: number }> {
  readonly type = "gauge";
  set(labels: Labels, value: number): void {
    this.child(labels, () => ({ value: 0 })).value = value;
  }
  protected samples(values: string[], child: { value: number }) {
    return [`${this.name}${formatLabels(this.labelNames, values)} ${formatNumber(child.value)}`];
  }
}

interface HistogramChild {
  counts: number[];
  sum: number;
  count: number;
}

export class Histogram extends Family<HistogramChild> {
  readonly type = "histogram";
  constructor(
    name: string,
    help: string,
    labelNames: readonly string[],
    readonly buckets: readonly number[],
  ) {
    super(name, help, labelNames);
    if (labelNames.includes("le")) throw new Error("`le` is reserved for histogram buckets");
    if (buckets.some((b, i) => i > 0 && b <= (buckets[i - 1] as number))) throw new Error("histogram buckets must increase");
  }
  observe(labels: Labels, value: number): void {
    const child = this.child(labels, () => ({ counts: this.buckets.map(() => 0), sum: 0, count: 0 }));
    // Counts are per bucket here and made cumulative when rendered.
    const index = this.buckets.findIndex((upper) => value <= upper);
    if (index >= 0) child.counts[index] = (child.counts[index] ?? 0) + 1;
    child.sum += value;
    child.count += 1;
  }
  protected samples(values: string[], child: HistogramChild) {
    const lines: string[] = [];
    let cumulative = 0;
    this.buckets.forEach((upper, i) => {
      cumulative += child.counts[i] ?? 0;
      lines.push(`${this.name}_bucket${formatLabels(this.labelNames, values, ["le", formatNumber(upper)])} ${cumulative}`);
    });
    lines.push(`${this.name}_bucket${formatLabels(this.labelNames, values, ["le", "+Inf"])} ${child.count}`);
    lines.push(`${this.name}_sum${formatLabels(this.labelNames, values)} ${formatNumber(child.sum)}`);
    lines.push(`${this.name}_count${formatLabels(this.labelNames, values)} ${child.count}`);
    return lines;
  }
}

interface Renderable {
  readonly name: string;
  render(): string;
}

export class MetricRegistry {
  private readonly families: Renderable[] = [];

  private add<F extends Renderable>(family: F): F {
    if (this.families.some((f) => f.name === family.name)) throw new Error(`metric ${family.name} registered twice`);
    this.families.push(family);
    return family;
  }

  counter(name: string, help: string, labelNames: readonly string[] = []): Counter {
    return this.add(new Counter(name, help, labelNames));
  }
  gauge(name: string, help: string, labelNames: readonly string[] = []): Gauge {
    return this.add(new Gauge(name, help, labelNames));
  }
  histogram(name: string, help: string, labelNames: readonly string[], buckets: readonly number[]): Histogram {
    return this.add(new Histogram(name, help, labelNames, buckets));
  }

  render(): string {
    return `${this.families.map((f) => f.render()).join("\n")}\n`;
  }
}
