/**
 * Serving catalog answers at the speed of a cache, without weakening one catalog guarantee.
 *
 * An answer (a page, or one definition) is a function of (tenant, request, the tenant's catalog
 * revision): the revision at which what the tenant can see last changed, which moves only when a
 * publication that reaches the tenant commits (functions/30_catalog.sql). Another tenant's
 * publication leaves this tenant's cached answers, validators and cursors current.
 *
 * So a warm hit only needs the tenant's revision confirmed. Where requests of one process can share
 * a promise (Node, `sharedRevisionCheck`, the default there), concurrent warm hits share that
 * confirmation: a request waits for a check of its tenant's revision that started after it
 * arrived, one statement shared by every request (of any tenant) arriving meanwhile, so a busy
 * server sends about one statement per round trip instead of one per request; only when the
 * check finds a newer revision does the request then read its answer (its second statement).
 * Without it (a Worker, whose requests cannot share I/O) every request is exactly one statement,
 * which on a warm cache only confirms, under the shared publication lock, that the cached answer's
 * revision is still current (the page function's if_revision short-circuit): the page is not
 * built, not sent over the wire and not parsed or serialized here. A miss builds the page once and
 * keeps it. With `maxStalenessMs` > 0 a cached answer may be served without any statement for that
 * long after its tenant's revision was last confirmed current here; pages stay single-revision (an
 * answer is one revision), and a cursor from a revision this process has not seen is always
 * revalidated.
 *
 * HTTP semantics follow from the same fact: the strong ETag is `"<revision>-<digest of tenant and
 * request>"`, `If-None-Match` with it (or `*`) is answered 304 in the same single statement, and
 * responses say `Cache-Control: private, no-cache` (see src/routes/catalog.ts).
 *
 * Where the server compresses (`compressor`: the Node server), an answer is compressed once per
 * cached answer and coding, kept beside it, and a hit serves those bytes as they are. A compressed
 * representation is another representation: its strong ETag carries the coding
 * (`"<revision>-<digest>-br"`), as RFC 9110 requires of a strong validator. `If-None-Match`
 * compares weakly, so a validator of any coding of this request at this revision answers 304, with
 * the ETag of the coding this request would get.
 */
import { negotiateCoding, type Compressor, type ContentCoding } from "../http/compression.js";
import { ANY_REVISION, type CatalogChangesQuery, type CatalogQuery, type CatalogText, type Registry } from "../registry/registry.js";
import { CATALOG_QUERY_MEMBERS } from "../schemas.js";
import type { CachedCatalogAnswer, CatalogCache } from "./cache.js";

export interface CatalogServingOptions {
  /** Where answers are kept; none: every request builds its answer. */
  cache?: CatalogCache;
  /** Serve a cached answer without a statement up to this long after its revision was confirmed (0: never). */
  maxStalenessMs?: number;
  /** Shared with other apps of the same process; default: this server's own. */
  confirmed?: ConfirmedRevision;
  /**
   * Confirm warm hits with one revision check shared by the requests that arrive together
   * (SharedRevisionCheck). Only where one request may await another's I/O: Node, not Workers.
   */
  sharedRevisionCheck?: boolean;
  /** Compress answers for clients that accept it, once per cached answer (the Node server). */
  compressor?: Compressor;
  now?: () => number;
}

export type Defer = (work: Promise<unknown>) => void;

/** What of the HTTP request decides the answer besides the tenant and the query. */
export interface CatalogRequest {
  ifNoneMatch?: string | undefined;
  acceptEncoding?: string | undefined;
  /** Runs the cache write after the response where the platform needs to be told (a Worker's waitUntil); without it the write runs unawaited. */
  defer?: Defer | undefined;
}

/** How an answer was produced: `hit` (no statement), `revalidated` (one statement, nothing built), `miss` (built). */
type CacheOutcome = "hit" | "revalidated" | "miss";

