/**
 * Assertions that a refused call changed nothing: a fingerprint of every registry table (row
 * count and a digest of all rows, timestamps included) plus the catalog revision, read as the
 * owner; and a helper that returns the RegistryError a call was refused with.
 */
import type pg from "pg";
import { catalogRevision } from "./assertions.js";

export interface RegistryState {
  catalog_revision: number;
  tables: Record<string, string>;
}

export async function registryState(owner: pg.Pool): Promise<RegistryState> {
  const { rows: tables } = await owner.query<{ name: string }>(
    `SELECT c.relname AS name FROM pg_class c
     WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' AND c.relname LIKE 'aip\\_%'
     ORDER BY 1`,
  );
  const { rows } = await owner.query<{ name: string; fingerprint: string }>(
    tables
      .map(
        ({ name }) =>
          `SELECT '${name}' AS name, count(*) || ':' || md5(coalesce(string_agg(t::text, E'\\n' ORDER BY t::text), '')) AS fingerprint FROM ${name} t`,
      )
      .join(" UNION ALL "),
  );
  return {
    catalog_revision: await catalogRevision(owner),
    tables: Object.fromEntries(rows.map((row) => [row.name, row.fingerprint])),
  };
}
