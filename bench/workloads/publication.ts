/**
 * Readers while large versions are published (issues 13.2 and 24.5). A publication prepares
 * (canonicalizes, digests) a manifest before it takes the exclusive publication lock; what it does
 * under the lock, and its commit, is what every catalog read and new route queues behind. Measured
 * on the reference fleet, first without publications, then while one publisher admits one large
 * version after another (a manifest of about 3.5 MB: 400 capabilities, each with 55 nested object
 * properties, the worst case for canonicalization), at the same time:
 * - resolves: 16 in flight, each a new route (only the resolve is timed; it is then settled);
 * - catalog reads: 8 in flight, a tenant's first page (limit 50) read in SQL, as every read at
 *   staleness 0 asks the database under the shared lock.
 * The second phase lasts until five publications finished (at most two minutes). Reported per
 * reader: throughput, p99 and the maximum wait (the stall), and refusals (a `busy`, or before
 * issue 24.4 a `storage`, is a lock timeout); the note gives what one publication took and, from
 * pg_locks sampled every few milliseconds (bench/lib/publication-lock.ts), how long each held the
 * exclusive lock and the longest any reader was queued for it: the lock's own share of the
 * stall, which the client-side maximum mixes with CPU starvation on a busy machine.
 */
import { connectorType, version } from "../../fixtures/records.js";
import type { Figure, Recorder } from "../lib/figures.js";
import { randomRoute, type Layout } from "../../fixtures/layout.js";
import { closedLoop, type Measurement } from "../lib/load.js";
import { samplePublicationLock } from "../lib/publication-lock.js";
import type { BenchDatabase } from "../lib/target.js";
import { resolveNew, settle } from "./routing.js";

const CAPABILITIES = 400;
const PROPERTIES = 55;
const RESOLVERS = 16;
const CATALOG_READERS = 8;
/** Publications the readers are measured through: each causes one stall. */
const PUBLICATIONS = 5;

/** A version whose manifest is about 3.5 MB of JSON, under distinct capability IDs. */
async function largeVersion(id: string) {
  const capabilities = Array.from({ length: CAPABILITIES }, (_, i) => ({
    id: `cap:${id}.c${i}`,
    kind: "tool",
    input_schema: {
      type: "object",
      properties: Object.fromEntries(
        Array.from({ length: PROPERTIES }, (_, k) => [
          `p${k}`,
          {
            type: "object",
            description: `field ${k} of ${i}`,
            properties: { a: { type: "string", maxLength: 64 }, b: { type: "array", items: { type: "number" } } },
          },
        ]),
      ),
    },
  }));
  return version(id, "ctype_bench_large", capabilities as never);
}

export async function runPublication(
  recorder: Recorder,
  db: BenchDatabase,
  l: Layout,
  plan: { target: string; durationMs: number; log: (line: string) => void },
): Promise<void> {
  const resolvers = await db.registry(RESOLVERS);
  const readers = await db.registry(CATALOG_READERS);
  const publisher = await db.registry(1);
  try {
    const resolve = async () => {
      const started = performance.now();
      const held = await resolveNew(resolvers.registry, l, "pub");
      const waited = performance.now() - started;
      await settle(resolvers.registry, held);
      return waited;
    };
    const read = async () => {
      await readers.registry.catalogPageText(randomRoute(l).tenant, { limit: 50 }, null);
    };
    const both = async (durationMs: number, until?: () => boolean): Promise<{ resolves: Measurement; reads: Measurement }> => {
      const [resolves, reads] = await Promise.all([
        closedLoop({ concurrency: RESOLVERS, durationMs, ...(until ? { until } : {}) }, resolve),
        closedLoop({ concurrency: CATALOG_READERS, durationMs, ...(until ? { until } : {}) }, read),
      ]);
      return { resolves, reads };
    };
    const record = (phase: string, m: { resolves: Measurement; reads: Measurement }, note?: string): Figure[] =>
      (
        [
          ["resolves", m.resolves, RESOLVERS],
          ["catalog reads (first page)", m.reads, CATALOG_READERS],
        ] as const
      ).map(([what, measurement, pool]) =>
        recorder.add({
          ...measurement,
          suite: "publication",
          name: `${what}, ${phase}`,
          target: plan.target,
          pool,
          note: `max ${measurement.latency.max.toFixed(0)} ms${note ? `; ${note}` : ""}`,
        }),
      );

    await publisher.registry.publish([connectorType("ctype_bench_large")]);
    const first = await largeVersion("cver_bench_large_0");
    const aloneStarted = performance.now();
    await publisher.registry.publish([first]);
    const aloneMs = performance.now() - aloneStarted;
    plan.log(
      `  large manifest: ${JSON.stringify(first.manifest).length} bytes of JSON, ${CAPABILITIES} capabilities; published alone in ${aloneMs.toFixed(0)} ms`,
    );
    // Sessions compile and plan on their first calls: not part of either phase.
    await both(1000);
    record("no publication", await both(plan.durationMs));

    const took: number[] = [];
    let stop = false;
    const publishing = (async () => {
      for (let n = 1; !stop; n++) {
        const change = await largeVersion(`cver_bench_large_${n}`);
        const started = performance.now();
        await publisher.registry.publish([change]);
        took.push(performance.now() - started);
      }
    })();
    const sampler = await samplePublicationLock(db.server.adminUrl, db.name);
    try {
      // Until several publications finished under the load (each takes longer than alone: its
      // canonicalization shares the cores with the readers), at most two minutes.
      const during = await both(120_000, () => took.length >= PUBLICATIONS);
      const lock = await sampler.stop();
      const mean = took.reduce((a, b) => a + b, 0) / Math.max(1, took.length);
      const holds = [...lock.holdsMs].sort((a, b) => a - b);
      const note =
        `${took.length} publications of a ${CAPABILITIES}-capability manifest finished during the phase, ${mean.toFixed(0)} ms each (${aloneMs.toFixed(0)} ms alone); ` +
        `exclusive lock held ${holds.map((h) => h.toFixed(0)).join(", ")} ms, longest queued reader ${lock.maxWaitMs.toFixed(0)} ms (pg_locks every ${lock.resolutionMs.toFixed(1)} ms)`;
      record("while large versions are published", during, note);
      plan.log(
        `  reader waits while publishing: resolve p99 ${during.resolves.latency.p99.toFixed(0)} max ${during.resolves.latency.max.toFixed(0)} ms, ` +
          `catalog read p99 ${during.reads.latency.p99.toFixed(0)} max ${during.reads.latency.max.toFixed(0)} ms; ${note}`,
      );
    } finally {
      await sampler.stop().catch(() => undefined);
      stop = true;
      await publishing;
    }
  } finally {
    await Promise.all([resolvers.close(), readers.close(), publisher.close()]);
  }
}