export type CatalogOutcome =
  | { status: 200; revision: number; etag: string; body: string | Uint8Array; coding: ContentCoding | null; cache: CacheOutcome }
  | { status: 304; revision: number; etag: string; cache: CacheOutcome }
  | { status: 404; revision: number; cache: CacheOutcome };

/**
 * The exact cache key of a page request: the tenant and every member of CatalogQuery, in the
 * schema's order (CATALOG_QUERY_MEMBERS, src/schemas.ts), unambiguously. Built from the schema, so
 * that a member added to it can never leave two requests sharing an answer or an ETag.
 */
export function pageKey(tenantId: string | null, query: CatalogQuery): string {
  const key: unknown[] = ["page", tenantId];
  for (const member of CATALOG_QUERY_MEMBERS) key.push(query[member] ?? null);
  return JSON.stringify(key);
}

export function definitionKey(tenantId: string | null, capabilityId: string): string {
  return JSON.stringify(["definition", tenantId, capabilityId]);
}

/**
 * 64 bits of the key (two FNV-1a passes with different offsets), as 16 hex digits: what makes an
 * ETag name one tenant's request. A validator is only ever compared with the digest of the
 * requester's own key, so it can never select another tenant's answer.
 */
export function keyDigest(key: string): string {
  let a = 0x811c9dc5;
  let b = 0x01000193 ^ 0x5bd1e995;
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x01000193) ^ (b >>> 15);
  }
  return (a >>> 0).toString(16).padStart(8, "0") + (b >>> 0).toString(16).padStart(8, "0");
}

/** The strong ETag of an answer at `revision`, per representation: its content coding, if any. */
export const etagOf = (revision: number, digest: string, coding: ContentCoding | null = null) => `"${revision}-${digest}${coding ? `-${coding}` : ""}"`;

const VALIDATOR = /^(?:W\/)?"(\d{1,16})-([0-9a-f]{16})(?:-(?:br|gzip))?"$/;

/**
 * What If-None-Match says about this request: `any` for `*`, otherwise the newest revision among
 * the validators issued for this very request (digest match, whatever their coding), or null.
 */
export function validatorRevision(header: string | undefined, digest: string): number | "any" | null {
  if (!header) return null;
  let newest: number | null = null;
  for (const candidate of header.split(",")) {
    const tag = candidate.trim();
    if (tag === "*") return "any";
    const match = VALIDATOR.exec(tag);
    const revision = Number(match?.[1]);
    if (match?.[2] === digest && Number.isSafeInteger(revision)) newest = Math.max(newest ?? 0, revision);
  }
  return newest;
}

/**
 * The change feed's answer when nothing changed after `since`: an empty last page at the tenant's
 * revision. Built here, also after a statement, so that one ETag always names the same bytes.
 */
function emptyChanges(revision: number, since: number): string {
  return JSON.stringify({ catalog_revision: revision, since, changes: [], next_cursor: null });
}

/** The revision a cursor belongs to ("<revision>:..."), if it names one. */
function cursorRevision(cursor: string | undefined): number | undefined {
  const match = cursor ? /^(\d{1,15}):/.exec(cursor) : null;
  return match ? Number(match[1]) : undefined;
}

/** The tenant key of revision bookkeeping: a read without a tenant has one of its own (always revision 0). */
const tenantKey = (tenantId: string | null) => tenantId ?? "";

/**
 * The newest revision of each tenant's catalog the database has confirmed current here, and when.
 * It belongs to the process (a Worker isolate), not to one request: a runtime that builds an app
 * per request passes the same instance to each. At most `maxTenants` are remembered (the least
 * recently confirmed is forgotten first; a forgotten tenant is simply confirmed again).
 */
export class ConfirmedRevision {
  private readonly tenants = new Map<string, { revision: number; at: number }>();

  constructor(private readonly maxTenants = 100_000) {}

