/**
 * The tenant's catalog change feed (functions/31_catalog_changes.sql): complete against a full
 * re-list at every revision of a randomized publication sequence, "not modified" exactly when the
 * tenant's revision has not moved, and changes-expired (410) exactly below what trimming kept.
 */
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ChangeHistorySchedule } from "../../src/catalog/change-history.js";
import { runMaintenanceCycle } from "../../src/maintenance/cycle.js";
import type { CatalogChanges } from "../../src/registry/registry.js";
import { createTestDatabase, type TestDatabase } from "../support/database.js";
import pg from "pg";
import { expectRefusal } from "../support/assertions.js";
import { capturePlans, tenantWalk } from "../support/catalog.js";
import { binding, connectorType, instance, version } from "../../fixtures/records.js";

let db: TestDatabase;
const TENANT = "tenant-feed";
const OTHER = "tenant-feed-other";
const CAPS = Array.from({ length: 8 }, (_, n) => `cap:feed.${n}`);
/** Two instances of the tenant on one type; v1 and v2 implement every capability, with other profiles. */
const INSTANCES = ["cinst_feed_0", "cinst_feed_1"];

beforeAll(async () => {
  db = await createTestDatabase();
  await db.registry.publish([
    connectorType("ctype_feed"),
    await version("cver_feed_1", "ctype_feed", CAPS, { profiles: ["aip.native.http.v1"] }),
    await version("cver_feed_2", "ctype_feed", CAPS, { profiles: ["aip.mcp.v1"] }),
    ...INSTANCES.map((id) => instance(id, "ctype_feed", "cver_feed_1", TENANT)),
    instance("cinst_feed_other", "ctype_feed", "cver_feed_1", OTHER),
    // Instance 0 binds the first six capabilities, instance 1 the last four (two overlap).
    ...CAPS.slice(0, 6).map((cap) => binding(TENANT, cap, INSTANCES[0]!)),
    ...CAPS.slice(4).map((cap) => binding(TENANT, cap, INSTANCES[1]!)),
    ...CAPS.map((cap) => binding(OTHER, cap, "cinst_feed_other")),
  ]);
});
afterAll(() => db?.close());

/**
 * The tenant's whole catalog, by capability ID (definitions as JSON text), and what it sees per
 * profile (a rollout to a version of other profiles changes that alone).
 */
async function list(): Promise<{ revision: number; catalog: Map<string, string>; profiles: string }> {
  const walk = await tenantWalk(db.registry, TENANT, { limit: 3 });
  const revision = walk.pages[0]!.catalog_revision;
  const profiles = [];
  for (const profile of ["aip.native.http.v1", "aip.mcp.v1"]) {
    const filtered = await tenantWalk(db.registry, TENANT, { profile });
    expect(filtered.pages[0]!.catalog_revision).toBe(revision);
    profiles.push(filtered.ids);
  }
  return {
    revision,
    catalog: new Map(walk.pages.flatMap((page) => page.capabilities.map((d) => [String(d.capability.id), JSON.stringify(d)]))),
    profiles: JSON.stringify(profiles),
  };
}

/** Every page of the feed after `since` (null: not modified). */
async function feed(since: number, limit?: number, tenant = TENANT): Promise<{ revision: number; changes: CatalogChanges["changes"] } | null> {
  let page = await db.registry.catalogChanges(tenant, { since, ...(limit ? { limit } : {}) });
  if (!page) return null;
  const changes = [...page.changes];
  while (page.next_cursor) {
    page = (await db.registry.catalogChanges(tenant, { since, cursor: page.next_cursor, ...(limit ? { limit } : {}) }))!;
    changes.push(...page.changes);
  }
  return { revision: page.catalog_revision, changes };
}

type Step =
  | { kind: "binding"; instance: number; cap: number }
  | { kind: "instance"; instance: number }
  | { kind: "rollout"; instance: number }
  | { kind: "qualification" }
  | { kind: "type" }
  | { kind: "other" };

