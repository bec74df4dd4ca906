/**
 * What one operation costs the server, measured serially on one session, so the figures hardly
 * move with other load on the machine (unlike throughput):
 * - server CPU per operation: the backend process's user+system time (/proc/<pid>/stat, when
 *   the server runs on this host), over a few hundred operations;
 * - WAL per operation, from EXPLAIN (ANALYZE, WAL) of the entry point's call, which counts this
 *   backend's records only (a server-wide LSN difference would include everyone else's): records,
 *   full-page images (the first change of a page after each checkpoint) and bytes;
 * - relation locks one operation holds at commit, and how many of them fit the backend's 16
 *   fast-path slots: the rest go through the shared lock manager, whose partition locks are
 *   what `LWLock:LockManager` waits are.
 * With C cores, cores / CPU-per-operation bounds what the server alone could sustain.
 */
import { readFile } from "node:fs/promises";
import os from "node:os";
import pg from "pg";
import { Registry } from "../../src/registry/registry.js";
import type { RouteAssignment } from "../../src/schemas.js";
import { randomRoute, tenantId, type Layout } from "../../fixtures/layout.js";
import type { BenchDatabase } from "../lib/target.js";
import { resolveNew, settle, type Held } from "./routing.js";
import { catalogPage } from "../../fixtures/catalog-reads.js";

interface Wal {
  records: number;
  fullPageImages: number;
  bytes: number;
}

export interface Cost {
  operation: string;
  /** Server CPU per operation, ms (null when the server is not on this host). */
  serverCpuMs: number | null;
  /** os.cpus().length * 1000 / serverCpuMs: the ceiling if the server had every core to itself. */
  cpuBoundOpsPerSecond: number | null;
  wal: Wal | null;
  relationLocks: number;
  fastPathLocks: number;
}

const TICK_MS = 10; // Linux USER_HZ is 100

export async function backendCpuMs(pid: number): Promise<number | null> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) * TICK_MS;
  } catch {
    return null;
  }
}

/** Average WAL of `samples` calls of resolve (new), settle and reacquire, per operation. */
async function walPerOperation(client: pg.Client, l: Layout, samples: number): Promise<Record<"resolve" | "settle" | "reacquire", Wal>> {
  const totals = {
    resolve: { records: 0, fullPageImages: 0, bytes: 0 },
    settle: { records: 0, fullPageImages: 0, bytes: 0 },
    reacquire: { records: 0, fullPageImages: 0, bytes: 0 },
  };
  const explain = async (into: Wal, call: string, params: unknown[]) => {
    const { rows } = await client.query<{ "QUERY PLAN": [{ Plan: Record<string, number> }] }>(`EXPLAIN (ANALYZE, WAL, FORMAT JSON) SELECT ${call}`, params);
    const plan = rows[0]?.["QUERY PLAN"][0].Plan ?? {};
    into.records += (plan["WAL Records"] ?? 0) / samples;
    into.fullPageImages += (plan["WAL FPI"] ?? 0) / samples;
    into.bytes += (plan["WAL Bytes"] ?? 0) / samples;
  };
  const settleCall = "aip_settle_route($1::text, $2::text, $3::jsonb, 'completed')";
  for (let i = 0; i < samples; i++) {
    const pick = randomRoute(l);
    const action = `act_bench_wal_${i}_${Math.random().toString(36).slice(2)}`;
    await explain(totals.resolve, "aip_resolve_route($1::text, $2::text, $3::text, $4::jsonb)", [
      action,
      pick.tenant,
      pick.capability,
      { region: pick.region },
    ]);
    const { rows } = await client.query<{ r: { assignment: RouteAssignment } }>("SELECT aip_get_route($1, $2) AS r", [action, pick.tenant]);
    const assignment = rows[0]?.r.assignment;
    await explain(totals.settle, settleCall, [action, pick.tenant, assignment]);
    await explain(totals.reacquire, "aip_resolve_route($1::text, $2::text, $3::text)", [action, pick.tenant, pick.capability]);
    await client.query(`SELECT ${settleCall}`, [action, pick.tenant, assignment]);
  }
  return totals;
}

