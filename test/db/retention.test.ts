/**
 * Route retention (functions/82_retention.sql) against the real database: which routes a batch
 * removes (released ones past the window, oldest first, never a reserved one), the watermarks, the
 * export pages and the export watermark, and the retry contract: a retry within the window gets
 * its route, and a resolve of any action whose route may have been removed (an `act_` + UUIDv7 in
 * any spelling by its time, any other ID by the record its removal left) is refused
 * `route-expired` instead of being routed afresh, including when the removal commits while a
 * reacquisition is under way. The policy itself (who may set it) is test/db/retention-policy.test.ts.
 */
import pg from "pg";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import type { RouteAssignment } from "../../src/schemas.js";
import { useTestDatabase } from "../support/database.js";
import { expectHealthy } from "../support/invariants.js";
import { actionMintedAt, DAY_MS, readExportPages, setPolicy, settledDaysAgo, stored, watermarks } from "../support/retention.js";
import { counters, publishRoutingFleet, replicaState, type RoutingFleet } from "../support/routing-fleet.js";
import { refusal as refused } from "../support/assertions.js";

const db = useTestDatabase();
let fleet: RoutingFleet;
beforeAll(async () => {
  fleet = await publishRoutingFleet(db.registry, {
    prefix: "ret",
    tenant: "tenant-ret",
    policy: { max_tenant_in_flight: 1000, max_tenant_retry_in_flight: 100 },
    instances: [{ name: "i", replicas: [{ name: "r", capacity: 1000 }] }],
  });
});
afterEach(() => expectHealthy(db.registry));

let n = 0;
const plainAction = () => `act_ret_${(++n).toString().padStart(5, "0")}`;
const resolve = (actionId: string) => db.registry.resolveRoute(actionId, fleet.tenant, fleet.capability);
const settle = (a: RouteAssignment) => db.registry.settleRoute(a.action_id, a.tenant_id, a, "completed");
const remove = (limit = 1000, requireExport = false) => db.registry.removeSettledRoutes(30, requireExport, limit);

/** Routes created and released, their settlement moved `days` into the past. */
async function released(count: number, days: number, id: () => string = plainAction): Promise<RouteAssignment[]> {
  const routes: RouteAssignment[] = [];
  for (let i = 0; i < count; i++) {
    const { assignment } = await resolve(id());
    await settle(assignment);
    routes.push(assignment);
  }
  await settledDaysAgo(
    db.owner,
    routes.map((r) => r.action_id),
    days,
  );
  return routes;
}

/** Nothing else left due, so that each test starts from a clean slate. */
async function drain(): Promise<void> {
  while ((await remove(10_000)).removed > 0);
}

