/**
 * `routes export` (released routes as NDJSON, page by page, then the export watermark), `routes
 * prune` (route retention now) and `routes policy` (its policy: shown, or set by the owner).
 */
import { createWriteStream, type WriteStream } from "node:fs";
import { once } from "node:events";
import { clampPage, ROUTE_RETENTION_BATCH, ROUTE_RETENTION_DAYS, ROUTES_EXPORT_PAGE, type RangeBound } from "../limits.js";
import { RegistryError } from "../registry/errors.js";
import type { RetentionWindow } from "./backend.js";
import { EXIT, UsageError, durationMs, str, withBackend, type CommandContext } from "./context.js";

/** An RFC 3339 time with an offset, or a duration ago (`90m`, `12h`, `30d`), as an ISO string. */
export function parseTime(text: string, name: string, now = Date.now()): string {
  const ago = durationMs(text);
  if (ago !== undefined && !text.endsWith("s")) return new Date(now - ago).toISOString();
  if (/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/i.test(text) && !Number.isNaN(Date.parse(text))) {
    return new Date(Date.parse(text)).toISOString();
  }
  throw new UsageError(`--${name} must be an RFC 3339 time with an offset (2026-11-01T00:00:00Z) or a duration ago (90m, 12h, 30d), not "${text}"`);
}

function boundedInt(value: string | undefined, name: string, bound: RangeBound): number {
  if (value === undefined) return bound.default;
  const n = Number(value);
  if (!Number.isInteger(n) || n < bound.min || n > bound.max) throw new UsageError(`--${name} must be an integer from ${bound.min} to ${bound.max}`);
  return n;
}

export async function routes(ctx: CommandContext): Promise<number> {
  const [sub, ...extra] = ctx.positionals;
  if (extra.length > 0) throw new UsageError(`unexpected argument "${extra[0]}"`);
  if (sub === "export") return exportRoutes(ctx);
  if (sub === "prune") return prune(ctx);
  if (sub === "policy") return policy(ctx);
  throw new UsageError(
    sub === undefined ? "routes needs a subcommand: export, prune or policy" : `unknown routes subcommand "${sub}": export, prune or policy`,
  );
}

/** Writes to a stream, waiting whenever its buffer is full: memory stays bounded by one page. */
async function write(stream: NodeJS.WritableStream, text: string): Promise<void> {
  if (!stream.write(text)) await once(stream, "drain");
}

async function exportRoutes(ctx: CommandContext): Promise<number> {
  const beforeText = str(ctx.values, "before");
  if (!beforeText) throw new UsageError("routes export needs --before: routes settled before that time are exported");
  const settledBefore = parseTime(beforeText, "before");
  const afterText = str(ctx.values, "after");
  const settledAfter = afterText ? parseTime(afterText, "after") : undefined;
  if (settledAfter && settledAfter >= settledBefore) throw new UsageError("--after must be earlier than --before");
  const pageText = str(ctx.values, "limit");
  if (pageText !== undefined && !Number.isInteger(Number(pageText))) throw new UsageError("--limit must be an integer");
  // A page size, clamped as the API clamps it.
  const limit = clampPage(pageText === undefined ? ROUTES_EXPORT_PAGE.default : Number(pageText), ROUTES_EXPORT_PAGE);
  const record = ctx.values["no-record"] !== true;
  const outPath = str(ctx.values, "out");

  return withBackend(ctx, ["registry:admin"], async (backend) => {
    const file: WriteStream | undefined = outPath ? createWriteStream(outPath, { flags: "wx" }) : undefined;
    const output: NodeJS.WritableStream = file ?? process.stdout;
    if (file) await once(file, "open");
    let exported = 0;
    let applied: string | undefined;
    let cursor: string | undefined;
    try {
      do {
        const page = await backend.routesPage({ settledBefore, ...(settledAfter ? { settledAfter } : {}), ...(cursor ? { cursor } : {}), limit });
        // The first page's bound: everything settled before it had committed when the export began.
        applied ??= page.settled_before;
        for (const route of page.routes) await write(output, `${JSON.stringify(route)}\n`);
        exported += page.routes.length;
        cursor = page.next_cursor ?? undefined;
        if (outPath) ctx.io.err(`exported ${exported} routes`);
      } while (cursor);
      if (file) {
        // On disk before the watermark says so.
        await new Promise<void>((resolve, reject) => file?.end((error?: Error | null) => (error ? reject(error) : resolve())));
        const { open } = await import("node:fs/promises");
        const handle = await open(outPath as string, "r+");
        await handle.sync().finally(() => handle.close());
      }
    } finally {
      if (file && !file.closed) file.destroy();
    }
    const summary: Record<string, unknown> = { exported, settled_after: settledAfter ?? null, settled_before: applied ?? null };
    if (applied && applied !== settledBefore) ctx.io.err(`settled_before applied: ${applied} (at most an hour before now)`);
    if (record && applied) {
      const watermarks = await backend.recordRouteExport(settledAfter ?? null, applied);
      summary.exported_before = watermarks.exported_before;
      ctx.io.err(`exported ${exported} routes; export watermark: routes settled before ${watermarks.exported_before} are exported`);
    } else {
      ctx.io.err(`exported ${exported} routes; the export watermark was not moved (--no-record)`);
    }
    if (outPath) ctx.io.out(ctx.values.json === true ? JSON.stringify(summary) : `exported ${exported} routes to ${outPath}`);
    return EXIT.ok;
  });
}

