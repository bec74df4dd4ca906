/**
 * Instructions per resolve + settle cycle, counted by valgrind (callgrind) in a single-user
 * PostgreSQL backend: a figure other load on a shared machine does not move at all, where CPU
 * time per cycle moves by a third. Two function sets, A and B, like bench/ab.ts --functions-at.
 *
 *   npx tsx bench/instructions.ts --server=postgres://postgres@127.0.0.1:5499/postgres \
 *     --functions-at=<commit> [--replicas=1000] [--out=/tmp/aip-instructions]
 *
 * The server must be a private cluster (initdb) that this run may stop: the script seeds two
 * databases on it (A with functions/ at <commit>, B with the working tree's, as bench/ab.ts does)
 * and writes two SQL files of cycles (40 and 240 new actions), then prints the commands that run
 * them, with the server stopped, through `postgres --single` under callgrind as the cluster's
 * owner. The steady cost of one cycle is (Ir(240) - Ir(40)) / 200: the first cycles of a session
 * compile the functions and plan their statements. A cycle passes the assignment from resolve to
 * settlement through a session setting (the same for both sides), and counts only the backend's
 * own instructions in user space: not the kernel's (the socket, the WAL flush) and not a client's.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { randomRoute } from "../fixtures/layout.js";
import { seedFleet, seedRouteHistory } from "../fixtures/seed.js";
import { functionSetAt } from "./lib/functions-at.js";
import { externalServer, freshDatabase } from "./lib/target.js";

const args = new Map(
  process.argv
    .slice(2)
    .filter((arg) => arg.startsWith("--"))
    .map((arg) => {
      const [key, value] = arg.replace(/^--/, "").split("=");
      return [key as string, value ?? "true"];
    }),
);
const url = args.get("server");
const functionsAt = args.get("functions-at");
if (!url || !functionsAt) throw new Error("usage: npx tsx bench/instructions.ts --server=<superuser URL of a private cluster> --functions-at=<commit>");
const replicas = Number(args.get("replicas") ?? 1000);
const out = args.get("out") ?? "/tmp/aip-instructions";

async function main() {
  mkdirSync(out, { recursive: true });
  const server = await externalServer(url as string, "instructions");
  for (const [name, commit] of [
    ["aip_instructions_a", functionsAt],
    ["aip_instructions_b", undefined],
  ] as const) {
    const db = await freshDatabase(server, name);
    const { layout } = await db.withOwner((s) => seedFleet(s, { replicas, types: Math.min(1000, replicas) }));
    await db.withOwner((s) => seedRouteHistory(s, 20_000));
    if (commit) await db.withOwner((s) => s.exec(functionSetAt(commit)));
    await db.withOwner((s) => s.exec("VACUUM ANALYZE"));
    await db.closePools();
    // The same cycles for both sides: new actions on random routable pairs of the seeded layout.
    for (const cycles of [40, 240]) {
      const lines: string[] = [];
      for (let i = 0; i < cycles; i++) {
        const pick = randomRoute(layout, mulberry32(cycles * 100_000 + i));
        const action = `act_instructions_${cycles}_${i}`;
        lines.push(
          `SELECT set_config('aip.assignment', (aip_resolve_route('${action}', '${pick.tenant}', '${pick.capability}', '{"region":"${pick.region}"}') -> 'assignment')::text, false);`,
          `SELECT aip_settle_route('${action}', '${pick.tenant}', current_setting('aip.assignment')::jsonb, 'completed');`,
        );
      }
      writeFileSync(`${out}/${name}-${cycles}.sql`, `${lines.join("\n")}\n`);
    }
  }
  console.log(`Stop the server, then as its owner, for each of aip_instructions_a and aip_instructions_b and each of 40 and 240:
  valgrind --tool=callgrind --callgrind-out-file=${out}/<db>-<n>.out postgres --single -D <data directory> <db> < ${out}/<db>-<n>.sql > /dev/null
and take (Ir(240) - Ir(40)) / 200 for each side (callgrind's "Collected" line). Each file runs once per database: its actions are then taken.`);
}

/** A seeded PRNG, so that both sides route the same pairs. */
function mulberry32(seed: number): () => number {
  let a = seed;
  return () => {
    a |= 0;
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
