/**
 * An identity provider's key set, as the token verifier uses it (AUTH_JWKS_URL). It replaces
 * jose's createRemoteJWKSet, whose ten-minute cache let a removed key mint tokens for ten minutes
 * and whose refetches nothing limited. The rules, each with its bound:
 *
 * - **Revocation.** A set is used for `maxAgeMs` after it was fetched; the first verification
 *   after that waits for a new fetch. A key removed from the set therefore stops being honoured
 *   within `maxAgeMs` (plus one fetch) whatever the traffic, and `isFresh` lets the
 *   verified-token cache drop principals verified under an older set.
 * - **New keys.** A token naming a key the set does not hold fetches the set again, at most once
 *   per `cooldownMs`: an unknown `kid` cannot make the registry hammer the identity provider.
 * - **A failing provider.** Fetches are shared: concurrent verifications wait for the one in
 *   flight. A failed fetch backs off exponentially with jitter (1 s doubling to 30 s) before the
 *   next is tried. Meanwhile the last good set is used for up to `graceMs` past its maximum age
 *   (so during an outage a removed key is honoured for up to `maxAgeMs + graceMs`); beyond that,
 *   or before any set was fetched, verification is refused with `auth-unavailable` (503 and
 *   Retry-After), never with a 401 that would tell a caller its valid token is bad. What failed
 *   is logged and counted (`status()`), never told to the caller. A body that is not a usable key
 *   set counts as a failed fetch too: not a JWKS, a repeated member name (ambiguous), or no key at
 *   all (which would lock every token out at once, without the grace).
 *
 * Times come from `now` (an injected clock in tests). Workers: isolates share nothing, and a
 * fetch started by one request may be abandoned with it, so a waiter stops waiting after the
 * fetch timeout, and a fetch older than that is replaced rather than joined.
 */
import { createLocalJWKSet, errors, type CryptoKey, type FlattenedJWSInput, type JWSHeaderParameters, type JSONWebKeySet } from "jose";
import { AUTH_JWKS_BACKOFF_MAX_MS, AUTH_JWKS_BACKOFF_MIN_MS } from "../limits.js";
import { RegistryError } from "../registry/errors.js";
import { FETCH_OUTCOMES, fetchKeySet, type FetchOutcome } from "./jwks-fetch.js";
import { duplicateMemberName } from "./unique-members.js";
import { log } from "../telemetry/log.js";

export interface KeySetOptions {
  url: string;
  maxAgeMs: number;
  cooldownMs: number;
  graceMs: number;
  timeoutMs: number;
  maxBytes: number;
  now: () => number;
  /** In [0, 1): the backoff's jitter (tests fix it). */
  random?: () => number;
  /** Structured log lines (Node and Workers: JSON on the console). */
  log?: (entry: Record<string, unknown>) => void;
  fetch?: typeof fetch;
}

/** What the metrics and logs see of the key set. */
export interface KeySetStatus {
  /** Fetches since start, by outcome. */
  fetches: Record<FetchOutcome, number>;
  /** Age of the set in use; undefined before the first good fetch. */
  ageMs: number | undefined;
  /** Keys in the set in use. */
  keys: number;
  /** Failed fetches since the last good one. */
  consecutiveFailures: number;
  /** How long until the next fetch may be tried (0 when not backing off). */
  backoffMs: number;
}

type LocalKeySet = ReturnType<typeof createLocalJWKSet>;

interface FetchedSet {
  keys: LocalKeySet;
  keyCount: number;
  /** The body it came from: a fetch that returns the same set keeps the same version. */
  text: string;
  version: number;
  fetchedAt: number;
}

/** Why a token found no key: the set holds none for it (401) or it cannot be known now (503). */
class NoMatchingKey extends Error {
  constructor(readonly reason: keyof typeof NO_KEY_MESSAGES) {
    super(NO_KEY_MESSAGES[reason]);
  }
}

const NO_KEY_MESSAGES = {
  "unknown-key": "no key of the key set matches the token",
  "several-keys": "the token names no kid and several keys of the key set match it",
  // What is wrong with the provider's key stays in the logs of whoever looks at the key set.
  "unusable-key": "the key set's key for this token cannot be used",
} as const;

const defaultLog = ({ level, msg, ...fields }: Record<string, unknown>) =>
  log.line(level === "info" || level === "warn" || level === "debug" ? level : "error", String(msg), fields);

