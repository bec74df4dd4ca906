/**
 * Concurrent publications over separate connections: the exclusive publication lock serializes
 * them, so every successful batch gets its own catalog revision, revisions strictly increase in
 * commit order, and no batch's changes are lost. Competing updates of one record admit exactly one
 * winner.
 */
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPgPool, pgExecutor } from "../../src/db/pg.js";
import { RegistryError } from "../../src/registry/errors.js";
import { Registry } from "../../src/registry/registry.js";
import { useTestDatabase } from "../support/database.js";
import { binding, connectorType, instance, policy, replica, version } from "../../fixtures/records.js";
import { catalogRevision, refusal } from "../support/assertions.js";
import { catalogPage } from "../../fixtures/catalog-reads.js";

const PUBLISHERS = 16;
const BATCHES = 5;

const db = useTestDatabase();
let pool: pg.Pool;
let registry: Registry;

beforeAll(async () => {
  pool = createPgPool(db.controlUrl, { max: PUBLISHERS });
  registry = new Registry({ data: pgExecutor(db.dataPool), control: pgExecutor(pool) });
});
afterAll(async () => {
  await pool?.end();
});

/**
 * Publish, retrying a publication that timed out waiting for the publication lock (lock_timeout,
 * a retryable `storage` refusal that committed nothing): a loaded test machine can make a queue
 * of publishers wait longer than the function's lock timeout, and retrying is what callers do.
 */
async function publish(changes: Record<string, unknown>[]) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await registry.publish(changes);
    } catch (error) {
      if (!(error instanceof RegistryError && error.code === "storage" && error.retryable) || attempt === 20) throw error;
    }
  }
}

/** Publisher p's batch b: its own type and version first, then an instance, a binding and a replica per batch. */
async function batch(p: number, b: number) {
  const typeId = `ctype_conc_${p}`;
  const versionId = `cver_conc_${p}`;
  const instanceId = `cinst_conc_${p}_${b}`;
  const changes: Record<string, unknown>[] = [];
  if (b === 0) changes.push(connectorType(typeId), await version(versionId, typeId, [`cap:conc.${p}`]));
  changes.push(
    instance(instanceId, typeId, versionId, `tenant-conc-${p}`),
    binding(`tenant-conc-${p}`, `cap:conc.${p}`, instanceId, { priority: b }),
    policy(`quota:conc-${p}-${b}`),
    replica(`crepl_conc_${p}_${b}`, instanceId, versionId),
  );
  return changes;
}