  confirm(tenant: string, revision: number, at: number): void {
    const known = this.tenants.get(tenant);
    if (known && revision < known.revision) return;
    const entry = known && revision === known.revision ? { revision, at: Math.max(known.at, at) } : { revision, at };
    this.tenants.delete(tenant);
    this.tenants.set(tenant, entry);
    if (this.tenants.size > this.maxTenants) {
      for (const oldest of this.tenants.keys()) {
        this.tenants.delete(oldest);
        break;
      }
    }
  }

  /** The tenant's newest known revision, if it was confirmed within the bound. */
  fresh(tenant: string, now: number, maxStalenessMs: number): number | undefined {
    if (maxStalenessMs <= 0) return undefined;
    const known = this.tenants.get(tenant);
    return known !== undefined && now - known.at <= maxStalenessMs ? known.revision : undefined;
  }

  /** An answer of `tenant` at `revision` may be served unconfirmed: the newest known for it, confirmed within the bound. */
  current(tenant: string, revision: number, now: number, maxStalenessMs: number): boolean {
    if (maxStalenessMs <= 0) return false;
    const known = this.tenants.get(tenant);
    return known !== undefined && revision === known.revision && now - known.at <= maxStalenessMs;
  }
}

/**
 * A tenant's catalog revision as of a read that started after the caller asked: `current()` joins
 * the check that will start next, never one already running (it may have read its snapshot before
 * the caller's request arrived, and missed a publication the caller must see). At most one check
 * runs at a time, and every caller that arrived while it ran shares the one after it, whatever its
 * tenant: one statement reads the revisions of every tenant asked for.
 */
export interface CheckedRevisions {
  revisions: Map<string, number>;
  /** 0 from the primary; from a replica, how long before now its snapshot was known current. */
  replay_lag_ms: number;
}

export class SharedRevisionCheck {
  private running: Promise<unknown> | null = null;
  private next: { tenants: Set<string>; revisions: Promise<CheckedRevisions> } | null = null;

  constructor(private readonly read: (tenants: readonly string[]) => Promise<CheckedRevisions>) {}

  current(tenant: string): Promise<{ catalog_revision: number; replay_lag_ms: number }> {
    let revisions: Promise<CheckedRevisions>;
    if (!this.running) {
      revisions = this.start(new Set([tenant]));
    } else {
      if (!this.next) {
        const tenants = new Set<string>();
        const startNext = () => {
          this.next = null;
          return this.start(tenants);
        };
        this.next = { tenants, revisions: this.running.then(startNext, startNext) };
      }
      this.next.tenants.add(tenant);
      revisions = this.next.revisions;
    }
    return revisions.then((checked) => {
      const revision = checked.revisions.get(tenant);
      if (revision === undefined) throw new Error(`the revision check did not answer for tenant ${JSON.stringify(tenant)}`);
      return { catalog_revision: revision, replay_lag_ms: checked.replay_lag_ms };
    });
  }

  private start(tenants: Set<string>): Promise<CheckedRevisions> {
    const check = this.read([...tenants]);
    this.running = check;
    const done = () => {
      if (this.running === check) this.running = null;
    };
    check.then(done, done);
    return check;
  }
}

export class CatalogServer {
  private readonly confirmed: ConfirmedRevision;
  private readonly now: () => number;
  private readonly revisionCheck: SharedRevisionCheck | undefined;

  constructor(
    private readonly registry: Registry,
    private readonly options: CatalogServingOptions = {},
  ) {
    this.confirmed = options.confirmed ?? new ConfirmedRevision();
    this.now = options.now ?? Date.now;
    this.revisionCheck = options.sharedRevisionCheck && options.cache ? new SharedRevisionCheck((tenants) => registry.catalogRevisions(tenants)) : undefined;
  }

  /** Whether answers depend on Accept-Encoding (they are then sent with `Vary: Accept-Encoding`). */
  get compresses(): boolean {
    return this.options.compressor !== undefined;
  }

