/**
 * Minting HS256 development tokens (CLI `token`, `npm start` without a configured secret, tests).
 * Production deployments normally verify tokens from their identity provider via AUTH_JWKS_URL.
 */
import { SignJWT } from "jose";
import type { Scope } from "./auth.js";

export interface TokenClaims {
  subject: string;
  scopes: Scope[] | string[];
  tenantId?: string;
  /** Binds a connector-host token to the replicas provisioned for this peer principal. */
  peerPrincipalId?: string;
  issuer?: string;
  audience?: string;
  /** Lifetime in seconds (default one hour). */
  ttlSeconds?: number;
}

export async function mintToken(secret: string, claims: TokenClaims): Promise<string> {
  const jwt = new SignJWT({
    scope: claims.scopes.join(" "),
    ...(claims.tenantId ? { tenant_id: claims.tenantId } : {}),
    ...(claims.peerPrincipalId ? { peer_principal_id: claims.peerPrincipalId } : {}),
  })
    .setProtectedHeader({ alg: "HS256", typ: "JWT" })
    .setSubject(claims.subject)
    .setIssuedAt()
    .setExpirationTime(`${claims.ttlSeconds ?? 3600}s`);
  if (claims.issuer) jwt.setIssuer(claims.issuer);
  if (claims.audience) jwt.setAudience(claims.audience);
  return jwt.sign(new TextEncoder().encode(secret));
}
