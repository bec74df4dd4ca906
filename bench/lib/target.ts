/**
 * Where the benchmark runs: a PostgreSQL server (the machine's, BENCH_DATABASE_URL's, or an
 * embedded one this process starts), a fresh migrated database on it, and pools that connect as
 * the real runtime roles, so every call goes through the same grants and SECURITY DEFINER entry
 * points as production.
 */
import pg from "pg";
import { loginRoleSql } from "../../fixtures/login-roles.js";
import { FUNCTION_SET } from "../../src/db/schema-version.js";
import { migrate, type MigrationSession } from "../../src/db/migrate.js";
import { createPgPool, pgExecutor, withPgSession } from "../../src/db/pg.js";
import { Registry } from "../../src/registry/registry.js";
import { startEmbeddedServer } from "../../fixtures/embedded-postgres.js";

export const MACHINE_URL = "postgres://postgres@127.0.0.1:5432/postgres";
const ROLE_PASSWORD = "aip-bench-password";
// Names of our own: other tools on a shared server create and drop their own login roles.
const LOGIN_ROLES = { aip_bench_login_data: "data", aip_bench_login_control: "control" } as const;

export interface Server {
  label: string;
  /** Superuser URL of the server's maintenance database. */
  adminUrl: string;
  maxConnections: number;
  stop(): Promise<void>;
}

export interface RegistryHandle {
  registry: Registry;
  pool: pg.Pool;
  size: number;
  close(): Promise<void>;
}

export interface BenchDatabase {
  server: Server;
  name: string;
  ownerUrl: string;
  dataUrl: string;
  controlUrl: string;
  /** True when the runtime login roles could not be created and the owner is used instead. */
  ownerFallback: boolean;
  /**
   * A registry over a new data pool of `size` connections (all opened before this returns) and the
   * shared control pool. Close it when done: the server's connection budget is shared.
   */
  registry(size: number): Promise<RegistryHandle>;
  /** The owner as one migration-style session (seed, EXPLAIN, settings). */
  withOwner<T>(fn: (session: MigrationSession) => Promise<T>): Promise<T>;
  closePools(): Promise<void>;
}

function urlFor(serverUrl: string, database: string, user?: string, password?: string): string {
  const url = new URL(serverUrl);
  url.pathname = `/${database}`;
  if (user) {
    url.username = user;
    url.password = password ?? "";
  }
  return url.toString();
}

async function adminQuery<R extends pg.QueryResultRow>(adminUrl: string, text: string): Promise<R[]> {
  const client = new pg.Client({ connectionString: adminUrl, application_name: "aip-bench-admin" });
  client.on("error", () => {});
  await client.connect();
  try {
    return (await client.query<R>(text)).rows;
  } finally {
    await client.end().catch(() => {});
  }
}

export async function externalServer(url: string, label: string): Promise<Server> {
  const adminUrl = urlFor(url, new URL(url).pathname.replace(/^\//, "") || "postgres");
  const [row] = await adminQuery<{ max: string }>(adminUrl, "SELECT current_setting('max_connections') AS max");
  return { label, adminUrl, maxConnections: Number(row?.max ?? 100), stop: async () => {} };
}

/**
 * A throwaway server with room for 500 real connections (max_connections=600). Durability
 * settings are PostgreSQL's defaults (fsync and synchronous_commit on), like the machine's server,
 * so the two differ in connection limit and major version, not in what a commit costs.
 */
export async function embeddedServer(options: { maxConnections: number; sharedBuffers: string }): Promise<Server> {
  const server = await startEmbeddedServer({
    dirPrefix: "aip-bench-pg-",
    postgresFlags: ["-c", `max_connections=${options.maxConnections}`, "-c", `shared_buffers=${options.sharedBuffers}`],
  });
  return {
    label: `embedded PostgreSQL (max_connections=${options.maxConnections})`,
    adminUrl: server.adminUrl,
    maxConnections: options.maxConnections,
    stop: () => server.stop(),
  };
}

/** Connections the server can still give us, leaving room for everyone else using it. */
export async function connectionBudget(server: Server, reserve = 8): Promise<number> {
  const [row] = await adminQuery<{ used: string; reserved: string }>(
    server.adminUrl,
    "SELECT (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend') AS used, current_setting('superuser_reserved_connections') AS reserved",
  );
  return server.maxConnections - Number(row?.reserved ?? 3) - Number(row?.used ?? 0) - reserve;
}

/**
 * Drops and recreates `name`, migrates it, and opens it as the runtime roles. `migrateFirst` runs
 * an older build's migrate on the empty database first (given the owner's URL), as an upgrade
 * would: that build's servers can then serve it beside this one's (bench/tracing.ts's base).
 */
export async function freshDatabase(server: Server, name: string, options: { migrateFirst?: (ownerUrl: string) => void } = {}): Promise<BenchDatabase> {
  await adminQuery(server.adminUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  await adminQuery(server.adminUrl, `CREATE DATABASE ${name}`);
  const ownerUrl = urlFor(server.adminUrl, name);
  options.migrateFirst?.(ownerUrl);
  const { roles } = await withPgSession(ownerUrl, (session) => migrate(session));
  let ownerFallback = false;
  try {
    for (const [login, plane] of Object.entries(LOGIN_ROLES)) {
      await adminQuery(server.adminUrl, loginRoleSql(login, ROLE_PASSWORD, plane, roles));
      // 0.1.0's set is granted to its cluster-wide roles (docs/upgrades.md, "from 0.1.0").
      if (options.migrateFirst) await adminQuery(server.adminUrl, `GRANT aip_registry_${plane} TO ${login}`);
    }
  } catch {
    // A managed server may not let us create roles: the functions run as the owner either way.
    ownerFallback = true;
  }
  const dataUrl = ownerFallback ? ownerUrl : urlFor(server.adminUrl, name, "aip_bench_login_data", ROLE_PASSWORD);
  const controlUrl = ownerFallback ? ownerUrl : urlFor(server.adminUrl, name, "aip_bench_login_control", ROLE_PASSWORD);
  const control = createPgPool(controlUrl, { max: 2, applicationName: "aip-bench-control", statementTimeoutMs: 600_000 });
  const open = new Set<pg.Pool>();
  return {
    server,
    name,
    ownerUrl,
    dataUrl,
    controlUrl,
    ownerFallback,
    async registry(size) {
      // Statements never time out on the client's behalf here: a queued request is part of the
      // latency being measured, not an error.
      const pool = createPgPool(dataUrl, { max: size, applicationName: "aip-bench", statementTimeoutMs: 120_000, connectionTimeoutMs: 120_000 });
      open.add(pool);
      // Open every connection before anything is timed.
      await Promise.all(Array.from({ length: size }, () => pool.query("SELECT 1")));
      return {
        registry: new Registry({ data: pgExecutor(pool), control: pgExecutor(control) }),
        pool,
        size,
        async close() {
          open.delete(pool);
          await pool.end();
        },
      };
    },
    // The owner's sessions call this build's functions unqualified (the seeds, the probe's fleet).
    withOwner: (fn) =>
      withPgSession(ownerUrl, async (session) => {
        await session.exec(`SET search_path = ${FUNCTION_SET}, public`);
        return fn(session);
      }),
    async closePools() {
      await Promise.all([...open].map((pool) => pool.end()));
      open.clear();
      await control.end();
    },
  };
}

export async function dropDatabase(server: Server, name: string): Promise<void> {
  await adminQuery(server.adminUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
}
