/**
 * Command line: `npm run bench [-- --quick] [--target=machine|embedded|both] [--only=suite,...]`.
 * BENCH_DATABASE_URL (a superuser URL of any database on the server) replaces the machine's
 * PostgreSQL at postgres://postgres@127.0.0.1:5432.
 */
const SUITES = [
  "cost",
  "routing",
  "catalog",
  "catalog-http",
  "catalog-churn",
  "contention",
  "limits",
  "http",
  "publication",
  "scale",
  "partition",
  "pglite",
] as const;
type Suite = (typeof SUITES)[number];
/** Suites that build databases of their own: the reference fleet is seeded only for the others. */
export const OWN_DATABASE_SUITES: readonly Suite[] = ["catalog-churn", "scale", "partition", "pglite"];

export interface Options {
  quick: boolean;
  targets: { machine: boolean; embedded: boolean };
  suites: Set<Suite>;
  /** Phase durations, ms. */
  phaseMs: number;
  baselineMs: number;
  concurrencies: number[];
  scaleReplicas: number[];
  /** Untimed route lifecycles per connection of every new pool (6 gets past PL/pgSQL's custom plans). */
  warmRounds: number;
  /** Largest data pool on the shared server (500 in-flight requests are multiplexed over it). */
  maxPool: number;
}

export function parseArgs(argv: string[]): Options {
  const flags = new Map<string, string>();
  for (const arg of argv) {
    const match = /^--([a-z-]+)(?:=(.*))?$/.exec(arg);
    if (!match) throw new Error(`unknown argument ${arg}; usage: npm run bench [-- --quick] [--target=machine|embedded|both] [--only=${SUITES.join(",")}]`);
    flags.set(match[1] as string, match[2] ?? "true");
  }
  const quick = flags.get("quick") === "true";
  const target = flags.get("target") ?? (quick ? "machine" : "both");
  if (!["machine", "embedded", "both"].includes(target)) throw new Error(`--target must be machine, embedded or both`);
  const only = flags.get("only")?.split(",").filter(Boolean);
  for (const suite of only ?? []) if (!SUITES.includes(suite as Suite)) throw new Error(`unknown suite ${suite}; suites: ${SUITES.join(", ")}`);
  // Quick mode skips the slow evidence experiments and the 100,000-replica fleet.
  const suites = new Set<Suite>((only as Suite[] | undefined) ?? SUITES.filter((s) => !(quick && s === "limits")));
  return {
    quick,
    targets: { machine: target !== "embedded", embedded: target !== "machine" },
    suites,
    phaseMs: quick ? 1500 : 5000,
    baselineMs: quick ? 1000 : 2000,
    concurrencies: [1, 16, 64, 500],
    scaleReplicas: quick ? [1000, 10000] : [1000, 10000, 100000],
    warmRounds: quick ? 2 : 6,
    maxPool: Number(flags.get("max-pool") ?? 64),
  };
}
