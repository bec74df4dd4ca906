/**
 * Run as root from a directory others cannot enter (a clone under /root, any `mktemp -d`), the
 * embedded server's OS user cannot reach the installed binaries; the test support then runs a
 * copy it can reach (fixtures/embedded-postgres.ts). Only root can arrange this: an ordinary
 * user's run skips the file (CI runs it as root).
 */
import { spawnSync } from "node:child_process";
import { chmod, cp, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { embeddedBinaries, runnableBinaries, serverUser, startEmbeddedServer } from "../../fixtures/embedded-postgres.js";

const root = process.getuid?.() === 0;

describe.runIf(root)("as root, binaries in a private directory", () => {
  let privateDir: string;
  let installed: string;
  let serverDir: string;
  beforeAll(async () => {
    privateDir = await mkdtemp(join(tmpdir(), "aip-private-"));
    await chmod(privateDir, 0o700);
    // Where a private checkout would have them.
    installed = join(privateDir, "native");
    await cp(embeddedBinaries() as string, installed, { recursive: true, verbatimSymlinks: true });
    serverDir = await mkdtemp(join(tmpdir(), "aip-server-"));
    await chmod(serverDir, 0o755);
  });
  afterAll(async () => {
    await rm(privateDir, { recursive: true, force: true });
    await rm(serverDir, { recursive: true, force: true });
  });

  it("are out of the server user's reach there (the EACCES this guards against)", () => {
    const user = serverUser();
    expect(user?.name).toBe("postgres");
    const run = spawnSync(join(installed, "bin", "initdb"), ["--version"], { uid: user?.uid, gid: user?.gid, cwd: "/" });
    expect((run.error as NodeJS.ErrnoException | undefined)?.code).toBe("EACCES");
  });

  it("are copied where that user can run them", async () => {
    const user = serverUser();
    const usable = await runnableBinaries(installed, serverDir, user);
    expect(usable).toBe(join(serverDir, "pgsql"));
    const run = spawnSync(join(usable, "bin", "initdb"), ["--version"], { uid: user?.uid, gid: user?.gid, cwd: "/", encoding: "utf8" });
    expect(run.stdout).toMatch(/^initdb \(PostgreSQL\) \d+/);
  });

  it("are used in place when that user can reach them", async () => {
    const reachable = embeddedBinaries() as string;
    const user = serverUser();
    const inPlace = spawnSync(join(reachable, "bin", "postgres"), ["--version"], { uid: user?.uid, gid: user?.gid, cwd: "/" }).status === 0;
    expect(await runnableBinaries(reachable, serverDir, user)).toBe(inPlace ? reachable : join(serverDir, "pgsql"));
  });
});

it("starts a server that answers, whoever runs the tests and wherever the checkout is", async () => {
  const server = await startEmbeddedServer({ dirPrefix: "aip-embedded-", postgresFlags: ["-c", "max_connections=10"] });
  try {
    expect(server.osUser?.name ?? null).toBe(root ? "postgres" : null);
    const client = new pg.Client({ connectionString: server.adminUrl });
    await client.connect();
    const { rows } = await client.query<{ user: string }>("SELECT current_user AS user");
    await client.end();
    expect(rows[0]?.user).toBe("postgres");
  } finally {
    await server.stop();
  }
}, 60_000);
