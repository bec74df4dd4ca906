/**
 * Roles are cluster-wide, registries are per database: each registry database gets group roles of
 * its own (src/db/migrate.ts registryRoleNames) and CONNECT only for them, so login roles made for
 * one registry are useless on another on the same server; `doctor` says when a login could cross
 * over, when PUBLIC may connect, and when a server runs as a superuser or the tables' owner.
 */
import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { migrate, type MigrationReport } from "../../src/db/migrate.js";
import { withPgSession } from "../../src/db/pg.js";
import { FUNCTION_SET } from "../../src/db/schema-version.js";
import { loginRoleSql } from "../../fixtures/login-roles.js";
import { cleanEnv, runCli } from "../cli/support.js";
import { databaseUrl } from "../support/server.js";

const server = inject("pgServer");
const suffix = randomBytes(3).toString("hex");
const names = { a: `aip_t_${server.runId}_roles_a_${suffix}`, b: `aip_t_${server.runId}_roles_b_${suffix}` };
const logins = { a: `aip_roles_a_${suffix}`, both: `aip_roles_both_${suffix}` };
const PASSWORD = "aip-roles-password";
const reports = {} as Record<"a" | "b", MigrationReport>;

async function admin<T>(fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: server.adminUrl });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

const loginUrl = (database: string, login: string) => {
  const url = new URL(databaseUrl(server, database, "aip_tests_data"));
  url.username = login;
  url.password = PASSWORD;
  return url.toString();
};

/** The SQLSTATE of connecting as `login` to `database` and calling its fleet status ('' when it works). */
async function attempt(database: string, login: string): Promise<string> {
  const client = new pg.Client({ connectionString: loginUrl(database, login) });
  client.on("error", () => {});
  try {
    await client.connect();
    await client.query(`SELECT ${FUNCTION_SET}.aip_fleet_status()`);
    return "";
  } catch (error) {
    return String((error as { code?: string }).code);
  } finally {
    await client.end().catch(() => {});
  }
}

beforeAll(async () => {
  for (const key of ["a", "b"] as const) {
    await admin((c) => c.query(`CREATE DATABASE ${names[key]}`));
    reports[key] = await withPgSession(databaseUrl(server, names[key]), (session) => migrate(session));
  }
  await admin(async (c) => {
    await c.query(loginRoleSql(logins.a, PASSWORD, "data", reports.a.roles));
    await c.query(loginRoleSql(logins.both, PASSWORD, "data", reports.a.roles));
    await c.query(loginRoleSql(logins.both, PASSWORD, "data", reports.b.roles));
  });
});

afterAll(async () => {
  await admin(async (c) => {
    for (const name of Object.values(names)) await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    for (const login of Object.values(logins)) await c.query(`DROP ROLE IF EXISTS ${login}`);
    for (const report of Object.values(reports)) for (const role of Object.values(report.roles)) await c.query(`DROP ROLE IF EXISTS ${role}`);
  });
});

describe("each registry database", () => {
  it("has group roles of its own, named after it", () => {
    expect(reports.a.roles).toEqual({ data: `${names.a}_aip_data`, control: `${names.a}_aip_control` });
    expect(reports.b.roles.data).not.toBe(reports.a.roles.data);
  });

  it("lets its own logins in, and another registry's logins neither connect nor execute", async () => {
    expect(await attempt(names.a, logins.a)).toBe("");
    // CONNECT is revoked from PUBLIC and granted to the database's own roles only.
    expect(await attempt(names.b, logins.a)).toBe("42501");
    // Even where someone grants CONNECT to PUBLIC again, the functions are the other roles'.
    await admin((c) => c.query(`GRANT CONNECT ON DATABASE ${names.b} TO PUBLIC`));
    try {
      expect(await attempt(names.b, logins.a)).toBe("42501");
    } finally {
      await admin((c) => c.query(`REVOKE CONNECT ON DATABASE ${names.b} FROM PUBLIC`));
    }
  });
});

describe("doctor", () => {
  it("warns when a login holds another registry's roles, and when PUBLIC may connect", async () => {
    await admin((c) => c.query(`GRANT CONNECT ON DATABASE ${names.b} TO PUBLIC`));
    try {
      const result = await runCli(["doctor", "--database-url", loginUrl(names.b, logins.both)], { env: cleanEnv() });
      expect(result.code, result.stderr).toBe(0);
      expect(result.stdout).toMatch(
        new RegExp(`^warn\\s+this login \\(${logins.both}\\) also holds ${reports.a.roles.data}: it may use other registry databases`, "m"),
      );
      expect(result.stdout).toMatch(/^warn\s+every role may connect to this database \(CONNECT is granted to PUBLIC\)/m);
    } finally {
      await admin((c) => c.query(`REVOKE CONNECT ON DATABASE ${names.b} FROM PUBLIC`));
    }
    const clean = await runCli(["doctor", "--database-url", loginUrl(names.a, logins.a)], { env: cleanEnv() });
    expect(clean.stdout).not.toMatch(/^warn/m);
  });

  it("warns when the server's role is a superuser", async () => {
    const result = await runCli(["doctor", "--database-url", databaseUrl(server, names.a)], { env: cleanEnv() });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toMatch(/^warn\s+this server's database role \S+ is a superuser: use a login role in this database's data role/m);
  });
});
