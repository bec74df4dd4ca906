import { FUNCTION_SET } from "../../src/db/schema-version.js";

/**
 * What the global setup tells test files about the PostgreSQL server (plain data: it crosses
 * from the setup process to test workers, including workerd).
 */
export interface PgServerInfo {
  /** Superuser URL (any database); test files derive per-database URLs from it. */
  adminUrl: string;
  /** `embedded`: started by the test setup (tests may restart it); `external`: DATABASE_URL's. */
  kind: "embedded" | "external";
  /** Data directory of an embedded server (for restart tests). */
  dataDir: string | null;
  maxConnections: number;
  runId?: string;
  template?: string;
  /** The template's group roles (its clones share them): the login roles below are members. */
  roles?: { data: string; control: string };
}

/** Login roles the setup creates, by the plane whose group role of the template they join (test server only). */
export const LOGIN_ROLES = { aip_tests_control: "control", aip_tests_data: "data" } as const;
export const TEST_ROLE_PASSWORD = "aip-test-password";
/** The template's group roles: aip_tests_aip_data, aip_tests_aip_control (migrate's rolePrefix). */
export const TEST_ROLE_PREFIX = "aip_tests";

/**
 * A database's URL: the owner's (superuser), or a login role's. The owner's sessions find this
 * build's functions unqualified (search_path), as an operator's psql session does after
 * `SET search_path = <set>, public`: assertions call them directly. Login roles' sessions do not,
 * as a server's do not: the code under test must name its set itself (src/registry/registry.ts).
 */
export function databaseUrl(info: PgServerInfo, database: string, login?: keyof typeof LOGIN_ROLES): string {
  const url = new URL(info.adminUrl);
  url.pathname = `/${database}`;
  if (login) {
    url.username = login;
    url.password = TEST_ROLE_PASSWORD;
    return url.toString();
  }
  return withSetOnPath(url.toString());
}

/**
 * `url` for a session that calls this build's functions unqualified: the owner's assertions, or
 * a runtime role's psql session as an operator or an attacker would open it (tests of privileges).
 */
export function withSetOnPath(url: string): string {
  const parsed = new URL(url);
  parsed.searchParams.set("options", `-c search_path=${FUNCTION_SET},public`);
  return parsed.toString();
}