describe("a retention batch", () => {
  it("removes released routes settled before the window, oldest first, up to its limit, and nothing else", async () => {
    await drain();
    const old = await released(4, 45);
    const older = await released(2, 60);
    const recent = await released(2, 29);
    const { assignment: reserved } = await resolve(plainAction());
    // A route reserved again after an old settlement is not released: it stays.
    const [retried] = await released(1, 50);
    expect((await resolve(retried!.action_id)).outcome).toBe("reacquired");

    const first = await remove(3);
    expect(first.removed).toBe(3);
    // The two settled 60 days ago went first, then one of the 45-day-old ones.
    const left = await stored(
      db.owner,
      [...older, ...old].map((r) => r.action_id),
    );
    expect(older.some((r) => left.has(r.action_id))).toBe(false);
    expect(old.filter((r) => left.has(r.action_id))).toHaveLength(3);

    const second = await remove(1000);
    expect(second.removed).toBe(3);
    const all = [...old, ...older, ...recent, reserved, retried!].map((r) => r.action_id);
    expect([...(await stored(db.owner, all))].sort()).toEqual([...recent, reserved, retried!].map((r) => r.action_id).sort());
    // The oldest released route left is 29 days old: due in a day.
    const due = Date.parse(second.next_due as string);
    expect(due).toBeGreaterThan(Date.now() + 0.9 * DAY_MS);
    expect(due).toBeLessThan(Date.now() + 1.1 * DAY_MS);

    // The watermark: every removed route was settled before it, and it is a millisecond past the latest.
    const { removed_before } = await watermarks(db.owner);
    expect(second.removed_before).toBe(removed_before?.toISOString());
    const latest = Date.now() - 45 * DAY_MS;
    expect(removed_before!.getTime()).toBeGreaterThan(latest - 60_000);
    expect(removed_before!.getTime()).toBeLessThan(latest + 60_000);

    await settle(reserved);
    await settle((await db.registry.getRoute(retried!.action_id, fleet.tenant))!.assignment);
  });

  it("a removed route is gone for its tenant: GET and settlement answer not-found", async () => {
    await drain();
    const [route] = await released(1, 31);
    expect((await remove()).removed).toBe(1);
    expect(await db.registry.getRoute(route!.action_id, fleet.tenant)).toBeNull();
    expect((await refused(settle(route!))).code).toBe("not-found");
  });

  it("refuses a window under a day and a limit outside [1, 10000], changing nothing", async () => {
    const [route] = await released(1, 40);
    for (const days of [0, 36_501]) {
      const error = await refused(db.registry.removeSettledRoutes(days, false, 10));
      expect(error.code).toBe("invalid");
      expect(error.extensions.errors).toEqual([expect.objectContaining({ field: "retention_days" })]);
    }
    for (const limit of [0, 10_001]) expect((await refused(db.registry.removeSettledRoutes(30, false, limit))).code).toBe("invalid");
    expect((await stored(db.owner, [route!.action_id])).size).toBe(1);
    await drain();
  });
});

describe("the export watermark", () => {
  afterEach(() => setPolicy(db.owner, 30, false));

  it("with require-export, nothing goes before an export is recorded, then only what it covered", async () => {
    await drain();
    const exportedPart = await released(2, 50);
    const newer = await released(2, 40);
    const before = await remove(1000, true);
    expect(before).toMatchObject({ removed: 0, exported_before: null, next_due: null, require_export: true });

    // An export of everything settled up to 45 days ago: its pages read, then recorded.
    const cut = new Date(Date.now() - 45 * DAY_MS).toISOString();
    const read = await readExportPages(db.registry, { settledBefore: cut });
    expect(read.map((r) => r.assignment.action_id).sort()).toEqual(exportedPart.map((r) => r.action_id).sort());
    const recorded = await db.registry.recordRouteExport(null, cut);
    expect(recorded.exported_before).toBe(cut);
    const after = await remove(1000, true);
    expect(after.removed).toBe(2);
    const left = await stored(
      db.owner,
      [...exportedPart, ...newer].map((r) => r.action_id),
    );
    expect([...left].sort()).toEqual(newer.map((r) => r.action_id).sort());
    // The requirement is the database's now: a batch asking without it still waits for an export...
    expect(await remove(1000, false)).toMatchObject({ removed: 0, require_export: true });
    // ...until the owner drops it; then the window alone decides.
    await setPolicy(db.owner, 30, false);
    expect((await remove(1000, false)).removed).toBe(2);
  });

  it("moves forward only from where the last export ended, never back, and at most to an hour ago", async () => {
    const { exported_before } = await watermarks(db.owner);
    const mark = exported_before!.getTime();
    // A gap between the watermark and where this export starts: conflict, naming the watermark.
    const gap = await refused(db.registry.recordRouteExport(new Date(mark + 60_000).toISOString(), new Date(mark + 120_000).toISOString()));
    expect(gap.code).toBe("conflict");
    expect(gap.extensions.exported_before).toBe(exported_before!.toISOString());
    // An earlier bound does not move it back.
    expect((await db.registry.recordRouteExport(null, new Date(mark - DAY_MS).toISOString())).exported_before).toBe(exported_before!.toISOString());
    // A contiguous export moves it, once its pages are read; one up to now stops an hour ago.
    const now = Date.now();
    await readExportPages(db.registry, { settledAfter: exported_before!.toISOString(), settledBefore: new Date(now + DAY_MS).toISOString() });
    const moved = await db.registry.recordRouteExport(exported_before!.toISOString(), new Date(now + DAY_MS).toISOString());
    const at = Date.parse(moved.exported_before as string);
    expect(at).toBeLessThanOrEqual(now - 3_600_000 + 5_000);
    expect(at).toBeGreaterThan(now - 3_600_000 - 60_000);
    for (const [after, before] of [
      [null, "infinity"],
      ["2026-01-02T00:00:00Z", "2026-01-01T00:00:00Z"],
    ] as const) {
      expect((await refused(db.registry.recordRouteExport(after, before))).code).toBe("invalid");
    }
  });
});

