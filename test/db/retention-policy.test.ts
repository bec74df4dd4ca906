/**
 * The route retention policy is the database's, and no runtime role can weaken it (issue 31,
 * functions/82_retention.sql, migration 0010). Each case is an attack the audit made, or the one
 * next to it, on the real roles' own connections: a data-role login asking a batch for a shorter
 * window without the export requirement, runtime roles restating the policy looser, deletes that
 * bypass the functions (as the previous release's still-installed functions or an owner's stray
 * DELETE would), and an administrator recording an export nobody read.
 */
import pg from "pg";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { PROBLEM_SQLSTATE } from "../../src/registry/errors.js";
import type { RouteAssignment } from "../../src/schemas.js";
import { useTestDatabase } from "../support/database.js";
import { expectHealthy } from "../support/invariants.js";
import { DAY_MS, readExportPages, setPolicy, settledDaysAgo, stored, watermarks } from "../support/retention.js";
import { publishRoutingFleet, type RoutingFleet } from "../support/routing-fleet.js";
import { refusal } from "../support/assertions.js";
import { withSetOnPath } from "../support/server.js";

const db = useTestDatabase();
let fleet: RoutingFleet;
let data: pg.Client;
let control: pg.Client;

beforeAll(async () => {
  fleet = await publishRoutingFleet(db.registry, {
    prefix: "rpol",
    tenant: "tenant-rpol",
    instances: [{ name: "i", replicas: [{ name: "r", capacity: 1000 }] }],
  });
  data = new pg.Client({ connectionString: withSetOnPath(db.dataUrl) });
  control = new pg.Client({ connectionString: withSetOnPath(db.controlUrl) });
  await Promise.all([data.connect(), control.connect()]);
});
afterAll(async () => {
  await Promise.all([data?.end(), control?.end()]);
});
// Each case starts from the defaults, with nothing old left to remove.
beforeEach(async () => {
  await setPolicy(db.owner, 1, false);
  await db.owner.query("SELECT aip_remove_routes_settled_before(now() - interval '1 day', 10000)");
  await setPolicy(db.owner, 30, false);
});

let n = 0;
/** Released routes (action IDs without a time), their last settlement `days` in the past. */
async function released(count: number, days: number): Promise<RouteAssignment[]> {
  const routes: RouteAssignment[] = [];
  for (let i = 0; i < count; i++) {
    const { assignment } = await db.registry.resolveRoute(`act_rpol_${++n}`, fleet.tenant, fleet.capability);
    await db.registry.settleRoute(assignment.action_id, fleet.tenant, assignment, "completed");
    routes.push(assignment);
  }
  await settledDaysAgo(
    db.owner,
    routes.map((r) => r.action_id),
    days,
  );
  return routes;
}
const ids = (routes: RouteAssignment[]) => routes.map((r) => r.action_id);

/** One function call on a role's own connection: its JSON answer, or the SQLSTATE / problem code it fails with. */
async function call(client: pg.Client, text: string, params: unknown[] = []): Promise<Record<string, unknown> | string> {
  try {
    const { rows } = await client.query(`SELECT ${text} AS result`, params);
    return rows[0].result;
  } catch (error) {
    const { code, detail } = error as { code?: string; detail?: string };
    return code === PROBLEM_SQLSTATE ? `problem:${(JSON.parse(String(detail)) as { code: string }).code}` : String(code);
  }
}

async function policy(): Promise<{ retention_days: number; require_export: boolean }> {
  const { rows } = await db.owner.query("SELECT retention_days, require_export FROM aip_route_retention WHERE singleton");
  return rows[0];
}

