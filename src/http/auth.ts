/**
 * Bearer-token authentication. The verified token is the only source of tenant identity: no
 * header, path or body field can name a tenant. Tokens are JWTs: HS256 with a shared secret
 * (development, small deployments) or an asymmetric algorithm with a key from an identity
 * provider's JWKS (production; the key set's lifetime, refetches and outages: src/http/jwks.ts).
 */
import { base64url, jwtVerify, type JWTPayload, type JWTVerifyOptions } from "jose";
import * as L from "../limits.js";
import { RegistryError } from "../registry/errors.js";
import { JWKS_ALGORITHMS, verifierSettingsProblems } from "./auth-settings.js";
import { RemoteKeySet, type KeySetOptions } from "./jwks.js";
import { BearerRefusal } from "./problem.js";
import { duplicateMemberName } from "./unique-members.js";

export const SCOPES = ["catalog:read", "routes:write", "routes:read", "replicas:write", "registry:read", "registry:admin", "fleet:read"] as const;
export type Scope = (typeof SCOPES)[number];

export interface Principal {
  subject: string;
  /** From the `tenant_id` claim only; null when the token carries none. */
  tenantId: string | null;
  /** From the `peer_principal_id` claim only: the connector host this token speaks for. */
  peerPrincipalId: string | null;
  scopes: ReadonlySet<string>;
}

export interface AuthConfig {
  hs256Secret?: string;
  jwksUrl?: string;
  issuer?: string;
  audience?: string;
  /** With jwksUrl: accept tokens of any issuer instead of requiring `issuer`. */
  allowAnyIssuer?: boolean;
  /** With jwksUrl: the accepted algorithms (default: all of JWKS_ALGORITHMS). */
  algorithms?: readonly string[];
  /** The JOSE header `typ` every token must carry (unset: not checked). */
  typ?: string;
  /** The longest `exp` minus `iat` or `nbf` (default: AUTH_MAX_TOKEN_LIFETIME_S in src/limits.ts). */
  maxTokenLifetimeS?: number;
  /** With jwksUrl: the key set's bounds (defaults: src/limits.ts) and, for tests, its fetch, jitter and log. */
  jwks?: Partial<Omit<KeySetOptions, "url" | "now">>;
  /** Verified tokens remembered (default 10,000; 0 verifies every request). See VerifiedTokens. */
  cacheEntries?: number;
  /** The longest a verification is trusted before the token is verified again (default 60 s). */
  cacheMaxAgeMs?: number;
  /** The clock (tests). */
  now?: () => number;
}

/** Verifies a bearer token; with a JWKS, `keySet` is the identity provider's key set (metrics read its status). */
export type Authenticator = ((token: string) => Promise<Principal>) & { readonly keySet?: RemoteKeySet };

/** The configuration members (src/config.ts) that choose and pin the token verifier. */
export interface AuthSettings {
  AUTH_HS256_SECRET?: string | undefined;
  AUTH_JWKS_URL?: string | undefined;
  AUTH_ISSUER?: string | undefined;
  AUTH_AUDIENCE?: string | undefined;
  AUTH_ALLOW_ANY_ISSUER?: boolean | undefined;
  AUTH_ALGORITHMS?: readonly string[] | undefined;
  AUTH_TYP?: string | undefined;
  AUTH_MAX_TOKEN_LIFETIME_S?: number | undefined;
  AUTH_JWKS_MAX_AGE_MS?: number | undefined;
  AUTH_JWKS_COOLDOWN_MS?: number | undefined;
  AUTH_JWKS_GRACE_MS?: number | undefined;
  AUTH_JWKS_TIMEOUT_MS?: number | undefined;
  AUTH_JWKS_MAX_BYTES?: number | undefined;
}

/**
 * The authenticator the configuration asks for, the same on Node and Workers: a JWKS URL wins
 * over a shared secret (Node passes its generated development secret as AUTH_HS256_SECRET).
 */
export function authenticatorFrom(config: AuthSettings): Authenticator {
  const keySet = present({
    maxAgeMs: config.AUTH_JWKS_MAX_AGE_MS,
    cooldownMs: config.AUTH_JWKS_COOLDOWN_MS,
    graceMs: config.AUTH_JWKS_GRACE_MS,
    timeoutMs: config.AUTH_JWKS_TIMEOUT_MS,
    maxBytes: config.AUTH_JWKS_MAX_BYTES,
  });
  return createAuthenticator({
    ...(config.AUTH_JWKS_URL ? { jwksUrl: config.AUTH_JWKS_URL, jwks: keySet } : present({ hs256Secret: config.AUTH_HS256_SECRET })),
    ...present({
      issuer: config.AUTH_ISSUER,
      audience: config.AUTH_AUDIENCE,
      allowAnyIssuer: config.AUTH_ALLOW_ANY_ISSUER,
      algorithms: config.AUTH_ALGORITHMS,
      typ: config.AUTH_TYP,
      maxTokenLifetimeS: config.AUTH_MAX_TOKEN_LIFETIME_S,
    }),
  });
}

