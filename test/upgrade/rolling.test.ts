/**
 * Every release rolls out under load with no failed request (docs/upgrades.md): a server of the
 * running build serves gateways while the new build migrates the same database, a server of the
 * new build starts, traffic moves to it, the old one gets SIGTERM, and finalize removes the old
 * build's functions. The old server stays ready (/readyz 200) until its SIGTERM, whatever the new
 * build installed beside it.
 *
 * Three rollouts: from the previous release (releases.json, checked out from git history) to this
 * build; and from this build to a build of it that edits one function body, and to one that
 * renames the settlement function (a signature change), as hotfixes do.
 */
import { execFileSync } from "node:child_process";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterAll, describe, expect, inject, it } from "vitest";
import { packageRoot } from "../../src/db/sql-files.js";
import { loginRoleSql } from "../../fixtures/login-roles.js";
import { databaseUrl } from "../support/server.js";
import { editedBuild, functionSetOf, previousRelease, type Build } from "../support/releases.js";
import { startNeonProxy } from "../../dev/neon-proxy.js";
import { pollReadiness, publishFleet, startServer, startTraffic, startWorker, type ServerProcess } from "../support/rollout.js";

const server = inject("pgServer");
const PASSWORD = "aip-rollout-password";
const thisBuild: Build = {
  version: (JSON.parse(readFileSync(join(packageRoot, "package.json"), "utf8")) as { version: string }).version,
  dir: packageRoot,
  server: join(packageRoot, "dist/entry/node.js"),
  cli: join(packageRoot, "bin/aip-registry.mjs"),
};
const previous = previousRelease();
if ("unavailable" in previous) console.warn(`rollout from the previous release skipped: ${previous.unavailable}`);