export class RemoteKeySet {
  private current: FetchedSet | undefined;
  private versions = 0;
  private goodFetches = 0;
  private pending: { promise: Promise<void>; startedAt: number } | undefined;
  private failures = 0;
  private retryAt = 0;
  private readonly fetches = Object.fromEntries(FETCH_OUTCOMES.map((outcome) => [outcome, 0])) as Record<FetchOutcome, number>;
  private readonly log: (entry: Record<string, unknown>) => void;
  private readonly random: () => number;

  /** The URL as logs show it: without credentials or a query a provider might have put in it. */
  private readonly shownUrl: string;

  constructor(private readonly options: KeySetOptions) {
    this.log = options.log ?? defaultLog;
    this.random = options.random ?? Math.random;
    const url = new URL(options.url);
    this.shownUrl = `${url.origin}${url.pathname}`;
  }

  /**
   * The key that verifies a token with this header, and the version of the set it came from.
   * Throws NoMatchingKey (the caller answers 401) or an `auth-unavailable` RegistryError (503).
   */
  async key(header: JWSHeaderParameters, token: FlattenedJWSInput): Promise<{ key: CryptoKey; version: number }> {
    const set = await this.usableSet();
    const found = await lookUp(set, header, token);
    if (found !== "unknown-key") return found;
    // An unknown key: the provider may have added it since. Fetch again unless the set is recent.
    if (this.options.now() < set.fetchedAt + this.options.cooldownMs) throw new NoMatchingKey("unknown-key");
    if (!this.mayFetch()) throw this.unavailable();
    const before = this.goodFetches;
    await this.wait(this.refresh());
    // Not fetched (failed, or abandoned): whether the key exists cannot be known now.
    if (this.goodFetches === before || !this.current) throw this.unavailable();
    const again = await lookUp(this.current, header, token);
    if (again === "unknown-key") throw new NoMatchingKey("unknown-key");
    return again;
  }

  /** Whether a verification under set `version` still stands: that set is current and within its maximum age. */
  isFresh(version: number): boolean {
    const set = this.current;
    return set !== undefined && set.version === version && this.options.now() < set.fetchedAt + this.options.maxAgeMs;
  }

  status(): KeySetStatus {
    const now = this.options.now();
    return {
      fetches: { ...this.fetches },
      ageMs: this.current ? now - this.current.fetchedAt : undefined,
      keys: this.current?.keyCount ?? 0,
      consecutiveFailures: this.failures,
      backoffMs: this.failures > 0 ? Math.max(0, this.retryAt - now) : 0,
    };
  }

  /** A set that may verify now: fresh, fetched now, or the last good one within its grace. */
  private async usableSet(): Promise<FetchedSet> {
    if (this.current && this.options.now() < this.current.fetchedAt + this.options.maxAgeMs) return this.current;
    const joining = this.inFlight();
    // While the provider is failing, a retry in flight is not waited for: the last good set serves.
    const failingWithGrace = this.failures > 0 && this.withinGrace();
    if (joining && !failingWithGrace) await this.wait(joining);
    else if (!joining && this.mayFetch()) await this.wait(this.refresh());
    const set = this.current;
    if (set && this.options.now() < set.fetchedAt + this.options.maxAgeMs) return set;
    if (set && this.withinGrace()) return set;
    throw this.unavailable();
  }

  private withinGrace(): boolean {
    const set = this.current;
    return set !== undefined && this.options.now() < set.fetchedAt + this.options.maxAgeMs + this.options.graceMs;
  }

  private mayFetch(): boolean {
    return this.failures === 0 || this.options.now() >= this.retryAt;
  }

  /** The fetch in flight; one older than the fetch timeout was abandoned (a Worker request that ended) and is forgotten. */
  private inFlight(): Promise<void> | undefined {
    if (this.pending && Date.now() - this.pending.startedAt > this.options.timeoutMs + 1000) this.pending = undefined;
    return this.pending?.promise;
  }

  /** Starts a fetch, or joins the one in flight. Never rejects: the outcome lands in the state. */
  private refresh(): Promise<void> {
    const inFlight = this.inFlight();
    if (inFlight) return inFlight;
    const promise = this.fetchOnce().finally(() => {
      if (this.pending?.promise === promise) this.pending = undefined;
    });
    this.pending = { promise, startedAt: Date.now() };
    return promise;
  }

