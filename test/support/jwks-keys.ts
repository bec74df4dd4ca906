/**
 * Signing keys and tokens for the JWKS tests, on jose and WebCrypto only: the same module runs in
 * Node (test/http/jwks.test.ts) and in workerd (test/worker/jwks.test.ts).
 */
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey, type JWK, type JWTPayload } from "jose";

export interface SigningKey {
  alg: string;
  kid: string;
  privateKey: CryptoKey;
  /** The public half as the key set publishes it. */
  jwk: JWK;
}

export async function signingKey(alg: string, kid: string): Promise<SigningKey> {
  const { privateKey, publicKey } = await generateKeyPair(alg, { extractable: true });
  return { alg, kid, privateKey, jwk: { ...(await exportJWK(publicKey)), kid, alg, use: "sig" } };
}

export interface TokenOptions {
  /** Seconds since the epoch that the token calls now (iat); default: the real clock. */
  nowS?: number;
  /** Lifetime in seconds (exp = now + ttl); default 600. */
  ttlS?: number;
  /** Header members beyond alg and kid (kid: null omits it). */
  header?: Record<string, unknown>;
  kid?: string | null;
}

/** A token signed by `key`, valid for `ttlS` from `nowS`, carrying `claims` (iss/aud included when given). */
export function signToken(key: SigningKey, claims: JWTPayload, options: TokenOptions = {}): Promise<string> {
  const nowS = options.nowS ?? Math.floor(Date.now() / 1000);
  const kid = options.kid === undefined ? key.kid : options.kid;
  return new SignJWT({ iat: nowS, exp: nowS + (options.ttlS ?? 600), ...claims })
    .setProtectedHeader({ alg: key.alg, ...(kid === null ? {} : { kid }), ...options.header } as never)
    .sign(key.privateKey);
}
