/**
 * What the retry contract costs every new route (functions/82_retention.sql,
 * aip_check_action_retained): server time per check over 100,000 action IDs of each kind, on one
 * session, minus the same query without the check, medians of three rounds alternating both:
 *
 *   npx tsx bench/retention-check.ts
 *
 * Kinds: `act_` + UUIDv7 minted now, simple and hyphenated (a regular expression, a comparison
 * and a probe of the removed actions' primary key), minted two days ago with routes removed
 * before (the watermark is read too), and an ID of another form (the expression fails at once),
 * with no removed action recorded and with a million recorded (the probe's index is three levels
 * deep then).
 */
import { dropDatabase, externalServer, freshDatabase, MACHINE_URL } from "./lib/target.js";

const N = 100_000;
const uuid7 = (at: string) =>
  `'act_' || lpad(to_hex((extract(epoch FROM ${at}) * 1000)::bigint), 12, '0') || '7' || substr(md5(g::text), 1, 3) || '8' || substr(md5(g::text), 4, 15)`;
const hyphenated = (id: string) => `regexp_replace(${id}, '^act_(.{8})(.{4})(.{4})(.{4})(.{12})$', 'act_\\1-\\2-\\3-\\4-\\5')`;
const RECORD = "INSERT INTO aip_removed_actions (action_id) SELECT 'act_gone_' || g FROM generate_series(1, 1000000) g; ANALYZE aip_removed_actions";
const KINDS: [string, string, string?][] = [
  ["act_ + UUIDv7 minted now", uuid7("now()")],
  ["act_ + UUIDv7 minted now, hyphenated", hyphenated(uuid7("now()"))],
  ["act_ + UUIDv7 minted 2 days ago", uuid7("now() - interval '2 days'")],
  ["another form (act_bench_<n>), no removed action recorded", "'act_bench_' || g"],
  ["another form (act_bench_<n>), 1,000,000 removed actions recorded", "'act_bench_' || g", RECORD],
];
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] as number;

const server = await externalServer(process.env.BENCH_DATABASE_URL ?? MACHINE_URL, "machine");
const db = await freshDatabase(server, process.env.BENCH_DATABASE_NAME ?? "aip_bench_retention_check");
try {
  await db.withOwner(async (s) => {
    await s.exec("UPDATE aip_route_retention SET removed_before = now() - interval '40 days'");
    /** Server time per row (ms) of count(expression) over N generated IDs. */
    const perRow = async (expression: string) => {
      const [row] = await s.query<{ "QUERY PLAN": [{ "Execution Time": number }] }>(
        `EXPLAIN (ANALYZE, FORMAT JSON) SELECT count(${expression}) FROM generate_series(1, ${N}) g`,
      );
      return (row?.["QUERY PLAN"][0]["Execution Time"] ?? Number.NaN) / N;
    };
    for (const [label, id, before] of KINDS) {
      if (before) await s.exec(before);
      const without: number[] = [];
      const withCheck: number[] = [];
      for (let round = 0; round < 3; round++) {
        without.push(await perRow(`length(${id})`));
        withCheck.push(await perRow(`aip_check_action_retained(${id})`));
      }
      const cost = (median(withCheck) - median(without)) * 1000;
      console.log(`${label}: ${cost.toFixed(2)} µs per check`);
    }
  });
} finally {
  await db.closePools();
  await dropDatabase(server, db.name);
}
