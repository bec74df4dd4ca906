/**
 * The catalog publication lock as the server sees it, sampled every few milliseconds from
 * pg_locks (so neither the load generator's nor the readers' own CPU delays enter it):
 * - how long each publication held the lock exclusively (from the first sample that saw it granted
 *   to the last, per holding backend and transaction);
 * - how long any reader had been queued for it (pg_locks.waitstart of a shared request not yet
 *   granted), the largest seen.
 * The key is the registry's (functions/06_locks.sql): (hashtext(current_database()), 'AIPC').
 */
import pg from "pg";

export interface LockSamples {
  /** Milliseconds each exclusive hold lasted, in order (at the sampling resolution). */
  holdsMs: number[];
  /** The longest a shared request was seen waiting, milliseconds. */
  maxWaitMs: number;
  samples: number;
  /** Milliseconds between samples, on average. */
  resolutionMs: number;
}

export async function samplePublicationLock(adminUrl: string, database: string): Promise<{ stop(): Promise<LockSamples> }> {
  const client = new pg.Client({ connectionString: adminUrl, application_name: "aip-bench-lock-sampler" });
  client.on("error", () => {});
  await client.connect();
  const query = `
    SELECT (SELECT l.pid || ':' || l.virtualtransaction FROM pg_locks l
            WHERE l.locktype = 'advisory' AND l.objid = 1095323715 AND l.objsubid = 2 AND l.database = d.oid
              AND l.granted AND l.mode = 'ExclusiveLock' LIMIT 1) AS holder,
           (SELECT max(extract(epoch FROM clock_timestamp() - l.waitstart) * 1000) FROM pg_locks l
            WHERE l.locktype = 'advisory' AND l.objid = 1095323715 AND l.objsubid = 2 AND l.database = d.oid
              AND NOT l.granted AND l.mode = 'ShareLock') AS waiting_ms,
           extract(epoch FROM clock_timestamp()) * 1000 AS at
    FROM pg_database d WHERE d.datname = $1`;
  const holdsMs: number[] = [];
  let current: { holder: string; first: number; last: number } | undefined;
  let maxWaitMs = 0;
  let samples = 0;
  let running = true;
  const started = performance.now();
  const close = () => {
    if (current) holdsMs.push(current.last - current.first);
    current = undefined;
  };
  const loop = (async () => {
    while (running) {
      const { rows } = await client.query<{ holder: string | null; waiting_ms: number | null; at: number }>(query, [database]);
      const row = rows[0];
      samples++;
      if (row) {
        maxWaitMs = Math.max(maxWaitMs, Number(row.waiting_ms ?? 0));
        const at = Number(row.at);
        if (row.holder && current?.holder === row.holder) current.last = at;
        else {
          close();
          if (row.holder) current = { holder: row.holder, first: at, last: at };
        }
      }
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
  })();
  return {
    async stop() {
      running = false;
      await loop.catch(() => {});
      close();
      await client.end().catch(() => {});
      return { holdsMs, maxWaitMs, samples, resolutionMs: (performance.now() - started) / Math.max(1, samples) };
    },
  };
}