  page(tenantId: string | null, query: CatalogQuery, request: CatalogRequest = {}): Promise<CatalogOutcome> {
    return this.serve(tenantKey(tenantId), pageKey(tenantId, query), request, cursorRevision(query.cursor), (ifRevision) =>
      this.registry.catalogPageText(tenantId, query, ifRevision),
    );
  }

  definition(tenantId: string | null, capabilityId: string, request: CatalogRequest = {}): Promise<CatalogOutcome> {
    return this.serve(tenantKey(tenantId), definitionKey(tenantId, capabilityId), request, undefined, (ifRevision) =>
      this.registry.catalogGetText(tenantId, capabilityId, ifRevision),
    );
  }

  /**
   * The tenant's catalog changes after `query.since` (GET /v1/catalog/changes), not cached (a poll
   * names a `since` of its own). HTTP as for pages: 304 only for a validator of this very request
   * that is still current (If-None-Match); without one, a 200 with the answer, which when nothing
   * changed after `since` is the empty page, built here. Within the staleness bound, the first page
   * of a walk costs no statement at all when this process confirmed the tenant's revision recently
   * and the validator names it, or nothing changed after `since`; otherwise one statement. The
   * strong ETag names the tenant's revision, the request and the content coding; on Node the
   * answer is compressed like a page (once per answer: nothing here is kept).
   */
  async changes(tenantId: string | null, query: CatalogChangesQuery, request: CatalogRequest = {}): Promise<CatalogOutcome> {
    const { compressor } = this.options;
    const tenant = tenantKey(tenantId);
    const digest = keyDigest(JSON.stringify(["changes", tenantId, query.since, query.cursor ?? null, query.limit ?? null, query.max_bytes ?? null]));
    // Decided by the request alone, so that a 304 names the same representation a 200 would.
    const coding = compressor ? negotiateCoding(request.acceptEncoding, compressor.codings) : null;
    const etag = (revision: number) => etagOf(revision, digest, coding);
    const validator = validatorRevision(request.ifNoneMatch, digest);
    const answer = async (revision: number, text: string, cache: CacheOutcome): Promise<CatalogOutcome> => {
      const body = coding && compressor ? await compressor.compress(text, coding) : text;
      return { status: 200, revision, etag: etag(revision), body, coding, cache };
    };

    const known = query.cursor === undefined ? this.confirmed.fresh(tenant, this.now(), this.options.maxStalenessMs ?? 0) : undefined;
    if (known !== undefined) {
      if (validator === "any" || validator === known) return { status: 304, revision: known, etag: etag(known), cache: "hit" };
      if (query.since >= known) return answer(known, emptyChanges(known, query.since), "hit");
    }
    const read = await this.registry.catalogChangesText(tenantId, query, validator === "any" ? ANY_REVISION : validator);
    // A replica's answer was current only as of its replay lag ago (src/registry/catalog-replica.ts).
    this.confirmed.confirm(tenant, read.catalog_revision, this.now() - (read.replay_lag_ms ?? 0));
    const revision = read.catalog_revision;
    if (read.not_modified) {
      // The validator is current, or nothing changed after since (then an older validator, or
      // none, gets the empty page).
      if (validator === "any" || (typeof validator === "number" && validator >= revision))
        return { status: 304, revision, etag: etag(revision), cache: "revalidated" };
      if (query.since >= revision) return answer(revision, emptyChanges(revision, query.since), "revalidated");
      throw new Error(`the change feed answered "not modified" at revision ${revision} for a validator it does not match`);
    }
    if (read.text === null) throw new Error("a change feed page is never missing");
    return answer(revision, read.text, "miss");
  }

