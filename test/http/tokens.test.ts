/**
 * Token attacks against both authenticators (HS256 shared secret; JWKS from a local key server):
 * expired, not yet valid, unsigned (`alg: none` in any spelling), wrong key, wrong algorithm
 * (including HS256 signed with the JWKS's own public key material), wrong issuer or audience,
 * keys smuggled in the token header, malformed and oversized tokens, and claims of the wrong type.
 * Every one is a 401 problem (403 for a token that is valid but carries no usable scope), never a
 * 500; valid tokens pass end to end.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { createHmac } from "node:crypto";
import { exportJWK, exportSPKI, generateKeyPair, SignJWT, type JWK, type CryptoKey } from "jose";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApp } from "../../src/app.js";
import { createAuthenticator, type Authenticator } from "../../src/http/auth.js";
import { RegistryError } from "../../src/registry/errors.js";
import { useTestDatabase } from "../support/database.js";
import { publishSimpleFleet } from "../../fixtures/records.js";
import { expectSaneAnswer } from "../support/fuzz.js";
import { TEST_SECRET } from "../support/http.js";

const TENANT = "tenant-tok";
const SCOPE = "catalog:read routes:read routes:write";
const b64 = (value: unknown) => Buffer.from(typeof value === "string" ? value : JSON.stringify(value)).toString("base64url");
const now = () => Math.floor(Date.now() / 1000);
const secretKey = (secret: string | Uint8Array) => (typeof secret === "string" ? new TextEncoder().encode(secret) : secret);

const db = useTestDatabase();

beforeAll(async () => {
  await publishSimpleFleet(db.registry, { prefix: "tok", tenants: [TENANT] });
});

/** GET the tenant's catalog through an app that uses `authenticator`; returns status and code. */
async function catalogWith(authenticator: Authenticator, token: string | undefined): Promise<{ status: number; code?: string }> {
  const app = createApp({ registry: db.registry, authenticator });
  const response = await app.request("/v1/catalog/capabilities", { headers: token === undefined ? {} : { authorization: `Bearer ${token}` } });
  const text = await response.text();
  const { status, body } = expectSaneAnswer(`token ${token?.slice(0, 60)}`, "GET", response, text, []);
  if (status === 401) expect(response.headers.get("www-authenticate")).toMatch(/^Bearer /);
  if (status === 200)
    expect(JSON.parse(text)).toMatchObject({ capabilities: [expect.objectContaining({ capability: expect.objectContaining({ id: "cap:tok.search" }) })] });
  return { status, ...(body ? { code: body.code as string } : {}) };
}

async function expectUnauthorized(authenticator: Authenticator, token: string, what: string) {
  await expect(authenticator(token), what).rejects.toBeInstanceOf(RegistryError);
  await expect(authenticator(token), what).rejects.toMatchObject({ code: "unauthorized" });
  expect(await catalogWith(authenticator, token), what).toEqual({ status: 401, code: "unauthorized" });
}

