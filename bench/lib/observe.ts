/**
 * What the server was doing while a phase ran, as evidence for what limits throughput:
 * - wait events: every 50 ms, the benchmark database's active backends grouped by wait event
 *   ("CPU" when not waiting), averaged over the phase: lock waits (Lock:transactionid on a row,
 *   Lock:advisory on an action), commit flushes (IO:WALSync, LWLock:WALWrite) or plain CPU;
 * - CPU: the whole machine's busy share (/proc/stat) and this client process's own share;
 * - table write statistics: how many updates were HOT (no index maintenance).
 */
import { readFile } from "node:fs/promises";
import pg from "pg";
import { round } from "./stats.js";

export interface Observation {
  /** Average number of active backends per wait event over the phase. */
  waits: Record<string, number>;
  /** Busy share of all cores, percent (null where /proc/stat does not exist). */
  machineCpuPct: number | null;
  /** This benchmark process's CPU, percent of one core. */
  clientCpuPct: number;
  /**
   * WAL the whole server wrote over the phase (pg_current_wal_lsn() difference), bytes: this
   * run's writes plus anyone else's on a shared server, and full-page images after checkpoints.
   */
  walBytes?: number;
}

async function cpuTimes(): Promise<{ busy: number; total: number } | null> {
  try {
    const line = (await readFile("/proc/stat", "utf8")).split("\n")[0] ?? "";
    const fields = line.trim().split(/\s+/).slice(1).map(Number);
    const idle = (fields[3] ?? 0) + (fields[4] ?? 0);
    const total = fields.reduce((a, b) => a + b, 0);
    return { busy: total - idle, total };
  } catch {
    return null;
  }
}

export interface Observer {
  stop(): Promise<Observation>;
}

export async function observe(adminUrl: string, database: string): Promise<Observer> {
  const client = new pg.Client({ connectionString: adminUrl, application_name: "aip-bench-observer" });
  client.on("error", () => {});
  await client.connect();
  const lsn = async () => (await client.query<{ lsn: string }>("SELECT pg_current_wal_lsn()::text AS lsn")).rows[0]?.lsn ?? "0/0";
  const lsn0 = await lsn().catch(() => null);
  const totals = new Map<string, number>();
  let samples = 0;
  let running = true;
  const cpu0 = await cpuTimes();
  const client0 = process.cpuUsage();
  const t0 = performance.now();
  const loop = (async () => {
    while (running) {
      const { rows } = await client.query<{ w: string; n: number }>(
        `SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') AS w, count(*)::int AS n
         FROM pg_stat_activity WHERE datname = $1 AND state = 'active' AND pid <> pg_backend_pid() GROUP BY 1`,
        [database],
      );
      for (const row of rows) totals.set(row.w, (totals.get(row.w) ?? 0) + row.n);
      samples++;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  })();
  return {
    async stop() {
      running = false;
      await loop.catch(() => {});
      let walBytes: number | undefined;
      if (lsn0) {
        const { rows } = await client
          .query<{ bytes: string }>("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::text AS bytes", [lsn0])
          .catch(() => ({ rows: [] as { bytes: string }[] }));
        if (rows[0]) walBytes = Number(rows[0].bytes);
      }
      await client.end().catch(() => {});
      const cpu1 = await cpuTimes();
      const used = process.cpuUsage(client0);
      const elapsedMs = performance.now() - t0;
      const waits = Object.fromEntries([...totals.entries()].sort((a, b) => b[1] - a[1]).map(([w, n]) => [w, round(n / Math.max(samples, 1), 2)]));
      return {
        waits,
        machineCpuPct: cpu0 && cpu1 && cpu1.total > cpu0.total ? round((100 * (cpu1.busy - cpu0.busy)) / (cpu1.total - cpu0.total), 1) : null,
        clientCpuPct: round((100 * (used.user + used.system)) / 1000 / elapsedMs, 1),
        ...(walBytes !== undefined ? { walBytes } : {}),
      };
    },
  };
}

export interface TableWrites {
  table: string;
  inserts: number;
  updates: number;
  hotUpdates: number;
}

/** Cumulative write counters of the registry's hot tables (diff two snapshots for a phase). */
export async function tableWrites(query: (text: string) => Promise<Record<string, unknown>[]>): Promise<TableWrites[]> {
  const rows = await query(
    `SELECT relname AS table, n_tup_ins AS inserts, n_tup_upd AS updates, n_tup_hot_upd AS hot
     FROM pg_stat_user_tables
     WHERE relname IN ('aip_connector_replicas', 'aip_admission_counters', 'aip_route_assignments')
     ORDER BY relname`,
  );
  return rows.map((r) => ({ table: String(r.table), inserts: Number(r.inserts), updates: Number(r.updates), hotUpdates: Number(r.hot) }));
}

export function writesBetween(before: TableWrites[], after: TableWrites[]) {
  return after.map((a) => {
    const b = before.find((x) => x.table === a.table);
    const updates = a.updates - (b?.updates ?? 0);
    const hot = a.hotUpdates - (b?.hotUpdates ?? 0);
    return { table: a.table, inserts: a.inserts - (b?.inserts ?? 0), updates, hotPct: updates ? round((100 * hot) / updates, 1) : null };
  });
}
