/**
 * `aip-registry catalog changes --since R`: what changed in a tenant's catalog after revision R
 * (GET /v1/catalog/changes, every page), as a table or JSON, and the revision it brings the caller
 * to. Over HTTP the tenant is the token's (a minted development token takes --tenant); over SQL
 * --tenant names it.
 */
import { CATALOG_PAGE, clampPage } from "../limits.js";
import { EXIT, UsageError, givenToken, str, tokenTenant, withBackend, type CommandContext } from "./context.js";
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
  // A catalog is one tenant's, and a read without one is always empty: say what is missing
  // instead of printing "no changes".
  if (overSql && !tenant) throw new UsageError("over SQL (--database-url) the tenant must be given: --tenant T");
  const given = overSql ? undefined : givenToken(ctx);
  if (!overSql && given === undefined && !tenant) {
    throw new UsageError("the tenant must be given: --tenant T (the token the CLI mints names it), or a tenant's token with --token");
  }
  if (given !== undefined) {
    const claimed = tokenTenant(given);
    if (claimed === null) throw new UsageError("the token names no tenant (no tenant_id claim), and a catalog is one tenant's: pass a tenant's token");
    if (tenant && claimed !== undefined && claimed !== tenant) {
      throw new UsageError(`--tenant ${tenant} is not the token's tenant (${claimed}): over HTTP the tenant is the token's`);
    }
  }
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