describe("HS256 tokens", () => {
  const auth = createAuthenticator({ hs256Secret: TEST_SECRET });
  const hs = (payload: Record<string, unknown>, options: { alg?: string; secret?: string; header?: Record<string, unknown> } = {}) =>
    new SignJWT(payload).setProtectedHeader({ alg: options.alg ?? "HS256", typ: "JWT", ...options.header }).sign(secretKey(options.secret ?? TEST_SECRET));
  const valid = () => hs({ scope: SCOPE, tenant_id: TENANT, sub: "gw", iat: now(), exp: now() + 600 });

  it("pass when signed with the secret, in time, with a string tenant", async () => {
    expect(await catalogWith(auth, await valid())).toEqual({ status: 200 });
    expect(await auth(await valid())).toMatchObject({ tenantId: TENANT, subject: "gw" });
  });

  it("are refused when expired or not yet valid", async () => {
    await expectUnauthorized(auth, await hs({ scope: SCOPE, tenant_id: TENANT, iat: now() - 7200, exp: now() - 3600 }), "expired an hour ago");
    await expectUnauthorized(auth, await hs({ scope: SCOPE, tenant_id: TENANT, iat: now() - 120, exp: now() - 60 }), "expired a minute ago");
    await expectUnauthorized(auth, await hs({ scope: SCOPE, tenant_id: TENANT, nbf: now() + 3600, exp: now() + 7200 }), "valid only in an hour");
    for (const claim of ["exp", "nbf", "iat"]) {
      await expectUnauthorized(auth, await hs({ scope: SCOPE, tenant_id: TENANT, exp: now() + 600, [claim]: String(now() + 600) }), `${claim} as a string`);
    }
  });

  it("are remembered once verified, but never past their expiry or the cache's maximum age", async () => {
    let clock = Date.now();
    const cached = createAuthenticator({ hs256Secret: TEST_SECRET, now: () => clock, cacheMaxAgeMs: 60_000 });
    const expiresAt = Math.floor(clock / 1000) + 120;
    const token = await hs({ scope: SCOPE, tenant_id: TENANT, sub: "gw", exp: expiresAt });
    const first = await cached(token);
    expect(first).toMatchObject({ tenantId: TENANT, subject: "gw" });
    expect(await cached(token)).toBe(first); // the remembered principal, not a new verification
    clock += 61_000; // past the maximum age: verified again (still valid), a new principal
    const again = await cached(token);
    expect(again).not.toBe(first);
    expect(again).toEqual(first);
    clock = expiresAt * 1000 + 10_000; // past exp (and the 5 s tolerance): refused, not served from the cache
    await expectUnauthorized(cached, token, "a remembered token after its expiry");
  });

  it("are remembered only when valid: a refusal is never cached as a success", async () => {
    const token = await hs({ scope: SCOPE, tenant_id: TENANT, exp: now() + 600 }, { secret: "x".repeat(48) });
    await expectUnauthorized(auth, token, "signed with another secret");
    await expectUnauthorized(auth, token, "signed with another secret, again");
  });

  it("are refused without an expiry: a leaked token must not live forever", async () => {
    await expectUnauthorized(auth, await hs({ scope: SCOPE, tenant_id: TENANT, iat: now() }), "no exp claim");
  });

  it("are refused unsigned, whatever the spelling of `none`", async () => {
    const signed = await valid();
    const [, payload, signature] = signed.split(".");
    for (const alg of ["none", "None", "nOnE", "NONE", "", "HS256 "]) {
      const header = b64({ alg, typ: "JWT" });
      await expectUnauthorized(auth, `${header}.${payload}.`, `alg ${JSON.stringify(alg)} without a signature`);
      await expectUnauthorized(auth, `${header}.${payload}.${signature}`, `alg ${JSON.stringify(alg)} with the original signature`);
    }
    await expectUnauthorized(auth, `${b64({ typ: "JWT" })}.${payload}.${signature}`, "no alg at all");
  });

  it("are refused when signed with another key or algorithm, or when the payload was changed", async () => {
    await expectUnauthorized(
      auth,
      await hs({ scope: SCOPE, tenant_id: TENANT, exp: now() + 600 }, { secret: "another-secret-another-secret-0123456789" }),
      "wrong key",
    );
    for (const alg of ["HS384", "HS512"]) {
      await expectUnauthorized(auth, await hs({ scope: SCOPE, tenant_id: TENANT, exp: now() + 600 }, { alg }), `${alg} with the right secret`);
    }
    const { privateKey } = await generateKeyPair("ES256");
    const es = await new SignJWT({ scope: SCOPE, tenant_id: TENANT }).setProtectedHeader({ alg: "ES256" }).setExpirationTime("10m").sign(privateKey);
    await expectUnauthorized(auth, es, "an ES256 token");
    const [header, , signature] = (await valid()).split(".");
    const escalated = b64({ scope: `${SCOPE} registry:admin`, tenant_id: "tenant-other", exp: now() + 600 });
    await expectUnauthorized(auth, `${header}.${escalated}.${signature}`, "payload swapped under the signature");
  });

  it("are refused when malformed or oversized, before any key is used", async () => {
    const [header, payload, signature] = (await valid()).split(".");
    const cases: [string, string][] = [
      ["two segments", `${header}.${payload}`],
      ["four segments", `${header}.${payload}.${signature}.${signature}`],
      ["empty segments", ".."],
      ["bad base64", `${header}.%%%.${signature}`],
      ["a header that is not JSON", `${b64("{not json")}.${payload}.${signature}`],
      ["a header that is an array", `${b64([])}.${payload}.${signature}`],
      ["a megabyte of base64", `${"A".repeat(1_000_000)}.${payload}.${signature}`],
      ["a megabyte header object", `${b64({ alg: "HS256", pad: "x".repeat(1_000_000) })}.${payload}.${signature}`],
    ];
    for (const [what, token] of cases) await expectUnauthorized(auth, token, what);
    // A correctly signed claims set that is not a JSON object.
    for (const claims of ["[]", "1", "null", '"text"', "{not json"]) {
      const text = `${b64({ alg: "HS256" })}.${b64(claims)}`;
      const mac = createHmac("sha256", TEST_SECRET).update(text).digest("base64url");
      await expectUnauthorized(auth, `${text}.${mac}`, `claims ${claims}`);
    }
  });

  it("are refused when tenant_id is not a usable string; a scope of the wrong type grants nothing (403)", async () => {
    for (const tenant of [7, 0, [TENANT], { id: TENANT }, "", " ", false, null, "t".repeat(257), `${TENANT}\u0000`]) {
      await expectUnauthorized(auth, await hs({ scope: SCOPE, tenant_id: tenant, exp: now() + 600 }), `tenant_id ${JSON.stringify(tenant)?.slice(0, 30)}`);
    }
    for (const scope of [[...SCOPE.split(" ")], 7, { "catalog:read": true }, "catalog:read\tregistry:admin"]) {
      const token = await hs({ scope, tenant_id: TENANT, exp: now() + 600 });
      expect(await catalogWith(auth, token), JSON.stringify(scope)).toEqual({ status: 403, code: "forbidden" });
    }
  });
});