describe("export pages", () => {
  it("page through released routes in (settled_at, action_id) order within [after, before), every tenant's, with reservation state", async () => {
    await drain();
    const routes = await released(7, 20);
    // Four with one settlement time (the action orders them), then three a day later, a millisecond apart.
    const at = Date.now() - 21 * DAY_MS;
    for (const [i, route] of routes.entries()) {
      const settledAt = i < 4 ? at : at + DAY_MS + i;
      await db.owner.query("UPDATE aip_route_assignments SET settled_at = $2 WHERE action_id = $1", [route.action_id, new Date(settledAt)]);
    }
    const { assignment: reserved } = await resolve(plainAction());
    const before = new Date(Date.now() - 10 * DAY_MS).toISOString();
    // From 22 days ago: the routes earlier tests left (29 days old) stay out.
    const after = new Date(Date.now() - 22 * DAY_MS).toISOString();
    const pages = [];
    let cursor: string | undefined;
    do {
      const page = await db.registry.routesPage({ settledBefore: before, settledAfter: after, limit: 3, ...(cursor ? { cursor } : {}) });
      expect(page.settled_before).toBe(before);
      pages.push(page);
      cursor = page.next_cursor ?? undefined;
    } while (cursor);
    expect(pages.map((p) => p.routes.length)).toEqual([3, 3, 1]);
    const exported = pages.flatMap((p) => p.routes);
    const expected = [
      ...routes
        .slice(0, 4)
        .map((r) => r.action_id)
        .sort(),
      ...routes.slice(4).map((r) => r.action_id),
    ];
    expect(exported.map((r) => r.assignment.action_id)).toEqual(expected);
    for (const route of exported) {
      expect(route).toMatchObject({ reserved: false, last_settlement: "completed" });
      // The record as resolve returned it, byte for byte.
      const original = routes.find((r) => r.action_id === route.assignment.action_id);
      expect(JSON.stringify(route.assignment)).toBe(JSON.stringify(original));
    }
    expect(exported.some((r) => r.assignment.action_id === reserved.action_id)).toBe(false);

    // [after, before): the four settled 21 days ago are before the lower bound.
    const later = await db.registry.routesPage({ settledBefore: before, settledAfter: new Date(Date.now() - 20.5 * DAY_MS).toISOString() });
    expect(later.routes.map((r) => r.assignment.action_id)).toEqual(routes.slice(4).map((r) => r.action_id));
    expect(later.next_cursor).toBeNull();
    await settle(reserved);
  });

  it("applies an upper bound an hour ago at the latest, and refuses malformed input", async () => {
    const page = await db.registry.routesPage({ settledBefore: new Date(Date.now() + DAY_MS).toISOString(), limit: 1 });
    expect(Date.parse(page.settled_before)).toBeLessThanOrEqual(Date.now() - 3_600_000 + 5_000);
    for (const cursor of ["nope", "[1,2]", '["x","y"]', "5", '["2026-01-01T00:00:00Z"]']) {
      const error = await refused(db.registry.routesPage({ settledBefore: "2026-01-01T00:00:00Z", cursor }));
      expect(error.code).toBe("invalid");
      expect(error.extensions.errors).toEqual([expect.objectContaining({ field: "cursor" })]);
    }
    expect((await refused(db.registry.routesPage({ settledBefore: "2026-01-01T00:00:00Z", settledAfter: "2026-02-01T00:00:00Z" }))).code).toBe("invalid");
  });
});