/** Replaces `from` by `to` in one file of a build (the edit must happen: the test is about it). */
function replaceIn(dir: string, file: string, from: string | RegExp, to: string): void {
  const path = join(dir, file);
  const text = readFileSync(path, "utf8");
  const edited = text.replace(typeof from === "string" ? new RegExp(from.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"), "g") : from, to);
  if (edited === text) throw new Error(`${file}: nothing to replace`);
  writeFileSync(path, edited);
}

const edits: { name: string; build: () => Build }[] = [
  {
    name: "edits one function body",
    build: () =>
      editedBuild("body", (dir) =>
        replaceIn(dir, "functions/60_settlement.sql", "indistinguishable from a missing one.", "indistinguishable from a missing one (a hotfix's edit)."),
      ),
  },
  {
    name: "renames the settlement function",
    build: () =>
      editedBuild("rename", (dir) => {
        for (const file of ["functions/60_settlement.sql", "functions/90_grants.sql", "src/registry/registry.ts"]) {
          replaceIn(dir, file, "aip_settle_route(", "aip_settle_route_v2(");
        }
      }),
  },
];

const cleanups: (() => Promise<void> | void)[] = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

async function admin<T>(fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: server.adminUrl });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/** `build`'s CLI, as an operator runs it from its checkout. */
function cli(build: Build, ...args: string[]): string {
  return execFileSync(process.execPath, [build.cli, ...args], { cwd: build.dir, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
}

/** The group roles a build's servers log in through, after it migrated `database`. */
async function groupRoles(url: string): Promise<{ data: string; control: string }> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query("SELECT to_regclass('aip_schema_roles') IS NOT NULL AS has");
    if (!rows[0].has) return { data: "aip_registry_data", control: "aip_registry_control" };
    return (await client.query("SELECT data_role AS data, control_role AS control FROM aip_schema_roles")).rows[0];
  } finally {
    await client.end();
  }
}

/** Login roles for a build's servers on `database`, members of its group roles; `host` as a Worker has it. */
async function logins(database: string, tag: string, roles: { data: string; control: string }, runtime: Runtime) {
  const names = { data: `aip_roll_${tag}_data`, control: `aip_roll_${tag}_control` };
  await admin(async (client) => {
    await client.query(loginRoleSql(names.data, PASSWORD, "data", roles));
    await client.query(loginRoleSql(names.control, PASSWORD, "control", roles));
  });
  cleanups.push(() => admin(async (client) => Promise.all(Object.values(names).map((name) => client.query(`DROP ROLE IF EXISTS ${name}`)))).then(() => {}));
  const url = (login: string) => {
    const u = new URL(databaseUrl(server, database, "aip_tests_data"));
    u.username = login;
    u.password = PASSWORD;
    // A Worker reaches PostgreSQL through the local Neon proxy, which serves this fake host.
    if (runtime === "worker") {
      u.hostname = "db.localtest.me";
      u.port = "5432";
    }
    return u.toString();
  };
  return { DATABASE_URL: url(names.data), CONTROL_DATABASE_URL: url(names.control) };
}

type Runtime = "node" | "worker";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The rollout from `from` to `to` on a fresh database, on Node servers or Workers (wrangler dev,
 * through the local Neon proxy); returns what the clients and the probes saw. Both builds serve
 * side by side for a while (a rolling update's overlap; a Worker's gradual deployment at 50 %).
 */
async function rollout(from: Build, to: Build, tag: string, runtime: Runtime = "node") {
  const database = `aip_t_${server.runId}_roll_${tag}_${randomBytes(2).toString("hex")}`;
  await admin((client) => client.query(`CREATE DATABASE ${database}`));
  const ownerUrl = (() => {
    const u = new URL(databaseUrl(server, database));
    u.searchParams.delete("options");
    return u.toString();
  })();
  cleanups.push(async () => {
    await admin(async (client) => {
      await client.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
      await client.query(`DROP ROLE IF EXISTS ${database}_aip_data`);
      await client.query(`DROP ROLE IF EXISTS ${database}_aip_control`);
    });
  });
  const servers: ServerProcess[] = [];
  cleanups.push(async () => {
    for (const s of servers) await s.stop();
  });
  let start = startServer;
  if (runtime === "worker") {
    const pg = new URL(server.adminUrl);
    const proxy = await startNeonProxy({ pgHost: pg.hostname, pgPort: Number(pg.port || 5432) });
    cleanups.push(() => proxy.close());
    start = (build, env) =>
      startWorker(build, {
        ...env,
        NEON_LOCAL_PROXY: proxy.url,
        NEON_TRANSPORT: "http",
        LEASE_MAINTENANCE_INTERVAL_MS: "0",
        ALLOW_REGISTRATION_WITHOUT_EVIDENCE: "true",
      });
  }

  cli(from, "migrate", "--database-url", ownerUrl);
  const old = await start(from, await logins(database, `${tag}_old`, await groupRoles(ownerUrl), runtime));
  servers.push(old);
  const fleet = await publishFleet(old.url, `roll${tag}`);
  const traffic = await startTraffic(old.url, fleet);
  const readiness = pollReadiness(old.url);
  await sleep(1500);

  // The new build migrates under load, then its first server starts beside the old one.
  const migrated = cli(to, "migrate", "--database-url", ownerUrl);
  await sleep(1500);
  const next = await start(to, await logins(database, `${tag}_new`, await groupRoles(ownerUrl), runtime));
  servers.push(next);

  // Both serve; then traffic moves to the new server, the old one finishes what it has and gets SIGTERM.
  traffic.target = [old.url, next.url];
  await sleep(2000);
  traffic.target = next.url;
  // A load balancer stops sending before the old server stops (a Node server drains, a Worker
  // version retired at 0 % is drained by the platform; wrangler dev is just killed).
  await traffic.drained(old.url);
  const oldReadiness = await readiness.stop();
  const oldExit = await old.stop();
  await sleep(1000);

  // Finalize once the old server is gone (its last report is older than the window by then).
  await sleep(1500);
  const finalized = JSON.parse(cli(to, "migrate", "--finalize", "--seen-within", "1s", "--json", "--database-url", ownerUrl)) as { droppedSets: string[] };
  await sleep(1000);
  const report = await traffic.stop();
  const nextReady = await fetch(`${next.url}/readyz`).then((r) => r.status);
  await next.stop();
  return { report, oldReadiness, oldExit, migrated, finalized, nextReady, runtime, urls: { old: old.url, next: next.url } };
}

function expectClean(result: Awaited<ReturnType<typeof rollout>>, from: Build) {
  expect(result.report.failures, `${JSON.stringify(result.urls)}\n${result.report.failures.slice(0, 5).join("\n")}`).toEqual([]);
  // Both servers served a share of the traffic; the old one was ready at every probe until SIGTERM.
  expect(result.report.served[result.urls.old]).toBeGreaterThan(20);
  expect(result.report.served[result.urls.next]).toBeGreaterThan(20);
  expect(result.oldReadiness.notReady).toEqual([]);
  expect(result.oldReadiness.probes).toBeGreaterThan(10);
  // A Node server stops gracefully (wrangler dev's exit is wrangler's own).
  if (result.runtime === "node") expect(result.oldExit).toBe(0);
  // Finalize dropped the old build's set, and the new server stayed ready through it.
  expect(result.finalized.droppedSets).toEqual([functionSetOf(from) ?? "public"]);
  expect(result.nextReady).toBe(200);
}

describe("a rolling upgrade under load loses no request", () => {
  it.runIf(!("unavailable" in previous))("from the previous release to this build", { timeout: 240_000 }, async () => {
    const from = previous as Build;
    const result = await rollout(from, thisBuild, "prev");
    expectClean(result, from);
  });

  it.runIf(!("unavailable" in previous))("from the previous release to this build, on Workers (both versions live at once)", { timeout: 300_000 }, async () => {
    const from = previous as Build;
    const result = await rollout(from, thisBuild, "wprev", "worker");
    expectClean(result, from);
  });

  it("from this build to one that renames the settlement function, on Workers (both versions live at once)", { timeout: 300_000 }, async () => {
    const to = (edits[1] as (typeof edits)[number]).build();
    cleanups.push(() => rmSync(to.dir, { recursive: true, force: true }));
    const result = await rollout(thisBuild, to, "wrename", "worker");
    expectClean(result, thisBuild);
  });

  for (const edit of edits) {
    it(`from this build to one that ${edit.name}`, { timeout: 240_000 }, async () => {
      const to = edit.build();
      cleanups.push(() => rmSync(to.dir, { recursive: true, force: true }));
      expect(functionSetOf(to)).not.toBe(functionSetOf(thisBuild));
      const result = await rollout(thisBuild, to, edit.name.split(" ")[0] as string);
      expectClean(result, thisBuild);
    });
  }
});
