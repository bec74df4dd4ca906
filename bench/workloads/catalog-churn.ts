/**
 * The catalog under other tenants' churn (issue 26): 20 tenants with 500 bound capabilities each,
 * on a database of their own. Readers of 19 tenants walk their whole catalog through the Node
 * server (its own process, default catalog settings) the way a syncing gateway does: limit 50, ten
 * pages, following `next_cursor`, restarting at the first page on 409 `stale-cursor`; a walk that
 * has not finished within 200 requests is given up (counted, not timed). One reader per tenant,
 * each one walk after another.
 *
 * Phases alternate A B A B: quiet (nothing published), then churn (a publisher changes one binding
 * of the 20th tenant every 100 ms: it disables or enables its binding of one capability, so that
 * tenant's catalog really changes). None of those publications changes anything the readers can
 * see. Reported per phase: walks/s, walk latency, stale-cursor restarts per walk and unfinished
 * walks; per churn phase its ratio to the quiet phase just before it, and the publications made
 * (count and p99).
 */
import { once } from "node:events";
import { mintToken } from "../../src/http/tokens.js";
import { binding, connectorType, instance, version } from "../../fixtures/records.js";
import type { Figure, Recorder } from "../lib/figures.js";
import { Samples } from "../lib/stats.js";
import { freshDatabase, type Server } from "../lib/target.js";
import { SECRET, startServer } from "./catalog-http.js";

const TENANTS = 20;
const CAPABILITIES = 500;
const PAGE = 50;
/** A walk of ten pages that needs more requests than this is a livelock, not a slow walk. */
const WALK_REQUEST_BUDGET = 200;
const PUBLISH_EVERY_MS = 100;

const tenantOf = (t: number) => `tenant-churn-${String(t).padStart(2, "0")}`;
const capabilityOf = (n: number) => `cap:churn.${String(n).padStart(4, "0")}`;
const instanceOf = (t: number) => `cinst_churn_${String(t).padStart(2, "0")}`;
const PUBLISHER_TENANT = TENANTS - 1;