describe("issuer and audience, when configured", () => {
  const auth = createAuthenticator({ hs256Secret: TEST_SECRET, issuer: "https://idp.example", audience: "aip-registry" });
  const token = (claims: Record<string, unknown>) =>
    new SignJWT({ scope: SCOPE, tenant_id: TENANT, ...claims }).setProtectedHeader({ alg: "HS256" }).setExpirationTime("10m").sign(secretKey(TEST_SECRET));

  it("pass with the configured issuer and an audience that includes the registry", async () => {
    expect(await catalogWith(auth, await token({ iss: "https://idp.example", aud: "aip-registry" }))).toEqual({ status: 200 });
    expect(await catalogWith(auth, await token({ iss: "https://idp.example", aud: ["billing", "aip-registry"] }))).toEqual({ status: 200 });
  });

  it("are refused for another, a missing or a look-alike issuer or audience", async () => {
    const cases: [string, Record<string, unknown>][] = [
      ["wrong issuer", { iss: "https://evil.example", aud: "aip-registry" }],
      ["issuer with a trailing slash", { iss: "https://idp.example/", aud: "aip-registry" }],
      ["no issuer", { aud: "aip-registry" }],
      ["wrong audience", { iss: "https://idp.example", aud: "aip-registry-staging" }],
      ["audiences without the registry", { iss: "https://idp.example", aud: ["billing", "crm"] }],
      ["no audience", { iss: "https://idp.example" }],
      ["issuer as an array", { iss: ["https://idp.example"], aud: "aip-registry" }],
    ];
    for (const [what, claims] of cases) await expectUnauthorized(auth, await token(claims), what);
  });
});

