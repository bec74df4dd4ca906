/**
 * The replica selection rules of src/registry/catalog-replica.ts with scripted executors and a fake clock
 * (the real standby cases are test/http/catalog-replica-bounds.test.ts): which answer is served,
 * how many statements each side gets, the revision floors and their bound, and the backoff.
 */
import { describe, expect, it } from "vitest";
import { CatalogReplica, RevisionFloors, primaryStatement, replicaStatement, type CatalogStatement } from "../../src/registry/catalog-replica.js";
import type { SqlExecutor } from "../../src/db/executor.js";

const STATEMENT: CatalogStatement = {
  columns: "catalog_revision::text AS revision, page AS text, not_modified",
  from: (after) => `aip_catalog_page($1::text, $2::jsonb, $3::bigint${after})`,
};

type Reply = { revision: number; lag?: number | null } | { error: Record<string, unknown> };

/** An executor answering from a script (the last reply repeats), counting its statements. */
function scripted(replies: Reply[]) {
  const texts: string[] = [];
  const executor: SqlExecutor & { texts: string[]; pending: (() => void)[]; hold: boolean } = {
    texts,
    pending: [],
    hold: false,
    async query<R>(text: string) {
      texts.push(text);
      if (executor.hold) await new Promise<void>((resolve) => executor.pending.push(resolve));
      const reply = replies.length > 1 ? replies.shift()! : replies[0]!;
      if ("error" in reply) throw Object.assign(new Error(String(reply.error.message ?? "failed")), reply.error);
      return [{ revision: String(reply.revision), text: "{}", not_modified: false, replay_lag_ms: reply.lag === undefined ? 0 : reply.lag }] as R[];
    },
  };
  return executor;
}

function clock(start = 1_000_000) {
  const c = { t: start, now: () => c.t };
  return c;
}

describe("replica selection", () => {
  it("sends today's statement to the primary and measures the lag first, laterally, on the replica", () => {
    expect(primaryStatement(STATEMENT)).toBe(
      "SELECT catalog_revision::text AS revision, page AS text, not_modified FROM aip_catalog_page($1::text, $2::jsonb, $3::bigint)",
    );
    const text = replicaStatement(STATEMENT);
    expect(text).toMatch(/pg_last_xact_replay_timestamp\(\)/);
    expect(text).toMatch(/pg_last_wal_receive_lsn\(\) <= pg_last_wal_replay_lsn\(\)/);
    expect(text).toMatch(/OFFSET 0\) replay CROSS JOIN LATERAL aip_catalog_page\(\$1::text, \$2::jsonb, \$3::bigint \+ replay\.zero\)$/);
  });

  it("serves a recent replica answer in one statement, and its lag says how old it is", async () => {
    const replica = scripted([{ revision: 5, lag: 300 }]);
    const primary = scripted([{ revision: 5 }]);
    const state = new CatalogReplica(replica, { maxLagMs: 1000 });
    const answer = await state.read("t1", STATEMENT, [], primary);
    expect(answer).toMatchObject({ from: "replica", lagMs: 300, row: { revision: "5" } });
    expect(answer.row).not.toHaveProperty("replay_lag_ms");
    expect([replica.texts.length, primary.texts.length]).toEqual([1, 0]);
    expect(state.status()).toMatchObject({ state: "ok", lag_ms: 300 });
  });

  it("reads the primary when the lag is above the bound or unknown", async () => {
    for (const lag of [1001, null]) {
      const replica = scripted([{ revision: 5, lag }]);
      const primary = scripted([{ revision: 6 }]);
      const state = new CatalogReplica(replica, { maxLagMs: 1000 });
      expect(await state.read("t1", STATEMENT, [], primary)).toMatchObject({ from: "primary", lagMs: 0, row: { revision: "6" } });
      expect([replica.texts.length, primary.texts.length]).toEqual([1, 1]);
      expect(state.status()).toMatchObject({ state: "lagging", fallbacks: { lagging: 1 } });
    }
  });

  it("never serves a tenant a revision older than one it served or read from the primary", async () => {
    const replica = scripted([{ revision: 7, lag: 0 }, { error: { code: "ARLAG" } }, { revision: 7, lag: 0 }, { revision: 8, lag: 0 }]);
    const primary = scripted([{ revision: 8 }]);
    const state = new CatalogReplica(replica, { maxLagMs: 1000 });
    expect((await state.read("t1", STATEMENT, [], primary)).row?.revision).toBe("7");
    // A validator of revision 8: the replica has not replayed it (ARLAG), the primary answers.
    expect(await state.read("t1", STATEMENT, [], primary)).toMatchObject({ from: "primary", row: { revision: "8" } });
    expect(state.floor("t1")).toBe(8);
    // The replica's 7 is now behind this tenant's floor; another tenant has none.
    expect(await state.read("t1", STATEMENT, [], primary)).toMatchObject({ from: "primary", row: { revision: "8" } });
    expect(state.status()).toMatchObject({ state: "behind_floor", fallbacks: { behind_request: 1, behind_floor: 1 } });
    expect(await state.read("t1", STATEMENT, [], primary)).toMatchObject({ from: "replica", row: { revision: "8" } });
    expect(state.status().state).toBe("ok");
  });

  it("passes on the replica's refusal of the request without asking the primary", async () => {
    const replica = scripted([{ error: { code: "AR000", detail: '{"code":"stale-cursor"}', message: "stale" } }]);
    const primary = scripted([{ revision: 1 }]);
    const state = new CatalogReplica(replica);
    await expect(state.read("t1", STATEMENT, [], primary)).rejects.toMatchObject({ code: "AR000" });
    expect(primary.texts).toEqual([]);
  });

  it("skips an unreachable replica for a jittered, doubling, capped backoff, then tries it with one request at a time", async () => {
    const c = clock();
    const replica = scripted([{ error: { code: "ECONNREFUSED", message: "connect ECONNREFUSED" } }]);
    const primary = scripted([{ revision: 3 }]);
    const state = new CatalogReplica(replica, { retryBaseMs: 100, retryMaxMs: 500, now: c.now, random: () => 1 });
    const delays: number[] = [];
    for (let n = 0; n < 5; n++) {
      expect(await state.read("t1", STATEMENT, [], primary)).toMatchObject({ from: "primary" });
      const status = state.status();
      expect(status).toMatchObject({ state: "unreachable", error: "connect ECONNREFUSED" });
      delays.push(status.retry_in_ms!);
      // Within the backoff: the replica is not asked at all.
      const asked = replica.texts.length;
      c.t += status.retry_in_ms! - 1;
      await state.read("t1", STATEMENT, [], primary);
      expect(replica.texts.length).toBe(asked);
      c.t += 1;
    }
    expect(delays).toEqual([100, 200, 400, 500, 500]);
    expect(state.status().fallbacks.unreachable).toBe(10);

    // Back: one request tries it; the others keep going to the primary meanwhile.
    const back = scripted([{ revision: 3, lag: 0 }]);
    const again = state.over(back);
    back.hold = true;
    const probe = again.read("t1", STATEMENT, [], primary);
    await Promise.resolve();
    expect(await again.read("t1", STATEMENT, [], primary)).toMatchObject({ from: "primary" });
    expect(back.texts.length).toBe(1);
    back.pending.shift()!();
    expect(await probe).toMatchObject({ from: "replica" });
    expect(state.status()).toMatchObject({ state: "ok" });
  });

  it("uses jitter: half the delay fixed, half random", async () => {
    const c = clock();
    const replica = scripted([{ error: { code: "57P03", message: "the database system is starting up" } }]);
    const state = new CatalogReplica(replica, { retryBaseMs: 1000, now: c.now, random: () => 0 });
    await state.read("t1", STATEMENT, [], scripted([{ revision: 1 }]));
    expect(state.status().retry_in_ms).toBe(500);
  });
});

