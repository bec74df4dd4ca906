/**
 * Less under the exclusive publication lock (issue 24.5): a version's manifest (aip_manifests, by
 * digest) and capability definitions are content-addressed and immutable, so a publication writes
 * them before it takes the exclusive lock, in its own transaction; under the lock it writes only
 * what the revision makes visible. On real PostgreSQL, with second sessions:
 * - what the publication holds while it waits for the lock: the content rows, not the version;
 * - two publications bringing conflicting contracts under one capability ID at once: one wins, the
 *   other is refused, and nothing of it remains;
 * - a batch refused after its content was written, and a dry run, leave nothing behind;
 * - migration 0007 moves stored manifests into aip_manifests.
 */
import { randomBytes } from "node:crypto";
import pg from "pg";
import { beforeAll, describe, expect, inject, it } from "vitest";
import { loadMigrations } from "../../src/db/sql-files.js";
import { useTestDatabase } from "../support/database.js";
import { connectorType, instance, version } from "../../fixtures/records.js";
import { expectHealthy } from "../support/invariants.js";
import { registryState } from "../support/registry-state.js";
import { databaseUrl } from "../support/server.js";
import { refusal } from "../support/assertions.js";

const db = useTestDatabase();
beforeAll(async () => {
  await db.registry.publish([connectorType("ctype_content")]);
});

const count = async (sql: string, params: unknown[] = []) => Number((await db.owner.query<{ n: string }>(sql, params)).rows[0]?.n);

/** Holds the shared publication lock (as a catalog read does) in another session until release(). */
async function holdCatalog() {
  const holder = await db.owner.connect();
  await holder.query("BEGIN");
  await holder.query("SELECT pg_advisory_xact_lock_shared(hashtext(current_database()), 1095323715)");
  return {
    release: async () => {
      await holder.query("ROLLBACK");
      holder.release();
    },
  };
}