describe("a data-role login", () => {
  it("cannot remove unexported evidence by asking a batch for a day's window without the export requirement", async () => {
    // The server runs with ROUTE_RETENTION_DAYS=30 and ROUTE_RETENTION_REQUIRE_EXPORT=true, and
    // said so at start-up (src/entry/node.ts) on its data-role connection.
    expect(await call(data, "aip_route_retention_policy(30, true)")).toMatchObject({ retention_days: 30, require_export: true });
    const recent = await released(3, 2);
    const old = await released(2, 40);
    const result = await call(data, "aip_remove_settled_routes(1, false, 10000)");
    expect(result).toMatchObject({ removed: 0, retention_days: 30, require_export: true, exported_before: null });
    expect(await stored(db.owner, ids([...recent, ...old]))).toEqual(new Set(ids([...recent, ...old])));
    await expectHealthy(db.registry);
  });

  it("and the control role can make the policy stricter, never looser; only the owner relaxes it", async () => {
    for (const client of [data, control]) {
      await setPolicy(db.owner, 30, false);
      // Looser: nothing changes.
      expect(await call(client, "aip_route_retention_policy(1, false)")).toMatchObject({ retention_days: 30, require_export: false });
      // Stricter: a longer window, export required, each on its own.
      expect(await call(client, "aip_route_retention_policy(60, NULL)")).toMatchObject({ retention_days: 60, require_export: false });
      expect(await call(client, "aip_route_retention_policy(NULL, true)")).toMatchObject({ retention_days: 60, require_export: true });
      expect(await call(client, "aip_route_retention_policy(45, false)")).toMatchObject({ retention_days: 60, require_export: true });
      // 0 keeps every route: the strictest window, which no shorter one undoes.
      expect(await call(client, "aip_route_retention_policy(0, NULL)")).toMatchObject({ retention_days: 0 });
      expect(await call(client, "aip_route_retention_policy(30, NULL)")).toMatchObject({ retention_days: 0 });
      // Setting it as given is the owner's alone: PostgreSQL refuses the runtime roles.
      expect(await call(client, "aip_set_route_retention_policy(1, false)")).toBe("42501");
      // Nor can a runtime role reach the owner's building blocks.
      expect(await call(client, "aip_remove_routes_settled_before(now(), 10)")).toBe("42501");
      expect(await call(client, "aip_tighten_route_retention(1, false)")).toBe("42501");
      expect(await policy()).toEqual({ retention_days: 0, require_export: true });
    }
    expect(await call(control, "aip_route_retention_policy(-1, NULL)")).toBe("problem:invalid");
    expect(await call(data, "aip_remove_settled_routes(30, false, 10)")).toMatchObject({ removed: 0, retention_days: 0, next_due: null });
  });
});

describe("servers stating their configuration at once", () => {
  it("never undo each other: the stored policy ends at the strictest stated, on parallel connections", async () => {
    const { registry } = db.registryWithPool(8);
    const days = Array.from({ length: 24 }, (_, i) => 31 + ((i * 7) % 24));
    await Promise.all(days.map((d, i) => registry.routeRetentionPolicy(d, i === 5)));
    expect(await policy()).toEqual({ retention_days: Math.max(...days), require_export: true });
  });
});

describe("whatever deletes routes", () => {
  it("removes only what the policy lets go: the table keeps the rest, and what it removed is recorded for the retry contract", async () => {
    await setPolicy(db.owner, 30, true);
    const exported = await released(2, 50);
    const unexported = await released(2, 40);
    const young = await released(2, 2);
    const { assignment: reserved } = await db.registry.resolveRoute(`act_rpol_${++n}`, fleet.tenant, fleet.capability);
    // An export of everything settled up to 45 days ago, read and recorded.
    const cut = new Date(Date.now() - 45 * DAY_MS).toISOString();
    await readExportPages(db.registry, { settledBefore: cut });
    await db.registry.recordRouteExport(null, cut);
    const all = ids([...exported, ...unexported, ...young, reserved]);
    // A DELETE of all of them, as the previous release's retention function (still installed
    // during a rollout) or an owner's stray statement would send it, with what it reports.
    const { rows } = await db.owner.query<{ action_id: string }>("DELETE FROM aip_route_assignments WHERE action_id = ANY($1) RETURNING action_id", [all]);
    expect(rows.map((r) => r.action_id).sort()).toEqual(ids(exported).sort());
    expect([...(await stored(db.owner, all))].sort()).toEqual(ids([...unexported, ...young, reserved]).sort());
    // The removal advanced removed_before and recorded the removed actions (their IDs carry no time).
    const { removed_before } = await watermarks(db.owner);
    expect(removed_before!.getTime()).toBeGreaterThan(Date.now() - 50 * DAY_MS);
    const recorded = await db.owner.query("SELECT action_id FROM aip_removed_actions WHERE action_id = ANY($1)", [all]);
    expect(recorded.rows.map((r) => r.action_id).sort()).toEqual(ids(exported).sort());
    for (const route of exported) {
      expect((await refusal(db.registry.resolveRoute(route.action_id, fleet.tenant, fleet.capability))).code).toBe("route-expired");
    }
    await db.registry.settleRoute(reserved.action_id, fleet.tenant, reserved, "completed");
    await expectHealthy(db.registry);
  });
});