describe("several keys in one statement", () => {
  const REVISIONS: CatalogStatement = {
    columns: "tenant_id, revision::text AS revision",
    from: () => "aip_catalog_revisions_now(ARRAY(SELECT jsonb_array_elements_text($1::jsonb)))",
  };
  /** An executor answering every tenant's revision from a map, with a replay lag. */
  const revisions = (map: Record<string, number>, lag = 0) => {
    const texts: string[] = [];
    return {
      texts,
      async query<R>(text: string) {
        texts.push(text);
        return Object.entries(map).map(([tenant_id, revision]) => ({ tenant_id, revision: String(revision), replay_lag_ms: lag })) as R[];
      },
    } satisfies SqlExecutor & { texts: string[] };
  };
  type Row = { tenant_id: string; revision: string };
  const keyOf = (row: Row) => row.tenant_id;

  it("serves the replica's rows only when every row is at least its own tenant's floor", async () => {
    const primary = revisions({ a: 4, b: 9 });
    const state = new CatalogReplica(revisions({ a: 3, b: 9 }), { maxLagMs: 1000 });
    // No floors yet: the replica's rows.
    expect(await state.readRows<Row>(keyOf, REVISIONS, [], primary)).toMatchObject({
      from: "replica",
      rows: [{ tenant_id: "a", revision: "3" }, { revision: "9" }],
    });
    expect([state.floor("a"), state.floor("b")]).toEqual([3, 9]);
    // Tenant a saw 4 on the primary: the replica's 3 for a sends the whole batch to the primary.
    await state.over(revisions({ a: 4 }, 2000)).readRows<Row>(keyOf, REVISIONS, [], primary);
    expect(state.floor("a")).toBe(4);
    const again = await state.readRows<Row>(keyOf, REVISIONS, [], primary);
    expect(again).toMatchObject({ from: "primary", rows: [{ revision: "4" }, { revision: "9" }] });
    expect(state.status().fallbacks).toMatchObject({ lagging: 1, behind_floor: 1 });
    expect(primary.texts).toEqual([
      "SELECT tenant_id, revision::text AS revision FROM aip_catalog_revisions_now(ARRAY(SELECT jsonb_array_elements_text($1::jsonb)))",
      "SELECT tenant_id, revision::text AS revision FROM aip_catalog_revisions_now(ARRAY(SELECT jsonb_array_elements_text($1::jsonb)))",
    ]);
  });
});

describe("revision floors", () => {
  it("forget the least recently used key beyond their bound, and then admit it only from a snapshot as new as what was forgotten", () => {
    const floors = new RevisionFloors(2);
    floors.observe("a", 5, 100);
    floors.observe("b", 6, 200);
    floors.observe("c", 7, 300);
    expect(floors.floor("a")).toBeNull();
    expect(floors.admits("a", 1, 99)).toBe(false);
    expect(floors.admits("a", 1, 100)).toBe(true);
    expect(floors.admits("b", 5, 10_000)).toBe(false);
    expect(floors.admits("b", 6, 0)).toBe(true);
    // A floor never goes down.
    floors.observe("b", 4, 400);
    expect(floors.floor("b")).toBe(6);
  });
});