export async function measureCosts(db: BenchDatabase, l: Layout, operations = 300): Promise<Cost[]> {
  const client = new pg.Client({ connectionString: db.dataUrl, application_name: "aip-bench-cost" });
  await client.connect();
  const executor = {
    query: async <R extends Record<string, unknown>>(text: string, params: readonly unknown[] = []) => (await client.query<R>(text, params as unknown[])).rows,
  };
  const registry = new Registry({ data: executor, control: executor });
  const pid = Number((await client.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]?.pid);
  const costs: Cost[] = [];

  const measure = async (operation: string, op: (i: number) => Promise<void>, lockProbe?: () => Promise<void>) => {
    for (let i = 0; i < 20; i++) await op(i); // compile and plan first
    const cpu0 = await backendCpuMs(pid);
    for (let i = 0; i < operations; i++) await op(i);
    const cpu1 = await backendCpuMs(pid);
    let relationLocks = 0;
    let fastPathLocks = 0;
    if (lockProbe) {
      // The operation inside an open transaction, then the locks it holds, then roll back.
      await client.query("BEGIN");
      try {
        await lockProbe();
        const { rows } = await client.query<{ total: number; fast: number }>(
          `SELECT count(*)::int AS total, count(*) FILTER (WHERE fastpath)::int AS fast
           FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'relation' AND relation <> 'pg_locks'::regclass`,
        );
        relationLocks = rows[0]?.total ?? 0;
        fastPathLocks = rows[0]?.fast ?? 0;
      } finally {
        await client.query("ROLLBACK");
      }
    }
    const serverCpuMs = cpu0 !== null && cpu1 !== null ? (cpu1 - cpu0) / operations : null;
    const cost: Cost = { operation, serverCpuMs, cpuBoundOpsPerSecond: null, wal: null, relationLocks, fastPathLocks };
    costs.push(cost);
    return cost;
  };

  try {
    await measure("SELECT 1", async () => {
      await client.query("SELECT 1");
    });
    const held: Held[] = [];
    const resolve = await measure(
      "resolve (new action)",
      async () => {
        held.push(await resolveNew(registry, l, "cost"));
      },
      async () => {
        await resolveNew(registry, l, "cost-locks");
      },
    );
    const spare = await resolveNew(registry, l, "cost-spare");
    let next = 0;
    const settled = await measure(
      "settle",
      async () => settle(registry, held[next++] as Held),
      async () => settle(registry, spare),
    );
    let again = 0;
    const reacquire = async (item: Held) => {
      await registry.resolveRoute(item.actionId, item.tenant, item.assignment.capability_id);
    };
    const retry = await measure(
      "reacquire (retry)",
      async () => {
        const item = held[again++ % held.length] as Held;
        await reacquire(item);
        await settle(registry, item);
      },
      async () => reacquire(held[again % held.length] as Held),
    );
    // That loop also settled each reacquired route: report the reacquisition alone.
    if (retry.serverCpuMs !== null && settled.serverCpuMs !== null) retry.serverCpuMs -= settled.serverCpuMs;
    await measure(
      "catalog page (limit 50)",
      async (i) => {
        await catalogPage(registry, tenantId(i % l.tenants), { limit: 50 });
      },
      async () => {
        await catalogPage(registry, tenantId(0), { limit: 50 });
      },
    );
    const wal = await walPerOperation(client, l, Math.max(10, Math.round(operations / 10)));
    resolve.wal = wal.resolve;
    settled.wal = wal.settle;
    retry.wal = wal.reacquire;
    for (const cost of costs) {
      cost.cpuBoundOpsPerSecond = cost.serverCpuMs ? (os.cpus().length * 1000) / cost.serverCpuMs : null;
    }
  } finally {
    await client.end();
  }
  return costs;
}