describe("concurrent publishers", () => {
  it("give every successful batch its own strictly increasing revision and lose no change", async () => {
    const start = await catalogRevision(db.owner);
    const batches = await Promise.all(Array.from({ length: PUBLISHERS }, (_, p) => Promise.all(Array.from({ length: BATCHES }, (_, b) => batch(p, b)))));
    const revisions = await Promise.all(
      batches.map(async (own) => {
        const seen: number[] = [];
        for (const changes of own) seen.push((await publish(changes)).catalog_revision);
        return seen;
      }),
    );

    // Each publisher saw its own batches commit in order, at strictly increasing revisions.
    for (const seen of revisions) {
      for (let i = 1; i < seen.length; i++) expect(seen[i]).toBeGreaterThan(seen[i - 1]!);
    }
    // No two batches share a revision, and together they account for every advance.
    const all = revisions.flat().sort((a, b) => a - b);
    expect(new Set(all).size).toBe(PUBLISHERS * BATCHES);
    expect(all).toEqual(Array.from({ length: PUBLISHERS * BATCHES }, (_, i) => start + 1 + i));
    expect(await catalogRevision(db.owner)).toBe(start + PUBLISHERS * BATCHES);

    // Every record of every batch is present.
    const count = async (table: string) => Number((await db.owner.query(`SELECT count(*) AS n FROM ${table}`)).rows[0].n);
    expect(await count("aip_connector_types")).toBe(PUBLISHERS);
    expect(await count("aip_connector_versions")).toBe(PUBLISHERS);
    expect(await count("aip_connector_instances")).toBe(PUBLISHERS * BATCHES);
    expect(await count("aip_capability_bindings")).toBe(PUBLISHERS * BATCHES);
    expect(await count("aip_admission_policies")).toBe(PUBLISHERS * BATCHES);
    expect(await count("aip_connector_replicas")).toBe(PUBLISHERS * BATCHES);
    for (let p = 0; p < PUBLISHERS; p++) {
      const page = await registry.adminBindings(`tenant-conc-${p}`);
      expect(page.bindings.map((b) => b.instance_id)).toEqual(Array.from({ length: BATCHES }, (_, b) => `cinst_conc_${p}_${b}`));
    }
  });

  it("let exactly one of many competing updates of one record win, and keep the winner's content", async () => {
    await registry.publish([policy("quota:conc-contested", { revision: 1 })]);
    const start = await catalogRevision(db.owner);
    const outcomes = await Promise.allSettled(
      Array.from({ length: PUBLISHERS }, (_, p) => publish([policy("quota:conc-contested", { revision: 2, max_tenant_in_flight: 100 + p })])),
    );
    const winners = outcomes.flatMap((o, p) => (o.status === "fulfilled" ? [p] : []));
    expect(winners).toHaveLength(1);
    for (const o of outcomes) {
      if (o.status === "rejected") expect(o.reason).toMatchObject({ code: "conflict" });
    }
    const stored = await registry.adminGet("admission_policy", "quota:conc-contested");
    expect(stored).toMatchObject({ revision: 2, max_tenant_in_flight: 100 + winners[0]! });
    expect(await catalogRevision(db.owner)).toBe(start + 1);
  });

  it("apply identical concurrent re-puts once: one batch advances the revision, the others change nothing", async () => {
    // The type is created first and the long admission after it, so that without the
    // publication lock the other publishers would race to create the same type.
    const typeId = `ctype_conc_same`;
    const caps = Array.from({ length: 60 }, (_, i) => `cap:conc.same.${i}`);
    const changes = [connectorType(typeId), await version("cver_conc_same", typeId, caps)];
    const start = await catalogRevision(db.owner);
    const results = await Promise.all(Array.from({ length: 8 }, () => publish(changes)));
    expect(results.filter((r) => r.changed > 0)).toHaveLength(1);
    expect(new Set(results.map((r) => r.catalog_revision))).toEqual(new Set([start + 1]));
    expect(await catalogRevision(db.owner)).toBe(start + 1);
  });

  it("keep readers on one publication while publishers run", async () => {
    const base = PUBLISHERS + 2;
    const typeId = `ctype_conc_${base}`;
    const versionId = `cver_conc_${base}`;
    await registry.publish([connectorType(typeId), await version(versionId, typeId, [`cap:conc.${base}`])]);
    let publishing = true;
    const readers = Array.from({ length: 4 }, async () => {
      let last = -1;
      while (publishing) {
        const page = await catalogPage(db.registry, null, {});
        expect(page.catalog_revision).toBeGreaterThanOrEqual(last);
        last = page.catalog_revision;
      }
    });
    const publishers = Array.from({ length: 8 }, async (_, p) => {
      for (let b = 0; b < 5; b++) {
        await publish([instance(`cinst_conc_r_${p}_${b}`, typeId, versionId, `tenant-conc-r-${p}`)]);
      }
    });
    await Promise.all(publishers);
    publishing = false;
    await Promise.all(readers);
    // A publication that fails under contention leaves no trace either.
    const before = await catalogRevision(db.owner);
    expect((await refusal(registry.publish([instance("cinst_conc_r_0_0", typeId, versionId, "tenant-other")]))).code).toBe("conflict");
    expect(await catalogRevision(db.owner)).toBe(before);
  });
});