describe("the retry contract", () => {
  beforeAll(async () => {
    // From no removal at all, whatever the tests above removed.
    await db.owner.query("UPDATE aip_route_retention SET removed_before = NULL");
  });

  it("a retry within the window reacquires the same route; after removal an act_ + UUIDv7 action is refused, not routed afresh", async () => {
    await drain();
    const minted = Date.now() - 40 * DAY_MS;
    const within = await released(1, 10, () => actionMintedAt(minted));
    const retry = await resolve(within[0]!.action_id);
    expect(retry.outcome).toBe("reacquired");
    expect(JSON.stringify(retry.assignment)).toBe(JSON.stringify(within[0]));
    await settle(retry.assignment);

    const [gone] = await released(1, 35, () => actionMintedAt(minted));
    expect((await remove()).removed).toBe(1);
    const { removed_before } = await watermarks(db.owner);
    const routesBefore = await db.owner.query("SELECT count(*)::int AS n FROM aip_route_assignments");
    const counted = await counters(db.owner);
    const refusal = await refused(resolve(gone!.action_id));
    expect(refusal.code).toBe("route-expired");
    expect(refusal.status).toBe(410);
    expect(refusal.extensions).toEqual({ action_id: gone!.action_id, removed_before: removed_before!.toISOString() });
    // Nothing was written.
    expect((await db.owner.query("SELECT count(*)::int AS n FROM aip_route_assignments")).rows).toEqual(routesBefore.rows);
    expect(await counters(db.owner)).toEqual(counted);

    // The registry cannot tell a first resolve of an action minted that long ago from a retry: refused too.
    expect((await refused(resolve(actionMintedAt(minted)))).code).toBe("route-expired");
    // An action minted after the watermark (plus an hour) routes as usual.
    const fresh = await resolve(actionMintedAt(removed_before!.getTime() + 3_600_000 + 1000));
    expect(fresh.outcome).toBe("created");
    await settle(fresh.assignment);
    const now = await resolve(actionMintedAt(Date.now()));
    expect(now.outcome).toBe("created");
    await settle(now.assignment);
  });

  it("refuses every spelling of a removed act_ + UUIDv7 action, hyphenated or in capitals, by the time in it", async () => {
    await drain();
    await db.owner.query("UPDATE aip_route_retention SET removed_before = NULL");
    const minted = Date.now() - 40 * DAY_MS;
    // The spellings a gateway might send, each routed and then removed; the last in the simple form.
    const spellings = [
      hyphenated(actionMintedAt(minted)),
      `act_${actionMintedAt(minted).slice(4).toUpperCase()}`,
      hyphenated(actionMintedAt(minted)).toUpperCase(),
      actionMintedAt(minted),
    ];
    const ids = [...spellings];
    const routes = await released(ids.length, 35, () => ids.shift() as string);
    expect((await remove()).removed).toBe(routes.length);
    const routesBefore = await db.owner.query("SELECT count(*)::int AS n FROM aip_route_assignments");
    const simple = spellings[3] as string;
    for (const id of [...spellings, hyphenated(simple), simple.toUpperCase(), hyphenated(simple).toUpperCase()]) {
      expect((await refused(resolve(id))).code, id).toBe("route-expired");
    }
    expect((await db.owner.query("SELECT count(*)::int AS n FROM aip_route_assignments")).rows).toEqual(routesBefore.rows);
    // The time is read from each spelling: no record of them was needed.
    const recorded = await db.owner.query("SELECT 1 FROM aip_removed_actions WHERE action_id = ANY($1)", [spellings]);
    expect(recorded.rowCount).toBe(0);
  });

  it("refuses a removed action whose ID carries no time, by the record its removal left", async () => {
    await drain();
    // Not act_ + UUIDv7: a plain ID (the README's quick start uses one), a UUIDv4 (its leading
    // bits are not a time), a wrong variant, and a UUIDv7 minted after its route settled (a
    // gateway clock far ahead: its time cannot vouch for the route).
    const ahead = actionMintedAt(Date.now() + 2 * DAY_MS);
    const ids = [plainAction(), "act_0190f3a2c1d04b7e9f1a2b3c4d5e6f70", "act_0190f3a2c1d07b7e0f1a2b3c4d5e6f70", ahead];
    const routes: RouteAssignment[] = [];
    for (const id of ids) {
      const { assignment } = await resolve(id);
      await settle(assignment);
      routes.push(assignment);
    }
    await settledDaysAgo(db.owner, ids, 31);
    const counted = await counters(db.owner);
    expect((await remove()).removed).toBe(4);
    const { removed_before } = await watermarks(db.owner);
    for (const route of routes) {
      const refusal = await refused(resolve(route.action_id));
      expect(refusal.code, route.action_id).toBe("route-expired");
      expect(refusal.extensions).toEqual({ action_id: route.action_id, removed_before: removed_before!.toISOString() });
    }
    expect(await stored(db.owner, ids)).toEqual(new Set());
    expect(await counters(db.owner)).toEqual(counted);
    const recorded = await db.owner.query<{ action_id: string }>("SELECT action_id FROM aip_removed_actions WHERE action_id = ANY($1)", [ids]);
    expect(recorded.rows.map((r) => r.action_id).sort()).toEqual([...ids].sort());
    // A new action of the same form routes as usual.
    const fresh = await resolve(plainAction());
    expect(fresh.outcome).toBe("created");
    await settle(fresh.assignment);
  });

  it("a removal that commits while a reacquisition of the route is under way: the reacquisition is refused and holds nothing", async () => {
    await drain();
    const [route] = await released(1, 40);
    const replicaBefore = await replicaState(db.owner, route!.replica_id);
    const countersBefore = await counters(db.owner);
    // The removal takes the route's row and holds it, uncommitted.
    const remover = new pg.Client({ connectionString: db.ownerUrl });
    await remover.connect();
    try {
      await remover.query("BEGIN");
      const { rows } = await remover.query("SELECT aip_remove_routes_settled_before(now() - interval '30 days', 10) AS n");
      expect(rows[0].n).toBe(1);
      // The retry reads the route (the removal is not committed), reserves its scopes and replica
      // slot, then waits for the row; the removal commits; the row is gone.
      const retry = resolve(route!.action_id).then(
        () => null,
        (error: unknown) => error,
      );
      await waitForLockWait(route!.action_id);
      await remover.query("COMMIT");
      const error = (await retry) as { code?: string } | null;
      expect(error?.code).toBe("route-expired");
    } finally {
      await remover.end();
    }
    expect(await replicaState(db.owner, route!.replica_id)).toEqual(replicaBefore);
    expect(await counters(db.owner)).toEqual(countersBefore);
  });
});

/** A UUIDv7 action ID in its hyphenated form (8-4-4-4-12). */
function hyphenated(actionId: string): string {
  const hex = actionId.slice(4);
  return `${actionId.slice(0, 4)}${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** Until a session waits on a lock while resolving this action. */
async function waitForLockWait(actionId: string): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const { rows } = await db.owner.query(
      "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%aip_resolve_route%' AND datname = current_database()",
    );
    if (rows.length > 0) return;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  throw new Error(`no resolve of ${actionId} waited for the removal`);
}