  /** Waits for a fetch, but no longer than its timeout (and a second): a Worker may have abandoned it. */
  private async wait(fetching: Promise<void>): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const bound = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, this.options.timeoutMs + 1000);
    });
    try {
      await Promise.race([fetching, bound]);
    } finally {
      if (timer !== undefined) clearTimeout(timer);
    }
  }

  private async fetchOnce(): Promise<void> {
    const result = await fetchKeySet(this.options.url, {
      timeoutMs: this.options.timeoutMs,
      maxBytes: this.options.maxBytes,
      ...(this.options.fetch ? { fetch: this.options.fetch } : {}),
    }).catch((error: unknown) => ({ outcome: "network" as const, detail: String(error) }));
    if (result.outcome !== "ok") return this.failed(result.outcome, result.detail);
    let keys: LocalKeySet;
    try {
      // jose checks the members are objects; RFC 7517 also makes `kty` a required string.
      if (!(result.json as JSONWebKeySet).keys?.every?.((key) => typeof key?.kty === "string")) throw new Error("a key without kty");
      keys = createLocalJWKSet(result.json as JSONWebKeySet);
    } catch {
      return this.failed("malformed", "the body is not a JSON Web Key Set");
    }
    // Two more refusals, each a failed fetch, so the last good set keeps serving within its grace:
    // a repeated member name (two `keys` arrays, or a key with two `n`s) is read last-wins here and
    // maybe first-wins by the provider's own tooling, so which keys it publishes is ambiguous; and an
    // empty set would refuse every token at once, which is an outage, not a rotation.
    const repeated = duplicateMemberName(result.text);
    if (repeated !== undefined) return this.failed("malformed", `the key set repeats the member name ${JSON.stringify(repeated)}`);
    if ((result.json as JSONWebKeySet).keys.length === 0) return this.failed("malformed", "the key set holds no key");
    this.fetches.ok++;
    this.goodFetches++;
    const now = this.options.now();
    const previous = this.current;
    if (this.failures > 0) {
      this.log({ level: "info", msg: "jwks fetch recovered", url: this.shownUrl, failed_fetches: this.failures });
    }
    this.failures = 0;
    this.retryAt = 0;
    if (previous && previous.text === result.text) {
      // The same set: keep its imported keys and its version (verified tokens stay valid).
      this.current = { ...previous, fetchedAt: now };
      return;
    }
    const keyCount = (result.json as JSONWebKeySet).keys.length;
    this.current = { keys, keyCount, text: result.text, version: ++this.versions, fetchedAt: now };
    this.log({ level: "info", msg: "jwks key set loaded", url: this.shownUrl, keys: keyCount, kids: kidsOf(result.json as JSONWebKeySet) });
  }

  private failed(outcome: Exclude<FetchOutcome, "ok">, detail: string): void {
    this.fetches[outcome]++;
    this.failures++;
    // Exponential backoff with jitter: the full pause at most, half of it at least.
    const ceiling = Math.min(AUTH_JWKS_BACKOFF_MAX_MS, AUTH_JWKS_BACKOFF_MIN_MS * 2 ** Math.min(this.failures - 1, 30));
    const pause = Math.round(ceiling / 2 + this.random() * (ceiling / 2));
    const now = this.options.now();
    this.retryAt = now + pause;
    const age = this.current ? now - this.current.fetchedAt : undefined;
    this.log({
      level: "warn",
      msg: "jwks fetch failed",
      url: this.shownUrl,
      outcome,
      detail,
      consecutive_failures: this.failures,
      retry_in_ms: pause,
      key_set_age_ms: age ?? null,
      serving:
        this.current && age !== undefined && age < this.options.maxAgeMs + this.options.graceMs
          ? "the last good key set (within its grace)"
          : "nothing: tokens are answered 503 auth-unavailable",
    });
  }

  private unavailable(): RegistryError {
    const retryAfterMs = Math.max(1000, this.failures > 0 ? this.retryAt - this.options.now() : 1000);
    return new RegistryError(
      "auth-unavailable",
      "bearer tokens cannot be verified right now: the identity provider's key set is unavailable; retry later",
      { retry_after_ms: retryAfterMs },
      true,
    );
  }
}

/** The set's key for the token; "unknown-key" when it holds none (a refetch may find it). */
async function lookUp(set: FetchedSet, header: JWSHeaderParameters, token: FlattenedJWSInput): Promise<{ key: CryptoKey; version: number } | "unknown-key"> {
  try {
    return { key: await set.keys(header, token), version: set.version };
  } catch (error) {
    if (error instanceof errors.JWKSNoMatchingKey) return "unknown-key";
    // Fail closed: a token without `kid` that several keys could verify is refused, not tried
    // against each (docs/security.md: rotation at providers that omit `kid`).
    if (error instanceof errors.JWKSMultipleMatchingKeys) throw new NoMatchingKey("several-keys");
    throw new NoMatchingKey("unusable-key");
  }
}

const kidsOf = (set: JSONWebKeySet) => set.keys.map((key) => (typeof key.kid === "string" ? key.kid : null));
