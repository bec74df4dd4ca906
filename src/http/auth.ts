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
}

export type Authenticator = (token: string) => Promise<Principal>;

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
  return async (token) => {
    let payload: JWTPayload;
    try {
      // jose refuses unsecured (alg: none) tokens and any algorithm outside `algorithms`.
      payload = typeof key === "function" ? (await jwtVerify(token, key, options)).payload : (await jwtVerify(token, key, options)).payload; // two overloads of jwtVerify
    } catch (error) {
      throw new BearerRefusal("unauthorized", `invalid bearer token: ${(error as Error).message}`, "invalid_token");
    }
    const tenant = identityClaim(payload, "tenant_id", 256);
    const peer = identityClaim(payload, "peer_principal_id", 512);
    const scope = typeof payload.scope === "string" ? payload.scope : "";
    return {
      subject: typeof payload.sub === "string" ? payload.sub : "",
      tenantId: tenant,
      peerPrincipalId: peer,
      scopes: new Set(scope.split(" ").filter(Boolean)),
    };
  };
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
