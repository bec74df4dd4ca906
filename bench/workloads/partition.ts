/**
 * docs/scaling.md's claim, checked: a tenant's routes, counters and leases never leave its
 * database, so tenants partitioned over independent databases add up with nothing shared between
 * them. Two fresh databases on the same server each get half the reference fleet (half the
 * tenants, each with its own instances, bindings, replicas and counters) and are driven together,
 * half the in-flight cycles each, exactly like one gateway routing each tenant to its partition.
 * Compared in the same run with the whole fleet in one database at the full concurrency (the
 * routing suite's cycle): on one server the two halves share its CPU and disk, so the sum
 * should match the single database (no cross-partition cost appears); on separate servers each
 * half would have its own, which is what the capacity model multiplies.
 */
import { closedLoop, type Measurement } from "../lib/load.js";
import type { Recorder } from "../lib/figures.js";
import { invariants } from "../lib/figures.js";
import { observe } from "../lib/observe.js";
import { seedFleet } from "../../fixtures/seed.js";
import { dropDatabase, freshDatabase, type Server } from "../lib/target.js";
import { resolveNew, settle, warmUp } from "./routing.js";

export interface PartitionPlan {
  target: string;
  /** In-flight cycles over both partitions together. */
  concurrency: number;
  /** Connections per partition. */
  pool: number;
  durationMs: number;
  warmRounds: number;
  /** The whole fleet's replicas; each partition gets half. */
  replicas: number;
  log: (line: string) => void;
}

export async function runPartition(recorder: Recorder, server: Server, plan: PartitionPlan): Promise<void> {
  const names = ["aip_bench_part1", "aip_bench_part2"];
  const partitions = [];
  try {
    for (const name of names) {
      const db = await freshDatabase(server, name);
      const seed = await db.withOwner((session) => seedFleet(session, { replicas: plan.replicas / 2, types: 1000 }));
      const handle = await db.registry(plan.pool);
      await warmUp(handle.registry, seed.layout, plan.pool, plan.warmRounds);
      partitions.push({ name, db, seed, handle });
      plan.log(`  ${name}: ${seed.rows.tenants} tenants, ${seed.rows.replicas} replicas, ${seed.rows.bindings} bindings`);
    }
    const perPartition = Math.ceil(plan.concurrency / partitions.length);
    const observers = await Promise.all(partitions.map((p) => observe(server.adminUrl, p.name)));
    const measured: Measurement[] = await Promise.all(
      partitions.map((p) =>
        closedLoop({ concurrency: perPartition, durationMs: plan.durationMs }, async () => {
          await settle(p.handle.registry, await resolveNew(p.handle.registry, p.seed.layout, `p${p.name.at(-1)}`));
        }),
      ),
    );
    const observations = await Promise.all(observers.map((o) => o.stop()));
    const verdicts = await Promise.all(partitions.map((p) => invariants(p.handle.registry)));
    for (const [i, p] of partitions.entries()) {
      const m = measured[i] as Measurement;
      recorder.add({
        ...m,
        suite: "partition",
        name: `${p.name}: half the tenants (${p.seed.rows.tenants})`,
        target: plan.target,
        pool: plan.pool,
        // (Its WAL is not its own: the server-wide LSN covers both partitions; see the combined figure.)
        ...(observations[i] ? { observation: { ...observations[i], walBytes: undefined } } : {}),
        invariants: verdicts[i],
        note: `driven together with the other partition, ${perPartition} in flight each`,
      });
    }
    // Both partitions as one deployment: throughput adds up, latency is the worse of the two.
    const errors: Record<string, number> = {};
    for (const m of measured) for (const [code, n] of Object.entries(m.errors)) errors[code] = (errors[code] ?? 0) + n;
    const worse = measured.reduce((a, b) => (a.latency.p99 >= b.latency.p99 ? a : b));
    recorder.add({
      suite: "partition",
      name: "both partitions together",
      target: plan.target,
      concurrency: perPartition * partitions.length,
      pool: plan.pool * partitions.length,
      ops: measured.reduce((sum, m) => sum + m.ops, 0),
      errors,
      seconds: Math.max(...measured.map((m) => m.seconds)),
      throughput: measured.reduce((sum, m) => sum + m.throughput, 0),
      latency: worse.latency,
      ...(observations[0]?.walBytes !== undefined
        ? {
            walBytesPerOp:
              observations[0].walBytes /
              Math.max(
                1,
                measured.reduce((sum, m) => sum + m.ops, 0),
              ),
          }
        : {}),
      invariants: verdicts.every((v) => v === "healthy") ? "healthy" : verdicts.join("; "),
      note: "throughput summed over the two databases; latency percentiles of the slower partition",
    });
  } finally {
    for (const p of partitions) await p.db.closePools();
    for (const name of names) await dropDatabase(server, name);
  }
}
