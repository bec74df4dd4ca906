/**
 * Route retention helpers: action IDs of the reference's form minted at a chosen time, and moving
 * a released route's settlement into the past (the evidence window is days; tests do not wait).
 */
import { randomBytes } from "node:crypto";
import type pg from "pg";
import type { Registry } from "../../src/registry/registry.js";
import type { RouteState } from "../../src/schemas.js";

export const DAY_MS = 86_400_000;

/** `act_` + a UUIDv7 in simple form whose 48-bit time is `ms` (version 7, RFC 9562 variant). */
export function actionMintedAt(ms: number): string {
  const random = randomBytes(10).toString("hex");
  const variant = ((Number.parseInt(random[3] as string, 16) & 0x3) | 0x8).toString(16);
  return `act_${Math.floor(ms).toString(16).padStart(12, "0")}7${random.slice(0, 3)}${variant}${random.slice(4, 19)}`;
}

/** Moves released routes' last settlement `days` into the past (the owner's UPDATE; the record itself is unchanged). */
export async function settledDaysAgo(owner: pg.Pool, actionIds: string[], days: number): Promise<void> {
  const { rowCount } = await owner.query(
    "UPDATE aip_route_assignments SET settled_at = date_trunc('milliseconds', clock_timestamp()) - $2 * interval '1 day' WHERE action_id = ANY($1) AND NOT reserved",
    [actionIds, days],
  );
  if (rowCount !== actionIds.length) throw new Error(`expected ${actionIds.length} released routes, moved ${rowCount}`);
}

/** Which of these actions still have a route. */
export async function stored(owner: pg.Pool, actionIds: string[]): Promise<Set<string>> {
  const { rows } = await owner.query<{ action_id: string }>("SELECT action_id FROM aip_route_assignments WHERE action_id = ANY($1)", [actionIds]);
  return new Set(rows.map((row) => row.action_id));
}

export async function watermarks(owner: pg.Pool): Promise<{ removed_before: Date | null; exported_before: Date | null }> {
  const { rows } = await owner.query("SELECT removed_before, exported_before FROM aip_route_retention WHERE singleton");
  return rows[0];
}

/** The owner sets the route retention policy exactly (runtime roles can only tighten it). */
export async function setPolicy(owner: pg.Pool, days: number, requireExport: boolean): Promise<void> {
  await owner.query("SELECT aip_set_route_retention_policy($1, $2)", [days, requireExport]);
}

/** Every export page of a range, read as `routes export` reads them; the routes they handed out. */
export async function readExportPages(registry: Registry, range: { settledBefore: string; settledAfter?: string }, limit?: number): Promise<RouteState[]> {
  const routes: RouteState[] = [];
  let cursor: string | undefined;
  do {
    const page = await registry.routesPage({ ...range, ...(cursor ? { cursor } : {}), ...(limit ? { limit } : {}) });
    routes.push(...page.routes);
    cursor = page.next_cursor ?? undefined;
  } while (cursor);
  return routes;
}
