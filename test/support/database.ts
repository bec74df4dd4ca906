/**
 * A private database per test file, cloned from the migrated template (milliseconds, isolated),
 * with a Registry whose data and control executors connect as the real runtime roles.
 */
import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterAll, beforeAll, inject } from "vitest";
import { createPgPool, pgExecutor } from "../../src/db/pg.js";
import { Registry } from "../../src/registry/registry.js";
import { databaseUrl, type PgServerInfo } from "./server.js";

export interface TestDatabase {
  name: string;
  server: PgServerInfo;
  /** Owner (superuser) URL: for assertions that look at tables directly. */
  ownerUrl: string;
  dataUrl: string;
  controlUrl: string;
  registry: Registry;
  /** Owner pool for direct SQL in assertions. */
  owner: pg.Pool;
  dataPool: pg.Pool;
  /** A registry on fresh pools of the given size (for concurrency tests). */
  registryWithPool(size: number): { registry: Registry; pools: pg.Pool[] };
  close(): Promise<void>;
}

export async function createTestDatabase(options: { dataPoolSize?: number } = {}): Promise<TestDatabase> {
  const server = inject("pgServer");
  const name = `aip_t_${server.runId}_${randomBytes(5).toString("hex")}`;
  const admin = new pg.Client({ connectionString: server.adminUrl });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name} TEMPLATE ${server.template}`);
    // A clone starts with PostgreSQL's default CONNECT for PUBLIC: give it what migrate gives a database.
    const roles = server.roles as { data: string; control: string };
    await admin.query(`REVOKE CONNECT ON DATABASE ${name} FROM PUBLIC; GRANT CONNECT ON DATABASE ${name} TO ${roles.data}, ${roles.control}`);
  } finally {
    await admin.end();
  }
  const ownerUrl = databaseUrl(server, name);
  const dataUrl = databaseUrl(server, name, "aip_tests_data");
  const controlUrl = databaseUrl(server, name, "aip_tests_control");
  // Named as the test harness, not as a server of this build's set: migrate --finalize counts those.
  const owner = createPgPool(ownerUrl, { max: 4, applicationName: "aip-test" });
  const dataPool = createPgPool(dataUrl, { max: options.dataPoolSize ?? 8, applicationName: "aip-test" });
  const controlPool = createPgPool(controlUrl, { max: 2, applicationName: "aip-test" });
  const extraPools: pg.Pool[] = [];
  return {
    name,
    server,
    ownerUrl,
    dataUrl,
    controlUrl,
    owner,
    dataPool,
    registry: new Registry({ data: pgExecutor(dataPool), control: pgExecutor(controlPool) }),
    registryWithPool(size: number) {
      // Waiters queue in the pool under load: give them longer than pg's 5 s connect timeout.
      const data = createPgPool(dataUrl, { max: size, connectionTimeoutMs: 60_000, applicationName: "aip-test" });
      extraPools.push(data);
      return { registry: new Registry({ data: pgExecutor(data), control: pgExecutor(controlPool) }), pools: [data] };
    },
    async close() {
      await Promise.all([owner.end(), dataPool.end(), controlPool.end(), ...extraPools.map((p) => p.end())]);
      const admin = new pg.Client({ connectionString: server.adminUrl });
      await admin.connect();
      await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => {});
      await admin.end();
    },
  };
}

/**
 * The test file's database: created before its first test (before the file's own beforeAll hooks,
 * when called above them), closed and dropped after everything else (after hooks run in reverse
 * order). The returned object reads the current database, so it may be captured at the top of the
 * file and used in hooks and tests.
 */
export function useTestDatabase(options: { dataPoolSize?: number } = {}): TestDatabase {
  let current: TestDatabase | undefined;
  beforeAll(async () => {
    current = await createTestDatabase(options);
  });
  afterAll(async () => {
    await current?.close();
    current = undefined;
  });
  return new Proxy({} as TestDatabase, {
    get(_target, member) {
      if (!current) throw new Error("the test database exists only in the file's hooks and tests (useTestDatabase)");
      const value = Reflect.get(current, member) as unknown;
      return typeof value === "function" ? value.bind(current) : value;
    },
  });
}
