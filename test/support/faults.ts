/**
 * Fault injection helpers: hold locks in an open owner transaction so a victim statement stops
 * mid-way, find that victim's backend while it waits, terminate it; victims on their own pools,
 * named by application_name; throwaway login roles with a connection limit; and the embedded
 * server's crash restart.
 */
import { randomBytes } from "node:crypto";
import pg from "pg";
import { createPgPool, pgExecutor } from "../../src/db/pg.js";
import { Registry } from "../../src/registry/registry.js";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const uniqueName = (prefix: string) => `${prefix}_${randomBytes(4).toString("hex")}`;

export interface HeldLocks {
  release(): Promise<void>;
}

/** Runs the statements in one open transaction of its own connection; release() rolls it back. */
export async function holdLocks(owner: pg.Pool, statements: [string, unknown[]?][]): Promise<HeldLocks> {
  const client = await owner.connect();
  await client.query("BEGIN");
  for (const [text, params] of statements) await client.query(text, params ?? []);
  return {
    async release() {
      await client.query("ROLLBACK").catch(() => {});
      client.release();
    },
  };
}

/** The pid of the backend named `applicationName` once it is blocked on a lock. */
export async function waitForLockWaiter(owner: pg.Pool, applicationName: string, timeoutMs = 60_000): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const { rows } = await owner.query<{ pid: number }>(
      "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND state = 'active' AND wait_event_type = 'Lock'",
      [applicationName],
    );
    if (rows[0]) return rows[0].pid;
    if (Date.now() > deadline) throw new Error(`${applicationName} never waited on a lock`);
    await sleep(20);
  }
}

export async function terminateBackend(owner: pg.Pool, pid: number): Promise<void> {
  const { rows } = await owner.query<{ done: boolean }>("SELECT pg_terminate_backend($1) AS done", [pid]);
  if (!rows[0]?.done) throw new Error(`backend ${pid} was not terminated`);
}

/** Until the backend with this pid is gone (a terminated or orphaned statement finished). */
export async function waitForBackendExit(owner: pg.Pool, pid: number, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const { rows } = await owner.query("SELECT 1 FROM pg_stat_activity WHERE pid = $1", [pid]);
    if (rows.length === 0) return;
    if (Date.now() > deadline) throw new Error(`backend ${pid} is still there`);
    await sleep(20);
  }
}

export interface Victim {
  registry: Registry;
  applicationName: string;
  close(): Promise<void>;
}

/** A registry on pools of one connection per role, named so its backend can be found. */
export function victim(urls: { dataUrl: string; controlUrl: string }, options: { statementTimeoutMs?: number; name?: string } = {}): Victim {
  const applicationName = uniqueName(options.name ?? "aip_victim");
  const settings = {
    max: 1,
    connectionTimeoutMs: 60_000,
    applicationName,
    ...(options.statementTimeoutMs !== undefined ? { statementTimeoutMs: options.statementTimeoutMs } : {}),
  };
  const data = createPgPool(urls.dataUrl, settings);
  const control = createPgPool(urls.controlUrl, settings);
  return {
    registry: new Registry({ data: pgExecutor(data), control: pgExecutor(control) }),
    applicationName,
    close: async () => {
      await Promise.all([data.end(), control.end()]);
    },
  };
}

/**
 * A registry on one plain client whose socket the test can cut (`drop()`), as a gateway process
 * dying or a network partition would, while its statement is still running on the server.
 */
export async function droppableVictim(url: string, options: { settings?: string } = {}): Promise<Victim & { drop(): void }> {
  const applicationName = uniqueName("aip_dropped");
  const client = new pg.Client({ connectionString: url, application_name: applicationName, ...(options.settings ? { options: options.settings } : {}) });
  client.on("error", () => {});
  await client.connect();
  const executor = {
    async query<R extends Record<string, unknown>>(text: string, params: readonly unknown[] = []) {
      return (await client.query<R>(text, params as unknown[])).rows;
    },
  };
  return {
    registry: new Registry({ data: executor }),
    applicationName,
    drop: () => (client as unknown as { connection: { stream: { destroy(): void } } }).connection.stream.destroy(),
    close: async () => {
      await client.end().catch(() => {});
    },
  };
}

/**
 * A throwaway login role in the data group with a connection limit; dropped (after its sessions)
 * by drop(). The limit is the role's, so the server's other clients keep their slots.
 */
export async function limitedDataRole(adminUrl: string, databaseUrl: string, limit: number, group: string): Promise<{ url: string; drop(): Promise<void> }> {
  const role = uniqueName("aip_fault_limited");
  const password = randomBytes(12).toString("hex");
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    await admin.query(`CREATE ROLE ${role} LOGIN PASSWORD '${password}' CONNECTION LIMIT ${limit} IN ROLE ${group}`);
  } finally {
    await admin.end();
  }
  const url = new URL(databaseUrl);
  url.username = role;
  url.password = password;
  return {
    url: url.toString(),
    async drop() {
      const client = new pg.Client({ connectionString: adminUrl });
      await client.connect();
      try {
        await client.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", [role]);
        await client.query(`DROP ROLE IF EXISTS ${role}`);
      } finally {
        await client.end();
      }
    },
  };
}

/**
 * Crash-restarts the server: SIGKILL one backend, and the postmaster terminates every session,
 * reinitializes and runs crash recovery (committed transactions survive, nothing else does). Only
 * for a server on this machine that the test setup started: the postmaster stays the process the
 * setup manages, unlike `pg_ctl restart`, whose new postmaster the setup's teardown would orphan.
 */
export async function crashRestart(owner: pg.Pool, database: string): Promise<number> {
  const { rows } = await owner.query<{ pid: number }>(
    "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend' AND pid <> pg_backend_pid() ORDER BY random() LIMIT 1",
    [database],
  );
  const pid = rows[0]?.pid ?? (await owner.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]!.pid;
  process.kill(pid, "SIGKILL");
  return pid;
}