const step = fc.oneof(
  { weight: 4, arbitrary: fc.record({ kind: fc.constant("binding" as const), instance: fc.integer({ min: 0, max: 1 }), cap: fc.integer({ min: 0, max: 7 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("instance" as const), instance: fc.integer({ min: 0, max: 1 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("rollout" as const), instance: fc.integer({ min: 0, max: 1 }) }) },
  { weight: 1, arbitrary: fc.constant({ kind: "qualification" as const }) },
  { weight: 1, arbitrary: fc.constant({ kind: "type" as const }) },
  { weight: 2, arbitrary: fc.constant({ kind: "other" as const }) },
);

describe("the change feed", () => {
  it("brings a listing from every earlier revision to a full re-list, in any randomized publication sequence", async () => {
    // Publication state, so that every step is a real change.
    const bound = new Map<string, { enabled: boolean; revision: number }>();
    for (const cap of CAPS.slice(0, 6)) bound.set(`0|${cap}`, { enabled: true, revision: 1 });
    for (const cap of CAPS.slice(4)) bound.set(`1|${cap}`, { enabled: true, revision: 1 });
    const instances = INSTANCES.map(() => ({ enabled: true, version: "cver_feed_1", revision: 1 }));
    let qualified = true;
    let typeEnabled = true;
    let otherRevision = 1;
    const snapshots = [await list()];

    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 10, maxLength: 10 }), async (steps) => {
        // Each run first restores whatever hides everything, then changes the catalog for sure
        // (instance 0 alone binds the first capability), then goes at random.
        const restore: Step[] = [
          ...(typeEnabled ? [] : [{ kind: "type" as const }]),
          ...(qualified ? [] : [{ kind: "qualification" as const }]),
          ...(instances[0]!.enabled ? [] : [{ kind: "instance" as const, instance: 0 }]),
          { kind: "binding", instance: 0, cap: 0 },
        ];
        for (const s of [...restore, ...(steps as Step[])]) {
          let change: Record<string, unknown>;
          if (s.kind === "binding") {
            const key = `${s.instance}|${CAPS[s.cap]}`;
            const state = bound.get(key) ?? { enabled: false, revision: 0 };
            const next = { enabled: !state.enabled, revision: state.revision + 1 };
            bound.set(key, next);
            change = binding(TENANT, CAPS[s.cap]!, INSTANCES[s.instance]!, { enabled: next.enabled, policy_revision: next.revision });
          } else if (s.kind === "instance" || s.kind === "rollout") {
            const state = instances[s.instance]!;
            if (s.kind === "instance") state.enabled = !state.enabled;
            else state.version = state.version === "cver_feed_1" ? "cver_feed_2" : "cver_feed_1";
            state.revision++;
            change = instance(INSTANCES[s.instance]!, "ctype_feed", state.version, TENANT, state.revision, state.enabled ? {} : { status: "disabled" });
          } else if (s.kind === "qualification") {
            qualified = !qualified;
            change = { op: "set_version_qualification", id: "cver_feed_1", supply_chain_qualified: qualified, reason: "feed test" };
          } else if (s.kind === "type") {
            typeEnabled = !typeEnabled;
            change = { op: "set_connector_type_enabled", id: "ctype_feed", enabled: typeEnabled };
          } else {
            otherRevision++;
            change = binding(OTHER, CAPS[otherRevision % CAPS.length]!, "cinst_feed_other", {
              priority: otherRevision,
              enabled: otherRevision % 2 === 0,
              policy_revision: otherRevision,
            });
          }
          await db.registry.publish([change]);
          const now = await list();
          const previous = snapshots.at(-1)!;
          // The tenant's revision moves exactly when what it sees changed.
          const same = JSON.stringify([...previous.catalog]) === JSON.stringify([...now.catalog]) && previous.profiles === now.profiles;
          if (same) expect(now.revision).toBe(previous.revision);
          else expect(now.revision).toBeGreaterThan(previous.revision);
          snapshots.push(now);

          // From every earlier listing, the feed reaches the re-list (paged one by one, and whole).
          for (const from of snapshots) {
            for (const limit of [1, undefined]) {
              const answer = await feed(from.revision, limit);
              if (from.revision === now.revision) {
                expect(answer).toBeNull();
                continue;
              }
              expect(answer, `since ${from.revision}`).not.toBeNull();
              expect(answer!.revision).toBe(now.revision);
              const applied = new Map(from.catalog);
              for (const c of answer!.changes) {
                expect(c.revision).toBeGreaterThan(from.revision);
                expect(c.revision).toBeLessThanOrEqual(now.revision);
                if (c.change === "removed") {
                  expect(c.definition).toBeNull();
                  expect(now.catalog.has(c.capability_id)).toBe(false);
                  applied.delete(c.capability_id);
                } else {
                  // "changed" only for what the listing already had.
                  if (c.change === "changed") expect(from.catalog.has(c.capability_id), `${c.capability_id} changed since ${from.revision}`).toBe(true);
                  if (!from.catalog.has(c.capability_id)) expect(c.change).toBe("added");
                  applied.set(c.capability_id, JSON.stringify(c.definition));
                }
              }
              expect(new Map([...applied].sort()), `since ${from.revision}`).toEqual(new Map([...now.catalog].sort()));
            }
          }
        }
      }),
      { numRuns: 3 },
    );
    // The sequence really changed the tenant's catalog, and not only that.
    expect(new Set(snapshots.map((s) => s.revision)).size).toBeGreaterThan(3);
  });

  it("answers not modified at the tenant's revision and after it, and is invalid past the catalog revision", async () => {
    const { revision } = await list();
    expect(await db.registry.catalogChanges(TENANT, { since: revision })).toBeNull();
    // Another tenant's publication moves the catalog revision, not this tenant's: still nothing.
    const other = await db.registry.publish([binding(OTHER, CAPS[0]!, "cinst_feed_other", { priority: 99, policy_revision: 1000 })]);
    expect(other.catalog_revision).toBeGreaterThan(revision);
    expect(await db.registry.catalogChanges(TENANT, { since: revision })).toBeNull();
    expect(await db.registry.catalogChanges(TENANT, { since: other.catalog_revision })).toBeNull();
    await expectRefusal(db.registry.catalogChanges(TENANT, { since: other.catalog_revision + 1 }), "invalid");
    // A tenant that never saw anything, and a read without a tenant: revision 0, nothing changed.
    expect(await db.registry.catalogChanges("tenant-feed-nobody", { since: 0 })).toBeNull();
    expect(await db.registry.catalogChanges(null, { since: 0 })).toBeNull();
  });

  it("is changes-expired (410) exactly below the history trimming kept", async () => {
    const tenant = "tenant-feed-expiry";
    const caps = ["cap:feedexp.a", "cap:feedexp.b"];
    const created = await db.registry.publish([
      connectorType("ctype_feedexp"),
      await version("cver_feedexp", "ctype_feedexp", caps),
      instance("cinst_feedexp", "ctype_feedexp", "cver_feedexp", tenant),
      ...caps.map((cap) => binding(tenant, cap, "cinst_feedexp")),
    ]);
    // Remove one capability (a tombstone); then another tenant publishes.
    const removed = await db.registry.publish([binding(tenant, caps[0]!, "cinst_feedexp", { enabled: false, policy_revision: 2 })]);
    const later = await db.registry.publish([binding(OTHER, CAPS[1]!, "cinst_feed_other", { priority: 98, policy_revision: 1001 })]);
    const removal = { capability_id: caps[0], change: "removed", revision: removed.catalog_revision, definition: null };
    expect((await feed(created.catalog_revision, undefined, tenant))!.changes).toEqual([removal]);

    // Keeping the last two revisions keeps this removal (older ones may go).
    await db.registry.trimCatalogChanges(later.catalog_revision - removed.catalog_revision + 1, 86_400, 10_000);
    expect((await feed(created.catalog_revision, undefined, tenant))!.changes).toEqual([removal]);
    // Keeping the last one only does not.
    const trimmed = await db.registry.trimCatalogChanges(1, 86_400, 10_000);
    expect(trimmed.trimmed).toBeGreaterThan(0);
    expect(trimmed.backlog).toBe(false);
    const expired = await expectRefusal(db.registry.catalogChanges(tenant, { since: created.catalog_revision }), "changes-expired");
    expect(expired.extensions).toMatchObject({
      since: created.catalog_revision,
      oldest_since: removed.catalog_revision,
      catalog_revision: removed.catalog_revision,
    });
    expect(expired.status).toBe(410);
    // From the oldest answerable revision on the feed answers (here: nothing changed since).
    expect(await db.registry.catalogChanges(tenant, { since: removed.catalog_revision })).toBeNull();
    // By age as well: a removal older than the seconds kept goes whatever the revisions.
    const again = await db.registry.publish([binding(tenant, caps[1]!, "cinst_feedexp", { enabled: false, policy_revision: 2 })]);
    await db.owner.query("UPDATE aip_catalog_changes SET changed_at = changed_at - interval '2 hours' WHERE tenant_id = $1 AND revision = $2", [
      tenant,
      again.catalog_revision,
    ]);
    expect((await db.registry.trimCatalogChanges(1_000_000, 3600, 10_000)).trimmed).toBe(1);
    await expectRefusal(db.registry.catalogChanges(tenant, { since: removed.catalog_revision }), "changes-expired");
    expect(await db.registry.catalogChanges(tenant, { since: again.catalog_revision })).toBeNull();
    // Bounded batches, oldest first: a full batch says there is more; the newest revision stays.
    while ((await db.registry.trimCatalogChanges(1, 86_400, 10_000)).backlog);
    for (const [n, cap] of caps.entries()) {
      await db.registry.publish([binding(tenant, cap, "cinst_feedexp", { enabled: true, policy_revision: 3 + n })]);
    }
    const last = await db.registry.publish([binding(tenant, caps[0]!, "cinst_feedexp", { enabled: false, policy_revision: 20 })]);
    let batches = 0;
    for (;;) {
      const batch = await db.registry.trimCatalogChanges(1, 86_400, 1);
      if (!batch.backlog) {
        expect(batch).toEqual({ trimmed: 0, backlog: false });
        break;
      }
      expect(batch.trimmed).toBe(1);
      batches++;
    }
    expect(batches).toBeGreaterThanOrEqual(2);
    const left = await db.owner.query<{ revision: string }>("SELECT revision::text FROM aip_catalog_changes");
    expect(left.rows.map((r) => Number(r.revision))).toEqual([last.catalog_revision]);
    await expectRefusal(db.registry.trimCatalogChanges(1, 86_400, 0), "invalid");
    await expectRefusal(db.registry.trimCatalogChanges(0, 86_400, 10), "invalid");
  });

  it("is trimmed by lease maintenance cycles, at most once per pause", async () => {
    const tenant = "tenant-feed-maintenance";
    const created = await db.registry.publish([
      connectorType("ctype_feedmnt"),
      await version("cver_feedmnt", "ctype_feedmnt", ["cap:feedmnt.a"]),
      instance("cinst_feedmnt", "ctype_feedmnt", "cver_feedmnt", tenant),
      binding(tenant, "cap:feedmnt.a", "cinst_feedmnt"),
    ]);
    await db.registry.publish([binding(tenant, "cap:feedmnt.a", "cinst_feedmnt", { enabled: false, policy_revision: 2 })]);
    let now = 1_000_000;
    const schedule = new ChangeHistorySchedule({ keepRevisions: 1, keepSeconds: 86_400, batchSize: 1, maxBatches: 1000, pauseMs: 60_000 });
    const cycle = await runMaintenanceCycle(db.registry, undefined, undefined, () => now, schedule);
    expect(cycle.changes?.trimmed).toBeGreaterThan(0);
    expect(cycle.changes?.backlog).toBe(false);
    await expectRefusal(db.registry.catalogChanges(tenant, { since: created.catalog_revision - 1 }), "changes-expired");
    // Within the pause the next cycle does not trim; after it, it does.
    expect((await runMaintenanceCycle(db.registry, undefined, undefined, () => now, schedule)).changes).toBeUndefined();
    now += 60_000;
    expect((await runMaintenanceCycle(db.registry, undefined, undefined, () => now, schedule)).changes).toMatchObject({ backlog: false });
  });

  it("answers an unchanged tenant's poll from the tenant's revision alone", async () => {
    const { revision } = await list();
    // No feed row is read: the poll's plans touch the tenant revisions' primary key, not the feed.
    const client = new pg.Client({ connectionString: db.ownerUrl });
    await client.connect();
    try {
      const plans = (await capturePlans(client, "SELECT aip_catalog_changes($1, $2::jsonb)", [TENANT, JSON.stringify({ since: revision })])).join("\n");
      expect(plans).toMatch(/aip_tenant_catalog_revisions/);
      expect(plans).not.toMatch(/aip_catalog_changes_/);
      expect(plans).not.toMatch(/Seq Scan/);
    } finally {
      await client.end();
    }
  });
});