describe("JWKS tokens", () => {
  let server: Server;
  let rogue: Server;
  let rogueFetches = 0;
  let jwksUrl: string;
  let es: { privateKey: CryptoKey; publicKey: CryptoKey; publicJwk: JWK };
  let rs: { privateKey: CryptoKey };
  let auth: Authenticator;
  const OCT_SECRET = "an-oct-key-someone-put-in-the-jwks-0123456789";

  const listen = (handler: Parameters<typeof createServer>[1]) =>
    new Promise<Server>((resolve) => {
      const s = createServer(handler);
      s.listen(0, "127.0.0.1", () => resolve(s));
    });
  const urlOf = (s: Server) => `http://127.0.0.1:${(s.address() as AddressInfo).port}/jwks.json`;

  beforeAll(async () => {
    const esPair = await generateKeyPair("ES256", { extractable: true });
    const rsPair = await generateKeyPair("RS256", { extractable: true });
    es = {
      privateKey: esPair.privateKey,
      publicKey: esPair.publicKey,
      publicJwk: { ...(await exportJWK(esPair.publicKey)), kid: "es-1", alg: "ES256", use: "sig" },
    };
    rs = { privateKey: rsPair.privateKey };
    const keys = [
      es.publicJwk,
      { ...(await exportJWK(rsPair.publicKey)), kid: "rs-1", alg: "RS256", use: "sig" },
      { kty: "oct", kid: "oct-1", k: b64(OCT_SECRET) },
    ];
    server = await listen((_req, res) => {
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ keys }));
    });
    rogue = await listen((_req, res) => {
      rogueFetches++;
      res.end("{}");
    });
    jwksUrl = urlOf(server);
    auth = createAuthenticator({ jwksUrl, issuer: ISSUER, audience: AUDIENCE });
  });
  afterAll(async () => {
    await new Promise((resolve) => server?.close(resolve));
    await new Promise((resolve) => rogue?.close(resolve));
  });

  // JWKS mode requires an issuer and an audience (src/http/auth-settings.ts).
  const ISSUER = "https://idp.example";
  const AUDIENCE = "aip-registry";
  const claims = () => ({ scope: SCOPE, tenant_id: TENANT, iss: ISSUER, aud: AUDIENCE });
  const signed = (key: CryptoKey | Uint8Array, header: Record<string, unknown>) =>
    new SignJWT(claims())
      .setProtectedHeader(header as never)
      .setIssuedAt()
      .setExpirationTime("10m")
      .sign(key, { crit: { "exp-policy": true } }); // lets the signer write an extension the verifier does not know

  it("pass when signed by a key of the set (EC and RSA)", async () => {
    expect(await catalogWith(auth, await signed(es.privateKey, { alg: "ES256", kid: "es-1" }))).toEqual({ status: 200 });
    expect(await catalogWith(auth, await signed(rs.privateKey, { alg: "RS256", kid: "rs-1" }))).toEqual({ status: 200 });
  });

  it("are refused when signed by a key outside the set, under a known or an unknown kid", async () => {
    const { privateKey } = await generateKeyPair("ES256");
    await expectUnauthorized(auth, await signed(privateKey, { alg: "ES256", kid: "es-1" }), "another key claiming kid es-1");
    await expectUnauthorized(auth, await signed(privateKey, { alg: "ES256", kid: "es-9" }), "an unknown kid");
    await expectUnauthorized(auth, await signed(privateKey, { alg: "ES256" }), "no kid");
  });

  it("are refused when HS256-signed with the set's public key material (algorithm confusion) or with a symmetric key of the set", async () => {
    const pem = await exportSPKI(es.publicKey);
    const materials: [string, Uint8Array][] = [
      ["the public JWK as JSON", secretKey(JSON.stringify(es.publicJwk))],
      ["the public key PEM", secretKey(pem)],
      ["the x coordinate", Buffer.from(String(es.publicJwk.x), "base64url")],
    ];
    for (const [what, key] of materials) {
      for (const kid of ["es-1", undefined])
        await expectUnauthorized(auth, await signed(key, { alg: "HS256", ...(kid ? { kid } : {}) }), `HS256 with ${what}, kid ${kid}`);
    }
    await expectUnauthorized(auth, await signed(secretKey(OCT_SECRET), { alg: "HS256", kid: "oct-1" }), "HS256 with the oct key of the set");
    const [, payload] = (await signed(es.privateKey, { alg: "ES256", kid: "es-1" })).split(".");
    await expectUnauthorized(auth, `${b64({ alg: "none", kid: "es-1" })}.${payload}.`, "alg none with a known kid");
  });

  it("never trust a key or key-set location carried in the token itself", async () => {
    const { privateKey, publicKey } = await generateKeyPair("ES256", { extractable: true });
    const attackerJwk = { ...(await exportJWK(publicKey)), kid: "es-1" };
    await expectUnauthorized(auth, await signed(privateKey, { alg: "ES256", kid: "es-1", jwk: attackerJwk }), "an embedded jwk header");
    await expectUnauthorized(auth, await signed(privateKey, { alg: "ES256", kid: "es-1", jku: urlOf(rogue) }), "a jku header");
    await expectUnauthorized(auth, await signed(privateKey, { alg: "ES256", kid: "es-1", x5u: urlOf(rogue) }), "an x5u header");
    await expectUnauthorized(
      auth,
      await signed(es.privateKey, { alg: "ES256", kid: "es-1", crit: ["exp-policy"], "exp-policy": 1 }),
      "an unknown critical header",
    );
    expect(rogueFetches).toBe(0);
  });

  it("are refused for a wrong audience or issuer", async () => {
    const token = (extra: Record<string, unknown>) =>
      new SignJWT({ ...claims(), ...extra }).setProtectedHeader({ alg: "ES256", kid: "es-1" }).setExpirationTime("10m").sign(es.privateKey);
    expect(await catalogWith(auth, await token({}))).toEqual({ status: 200 });
    await expectUnauthorized(auth, await token({ aud: "someone-else" }), "wrong audience");
    await expectUnauthorized(auth, await token({ aud: undefined }), "no audience");
    await expectUnauthorized(auth, await token({ iss: "https://evil.example" }), "wrong issuer");
    await expectUnauthorized(auth, await token({ iss: undefined }), "no issuer");
  });

  it("answer an unreachable key set with 503 auth-unavailable, never a 401 or a 500", async () => {
    const dead = await listen(() => {});
    const url = urlOf(dead);
    await new Promise((resolve) => dead.close(resolve));
    const unreachable = createAuthenticator({ jwksUrl: url, issuer: ISSUER, audience: AUDIENCE, jwks: { log: () => {} } });
    const result = await catalogWith(unreachable, await signed(es.privateKey, { alg: "ES256", kid: "es-1" }));
    expect(result).toEqual({ status: 503, code: "auth-unavailable" });
  });
});
