/**
 * The embedded default: PGlite in this process (in memory), migrated and seeded with a small
 * fleet (one tenant, 100 instances, 1,000 bindings), driven through the same registry client.
 * PGlite is one session, so calls serialize: one cycle at a time is its natural rate.
 */
import { migrate } from "../../src/db/migrate.js";
import { openPglite, pgliteExecutor, pgliteSession } from "../../src/db/pglite.js";
import { Registry } from "../../src/registry/registry.js";
import type { Recorder } from "../lib/figures.js";
import { invariants } from "../lib/figures.js";
import { closedLoop } from "../lib/load.js";
import { seedFleet } from "../../fixtures/seed.js";
import { resolveNew, settle } from "./routing.js";

export async function runPglite(recorder: Recorder, plan: { durationMs: number; log: (line: string) => void }): Promise<void> {
  const t0 = performance.now();
  const db = await openPglite();
  const opened = performance.now();
  try {
    const session = pgliteSession(db);
    await migrate(session);
    const migrated = performance.now();
    const seed = await seedFleet(session, { replicas: 100, types: 10 });
    const startup = `open ${((opened - t0) / 1000).toFixed(1)} s, migrate ${((migrated - opened) / 1000).toFixed(1)} s, seed ${(seed.seedMs / 1000).toFixed(1)} s`;
    plan.log(`  PGlite in memory: ${startup} (${seed.layout.bindings} bindings)`);
    const executor = pgliteExecutor(db);
    const registry = new Registry({ data: executor, control: executor });
    const base = { suite: "pglite", target: "pglite", pool: 1 };
    recorder.add({
      ...base,
      suite: "baseline",
      name: "SELECT 1",
      ...(await closedLoop({ concurrency: 1, durationMs: plan.durationMs / 2 }, async () => {
        await executor.query("SELECT 1");
      })),
    });
    const figure = recorder.add({
      ...base,
      name: "resolve + settle cycle (in-memory, one session)",
      note: `start-up: ${startup}`,
      ...(await closedLoop({ concurrency: 1, durationMs: plan.durationMs }, async () => {
        await settle(registry, await resolveNew(registry, seed.layout, "p"));
      })),
    });
    figure.invariants = await invariants(registry);
  } finally {
    await db.close();
  }
}
