/**
 * Routing while large versions are published (issue 13.2): publication canonicalizes and digests
 * a manifest before it takes the exclusive publication lock, so routing only waits for the short
 * write under the lock. Cycles at 16 in flight on the reference fleet, first alone, then while one
 * publisher admits one large version after another (a manifest of about 2.8 MB canonical: 300
 * capabilities, each with 64 nested object properties, the worst case for canonicalization).
 * Reported: the cycles' throughput, p99 and refusals (a `storage` refusal is a lock timeout), and
 * what one publication took.
 */
import { connectorType, version } from "../../test/support/fleet.js";
import type { Recorder } from "../lib/figures.js";
import type { Layout } from "../lib/layout.js";
import type { BenchDatabase } from "../lib/target.js";
import { resolveNew, settle } from "./routing.js";

const CAPABILITIES = 300;
const PROPERTIES = 64;

/** A version whose manifest is about 2.8 MB canonical, under distinct capability IDs. */
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
  plan: { target: string; concurrency: number; durationMs: number; log: (line: string) => void },
): Promise<void> {
  const routers = await db.registry(plan.concurrency);
  const publisher = await db.registry(1);
  try {
    const op = async () => settle(routers.registry, await resolveNew(routers.registry, l, "pub"));
    const spec = { suite: "publication", concurrency: plan.concurrency, pool: plan.concurrency, durationMs: plan.durationMs };
    await publisher.registry.publish([connectorType("ctype_bench_large")]);
    const first = await largeVersion("cver_bench_large_0");
    const aloneStarted = performance.now();
    await publisher.registry.publish([first]);
    const aloneMs = performance.now() - aloneStarted;
    plan.log(
      `  large manifest: ${JSON.stringify(first.manifest).length} bytes of JSON, ${CAPABILITIES} capabilities; published alone in ${aloneMs.toFixed(0)} ms`,
    );
    await recorder.measure(db, plan.target, { ...spec, name: "cycles, no publication" }, op, routers.registry);

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
    try {
      // Long enough for several publications to finish under the load (each takes longer than alone).
      const durationMs = Math.min(30_000, Math.max(spec.durationMs, 5 * aloneMs));
      const during = { ...spec, durationMs, name: "cycles while large versions are published", overlapping: true };
      const figure = await recorder.measure(db, plan.target, during, op, routers.registry);
      const mean = took.reduce((a, b) => a + b, 0) / Math.max(1, took.length);
      figure.note = `${took.length} publications of a ${CAPABILITIES}-capability manifest finished during the phase, ${mean.toFixed(0)} ms each (${aloneMs.toFixed(0)} ms alone)`;
      plan.log(`  ${figure.note}`);
    } finally {
      stop = true;
      await publishing;
    }
  } finally {
    await Promise.all([routers.close(), publisher.close()]);
  }
}