export async function runCatalogChurn(
  recorder: Recorder,
  server: Server,
  plan: { target: string; durationMs: number; poolMax: number; rounds: number; log: (line: string) => void },
): Promise<void> {
  const db = await freshDatabase(server, `${process.env.BENCH_DATABASE_NAME ?? "aip_bench"}_churn`);
  const setup = await db.registry(2);
  let child: Awaited<ReturnType<typeof startServer>>["child"] | undefined;
  try {
    const capabilities = Array.from({ length: CAPABILITIES }, (_, n) => capabilityOf(n));
    await setup.registry.publish([
      connectorType("ctype_churn"),
      await version("cver_churn", "ctype_churn", capabilities),
      ...Array.from({ length: TENANTS }, (_, t) => instance(instanceOf(t), "ctype_churn", "cver_churn", tenantOf(t))),
    ]);
    // 10,000 bindings in two publications (at most 10,000 changes each).
    for (const half of [0, 1]) {
      const tenants = Array.from({ length: TENANTS / 2 }, (_, i) => half * (TENANTS / 2) + i);
      await setup.registry.publish(tenants.flatMap((t) => capabilities.map((cap) => binding(tenantOf(t), cap, instanceOf(t)))));
    }
    await db.withOwner((session) => session.query("ANALYZE"));
    plan.log(`  seeded ${TENANTS} tenants x ${CAPABILITIES} bound capabilities`);

    const started = await startServer(db, { DB_POOL_MAX: String(plan.poolMax) });
    child = started.child;
    const url = started.url;
    const readers = Array.from({ length: TENANTS - 1 }, (_, t) => t);
    const tokens = await Promise.all(
      Array.from({ length: TENANTS }, (_, t) => mintToken(SECRET, { subject: "bench-gateway", tenantId: tenantOf(t), scopes: ["catalog:read"] })),
    );

    let restarts = 0;
    let unfinished = 0;
    /** One whole walk of the tenant's catalog; restarts at the first page on stale-cursor. */
    const walk = async (t: number) => {
      let requests = 0;
      let cursor: string | null = null;
      let ids = 0;
      for (;;) {
        if (++requests > WALK_REQUEST_BUDGET) {
          unfinished++;
          throw Object.assign(new Error("walk unfinished"), { code: "unfinished" });
        }
        const response = await fetch(`${url}/v1/catalog/capabilities?limit=${PAGE}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`, {
          headers: { authorization: `Bearer ${tokens[t]}` },
        });
        if (response.status === 409) {
          await response.arrayBuffer();
          restarts++;
          cursor = null;
          ids = 0;
          continue;
        }
        if (response.status !== 200) throw Object.assign(new Error(`status ${response.status}`), { code: String(response.status) });
        const page = (await response.json()) as { next_cursor: string | null; capabilities: unknown[] };
        ids += page.capabilities.length;
        if (!page.next_cursor) break;
        cursor = page.next_cursor;
      }
      if (ids !== CAPABILITIES) throw Object.assign(new Error(`walked ${ids} capabilities`), { code: "incomplete" });
    };
    // Warm: every reader's pages cached once.
    for (const t of readers) await walk(t);

    /** Publications so far, across phases: each pass over the capabilities disables or enables them, with a newer policy revision. */
    let count = 0;
    const publisher = () => {
      const latencies = new Samples();
      const refusals: Record<string, number> = {};
      let running = true;
      const done = (async () => {
        while (running) {
          const t0 = performance.now();
          const pass = Math.floor(count / CAPABILITIES);
          const cap = count % CAPABILITIES;
          count++;
          try {
            await setup.registry.publish([
              binding(tenantOf(PUBLISHER_TENANT), capabilityOf(cap), instanceOf(PUBLISHER_TENANT), { enabled: pass % 2 === 1, policy_revision: 2 + pass }),
            ]);
            latencies.add(performance.now() - t0);
          } catch (error) {
            const code = (error as { code?: string }).code ?? "error";
            refusals[code] = (refusals[code] ?? 0) + 1;
          }
          const wait = PUBLISH_EVERY_MS - (performance.now() - t0);
          if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
        }
      })();
      return {
        async stop() {
          running = false;
          await done;
          return { latencies: latencies.summary(), count: latencies.count, refusals };
        },
      };
    };

    const phase = async (name: string, churn: boolean): Promise<{ figure: Figure; perWalk: number }> => {
      restarts = 0;
      unfinished = 0;
      const publishing = churn ? publisher() : undefined;
      const figure = await recorder.measure(
        db,
        plan.target,
        {
          suite: "catalog-churn",
          name,
          concurrency: readers.length,
          pool: plan.poolMax,
          durationMs: plan.durationMs,
          skipInvariants: true,
          overlapping: churn,
        },
        (worker) => walk(readers[worker % readers.length] as number),
      );
      const published = await publishing?.stop();
      const walks = figure.ops;
      const perWalk = walks ? restarts / walks : restarts;
      figure.note = [
        `walks of ${CAPABILITIES / PAGE} pages (limit ${PAGE}) by ${readers.length} readers, one per tenant, over HTTP (Node server, default catalog settings)`,
        `stale-cursor restarts ${restarts} (${perWalk.toFixed(3)} per walk)`,
        `unfinished walks (over ${WALK_REQUEST_BUDGET} requests) ${unfinished}`,
        published
          ? `another tenant's binding published every ${PUBLISH_EVERY_MS} ms: ${published.count} publications (${(published.count / figure.seconds).toFixed(1)}/s), p99 ${published.latencies.p99.toFixed(1)} ms${
              Object.keys(published.refusals).length ? `, refused ${JSON.stringify(published.refusals)}` : ""
            }`
          : "nothing published",
      ].join("; ");
      plan.log(
        `    ${name}: ${figure.throughput.toFixed(1)} walks/s, p99 ${figure.latency.p99.toFixed(0)} ms, ${perWalk.toFixed(3)} restarts/walk, ${unfinished} unfinished`,
      );
      return { figure, perWalk };
    };

    for (let round = 1; round <= plan.rounds; round++) {
      const quiet = await phase(`walks, quiet (round ${round})`, false);
      const churn = await phase(`walks, another tenant publishing every ${PUBLISH_EVERY_MS} ms (round ${round})`, true);
      const ratio = churn.figure.throughput / quiet.figure.throughput;
      churn.figure.note = `${churn.figure.note}; ${ratio.toFixed(2)} x the quiet walks/s of round ${round} (${quiet.figure.throughput.toFixed(1)}/s)`;
      plan.log(`    = ${ratio.toFixed(2)} x quiet`);
    }
  } finally {
    if (child) {
      child.kill("SIGTERM");
      await once(child, "exit").catch(() => {});
    }
    await setup.close();
    await db.closePools();
  }
}
