/**
 * Bearer-token authentication. The verified token is the only source of tenant identity: no
 * header, path or body field can name a tenant. Tokens are JWTs: HS256 with a shared secret
 * (development, small deployments) or any asymmetric algorithm from a JWKS URL (production).
 */
import { createRemoteJWKSet, jwtVerify, type JWTPayload, type JWTVerifyGetKey } from "jose";
import { BearerRefusal } from "./problem.js";

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
  /** Verified tokens remembered (default 10,000; 0 verifies every request). See VerifiedTokens. */
  cacheEntries?: number;
  /** The longest a verification is trusted before the token is verified again (default 60 s). */
  cacheMaxAgeMs?: number;
  /** The clock (tests). */
  now?: () => number;
}

export type Authenticator = (token: string) => Promise<Principal>;

/** The configuration members (src/config.ts) that choose and pin the token verifier. */
export interface AuthSettings {
  AUTH_HS256_SECRET?: string | undefined;
  AUTH_JWKS_URL?: string | undefined;
  AUTH_ISSUER?: string | undefined;
  AUTH_AUDIENCE?: string | undefined;
}

/**
 * The authenticator the configuration asks for, the same on Node and Workers: a JWKS URL wins
 * over a shared secret (Node passes its generated development secret as AUTH_HS256_SECRET).
 */
export function authenticatorFrom(config: AuthSettings): Authenticator {
  return createAuthenticator({
    ...(config.AUTH_JWKS_URL ? { jwksUrl: config.AUTH_JWKS_URL } : { hs256Secret: config.AUTH_HS256_SECRET }),
    ...(config.AUTH_ISSUER ? { issuer: config.AUTH_ISSUER } : {}),
    ...(config.AUTH_AUDIENCE ? { audience: config.AUTH_AUDIENCE } : {}),
  });
}

const ASYMMETRIC = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"];

export function createAuthenticator(config: AuthConfig): Authenticator {
  let key: Uint8Array | JWTVerifyGetKey;
  let algorithms: string[];
  if (config.jwksUrl) {
    key = createRemoteJWKSet(new URL(config.jwksUrl));
    algorithms = ASYMMETRIC;
  } else if (config.hs256Secret) {
    if (config.hs256Secret.length < 32) throw new Error("AUTH_HS256_SECRET must be at least 32 characters");
    key = new TextEncoder().encode(config.hs256Secret);
    algorithms = ["HS256"];
  } else {
    throw new Error("configure AUTH_HS256_SECRET or AUTH_JWKS_URL");
  }
  const options = {
    algorithms,
    ...(config.issuer ? { issuer: config.issuer } : {}),
    ...(config.audience ? { audience: config.audience } : {}),
    clockTolerance: 5,
    // A token without an expiry would be valid forever.
    requiredClaims: ["exp"],
  };
  const verify = async (token: string): Promise<{ principal: Principal; expiresAtMs: number }> => {
    let payload: JWTPayload;
    try {
      // jose refuses unsecured (alg: none) tokens and any algorithm outside `algorithms`.
      const at = config.now ? { ...options, currentDate: new Date(config.now()) } : options;
      payload = typeof key === "function" ? (await jwtVerify(token, key, at)).payload : (await jwtVerify(token, key, at)).payload; // two overloads of jwtVerify
    } catch (error) {
      throw new BearerRefusal("unauthorized", `invalid bearer token: ${(error as Error).message}`, "invalid_token");
    }
    const tenant = identityClaim(payload, "tenant_id", 256);
    const peer = identityClaim(payload, "peer_principal_id", 512);
    const scope = typeof payload.scope === "string" ? payload.scope : "";
    const principal = {
      subject: typeof payload.sub === "string" ? payload.sub : "",
      tenantId: tenant,
      peerPrincipalId: peer,
      scopes: new Set(scope.split(" ").filter(Boolean)),
    };
    return { principal, expiresAtMs: (payload.exp as number) * 1000 };
  };
  const entries = config.cacheEntries ?? 10_000;
  if (entries <= 0) return async (token) => (await verify(token)).principal;
  const cache = new VerifiedTokens(entries, config.cacheMaxAgeMs ?? 60_000, config.now ?? Date.now);
  return async (token) => {
    const known = cache.get(token);
    if (known) return known;
    const verified = await verify(token);
    cache.set(token, verified.principal, verified.expiresAtMs);
    return verified.principal;
  };
}

/**
 * Principals of tokens verified recently, by the token's exact text: a gateway sends the same
 * token with every request for its lifetime, and verifying it (an HMAC or a signature, the JOSE
 * header and claims parsed again) was a seventh of the Node server's CPU per routing cycle. Only
 * successful verifications are kept, each until the token's own `exp` (no clock tolerance: the
 * cache never extends a token's life) or `maxAgeMs`, whichever comes first, so a key removed from
 * the JWKS stops being honoured within `maxAgeMs`. The oldest entry goes when the cache is full.
 */
export class VerifiedTokens {
  private readonly entries = new Map<string, { principal: Principal; validUntilMs: number }>();

  constructor(
    private readonly maxEntries: number,
    private readonly maxAgeMs: number,
    private readonly now: () => number,
  ) {}

  get(token: string): Principal | undefined {
    const entry = this.entries.get(token);
    if (!entry) return undefined;
    if (this.now() < entry.validUntilMs) return entry.principal;
    this.entries.delete(token);
    return undefined;
  }

  set(token: string, principal: Principal, expiresAtMs: number): void {
    const validUntilMs = Math.min(expiresAtMs, this.now() + this.maxAgeMs);
    if (!(validUntilMs > this.now())) return;
    if (this.entries.size >= this.maxEntries) {
      const oldest = this.entries.keys().next();
      if (!oldest.done) this.entries.delete(oldest.value);
    }
    this.entries.set(token, { principal, validUntilMs });
  }
}

/**
 * An identity claim: absent (null), or a non-empty string without NUL or unpaired surrogates
 * (which the database would turn into U+FFFD, making two identities one). Anything else makes
 * the token invalid rather than anonymous.
 */
function identityClaim(payload: JWTPayload, name: string, maxLength: number): string | null {
  const value = payload[name];
  if (value === undefined) return null;
  if (typeof value !== "string" || value.trim() === "" || value.length > maxLength || /[\u0000]|\p{Cs}/u.test(value)) {
    throw new BearerRefusal("unauthorized", `invalid bearer token: ${name} claim must be a non-empty string`, "invalid_token");
  }
  return value;
}
