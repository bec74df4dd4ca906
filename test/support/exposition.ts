/**
 * A strict reader of the Prometheus text exposition format (0.0.4), for tests of /metrics.
 */
import { expect } from "vitest";

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** Parses the text format strictly enough to catch malformed output. */
export function parseExposition(text: string): { samples: Sample[]; types: Map<string, string> } {
  expect(text.endsWith("\n")).toBe(true);
  const samples: Sample[] = [];
  const types = new Map<string, string>();
  const helped = new Set<string>();
  for (const line of text.trimEnd().split("\n")) {
    // The format ignores empty lines (prom-client separates its families with them).
    if (line === "") continue;
    const help = /^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .+$/.exec(line);
    if (help) {
      helped.add(help[1] as string);
      continue;
    }
    const type = /^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram)$/.exec(line);
    if (type) {
      expect(helped.has(type[1] as string), `HELP before TYPE for ${type[1]}`).toBe(true);
      expect(types.has(type[1] as string), `one TYPE line for ${type[1]}`).toBe(false);
      types.set(type[1] as string, type[2] as string);
      continue;
    }
    const sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    expect(sample, `sample line: ${line}`).not.toBeNull();
    const [, name, rawLabels, value] = sample as RegExpExecArray;
    const family = (name as string).replace(/_(bucket|sum|count)$/, "");
    expect(types.has(name as string) || types.get(family) === "histogram", `TYPE declared for ${name}`).toBe(true);
    const labels: Record<string, string> = {};
    for (const m of (rawLabels ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[m[1] as string] = m[2] as string;
    samples.push({ name: name as string, labels, value: value === "+Inf" ? Infinity : Number(value) });
  }
  return { samples, types };
}

export const find = (samples: Sample[], name: string, labels: Record<string, string> = {}) =>
  samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
export const value = (samples: Sample[], name: string, labels: Record<string, string> = {}) => {
  const found = find(samples, name, labels);
  expect(found, `${name} ${JSON.stringify(labels)}`).toHaveLength(1);
  return found[0]?.value;
};
