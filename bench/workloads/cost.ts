/**
 * What one operation costs the server, measured serially on one session, so the figures hardly
 * move with other load on the machine (unlike throughput):
 * - server CPU per operation: the backend process's user+system time (/proc/<pid>/stat, when
 *   the server runs on this host), over a few hundred operations;
 * - WAL bytes per operation (pg_current_wal_lsn before and after);
 * - relation locks one operation holds at commit, and how many of them fit the backend's 16
 *   fast-path slots: the rest go through the shared lock manager, whose partition locks are
 *   what `LWLock:LockManager` waits are.
 * With C cores, cores / CPU-per-operation bounds what the server alone could sustain.
 */
import { readFile } from "node:fs/promises";
import os from "node:os";
import pg from "pg";
import { Registry } from "../../src/registry/registry.js";
import type { Layout } from "../lib/layout.js";
import type { BenchDatabase } from "../lib/target.js";
import { resolveNew, settle, type Held } from "./routing.js";

export interface Cost {
  operation: string;
  /** Server CPU per operation, ms (null when the server is not on this host). */
  serverCpuMs: number | null;
  walBytes: number;
  relationLocks: number;
  fastPathLocks: number;
  /** os.cpus().length * 1000 / serverCpuMs: the ceiling if the server had every core to itself. */
  cpuBoundOpsPerSecond: number | null;
}

const TICK_MS = 10; // Linux USER_HZ is 100

async function backendCpuMs(pid: number): Promise<number | null> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) * TICK_MS;
  } catch {
    return null;
  }
}

export async function measureCosts(db: BenchDatabase, l: Layout, operations = 300): Promise<Cost[]> {
  const client = new pg.Client({ connectionString: db.dataUrl, application_name: "aip-bench-cost" });
  const owner = new pg.Client({ connectionString: db.ownerUrl, application_name: "aip-bench-cost" });
  await Promise.all([client.connect(), owner.connect()]);
  const executor = { query: async <R extends Record<string, unknown>>(text: string, params: readonly unknown[] = []) => (await client.query<R>(text, params as unknown[])).rows };
  const registry = new Registry({ data: executor, control: executor });
  const pid = ((await client.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0] as { pid: number }).pid;
  const lsn = async () => BigInt(((await owner.query<{ b: string }>("SELECT pg_current_wal_lsn() - '0/0' AS b")).rows[0] as { b: string }).b);
  const costs: Cost[] = [];

  const measure = async (operation: string, op: (i: number) => Promise<void>, lockProbe?: () => Promise<void>) => {
    for (let i = 0; i < 20; i++) await op(i); // compile and plan first
    const cpu0 = await backendCpuMs(pid);
    const wal0 = await lsn();
    for (let i = 0; i < operations; i++) await op(i);
    const cpu1 = await backendCpuMs(pid);
    const wal1 = await lsn();
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
    costs.push({
      operation,
      serverCpuMs,
      walBytes: Number(wal1 - wal0) / operations,
      relationLocks,
      fastPathLocks,
      cpuBoundOpsPerSecond: serverCpuMs ? (os.cpus().length * 1000) / serverCpuMs : null,
    });
  };

  try {
    await measure("SELECT 1", async () => {
      await client.query("SELECT 1");
    });
    const held: Held[] = [];
    await measure(
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
    await measure(
      "settle",
      async () => settle(registry, held[next++] as Held),
      async () => settle(registry, spare),
    );
    let again = 0;
    const reacquire = async (item: Held) => {
      await registry.resolveRoute(item.actionId, item.tenant, item.assignment.capability_id);
    };
    await measure(
      "reacquire (retry)",
      async () => {
        const item = held[again++ % held.length] as Held;
        await reacquire(item);
        await settle(registry, item);
      },
      async () => reacquire(held[again % held.length] as Held),
    );
    // The reacquire loop also settles: report the reacquire alone by subtracting one settle.
    const retry = costs.at(-1) as Cost;
    const settleCost = costs.at(-2) as Cost;
    if (retry.serverCpuMs !== null && settleCost.serverCpuMs !== null) {
      retry.serverCpuMs -= settleCost.serverCpuMs;
      retry.cpuBoundOpsPerSecond = retry.serverCpuMs > 0 ? (os.cpus().length * 1000) / retry.serverCpuMs : null;
    }
    retry.walBytes -= settleCost.walBytes;
    await measure(
      "catalog page (limit 50)",
      async (i) => {
        await registry.catalogPage(`tenant-${String(i % l.tenants).padStart(4, "0")}`, { limit: 50 });
      },
      async () => {
        await registry.catalogPage("tenant-0000", { limit: 50 });
      },
    );
  } finally {
    await Promise.all([client.end(), owner.end()]);
  }
  return costs;
}
