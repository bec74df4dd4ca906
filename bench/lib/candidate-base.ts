/**
 * A candidate in bench/candidates/ is a frozen copy of production functions with one change. It
 * measures that change only against the functions it was written from: once a base function
 * changes in functions/, B would silently also undo that later change. So each candidate records,
 * in its header, the sha256 of the source text of every production function it replaces or
 * alters (`-- base <name> sha256:<hex>`), and bench/ab.ts refuses a candidate whose base moved.
 *
 * The digest is of the function's whole `CREATE FUNCTION ... $$;` statement as written in
 * functions/*.sql (every function there is dollar-quoted with `$$`, and every name is unique).
 */
import { createHash } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

const DEFINITION = /^CREATE FUNCTION (\w+)\([\s\S]*?\$\$[\s\S]*?\$\$;/gm;
const TOUCHED = /^(?:CREATE OR REPLACE|ALTER) FUNCTION (\w+)/gm;
const BASE_LINE = /^-- base (\w+) (sha256:[0-9a-f]{64})\n/gm;

const digest = (text: string) => `sha256:${createHash("sha256").update(text).digest("hex")}`;

/** name -> digest of its definition, over a set of SQL source texts (functions/*.sql). */
export function functionDigests(sources: string[]): Map<string, string> {
  const digests = new Map<string, string>();
  for (const source of sources) for (const m of source.matchAll(DEFINITION)) digests.set(m[1]!, digest(m[0]));
  return digests;
}

export function readFunctionSources(dir: string): string[] {
  return readdirSync(dir)
    .filter((f) => f.endsWith(".sql"))
    .sort()
    .map((f) => readFileSync(join(dir, f), "utf8"));
}

/** The production functions a candidate replaces or alters, in first-mention order. */
export function touchedFunctions(candidate: string): string[] {
  return [...new Set([...candidate.replace(BASE_LINE, "").matchAll(TOUCHED)].map((m) => m[1]!))];
}

/** The base digests recorded in a candidate's header. */
export function recordedBases(candidate: string): Map<string, string> {
  return new Map([...candidate.matchAll(BASE_LINE)].map((m) => [m[1]!, m[2]!]));
}

/** Why the candidate must not be measured against these functions, or null when it may. */
export function baseProblem(candidate: string, digests: Map<string, string>): string | null {
  const recorded = recordedBases(candidate);
  for (const name of touchedFunctions(candidate)) {
    const then = recorded.get(name);
    const now = digests.get(name);
    if (!then) return `it records no base digest for ${name}: stamp it (bench/ab.ts --stamp) after checking it was written from the current function`;
    if (!now) return `its base function ${name} no longer exists in functions/`;
    if (then !== now) {
      return `its base function ${name} changed since the candidate was written (recorded ${then.slice(0, 19)}..., now ${now.slice(0, 19)}...): re-apply the candidate's change to the current ${name} and stamp it again`;
    }
  }
  return null;
}

/** The candidate with its header's base lines replaced by the given digests of what it touches. */
export function stamp(candidate: string, digests: Map<string, string>): string {
  const lines = touchedFunctions(candidate).map((name) => {
    const d = digests.get(name);
    if (!d) throw new Error(`${name} is not defined in functions/`);
    return `-- base ${name} ${d}\n`;
  });
  return lines.join("") + candidate.replace(BASE_LINE, "");
}