/** The evidence window over SQL: --retention-days, else ROUTE_RETENTION_DAYS, else the default. */
function sqlWindow(ctx: CommandContext): RetentionWindow {
  const days = boundedInt(str(ctx.values, "retention-days") ?? ctx.env.ROUTE_RETENTION_DAYS, "retention-days", ROUTE_RETENTION_DAYS);
  if (days === 0) throw new UsageError("route retention is off (ROUTE_RETENTION_DAYS=0): nothing to prune");
  const env = ctx.env.ROUTE_RETENTION_REQUIRE_EXPORT;
  return { days, requireExport: ctx.values["require-export"] === true || env === "true" || env === "1" };
}

async function prune(ctx: CommandContext): Promise<number> {
  const limit = boundedInt(str(ctx.values, "limit"), "limit", ROUTE_RETENTION_BATCH);
  const all = ctx.values.all === true;
  const overSql = str(ctx.values, "database-url") !== undefined;
  if (!overSql && (str(ctx.values, "retention-days") !== undefined || ctx.values["require-export"] === true)) {
    throw new UsageError("--retention-days and --require-export apply over SQL (--database-url) only: over HTTP the server applies its own settings");
  }
  const window = overSql ? sqlWindow(ctx) : undefined;
  return withBackend(ctx, ["registry:admin"], async (backend) => {
    let removed = 0;
    let last: Awaited<ReturnType<typeof backend.removeSettledRoutes>> | undefined;
    // --all: batches until one comes back short, bounded so that it cannot loop forever.
    for (let batch = 1; batch <= (all ? 10_000 : 1); batch++) {
      last = await backend.removeSettledRoutes(limit, window);
      removed += last.removed;
      if (all) ctx.io.err(`batch ${batch}: removed ${last.removed}`);
      if (last.removed < limit) break;
    }
    const result = { removed, removed_before: last?.removed_before ?? null, exported_before: last?.exported_before ?? null, next_due: last?.next_due ?? null };
    ctx.io.out(
      ctx.values.json === true
        ? JSON.stringify(result)
        : `removed ${removed} ${removed === 1 ? "route" : "routes"}; removed before ${result.removed_before ?? "(none yet)"}; next due ${result.next_due ?? "(none)"}`,
    );
    return EXIT.ok;
  });
}

/**
 * The database's route retention policy: shown, or set as given with the owner's --database-url
 * (shorter windows and dropping the export requirement included; servers can only make it stricter).
 */
async function policy(ctx: CommandContext): Promise<number> {
  if (str(ctx.values, "database-url") === undefined) {
    throw new UsageError("routes policy works over SQL only (--database-url): the policy is the database owner's");
  }
  if (ctx.values["require-export"] === true && ctx.values["no-require-export"] === true) {
    throw new UsageError("--require-export and --no-require-export contradict each other");
  }
  const daysText = str(ctx.values, "retention-days");
  const change = {
    ...(daysText !== undefined ? { days: boundedInt(daysText, "retention-days", ROUTE_RETENTION_DAYS) } : {}),
    ...(ctx.values["require-export"] === true ? { requireExport: true } : ctx.values["no-require-export"] === true ? { requireExport: false } : {}),
  };
  return withBackend(ctx, [], async (backend) => {
    const result = await backend.retentionPolicy(Object.keys(change).length > 0 ? change : undefined).catch((error: unknown) => {
      if (error instanceof RegistryError && error.code === "forbidden") {
        throw new RegistryError(
          "forbidden",
          "only the database owner may set the route retention policy: use the owner's --database-url (a server's runtime role can only make it stricter, with ROUTE_RETENTION_DAYS and ROUTE_RETENTION_REQUIRE_EXPORT)",
          error.extensions,
        );
      }
      throw error;
    });
    ctx.io.out(
      ctx.values.json === true
        ? JSON.stringify(result)
        : `route retention: ${result.retention_days === 0 ? "every route is kept" : `released routes are removed ${result.retention_days} days after their last settlement`}` +
            `${result.require_export ? ", once exported" : ""}; exported before ${result.exported_before ?? "(none yet)"}; removed before ${result.removed_before ?? "(none yet)"}`,
    );
    return EXIT.ok;
  });
}
