/**
 * Trusting an identity provider (issue 27), against a real local JWKS server whose key sets and
 * failures change at runtime (test/support/jwks-server.ts), on an injected clock (nothing here
 * sleeps; the one real wait is a fetch timeout of a hanging provider):
 *
 * - rotation: a removed key stops being honoured at the key set's maximum age whatever the
 *   traffic, the verified-token cache never outlives the set, an added key is picked up at the
 *   first unknown kid after the cooldown;
 * - a failing provider (500, refused connection, hang, malformed, oversized, reset): fetches
 *   shared and backing off with jitter, the last good set served within its grace, then 503
 *   `auth-unavailable` with Retry-After, never a 401 and never the provider's detail; logs and
 *   metrics tell;
 * - configuration refused at start (audience, issuer, plain-HTTP URL, algorithms), algorithms and
 *   `typ`, token lifetime and `iat` limits, repeated member names, kid-less tokens in rotation.
 */
import { createHmac } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CompactSign } from "jose";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { createApp } from "../../src/app.js";
import { loadConfig } from "../../src/config.js";
import { JWKS_ALGORITHMS } from "../../src/http/auth-settings.js";
import { authenticatorFrom, createAuthenticator, type AuthConfig, type Authenticator } from "../../src/http/auth.js";
import { startServer, type RunningServer } from "../../src/entry/node.js";
import { RegistryError } from "../../src/registry/errors.js";
import { createTestDatabase, type TestDatabase } from "../support/database.js";
import { freePort } from "../../fixtures/free-port.js";
import { TEST_SECRET } from "../support/http.js";
import { signingKey, signToken, type SigningKey, type TokenOptions } from "../support/jwks-keys.js";
import { startJwksServer, type JwksServer } from "../support/jwks-server.js";

const ISSUER = "https://idp.test";
const AUDIENCE = "aip-registry";
const CLAIMS = { iss: ISSUER, aud: AUDIENCE, sub: "gw", scope: "fleet:read" };
/** What a caller must never be told about the identity provider. */
const IDP_DETAIL =
  /fetch failed|ECONNREFUSED|ECONNRESET|HTTP 5\d\d|Expected 200|timed out|request timed|not UTF-8|JSON Web Key Set|bad day|127\.0\.0\.1|content-length/i;

let idp: JwksServer;
let db: TestDatabase;
let a: SigningKey;
let b: SigningKey;
let c: SigningKey;
let sequence = 0;

beforeAll(async () => {
  [idp, db, a, b, c] = await Promise.all([
    startJwksServer(),
    createTestDatabase(),
    signingKey("ES256", "key-a"),
    signingKey("ES256", "key-b"),
    signingKey("RS256", "key-c"),
  ]);
});
afterAll(async () => {
  await idp?.close();
  await db?.close();
});

class Clock {
  ms = Date.UTC(2030, 0, 1);
  readonly now = () => this.ms;
  get seconds() {
    return Math.floor(this.ms / 1000);
  }
  advance(ms: number) {
    this.ms += ms;
  }
}

/** A key-set endpoint of its own for one test. */
function endpoint(keys = [a.jwk, b.jwk]) {
  const name = `set-${++sequence}`;
  const ep = idp.endpoint(name);
  ep.set({ keys, mode: { kind: "ok" } });
  return { name, url: idp.url(name), ep };
}

function verifier(url: string, clock: Clock, overrides: Partial<AuthConfig> = {}, logs: Record<string, unknown>[] = []): Authenticator {
  const { jwks, ...rest } = overrides;
  return createAuthenticator({
    jwksUrl: url,
    issuer: ISSUER,
    audience: AUDIENCE,
    now: clock.now,
    jwks: { random: () => 0.5, log: (entry) => logs.push(entry), ...jwks },
    ...rest,
  });
}

const sign = (key: SigningKey, clock: Clock, claims: Record<string, unknown> = {}, options: TokenOptions = {}) =>
  signToken(key, { ...CLAIMS, ...claims }, { nowS: clock.seconds, ...options });

/** "ok", or the problem code the verifier refused with. */
async function outcome(auth: Authenticator, token: string): Promise<string> {
  try {
    await auth(token);
    return "ok";
  } catch (error) {
    if (error instanceof RegistryError) return error.code;
    throw error;
  }
}

