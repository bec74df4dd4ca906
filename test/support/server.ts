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
}

/** Login roles the setup creates for the migration's group roles (test server only). */
export const LOGIN_ROLES = { aip_test_control: "aip_registry_control", aip_test_data: "aip_registry_data" } as const;
export const TEST_ROLE_PASSWORD = "aip-test-password";

export function databaseUrl(info: PgServerInfo, database: string, login?: keyof typeof LOGIN_ROLES): string {
  const url = new URL(info.adminUrl);
  url.pathname = `/${database}`;
  if (login) {
    url.username = login;
    url.password = TEST_ROLE_PASSWORD;
  }
  return url.toString();
}