/** The members that are set (an optional member may not be given as undefined here). */
const present = <T extends object>(members: T) =>
  Object.fromEntries(Object.entries(members).filter(([, value]) => value !== undefined)) as { [K in keyof T]?: Exclude<T[K], undefined> };

export function createAuthenticator(config: AuthConfig): Authenticator {
  const now = config.now ?? Date.now;
  let keySet: RemoteKeySet | undefined;
  let secret: Uint8Array | undefined;
  if (config.jwksUrl) {
    const problems = verifierSettingsProblems({
      AUTH_JWKS_URL: config.jwksUrl,
      AUTH_ISSUER: config.issuer,
      AUTH_AUDIENCE: config.audience,
      AUTH_ALLOW_ANY_ISSUER: config.allowAnyIssuer,
      AUTH_ALGORITHMS: config.algorithms,
    });
    if (problems.length > 0) throw new Error(problems.map((p) => `${p.setting} ${p.message}`).join("; "));
    keySet = new RemoteKeySet({
      maxAgeMs: L.AUTH_JWKS_MAX_AGE_MS.default,
      cooldownMs: L.AUTH_JWKS_COOLDOWN_MS.default,
      graceMs: L.AUTH_JWKS_GRACE_MS.default,
      timeoutMs: L.AUTH_JWKS_TIMEOUT_MS.default,
      maxBytes: L.AUTH_JWKS_MAX_BYTES.default,
      ...config.jwks,
      url: config.jwksUrl,
      now,
    });
  } else if (config.hs256Secret) {
    if (config.hs256Secret.length < 32) throw new Error("AUTH_HS256_SECRET must be at least 32 characters");
    secret = new TextEncoder().encode(config.hs256Secret);
  } else {
    throw new Error("configure AUTH_HS256_SECRET or AUTH_JWKS_URL");
  }
  const maxLifetimeS = config.maxTokenLifetimeS ?? (keySet ? L.AUTH_MAX_TOKEN_LIFETIME_S.jwksDefault : L.AUTH_MAX_TOKEN_LIFETIME_S.sharedSecretDefault);
  const options: JWTVerifyOptions = {
    // jose refuses unsigned (alg: none) tokens and any algorithm outside this list, before a key is looked up.
    algorithms: keySet ? [...(config.algorithms ?? JWKS_ALGORITHMS)] : ["HS256"],
    ...(config.issuer && !config.allowAnyIssuer ? { issuer: config.issuer } : {}),
    ...(config.audience ? { audience: config.audience } : {}),
    ...(config.typ ? { typ: config.typ } : {}),
    clockTolerance: L.AUTH_CLOCK_TOLERANCE_S,
    // A token without an expiry would be valid forever.
    requiredClaims: ["exp"],
  };
  const verify = async (token: string): Promise<{ principal: Principal; expiresAtMs: number; keySetVersion: number }> => {
    let payload: JWTPayload;
    let keySetVersion = 0;
    const at = { ...options, currentDate: new Date(now()) };
    try {
      if (keySet) {
        const set = keySet;
        const getKey = async (...args: Parameters<RemoteKeySet["key"]>) => {
          const found = await set.key(...args);
          keySetVersion = found.version;
          return found.key;
        };
        payload = (await jwtVerify(token, getKey, at)).payload;
      } else {
        payload = (await jwtVerify(token, secret as Uint8Array, at)).payload;
      }
    } catch (error) {
      // The key set being unavailable is not the token's fault: 503, never a 401 that tells a
      // caller to throw a valid token away.
      if (error instanceof RegistryError) throw error;
      throw new BearerRefusal("unauthorized", `invalid bearer token: ${(error as Error).message}`, "invalid_token");
    }
    const exceeded = limitExceeded(token, payload, now() / 1000, maxLifetimeS);
    if (exceeded) throw new BearerRefusal("unauthorized", `invalid bearer token: ${exceeded}`, "invalid_token");
    const tenant = identityClaim(payload, "tenant_id", L.TEXT_BYTES.id);
    const peer = identityClaim(payload, "peer_principal_id", L.TEXT_BYTES.peer_principal_id);
    const scope = typeof payload.scope === "string" ? payload.scope : "";
    const principal = {
      subject: typeof payload.sub === "string" ? payload.sub : "",
      tenantId: tenant,
      peerPrincipalId: peer,
      scopes: new Set(scope.split(" ").filter(Boolean)),
    };
    return { principal, expiresAtMs: (payload.exp as number) * 1000, keySetVersion };
  };
  const entries = config.cacheEntries ?? 10_000;
  const authenticate =
    entries <= 0
      ? async (token: string) => (await verify(token)).principal
      : (() => {
          // A principal verified under a key set stands only while that set is current and fresh.
          const keysCurrent = keySet ? (version: number) => (keySet as RemoteKeySet).isFresh(version) : undefined;
          const cache = new VerifiedTokens(entries, config.cacheMaxAgeMs ?? 60_000, now, keysCurrent);
          return async (token: string) => {
            const known = cache.get(token);
            if (known) return known;
            const verified = await verify(token);
            cache.set(token, verified.principal, verified.expiresAtMs, verified.keySetVersion);
            return verified.principal;
          };
        })();
  return keySet ? Object.assign(authenticate, { keySet }) : authenticate;
}