/** The pids of publications waiting for the exclusive publication lock. */
async function waitingPublishers(): Promise<number[]> {
  const { rows } = await db.owner.query<{ pid: number }>(
    `SELECT l.pid FROM pg_locks l
     WHERE l.locktype = 'advisory' AND NOT l.granted AND l.objid = 1095323715 AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
  );
  return rows.map((r) => r.pid);
}

async function until<T>(probe: () => Promise<T | undefined>, what: string): Promise<T> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

describe("content-addressed rows before the exclusive lock", () => {
  it("a publication waiting for the lock has written its manifest and definitions, not its version", async () => {
    const held = await holdCatalog();
    let publishing: Promise<unknown> | undefined;
    try {
      const change = await version("cver_content_wait", "ctype_content", ["cap:content.wait.a", "cap:content.wait.b"]);
      publishing = db.registry.publish([change]);
      const [pid] = await until(async () => ((await waitingPublishers()).length ? await waitingPublishers() : undefined), "the publication to queue");
      const { rows } = await db.owner.query<{ relname: string }>(
        `SELECT c.relname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
         WHERE l.pid = $1 AND l.granted AND l.mode = 'RowExclusiveLock' AND c.relname LIKE 'aip\\_%' AND c.relkind = 'r'`,
        [pid],
      );
      const written = rows.map((r) => r.relname).sort();
      expect(written).toEqual(expect.arrayContaining(["aip_capability_definitions", "aip_manifests"]));
      expect(written).not.toContain("aip_connector_versions");
      expect(written).not.toContain("aip_version_capabilities");
      // Invisible to everyone else until the publication commits.
      expect(await count("SELECT count(*) AS n FROM aip_manifests WHERE manifest_digest = $1", [change.manifest_digest])).toBe(0);
      expect(await count("SELECT count(*) AS n FROM aip_capability_definitions WHERE capability_id LIKE 'cap:content.wait.%'")).toBe(0);
    } finally {
      await held.release();
    }
    await publishing;
    const stored = (await db.registry.adminGet("version", "cver_content_wait")) as Record<string, unknown>;
    expect((stored.manifest as { capabilities: unknown[] }).capabilities).toHaveLength(2);
    await expectHealthy(db.registry);
  });

  it("two publications of conflicting contracts under one capability ID at once: one is admitted, the other refused without a trace", async () => {
    const contract = (description: string) => ({ id: "cap:content.race", description });
    const first = await version("cver_content_race_1", "ctype_content", [contract("one contract"), "cap:content.race.only1"]);
    const second = await version("cver_content_race_2", "ctype_content", [contract("another contract"), "cap:content.race.only2"]);
    const before = await registryState(db.owner);
    const held = await holdCatalog();
    let outcomes: PromiseSettledResult<unknown>[];
    try {
      const a = db.registry.publish([first]);
      // The second brings the same capability ID: its insert waits for the first's transaction.
      await until(async () => ((await waitingPublishers()).length === 1 ? true : undefined), "the first publication to queue");
      const b = db.registry.publish([second]);
      await until(
        async () =>
          (await count(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%aip_publish%'",
          )) >= 2
            ? true
            : undefined,
        "the second publication to wait",
      );
      const settled = Promise.allSettled([a, b]);
      await held.release();
      outcomes = await settled;
    } catch (error) {
      await held.release();
      throw error;
    }
    expect(outcomes[0]?.status).toBe("fulfilled");
    expect(outcomes[1]?.status).toBe("rejected");
    const error = await refusal(Promise.reject((outcomes[1] as PromiseRejectedResult).reason));
    expect(error.code).toBe("conflict");
    expect(error.extensions).toMatchObject({ capability_id: "cap:content.race" });
    // The winner's contract is stored; of the loser nothing: not its other definition, not its manifest.
    const { rows } = await db.owner.query("SELECT capability ->> 'description' AS d FROM aip_capability_definitions WHERE capability_id = 'cap:content.race'");
    expect(rows).toEqual([{ d: "one contract" }]);
    expect(await count("SELECT count(*) AS n FROM aip_capability_definitions WHERE capability_id = 'cap:content.race.only2'")).toBe(0);
    expect(await count("SELECT count(*) AS n FROM aip_manifests WHERE manifest_digest = $1", [second.manifest_digest])).toBe(0);
    expect((await registryState(db.owner)).catalog_revision).toBe(before.catalog_revision + 1);
    await expectHealthy(db.registry);
  });

  it("a batch refused after its content was written, and a dry run, leave nothing behind", async () => {
    const change = await version("cver_content_refused", "ctype_content", ["cap:content.refused"]);
    const before = await registryState(db.owner);
    // Refused under the lock, after the content step: an instance of a type that does not exist.
    const error = await refusal(db.registry.publish([change, instance("cinst_content_x", "ctype_content_missing", "cver_content_refused", "tenant-c")]));
    expect(error.extensions.change_index).toBe(1);
    expect(await registryState(db.owner)).toEqual(before);
    const dry = await db.registry.publish([change], { dryRun: true });
    expect(dry.results[0]?.outcome).toBe("created");
    expect(await registryState(db.owner)).toEqual(before);
  });

  it("versions with the same manifest share its row; a re-admission changes nothing", async () => {
    const one = await version("cver_content_same_1", "ctype_content", ["cap:content.same"], { version: "1.0.0" });
    const two = await version("cver_content_same_2", "ctype_content", ["cap:content.same"], { version: "1.0.1" });
    expect(two.manifest_digest).toBe(one.manifest_digest);
    await db.registry.publish([one, two]);
    expect(await count("SELECT count(*) AS n FROM aip_manifests WHERE manifest_digest = $1", [one.manifest_digest])).toBe(1);
    const before = await registryState(db.owner);
    expect((await db.registry.publish([one])).results[0]?.outcome).toBe("unchanged");
    expect(await registryState(db.owner)).toEqual(before);
  });
});

describe("migration 0007", () => {
  it("moves every stored manifest into aip_manifests, one row per digest, and drops the column", async () => {
    const server = inject("pgServer");
    const name = `aip_t_${server.runId}_mf_${randomBytes(4).toString("hex")}`;
    const admin = new pg.Client({ connectionString: server.adminUrl });
    await admin.connect();
    await admin.query(`CREATE DATABASE ${name} TEMPLATE template0`);
    const client = new pg.Client({ connectionString: databaseUrl(server, name) });
    await client.connect();
    try {
      const migrations = await loadMigrations();
      const index = migrations.findIndex((m) => m.name === "0007_manifests");
      expect(index).toBeGreaterThan(0);
      for (const migration of migrations.slice(0, index)) await client.query(migration.sql);
      // Versions as the schema before 0007 held them: two sharing a manifest, one with its own.
      await client.query("INSERT INTO aip_connector_types (type_id, name, owner, enabled) VALUES ('ctype_m', 'M', 'org:m', true)");
      for (const [id, digest, manifest] of [
        ["cver_m_1", `sha256:${"1".repeat(64)}`, { capabilities: [], profiles: ["one"] }],
        ["cver_m_2", `sha256:${"1".repeat(64)}`, { capabilities: [], profiles: ["one"] }],
        ["cver_m_3", `sha256:${"3".repeat(64)}`, { capabilities: [], profiles: ["three"] }],
      ] as const) {
        await client.query(
          `INSERT INTO aip_connector_versions (version_id, type_id, version, status, artifact_digest, manifest_digest, manifest, attestation, supply_chain_qualified)
           VALUES ($1, 'ctype_m', $1, 'active', $1, $2, $3, '{}', true)`,
          [id, digest, JSON.stringify(manifest)],
        );
      }
      await client.query(migrations[index]!.sql);
      const manifests = await client.query("SELECT manifest_digest, manifest FROM aip_manifests ORDER BY 1");
      expect(manifests.rows).toEqual([
        { manifest_digest: `sha256:${"1".repeat(64)}`, manifest: { capabilities: [], profiles: ["one"] } },
        { manifest_digest: `sha256:${"3".repeat(64)}`, manifest: { capabilities: [], profiles: ["three"] } },
      ]);
      const columns = await client.query(
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'aip_connector_versions' AND column_name = 'manifest'",
      );
      expect(columns.rowCount).toBe(0);
      await expect(
        client.query(
          `INSERT INTO aip_connector_versions (version_id, type_id, version, status, artifact_digest, manifest_digest, attestation, supply_chain_qualified)
           VALUES ('cver_m_4', 'ctype_m', '4', 'active', 'x4', 'sha256:nowhere', '{}', true)`,
        ),
      ).rejects.toMatchObject({ code: "23503" });
    } finally {
      await client.end();
      await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => {});
      await admin.end();
    }
  });
});
