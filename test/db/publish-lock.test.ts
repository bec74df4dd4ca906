/**
 * Publication validates before it locks: every stateless check and canonicalization runs before
 * the exclusive publication lock is taken, so a slow admission (a manifest of megabytes) never
 * holds up resolvers and catalog readers, and a change refused on its own merits is refused
 * without queueing for the lock at all.
 *
 * The proof needs no clock: a second session holds the shared publication lock (as a catalog read
 * or a new-route decision does) for the whole test. A publication that took the exclusive lock
 * before validating would wait for it and give up after its lock_timeout (busy, 503); one that
 * validates first answers the refusal at once.
 */
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { useTestDatabase } from "../support/database.js";
import { attestation, binding, connectorType, instance, publishSimpleFleet, replica, version } from "../../fixtures/records.js";
import { registryState } from "../support/registry-state.js";
import { refusal } from "../support/assertions.js";

const db = useTestDatabase();
let reader: pg.PoolClient;

beforeAll(async () => {
  await publishSimpleFleet(db.registry, { prefix: "plk" });
  reader = await db.owner.connect();
  await reader.query("BEGIN");
  await reader.query("SELECT pg_advisory_xact_lock_shared(hashtext(current_database()), 1095323715)");
});
afterAll(async () => {
  await reader?.query("ROLLBACK");
  reader?.release();
});

/** A manifest of about `bytes` canonical bytes: one capability per 200 KiB of schema text. */
function bigCapabilities(prefix: string, bytes: number) {
  const count = Math.max(1, Math.ceil(bytes / (200 * 1024)));
  return Array.from({ length: count }, (_, n) => ({
    id: `cap:${prefix}.${n}`,
    name: `Big ${n}`,
    kind: "tool",
    input_schema: { type: "object", description: "x".repeat(Math.floor(bytes / count) - 200) },
  }));
}

describe("while a reader holds the shared publication lock", () => {
  it("refuses changes that fail their own checks at once, without waiting for the exclusive lock", async () => {
    const before = await registryState(db.owner);
    const big = await version("cver_plk_big", "ctype_plk", bigCapabilities("plk", 3 * 1024 * 1024));
    const cases: [Record<string, unknown>, string][] = [
      // A 3 MiB manifest whose declared digest is wrong: found only by canonicalizing it.
      [{ ...big, manifest_digest: `sha256:${"0".repeat(64)}` }, "admission"],
      [await version("cver_plk_eva", "ctype_plk", ["cap:plk.eva"], { attestation: attestation("org:acme", { license_policy_status: "failed" }) }), "admission"],
      [{ ...replica("crepl_plk_bad", "cinst_plk_tenant-a", "cver_plk_1"), endpoint: "ftp://nowhere" }, "invalid"],
      [{ ...binding("tenant-a", "cap:plk.search", "cinst_plk_tenant-a"), priority: -1 }, "invalid"],
      [{ ...instance("cinst_plk_x", "ctype_plk", "cver_plk_1", "tenant-a"), status: "sleeping" }, "invalid"],
      [{ op: "put_admission_policy", policy_ref: "policy:plk", revision: 0 }, "invalid"],
      [{ op: "make_coffee" }, "invalid"],
    ];
    for (const [change, code] of cases) {
      // The refused change comes after a valid one: the whole batch is refused, naming it.
      const error = await refusal(db.registry.publish([connectorType("ctype_plk_ok"), change]));
      expect(error.code, error.message).toBe(code);
      expect(error.extensions.change_index).toBe(1);
    }
    expect(await registryState(db.owner)).toEqual(before);
  });

  it("queues only once its changes are valid, and then for the lock alone (it gives up after lock_timeout)", async () => {
    const before = await registryState(db.owner);
    const error = await refusal(db.registry.publish([connectorType("ctype_plk_queued")]));
    expect(error.code).toBe("busy");
    expect(error.message).toMatch(/publication lock/);
    expect(await registryState(db.owner)).toEqual(before);
  }, 20_000);
});