async function refusal(auth: Authenticator, token: string): Promise<RegistryError> {
  const error = await auth(token).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(RegistryError);
  return error as RegistryError;
}

describe("key rotation and revocation", () => {
  it("stops honouring a removed key at the key set's maximum age, whatever the traffic, and the token cache with it", async () => {
    const clock = new Clock();
    const { url, ep } = endpoint();
    // The verified-token cache would trust a token for 60 s: the key set's 30 s must win.
    const auth = verifier(url, clock, { jwks: { maxAgeMs: 30_000 }, cacheMaxAgeMs: 60_000 });
    const early = await sign(a, clock);
    expect(await outcome(auth, early)).toBe("ok");
    expect(ep.fetches).toBe(1);
    ep.set({ keys: [b.jwk] }); // key-a is revoked at the provider
    clock.advance(29_999);
    expect(await outcome(auth, await sign(a, clock))).toBe("ok"); // within the bound, and no fetch for it
    expect(await outcome(auth, early)).toBe("ok");
    expect(ep.fetches).toBe(1);
    clock.advance(1);
    expect(await outcome(auth, await sign(a, clock))).toBe("unauthorized");
    expect(await outcome(auth, early)).toBe("unauthorized");
    expect(await outcome(auth, await sign(b, clock))).toBe("ok");
    expect(ep.fetches).toBe(2);
  });

  it("keeps verified tokens across refetches that return the same key set", async () => {
    const clock = new Clock();
    const { url, ep } = endpoint();
    const auth = verifier(url, clock, { jwks: { maxAgeMs: 10_000 } });
    const token = await sign(a, clock);
    const first = await auth(token);
    clock.advance(10_000);
    expect(await auth(await sign(b, clock))).toMatchObject({ subject: "gw" }); // refetched: same set
    expect(ep.fetches).toBe(2);
    expect(await auth(token)).toBe(first); // still the remembered principal
  });

  it("picks up a new key at the first unknown kid after the cooldown, and no sooner", async () => {
    const clock = new Clock();
    const { url, ep } = endpoint([a.jwk]);
    const auth = verifier(url, clock, { jwks: { cooldownMs: 10_000 } });
    expect(await outcome(auth, await sign(a, clock))).toBe("ok");
    ep.set({ keys: [a.jwk, c.jwk] });
    clock.advance(5000);
    expect(await outcome(auth, await sign(c, clock))).toBe("unauthorized");
    for (let i = 0; i < 5; i++) expect(await outcome(auth, await sign(a, clock, {}, { kid: `made-up-${i}` }))).toBe("unauthorized");
    expect(ep.fetches).toBe(1);
    clock.advance(5000);
    expect(await outcome(auth, await sign(c, clock))).toBe("ok");
    expect(ep.fetches).toBe(2);
    expect(await outcome(auth, await sign(a, clock, {}, { kid: "made-up-again" }))).toBe("unauthorized");
    expect(ep.fetches).toBe(2);
  });

  it("refuses a token without kid when several keys of its type are in the set (fail closed), and accepts it with one", async () => {
    const clock = new Clock();
    const two = verifier(endpoint([a.jwk, b.jwk]).url, clock);
    const error = await refusal(two, await sign(a, clock, {}, { kid: null }));
    expect(error.code).toBe("unauthorized");
    expect(error.message).toMatch(/names no kid and several keys/);
    const one = verifier(endpoint([a.jwk, c.jwk]).url, clock);
    expect(await outcome(one, await sign(a, clock, {}, { kid: null }))).toBe("ok");
  });
});

