/**
 * `aip-registry catalog changes --since R`: what changed in a tenant's catalog after revision R
 * (GET /v1/catalog/changes, every page), as a table or JSON, and the revision it brings the caller
 * to. Over HTTP the tenant is the token's (a minted development token takes --tenant); over SQL
 * --tenant names it.
 */
import { CATALOG_PAGE, clampPage } from "../limits.js";
import { EXIT, UsageError, str, withBackend, type CommandContext } from "./context.js";
import { table } from "./table.js";

export async function catalog(ctx: CommandContext): Promise<number> {
  const [sub] = ctx.positionals;
  if (sub !== "changes") throw new UsageError("usage: catalog changes --since R [--tenant T] [--limit N] [--json]");
  const sinceText = str(ctx.values, "since");
  const since = Number(sinceText);
  if (sinceText === undefined || !/^\d{1,15}$/.test(sinceText) || !Number.isSafeInteger(since)) {
    throw new UsageError("--since must be a catalog revision (a non-negative integer): the catalog_revision of a catalog page or of the last changes");
  }
  const limitText = str(ctx.values, "limit");
  const limit = limitText === undefined ? undefined : clampPage(Number(limitText), CATALOG_PAGE);
  if (limitText !== undefined && !/^\d+$/.test(limitText)) throw new UsageError("--limit must be a positive integer");
  const tenant = str(ctx.values, "tenant");
  const overSql = str(ctx.values, "database-url") !== undefined;
  if (overSql && !tenant) throw new UsageError("over SQL (--database-url) the tenant must be given: --tenant T");
  return withBackend(
    ctx,
    ["catalog:read"],
    async (backend) => {
      const answer = await backend.catalogChanges(overSql ? tenant : undefined, since, limit);
      if (ctx.values.json === true) {
        ctx.io.out(JSON.stringify({ since, ...answer }, null, 2));
      } else if (answer.changes.length === 0) {
        ctx.io.out(`no changes since revision ${since}`);
      } else {
        ctx.io.out(
          `${table(
            ["CHANGE", "CAPABILITY", "REVISION"],
            answer.changes.map((c) => [c.change, c.capability_id, c.revision]),
          )}\n\n${answer.changes.length} changes since revision ${since}; now at revision ${answer.catalog_revision}`,
        );
      }
      return EXIT.ok;
    },
    tenant && !overSql ? { tenantId: tenant } : {},
  );
}