describe("the export watermark", () => {
  beforeEach(async () => {
    // From no export at all.
    await db.owner.query("ALTER TABLE aip_route_retention DISABLE TRIGGER aip_route_retention_export_watermark");
    await db.owner.query("UPDATE aip_route_retention SET exported_before = NULL, read_through_at = NULL, read_through_action = NULL");
    await db.owner.query("ALTER TABLE aip_route_retention ENABLE TRIGGER aip_route_retention_export_watermark");
  });

  it("does not move for an export nobody read, from the control role or any other writer", async () => {
    await released(2, 40);
    const before = new Date(Date.now() - 2 * DAY_MS).toISOString();
    expect(await call(control, "aip_record_route_export(NULL, $1)", [before])).toBe("problem:conflict");
    // What the previous release's aip_record_route_export writes (it is installed during a rollout).
    await db.owner.query("UPDATE aip_route_retention SET exported_before = $1", [before]);
    expect((await watermarks(db.owner)).exported_before).toBeNull();
    // A page that starts after the beginning leaves a gap: it does not count.
    await readExportPages(db.registry, { settledAfter: new Date(Date.now() - 35 * DAY_MS).toISOString(), settledBefore: before });
    expect(await call(control, "aip_record_route_export(NULL, $1)", [before])).toBe("problem:conflict");
    // Nor does a page read from a cursor past the routes read so far.
    const far = JSON.stringify([new Date(Date.now() - 10 * DAY_MS).toISOString(), "act_"]);
    await db.registry.routesPage({ settledBefore: before, cursor: far });
    expect(await call(control, "aip_record_route_export(NULL, $1)", [before])).toBe("problem:conflict");
    expect((await watermarks(db.owner)).exported_before).toBeNull();
  });

  it("moves over what the pages handed out, contiguously, and no further", async () => {
    await released(5, 40);
    const mid = new Date(Date.now() - 30 * DAY_MS).toISOString();
    const end = new Date(Date.now() - 2 * DAY_MS).toISOString();
    // The first pages, one route each, up to 30 days ago: the watermark can reach there.
    await readExportPages(db.registry, { settledBefore: mid }, 1);
    expect(await call(control, "aip_record_route_export(NULL, $1)", [mid])).toMatchObject({ exported_before: mid });
    // An export asking for more than its pages reached moves only as far as they did.
    expect(await call(control, "aip_record_route_export($1, $2)", [mid, end])).toBe("problem:conflict");
    const page = await db.registry.routesPage({ settledAfter: mid, settledBefore: end, limit: 1 });
    expect(page.routes).toHaveLength(0);
    expect(await call(control, "aip_record_route_export($1, $2)", [mid, new Date(Date.now() + DAY_MS).toISOString()])).toMatchObject({ exported_before: end });
    // Any other writer is held to the same bound.
    await db.owner.query("UPDATE aip_route_retention SET exported_before = now()");
    expect((await watermarks(db.owner)).exported_before?.toISOString()).toBe(end);
  });
});