/**
 * What jose does not check: a lifetime (`exp` minus the earlier of `iat` and `nbf`; a token with
 * neither is measured from now, so it is accepted only while its `exp` is within the limit from
 * now), an `iat` in the future, and member names repeated in the header or the claims.
 */
function limitExceeded(token: string, payload: JWTPayload, nowS: number, maxLifetimeS: number): string | undefined {
  const tolerance = L.AUTH_CLOCK_TOLERANCE_S;
  if (typeof payload.iat === "number" && payload.iat > nowS + tolerance) return '"iat" claim is in the future';
  const starts = [payload.iat, payload.nbf].filter((value): value is number => typeof value === "number");
  const start = starts.length > 0 ? Math.min(...starts) : nowS;
  if ((payload.exp as number) - start > maxLifetimeS) return `the token's lifetime exceeds ${maxLifetimeS} s`;
  const [header = "", claims = ""] = token.split(".");
  const decode = (segment: string) => new TextDecoder().decode(base64url.decode(segment));
  const repeated = duplicateMemberName(decode(header)) ?? duplicateMemberName(decode(claims));
  if (repeated !== undefined) return `a member name appears twice (${JSON.stringify(repeated.slice(0, 64))})`;
  return undefined;
}

/**
 * Principals of tokens verified recently, by the token's exact text: a gateway sends the same
 * token with every request for its lifetime, and verifying it (an HMAC or a signature, the JOSE
 * header and claims parsed again) every time was a large share of the Node server's CPU per
 * routing cycle (docs/decisions.md). Only
 * successful verifications are kept, each until the token's own `exp` (no clock tolerance: the
 * cache never extends a token's life) or `maxAgeMs`, whichever comes first, and, with a JWKS, only
 * while the key set it was verified under is current and within its maximum age: the cache never
 * honours a key longer than the key set does. The oldest entry goes when the cache is full.
 */
export class VerifiedTokens {
  private readonly entries = new Map<string, { principal: Principal; validUntilMs: number; keySetVersion: number }>();

  constructor(
    private readonly maxEntries: number,
    private readonly maxAgeMs: number,
    private readonly now: () => number,
    /** Whether verifications under a key-set version still stand (src/http/jwks.ts isFresh); always, for a shared secret. */
    private readonly keysCurrent: (version: number) => boolean = () => true,
  ) {}

  get(token: string): Principal | undefined {
    const entry = this.entries.get(token);
    if (!entry) return undefined;
    if (this.now() < entry.validUntilMs && this.keysCurrent(entry.keySetVersion)) return entry.principal;
    this.entries.delete(token);
    return undefined;
  }

  set(token: string, principal: Principal, expiresAtMs: number, keySetVersion = 0): void {
    const validUntilMs = Math.min(expiresAtMs, this.now() + this.maxAgeMs);
    if (!(validUntilMs > this.now())) return;
    if (this.entries.size >= this.maxEntries) {
      const oldest = this.entries.keys().next();
      if (!oldest.done) this.entries.delete(oldest.value);
    }
    this.entries.set(token, { principal, validUntilMs, keySetVersion });
  }
}

const utf8 = new TextEncoder();

/**
 * An identity claim: absent (null), or a non-empty string without NUL or unpaired surrogates
 * (which the database would turn into U+FFFD, making two identities one). Anything else makes
 * the token invalid rather than anonymous.
 */
function identityClaim(payload: JWTPayload, name: string, maxBytes: number): string | null {
  const value = payload[name];
  if (value === undefined) return null;
  // Counted in UTF-8 bytes, as the database counts the same identifiers (src/limits.ts, TEXT_BYTES).
  if (typeof value !== "string" || value.trim() === "" || utf8.encode(value).length > maxBytes || /[\u0000]|\p{Cs}/u.test(value)) {
    throw new BearerRefusal("unauthorized", `invalid bearer token: ${name} claim must be a non-empty string`, "invalid_token");
  }
  return value;
}