describe("a failing identity provider", () => {
  it("is not hammered: failed fetches back off exponentially with jitter (counted fetches)", async () => {
    const clock = new Clock();
    const start = clock.ms;
    const { url, ep } = endpoint();
    ep.set({ mode: { kind: "status", status: 500 } });
    const auth = verifier(url, clock);
    const token = await sign(a, clock);
    const attempts: number[] = [];
    for (let t = 0; t <= 60_000; t += 250) {
      clock.ms = start + t;
      const before = ep.fetches;
      expect(await outcome(auth, token)).toBe("auth-unavailable");
      if (ep.fetches > before) attempts.push(t);
    }
    // Jitter fixed at 0.5: each pause is 3/4 of 1 s, 2 s, 4 s ... capped at 30 s.
    expect(attempts).toEqual([0, 750, 2250, 5250, 11_250, 23_250, 45_750]);
    expect(auth.keySet?.status()).toMatchObject({ consecutiveFailures: 7, ageMs: undefined });
  });

  it("draws each pause between half and all of the doubling bound", async () => {
    for (const [random, first] of [
      [0, 500],
      [0.999_999, 1000],
    ] as const) {
      const clock = new Clock();
      const { url, ep } = endpoint();
      ep.set({ mode: { kind: "status", status: 503 } });
      const auth = verifier(url, clock, { jwks: { random: () => random } });
      await outcome(auth, await sign(a, clock));
      expect(auth.keySet?.status().backoffMs).toBe(first);
    }
  });

  it("shares one fetch among concurrent verifications, good or failed", async () => {
    for (const answer of [{ kind: "ok" }, { kind: "status", status: 500 }] as const) {
      const clock = new Clock();
      const { url, ep } = endpoint();
      ep.set({ mode: { kind: "hold" } });
      // Waiters give up after the fetch timeout: make it longer than any busy machine needs here.
      const auth = verifier(url, clock, { jwks: { timeoutMs: 60_000 } });
      const tokens = await Promise.all(Array.from({ length: 20 }, (_, i) => sign(i % 2 ? a : b, clock, { sub: `gw-${i}` })));
      const results = Promise.all(tokens.map((token) => outcome(auth, token)));
      await vi.waitFor(() => expect(ep.fetches).toBe(1), { timeout: 30_000 });
      ep.set({ mode: answer });
      expect(new Set(await results)).toEqual(new Set([answer.kind === "ok" ? "ok" : "auth-unavailable"]));
      expect(ep.fetches).toBe(1);
    }
  });

  it("lets unknown kids refetch at most once while it fails, and keeps verifying known keys", async () => {
    const clock = new Clock();
    const { url, ep } = endpoint();
    const auth = verifier(url, clock);
    expect(await outcome(auth, await sign(a, clock))).toBe("ok");
    ep.set({ mode: { kind: "status", status: 500 } });
    clock.advance(20_000); // past the cooldown, within the maximum age
    const unknown = await Promise.all(Array.from({ length: 20 }, (_, i) => sign(a, clock, {}, { kid: `unknown-${i}` })));
    for (const token of unknown) expect(await outcome(auth, token)).toBe("auth-unavailable");
    expect(ep.fetches).toBe(2);
    expect(await outcome(auth, await sign(b, clock))).toBe("ok");
  });

  it.each([
    ["an HTTP 500", { kind: "status", status: 500 }, "http-error", "HTTP 500"],
    ["a redirect (never followed)", { kind: "status", status: 302 }, "http-error", "HTTP 302"],
    ["a body that is not JSON", { kind: "body", body: "<html>maintenance</html>" }, "malformed", "not UTF-8 JSON"],
    ["JSON that is not a key set", { kind: "body", body: '{"keys": 5}' }, "malformed", "not a JSON Web Key Set"],
    ["keys that are not JWKs", { kind: "body", body: '{"keys": [{"kty": 1}]}' }, "malformed", "not a JSON Web Key Set"],
    [
      "a key set that repeats `keys` (read last-wins)",
      { kind: "body", body: '{"keys": [{"kty": "EC"}], "keys": [{"kty": "OKP"}]}' },
      "malformed",
      'repeats the member name "keys"',
    ],
    ["a key that repeats a member", { kind: "body", body: '{"keys": [{"kty": "EC", "kty": "RSA"}]}' }, "malformed", 'repeats the member name "kty"'],
    ["an empty key set", { kind: "body", body: '{"keys": []}' }, "malformed", "holds no key"],
    ["an oversized body with its length declared", { kind: "oversized", bytes: 64 * 1024 * 1024, declared: true }, "too-large", "content-length"],
    ["an oversized body streamed without a length", { kind: "oversized", bytes: 64 * 1024 * 1024, declared: false }, "too-large", "exceeds"],
    ["a dropped connection", { kind: "reset" }, "network", ""],
  ] as const)("answers %s with 503 auth-unavailable and Retry-After, logged and counted, told to nobody", async (_what, mode, counted, detail) => {
    const clock = new Clock();
    const { url, ep } = endpoint();
    ep.set({ mode });
    const logs: Record<string, unknown>[] = [];
    const auth = verifier(url, clock, {}, logs);
    const response = await createApp({ registry: db.registry, authenticator: auth }).request("/v1/fleet/status", {
      headers: { authorization: `Bearer ${await sign(a, clock)}` },
    });
    await expectUnavailable(response);
    expect(auth.keySet?.status().fetches[counted]).toBe(1);
    expect(logs).toEqual([expect.objectContaining({ level: "warn", msg: "jwks fetch failed", outcome: counted, detail: expect.stringContaining(detail) })]);
  });

  it("answers a refused connection and a hanging provider the same way", async () => {
    const clock = new Clock();
    const closed = `http://127.0.0.1:${await freePort()}/jwks.json`;
    const logs: Record<string, unknown>[] = [];
    const refused = verifier(closed, clock, {}, logs);
    await expectUnavailable(
      await createApp({ registry: db.registry, authenticator: refused }).request("/v1/fleet/status", { headers: bearer(await sign(a, clock)) }),
    );
    expect(refused.keySet?.status().fetches.network).toBe(1);
    expect(logs[0]).toMatchObject({ outcome: "network", detail: "ECONNREFUSED" });

    const { url, ep } = endpoint();
    ep.set({ mode: { kind: "hold" } });
    const hanging = verifier(url, clock, { jwks: { timeoutMs: 300 } });
    await expectUnavailable(
      await createApp({ registry: db.registry, authenticator: hanging }).request("/v1/fleet/status", { headers: bearer(await sign(a, clock)) }),
    );
    expect(hanging.keySet?.status().fetches.timeout).toBe(1);
    ep.set({ mode: { kind: "ok" } });
  });

  it("serves the last good key set for the grace period, then answers 503 until the provider is back", async () => {
    const clock = new Clock();
    const { url, ep } = endpoint();
    const logs: Record<string, unknown>[] = [];
    const auth = verifier(url, clock, { jwks: { maxAgeMs: 60_000, graceMs: 300_000 } }, logs);
    const app = createApp({ registry: db.registry, authenticator: auth });
    const status = async () => app.request("/v1/fleet/status", { headers: bearer(await sign(a, clock)) });
    expect((await status()).status).toBe(200);
    ep.set({ mode: { kind: "status", status: 500 } });
    clock.advance(60_000);
    expect((await status()).status).toBe(200); // past the maximum age: the refetch failed, the last good set serves
    expect(ep.fetches).toBe(2);
    expect(logs.at(-1)).toMatchObject({ msg: "jwks fetch failed", serving: expect.stringMatching(/^the last good key set/) });
    clock.advance(300_000 - 1);
    expect((await status()).status).toBe(200); // the last moment of the grace
    clock.advance(1);
    const refused = await status();
    await expectUnavailable(refused);
    ep.set({ mode: { kind: "ok" } });
    clock.advance(Number(refused.headers.get("retry-after")) * 1000);
    expect((await status()).status).toBe(200);
    expect(logs.at(-1)).toMatchObject({ level: "info", msg: "jwks fetch recovered" });
  });

  it("keeps serving the last good key set within its grace when the provider publishes an empty set or repeats `keys`", async () => {
    const clock = new Clock();
    const { url, ep } = endpoint();
    const logs: Record<string, unknown>[] = [];
    const auth = verifier(url, clock, { jwks: { maxAgeMs: 60_000, graceMs: 300_000, cooldownMs: 0 } }, logs);
    expect(await outcome(auth, await sign(a, clock))).toBe("ok");
    // An empty set would lock every token out at once; a repeated `keys` member, read last-wins,
    // would swap key a for key c. Both are failed fetches: the last good set ({a, b}) serves.
    for (const body of ['{"keys": []}', JSON.stringify({ keys: [a.jwk] }).replace(/}$/, `, "keys": [${JSON.stringify(c.jwk)}]}`)]) {
      ep.set({ mode: { kind: "body", body } });
      clock.advance(60_000); // past the maximum age: the next verification fetches
      expect(await outcome(auth, await sign(a, clock, { sub: `gw-${clock.ms}` }))).toBe("ok");
      expect(logs.at(-1)).toMatchObject({ msg: "jwks fetch failed", outcome: "malformed", serving: expect.stringMatching(/^the last good key set/) });
      // A key only the refused body names is not picked up (the provider counts as failing: 503, not 401).
      expect(await outcome(auth, await sign(c, clock))).toBe("auth-unavailable");
      clock.advance(auth.keySet?.status().backoffMs ?? 0);
    }
    expect(auth.keySet?.status()).toMatchObject({ keys: 2, fetches: { ok: 1, malformed: 2 } });
    clock.advance(300_000); // past the grace: nothing usable is left
    expect(await outcome(auth, await sign(a, clock, { sub: "late" }))).toBe("auth-unavailable");
  });

  it("reports fetches by outcome, the key set's age and the backoff in the Node metrics", async () => {
    const clock = new Clock();
    const { url, ep } = endpoint();
    ep.set({ mode: { kind: "status", status: 500 } });
    const auth = verifier(url, clock);
    const app = createApp({ registry: db.registry, authenticator: auth, metrics: { public: true, ...(auth.keySet ? { keySet: auth.keySet } : {}) } });
    const scrape = async () => (await app.request("/metrics")).text();
    expect(await scrape()).toMatch(/^aip_auth_jwks_fetch_total\{outcome="http-error"\} 0$/m);
    await outcome(auth, await sign(a, clock));
    let text = await scrape();
    expect(text).toMatch(/^aip_auth_jwks_fetch_total\{outcome="http-error"\} 1$/m);
    expect(text).toMatch(/^aip_auth_jwks_consecutive_failures 1$/m);
    expect(text).toMatch(/^aip_auth_jwks_backoff_seconds 0\.75$/m);
    expect(text).not.toMatch(/^aip_auth_jwks_age_seconds /m);
    ep.set({ mode: { kind: "ok" } });
    clock.advance(750);
    expect(await outcome(auth, await sign(a, clock))).toBe("ok");
    clock.advance(12_000);
    text = await scrape();
    expect(text).toMatch(/^aip_auth_jwks_fetch_total\{outcome="ok"\} 1$/m);
    expect(text).toMatch(/^aip_auth_jwks_age_seconds 12$/m);
    expect(text).toMatch(/^aip_auth_jwks_keys 2$/m);
    expect(text).toMatch(/^aip_auth_jwks_consecutive_failures 0$/m);
    expect(text).toMatch(/^aip_auth_jwks_backoff_seconds 0$/m);
  });
});

