/**
 * A local PostgreSQL database prepared for the Worker (Node only; `npm run dev` and the Worker
 * benchmarks): created if missing, migrated by its owner, with login roles in the migration's
 * group roles, and connection strings that only the local Neon proxy serves (db.localtest.me).
 */
import pg from "pg";
import { migrate, type MigrationReport } from "../db/migrate.js";
import { withPgSession } from "../db/pg.js";

export interface LocalWorkerDatabase {
  /** Owner URL, as given. */
  ownerUrl: string;
  /** For the Worker: data and control role through the proxy (the owner's if roles could not be made). */
  dataUrl: string;
  controlUrl: string;
  /** Whether dedicated login roles are in use. */
  loginRoles: boolean;
  migration: MigrationReport;
}

export interface LoginRoleNames {
  data: string;
  control: string;
  password: string;
}

/** The connection string `url` as a Worker holds it: the proxy maps the fake host to PostgreSQL. */
export function viaLocalProxy(url: string): string {
  const parsed = new URL(url);
  parsed.hostname = "db.localtest.me";
  parsed.port = "5432";
  return parsed.toString();
}

async function withClient<T>(url: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

export async function prepareLocalWorkerDatabase(ownerUrl: string, roles: LoginRoleNames, log: (line: string) => void = () => {}): Promise<LocalWorkerDatabase> {
  const owner = new URL(ownerUrl);
  const name = decodeURIComponent(owner.pathname.slice(1));
  const maintenance = new URL(owner);
  maintenance.pathname = "/postgres";
  await withClient(maintenance.toString(), async (client) => {
    const { rowCount } = await client.query("SELECT 1 FROM pg_database WHERE datname = $1", [name]);
    if (!rowCount) {
      await client.query(`CREATE DATABASE ${client.escapeIdentifier(name)}`);
      log(`created database ${name}`);
    }
  });
  const migration = await withPgSession(ownerUrl, (session) => migrate(session));

  let loginRoles = true;
  try {
    await withClient(ownerUrl, async (client) => {
      for (const [login, group] of [[roles.data, "aip_registry_data"], [roles.control, "aip_registry_control"]] as const) {
        const role = client.escapeIdentifier(login);
        await client.query(
          `DO $$ BEGIN
             CREATE ROLE ${role} LOGIN PASSWORD ${client.escapeLiteral(roles.password)} IN ROLE ${group};
           EXCEPTION WHEN duplicate_object THEN NULL; END $$`,
        );
        await client.query(`ALTER ROLE ${role} SET statement_timeout = '10s'`);
      }
    });
  } catch (error) {
    log(`could not create login roles (${(error as Error).message}): the Worker uses the owner's credentials`);
    loginRoles = false;
  }
  const roleUrl = (login: string) => {
    const url = new URL(viaLocalProxy(ownerUrl));
    url.username = login;
    url.password = roles.password;
    return url.toString();
  };
  return {
    ownerUrl,
    dataUrl: loginRoles ? roleUrl(roles.data) : viaLocalProxy(ownerUrl),
    controlUrl: loginRoles ? roleUrl(roles.control) : viaLocalProxy(ownerUrl),
    loginRoles,
    migration,
  };
}