  private async serve(
    tenant: string,
    key: string,
    request: CatalogRequest,
    fromRevision: number | undefined,
    read: (ifRevision: number | null) => Promise<CatalogText & { replay_lag_ms?: number }>,
  ): Promise<CatalogOutcome> {
    const { compressor, cache } = this.options;
    const digest = keyDigest(key);
    // Decided by the request alone, so that a 304 names the same representation a 200 would.
    const coding = compressor ? negotiateCoding(request.acceptEncoding, compressor.codings) : null;
    const etag = (revision: number) => etagOf(revision, digest, coding);
    const validator = validatorRevision(request.ifNoneMatch, digest);
    const cached = await cache?.get(key);
    /** The cached answer in this request's coding: compressed at most once per entry and coding. */
    const served = async (entry: CachedCatalogAnswer): Promise<string | Uint8Array> => {
      if (!coding || !compressor) return entry.body;
      const kept = entry.encoded?.[coding];
      if (kept) return kept;
      const bytes = await compressor.compress(entry.body, coding);
      cache?.attach?.(key, entry.revision, coding, bytes);
      return bytes;
    };

    // Within the staleness bound, and never for a cursor newer than what is cached: no statement.
    if (
      cached &&
      (fromRevision === undefined || fromRevision === cached.revision) &&
      this.confirmed.current(tenant, cached.revision, this.now(), this.options.maxStalenessMs ?? 0)
    ) {
      if (validator === "any" || validator === cached.revision) return { status: 304, revision: cached.revision, etag: etag(cached.revision), cache: "hit" };
      return { status: 200, revision: cached.revision, etag: etag(cached.revision), body: await served(cached), coding, cache: "hit" };
    }

    // A warm hit confirmed by the shared check; a failed or newer one leaves it to the read below.
    if (cached && this.revisionCheck && (fromRevision === undefined || fromRevision === cached.revision)) {
      const checked = await this.revisionCheck.current(tenant).catch(() => undefined);
      // A replica's answer was current only as of its replay lag ago (src/registry/catalog-replica.ts).
      if (checked !== undefined) this.confirmed.confirm(tenant, checked.catalog_revision, this.now() - checked.replay_lag_ms);
      const current = checked?.catalog_revision;
      if (current === cached.revision) {
        if (validator === "any" || validator === current) return { status: 304, revision: current, etag: etag(current), cache: "revalidated" };
        return { status: 200, revision: current, etag: etag(current), body: await served(cached), coding, cache: "revalidated" };
      }
    }

    // One statement: "not modified" at the newest revision we (or the client) hold, or the answer.
    // "Not modified" says the tenant's content has not changed since that revision: the answer
    // reports the tenant's revision, at most the one sent (an issued validator always names it).
    const newest = Math.max(cached?.revision ?? -1, typeof validator === "number" ? validator : -1);
    const answer = await read(validator === "any" ? ANY_REVISION : newest >= 0 ? newest : null);
    // A replica's answer was current only as of its replay lag ago (src/registry/catalog-replica.ts).
    this.confirmed.confirm(tenant, answer.catalog_revision, this.now() - (answer.replay_lag_ms ?? 0));
    const revision = answer.catalog_revision;
    if (answer.not_modified) {
      if (validator === "any" || (typeof validator === "number" && validator >= revision))
        return { status: 304, revision, etag: etag(revision), cache: "revalidated" };
      // The validator we sent was the cached answer's: serve it.
      if (cached?.revision === revision) return { status: 200, revision, etag: etag(revision), body: await served(cached), coding, cache: "revalidated" };
      throw new Error(`catalog answered "not modified" at revision ${revision}, which nothing here holds`);
    }
    if (answer.text === null) return { status: 404, revision, cache: "miss" };
    const built: CachedCatalogAnswer = { revision, body: answer.text };
    const body = validator === "any" ? undefined : await served(built);
    if (body instanceof Uint8Array && coding) built.encoded = { [coding]: body };
    if (cache) {
      const write = cache.put(key, built).catch(() => {});
      request.defer?.(write);
    }
    if (body === undefined) return { status: 304, revision, etag: etag(revision), cache: "miss" };
    return { status: 200, revision, etag: etag(revision), body, coding, cache: "miss" };
  }
}