describe("configuration", () => {
  const jwks = { AUTH_JWKS_URL: "https://idp.example/.well-known/jwks.json", AUTH_ISSUER: ISSUER, AUTH_AUDIENCE: AUDIENCE };

  it.each([
    ["no audience", { ...jwks, AUTH_AUDIENCE: undefined }, /AUTH_AUDIENCE: is required with AUTH_JWKS_URL/],
    ["no issuer", { ...jwks, AUTH_ISSUER: undefined }, /AUTH_ISSUER: is required with AUTH_JWKS_URL.*AUTH_ALLOW_ANY_ISSUER=true/],
    ["an issuer and any issuer", { ...jwks, AUTH_ALLOW_ANY_ISSUER: "true" }, /AUTH_ALLOW_ANY_ISSUER: contradicts AUTH_ISSUER/],
    ["a plain-HTTP key set on another host", { ...jwks, AUTH_JWKS_URL: "http://idp.example/jwks.json" }, /AUTH_JWKS_URL: must be https/],
    ["a plain-HTTP key set on a look-alike host", { ...jwks, AUTH_JWKS_URL: "http://127.0.0.1.evil.example/jwks.json" }, /AUTH_JWKS_URL: must be https/],
    ["another scheme", { ...jwks, AUTH_JWKS_URL: "file:///etc/jwks.json" }, /AUTH_JWKS_URL: must be an https URL/],
    ["no URL at all", { ...jwks, AUTH_JWKS_URL: "idp.example" }, /AUTH_JWKS_URL: is not a URL/],
    ["HMAC among the algorithms", { ...jwks, AUTH_ALGORITHMS: "ES256,HS256" }, /AUTH_ALGORITHMS: HS256 not accepted/],
    ["none as an algorithm", { ...jwks, AUTH_ALGORITHMS: "none" }, /AUTH_ALGORITHMS: none not accepted/],
    ["algorithms for a shared secret", { AUTH_HS256_SECRET: TEST_SECRET, AUTH_ALGORITHMS: "ES256" }, /AUTH_ALGORITHMS: applies to AUTH_JWKS_URL only/],
    ["a key set kept too long", { ...jwks, AUTH_JWKS_MAX_AGE_MS: "86400000" }, /AUTH_JWKS_MAX_AGE_MS/],
    ["a lifetime of ten years", { ...jwks, AUTH_MAX_TOKEN_LIFETIME_S: String(10 * 366 * 86_400) }, /AUTH_MAX_TOKEN_LIFETIME_S/],
  ])("refuses %s", (_what, env, message) => {
    expect(() => loadConfig(env)).toThrow(message);
  });

  it.each([
    ["issuer and audience", jwks],
    ["any issuer, said explicitly", { ...jwks, AUTH_ISSUER: undefined, AUTH_ALLOW_ANY_ISSUER: "true" }],
    ["plain HTTP to 127.0.0.1", { ...jwks, AUTH_JWKS_URL: "http://127.0.0.1:9999/jwks.json" }],
    ["plain HTTP to localhost", { ...jwks, AUTH_JWKS_URL: "http://localhost:9999/jwks.json" }],
    ["plain HTTP to [::1]", { ...jwks, AUTH_JWKS_URL: "http://[::1]:9999/jwks.json" }],
    ["a subset of the algorithms", { ...jwks, AUTH_ALGORITHMS: "ES256, EdDSA" }],
    ["a shared secret without issuer or audience", { AUTH_HS256_SECRET: TEST_SECRET }],
  ])("accepts %s", (_what, env) => {
    expect(() => loadConfig(env)).not.toThrow();
  });

  it("parses the settings with their documented defaults", () => {
    const config = loadConfig(jwks);
    for (const unset of ["AUTH_ALGORITHMS", "AUTH_TYP", "AUTH_MAX_TOKEN_LIFETIME_S"] as const) expect(config[unset], unset).toBeUndefined();
    expect(config).toMatchObject({
      AUTH_ALLOW_ANY_ISSUER: false,
      AUTH_JWKS_MAX_AGE_MS: 60_000,
      AUTH_JWKS_COOLDOWN_MS: 10_000,
      AUTH_JWKS_GRACE_MS: 600_000,
      AUTH_JWKS_TIMEOUT_MS: 5000,
      AUTH_JWKS_MAX_BYTES: 256 * 1024,
    });
    expect(loadConfig({ ...jwks, AUTH_ALGORITHMS: "ES256, EdDSA,ES256" }).AUTH_ALGORITHMS).toEqual(["ES256", "EdDSA"]);
  });

  it("keeps the Node server from starting, before anything is opened", async () => {
    const dataDir = await mkdtemp(join(tmpdir(), "aip-jwks-"));
    try {
      await expect(startServer({ ...jwks, AUTH_AUDIENCE: undefined, PORT: "0", DATA_DIR: dataDir }, () => {})).rejects.toThrow(
        /invalid configuration:\n {2}AUTH_AUDIENCE: is required/,
      );
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
  });

  it("is enforced by createAuthenticator too", () => {
    expect(() => createAuthenticator({ jwksUrl: jwks.AUTH_JWKS_URL })).toThrow(/AUTH_AUDIENCE is required.*AUTH_ISSUER is required/);
    expect(() => createAuthenticator({ jwksUrl: "http://idp.example/jwks.json", issuer: ISSUER, audience: AUDIENCE })).toThrow(/must be https/);
  });
});

describe("issuer, audience, algorithms and typ", () => {
  it("refuses another issuer or audience, and accepts any issuer only when told to", async () => {
    const clock = new Clock();
    const { url } = endpoint();
    const auth = verifier(url, clock);
    expect(await outcome(auth, await sign(a, clock, { iss: "https://other-idp.test" }))).toBe("unauthorized");
    expect(await outcome(auth, await sign(a, clock, { aud: "payroll-api", scope: "registry:admin" }))).toBe("unauthorized");
    const anyIssuer = verifier(url, clock, { issuer: undefined, allowAnyIssuer: true } as Partial<AuthConfig>);
    expect(await outcome(anyIssuer, await sign(a, clock, { iss: "https://other-idp.test" }))).toBe("ok");
    expect(await outcome(anyIssuer, await sign(a, clock, { aud: "payroll-api" }))).toBe("unauthorized");
  });

  it("accepts every documented algorithm by default, ES512 and Ed25519 included", async () => {
    const clock = new Clock();
    const keys = await Promise.all(JWKS_ALGORITHMS.map((alg) => signingKey(alg, `kid-${alg}`)));
    const auth = verifier(endpoint(keys.map((key) => key.jwk)).url, clock);
    for (const key of keys) expect(`${key.alg}: ${await outcome(auth, await sign(key, clock))}`).toBe(`${key.alg}: ok`);
  });

  it("accepts only AUTH_ALGORITHMS when set, without fetching the key set for another", async () => {
    const rs = await signingKey("RS256", "rs");
    const { url, ep } = endpoint([a.jwk, rs.jwk]);
    const auth = authenticatorFrom(loadConfig({ AUTH_JWKS_URL: url, AUTH_ISSUER: ISSUER, AUTH_AUDIENCE: AUDIENCE, AUTH_ALGORITHMS: "ES256" }));
    expect(await outcome(auth, await signToken(rs, CLAIMS))).toBe("unauthorized");
    expect(ep.fetches).toBe(0);
    expect(await outcome(auth, await signToken(a, CLAIMS))).toBe("ok");
  });

  it("checks typ when AUTH_TYP is set", async () => {
    const clock = new Clock();
    const auth = verifier(endpoint().url, clock, { typ: "at+jwt" });
    expect(await outcome(auth, await sign(a, clock, {}, { header: { typ: "at+jwt" } }))).toBe("ok");
    expect(await outcome(auth, await sign(a, clock, {}, { header: { typ: "application/at+jwt" } }))).toBe("ok");
    expect(await outcome(auth, await sign(a, clock, {}, { header: { typ: "JWT" } }))).toBe("unauthorized");
    expect(await outcome(auth, await sign(a, clock, {}, { header: { typ: "id_token+jwt" } }))).toBe("unauthorized");
    expect(await outcome(auth, await sign(a, clock))).toBe("unauthorized");
  });
});

describe("token limits", () => {
  const DAY = 86_400;

  it("bounds the lifetime from iat, from nbf, or from now without either", async () => {
    const clock = new Clock();
    const auth = verifier(endpoint().url, clock);
    const now = clock.seconds;
    const cases: [string, Record<string, unknown>, string][] = [
      ["a day from iat", { iat: now - 10, exp: now - 10 + DAY }, "ok"],
      ["a day and a second from iat", { iat: now - 10, exp: now - 10 + DAY + 1 }, "unauthorized"],
      ["exp 1e308", { iat: now, exp: 1e308 }, "unauthorized"],
      ["a day and a second from nbf", { iat: undefined, nbf: now, exp: now + DAY + 1 }, "unauthorized"],
      ["from the earlier of iat and nbf", { iat: now - 3600, nbf: now, exp: now - 3600 + DAY + 1 }, "unauthorized"],
      ["neither: exp a day from now", { iat: undefined, exp: now + DAY }, "ok"],
      ["neither: exp a day and a second from now", { iat: undefined, exp: now + DAY + 1 }, "unauthorized"],
      ["iat within the clock tolerance", { iat: now + 5, exp: now + 600 }, "ok"],
      ["iat in the future", { iat: now + 6, exp: now + 600 }, "unauthorized"],
    ];
    for (const [what, claims, expected] of cases) expect(`${what}: ${await outcome(auth, await sign(a, clock, claims))}`).toBe(`${what}: ${expected}`);
    const error = await refusal(auth, await sign(a, clock, { exp: 1e308 }));
    expect(error.message).toMatch(/lifetime exceeds 86400 s/);
  });

  it("takes AUTH_MAX_TOKEN_LIFETIME_S, with a default per verifier", async () => {
    const clock = new Clock();
    const short = verifier(endpoint().url, clock, { maxTokenLifetimeS: 3600 });
    expect(await outcome(short, await sign(a, clock, {}, { ttlS: 3600 }))).toBe("ok");
    expect(await outcome(short, await sign(a, clock, {}, { ttlS: 3601 }))).toBe("unauthorized");
    // A shared secret's tokens may live a year (the CLI mints up to 365 days), not forever.
    const secret = createAuthenticator({ hs256Secret: TEST_SECRET, now: clock.now });
    const hs = (exp: number) =>
      new CompactSign(new TextEncoder().encode(JSON.stringify({ iat: clock.seconds, exp, scope: "fleet:read" })))
        .setProtectedHeader({ alg: "HS256" })
        .sign(new TextEncoder().encode(TEST_SECRET));
    expect(await outcome(secret, await hs(clock.seconds + 365 * DAY))).toBe("ok");
    expect(await outcome(secret, await hs(1e308))).toBe("unauthorized");
  });

  it("refuses repeated member names in the claims or the header, escaped or nested", async () => {
    const clock = new Clock();
    const auth = verifier(endpoint().url, clock);
    const base = `"iss":"${ISSUER}","aud":"${AUDIENCE}","iat":${clock.seconds},"exp":${clock.seconds + 600},"scope":"fleet:read"`;
    const signedText = (claims: string) =>
      new CompactSign(new TextEncoder().encode(claims)).setProtectedHeader({ alg: "ES256", kid: a.kid }).sign(a.privateKey);
    expect(await outcome(auth, await signedText(`{${base},"tenant_id":"t-1"}`))).toBe("ok");
    for (const claims of [
      `{${base},"tenant_id":"t-1","tenant_id":"t-2"}`,
      `{${base},"tenant_id":"t-1","tenant\\u005fid":"t-2"}`,
      `{${base},"cnf":{"jkt":"x","jkt":"y"}}`,
      `{"scope":"registry:admin",${base}}`,
    ]) {
      const error = await refusal(auth, await signedText(claims));
      expect(error.code, claims).toBe("unauthorized");
      expect(error.message, claims).toMatch(/a member name appears twice/);
    }
    // Arrays hold values, not names: repeated strings in them are fine.
    expect(await outcome(auth, await signedText(`{${base},"roles":["x","x"]}`))).toBe("ok");
    // A header that says alg twice (signed with a shared secret: a signer's library would not write it).
    const secret = createAuthenticator({ hs256Secret: TEST_SECRET, now: clock.now });
    const b64 = (text: string) => Buffer.from(text).toString("base64url");
    const input = `${b64('{"alg":"HS256","alg":"HS256"}')}.${b64(JSON.stringify({ iat: clock.seconds, exp: clock.seconds + 60 }))}`;
    const mac = createHmac("sha256", TEST_SECRET).update(input).digest("base64url");
    expect((await refusal(secret, `${input}.${mac}`)).message).toMatch(/a member name appears twice \("alg"\)/);
  });
});

describe("the Node server", () => {
  let running: RunningServer | undefined;
  afterAll(async () => running?.close());

  it("verifies against the key set and exposes its metrics", async () => {
    const { url, ep } = endpoint();
    running = await startServer(
      {
        DATABASE_URL: db.dataUrl,
        CONTROL_DATABASE_URL: db.controlUrl,
        AUTH_JWKS_URL: url,
        AUTH_ISSUER: ISSUER,
        AUTH_AUDIENCE: AUDIENCE,
        PORT: "0",
        MIGRATE_ON_START: "false",
        LEASE_MAINTENANCE_INTERVAL_MS: "0",
        ACCESS_LOG: "false",
      },
      () => {},
    );
    const token = await signToken(a, CLAIMS);
    const response = await fetch(`${running.url}/metrics`, { headers: bearer(token) });
    expect(response.status).toBe(200);
    const text = await response.text();
    expect(text).toMatch(/^aip_auth_jwks_fetch_total\{outcome="ok"\} 1$/m);
    expect(text).toMatch(/^aip_auth_jwks_keys 2$/m);
    expect(ep.fetches).toBe(1);
    const wrongAudience = await fetch(`${running.url}/v1/fleet/status`, { headers: bearer(await signToken(a, { ...CLAIMS, aud: "payroll-api" })) });
    expect(wrongAudience.status).toBe(401);
  });
});

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

/** 503 auth-unavailable: Retry-After, no bearer challenge, nothing about the provider. */
async function expectUnavailable(response: Response): Promise<void> {
  const text = await response.text();
  expect(response.status, text).toBe(503);
  expect(response.headers.get("content-type")).toBe("application/problem+json");
  expect(Number(response.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
  expect(response.headers.get("www-authenticate")).toBeNull();
  const body = JSON.parse(text) as Record<string, unknown>;
  expect(body).toMatchObject({ code: "auth-unavailable", status: 503, title: "Token verification unavailable" });
  expect(text).not.toMatch(IDP_DETAIL);
}
