/**
 * A local PostgreSQL database prepared for the Worker (Node only; `npm run dev` and the Worker
 * benchmarks): created if missing, migrated by its owner, with login roles in the migration's
 * group roles, and connection strings that only the local Neon proxy serves (db.localtest.me).
 */
import { createHash, createHmac, pbkdf2Sync, randomBytes } from "node:crypto";
import pg from "pg";
import { migrate, type MigrationReport } from "../src/db/migrate.js";
import { withPgSession } from "../src/db/pg.js";

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
function viaLocalProxy(url: string): string {
  const parsed = new URL(url);
  parsed.hostname = "db.localtest.me";
  parsed.port = "5432";
  return parsed.toString();
}

/**
 * The SCRAM-SHA-256 verifier PostgreSQL stores for `password` (RFC 5802/7677, 4096 iterations),
 * as `psql`'s \password sends it: the server, its statement log and pg_stat_activity never see
 * the password itself.
 */
export function scramVerifier(password: string, salt: Buffer = randomBytes(16), iterations = 4096): string {
  const salted = pbkdf2Sync(password.normalize("NFKC"), salt, iterations, 32, "sha256");
  const clientKey = createHmac("sha256", salted).update("Client Key").digest();
  const storedKey = createHash("sha256").update(clientKey).digest();
  const serverKey = createHmac("sha256", salted).update("Server Key").digest();
  return `SCRAM-SHA-256$${iterations}:${salt.toString("base64")}$${storedKey.toString("base64")}:${serverKey.toString("base64")}`;
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

export async function prepareLocalWorkerDatabase(
  ownerUrl: string,
  roles: LoginRoleNames,
  log: (line: string) => void = () => {},
): Promise<LocalWorkerDatabase> {
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
      // This database's own group roles (src/db/migrate.ts), which the migration names.
      for (const [login, group] of [
        [roles.data, migration.roles.data],
        [roles.control, migration.roles.control],
      ] as const) {
        const role = client.escapeIdentifier(login);
        await client.query(
          `DO $$ BEGIN
             CREATE ROLE ${role} LOGIN;
           EXCEPTION WHEN duplicate_object THEN NULL; END $$`,
        );
        await client.query(`GRANT ${client.escapeIdentifier(group)} TO ${role}`);
        // Every run: a role left from an earlier run gets today's password, not whatever it had.
        await client.query(`ALTER ROLE ${role} LOGIN PASSWORD ${client.escapeLiteral(scramVerifier(roles.password))}`);
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
