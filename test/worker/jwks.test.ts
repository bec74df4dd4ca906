/**
 * The Worker's token verification against an identity provider, inside workerd: the JWKS endpoint
 * runs on the Node side (test/global-setup.ts starts test/support/jwks-server.ts; this file
 * changes its key sets and failures through its control endpoints). The same code as the Node
 * server's (src/http/jwks.ts), whose time-dependent bounds test/http/jwks.test.ts drives on an
 * injected clock; here: every documented algorithm on workerd's WebCrypto, rotation, a failing
 * provider answered 503 with one fetch, an empty or ambiguous key set refused while the last good
 * one serves, fetches shared by concurrent requests, the body limit,
 * and the configuration rules answered as a misconfiguration.
 */
import type { JWK } from "jose";
import { describe, expect, inject, it } from "vitest";
import { JWKS_ALGORITHMS } from "../../src/http/auth-settings.js";
import { signingKey, signToken, type SigningKey } from "../support/jwks-keys.js";
import type { JwksMode } from "../support/jwks-mode.js";
import { callWorker, workerEnv } from "./support.js";

const ISSUER = "https://idp.test";
const AUDIENCE = "aip-registry";
const CLAIMS = { iss: ISSUER, aud: AUDIENCE, scope: "fleet:read" };
const origin = inject("jwksOrigin");
let sequence = 0;

/** A key set of its own on the local provider; returns its fetches so far. */
async function control(name: string, change?: { keys?: JWK[]; mode?: JwksMode }): Promise<number> {
  const response = await fetch(`${origin}/__control/${name}`, change ? { method: "POST", body: JSON.stringify(change) } : {});
  return ((await response.json()) as { fetches: number }).fetches;
}

async function provider(keys: SigningKey[], settings: Record<string, string> = {}) {
  const name = `worker-${++sequence}-${Date.now().toString(36)}`;
  await control(name, { keys: keys.map((key) => key.jwk), mode: { kind: "ok" } });
  const env = workerEnv({
    AUTH_HS256_SECRET: undefined,
    AUTH_JWKS_URL: `${origin}/${name}/jwks.json`,
    AUTH_ISSUER: ISSUER,
    AUTH_AUDIENCE: AUDIENCE,
    ...settings,
  });
  return {
    name,
    status: (token: string) => callWorker(env, "/v1/fleet/status", { headers: { authorization: `Bearer ${token}` } }),
    fetches: () => control(name),
    set: (change: { keys?: JWK[]; mode?: JwksMode }) => control(name, change),
  };
}

describe("verification in workerd", () => {
  it("accepts every documented algorithm, ES512 and Ed25519 included, and refuses another audience or issuer", async () => {
    const keys = await Promise.all(JWKS_ALGORITHMS.map((alg) => signingKey(alg, `kid-${alg}`)));
    const idp = await provider(keys);
    for (const key of keys) expect(`${key.alg}: ${(await idp.status(await signToken(key, CLAIMS))).status}`).toBe(`${key.alg}: 200`);
    const [first] = keys as [SigningKey];
    for (const claims of [{ aud: "payroll-api" }, { iss: "https://other-idp.test" }]) {
      const refused = await idp.status(await signToken(first, { ...CLAIMS, ...claims }));
      expect(refused.status).toBe(401);
      expect(refused.headers.get("www-authenticate")).toMatch(/error="invalid_token"/);
    }
    expect(await idp.fetches()).toBe(1);
  });

  it("picks up an added key and stops honouring a removed one when the set is fetched again", async () => {
    const [a, b, c] = await Promise.all([signingKey("ES256", "a"), signingKey("ES256", "b"), signingKey("ES256", "c")]);
    const idp = await provider([a], { AUTH_JWKS_COOLDOWN_MS: "0" });
    const early = await signToken(a, CLAIMS);
    expect((await idp.status(early)).status).toBe(200);
    await idp.set({ keys: [b.jwk] }); // a rotated out, b in
    expect((await idp.status(await signToken(b, CLAIMS))).status).toBe(200); // unknown kid: fetched again
    expect(await idp.fetches()).toBe(2);
    expect((await idp.status(early)).status).toBe(401); // remembered under the old set: verified again, refused
    expect((await idp.status(await signToken(a, { ...CLAIMS, sub: "late" }))).status).toBe(401);
    expect((await idp.status(await signToken(c, CLAIMS))).status).toBe(401);
  });
});

describe("a failing identity provider, in workerd", () => {
  it("is answered 503 auth-unavailable with Retry-After, fetched once while backing off, without its detail", async () => {
    const a = await signingKey("ES256", "a");
    const idp = await provider([a]);
    await idp.set({ mode: { kind: "status", status: 500 } });
    for (let i = 0; i < 3; i++) {
      const response = await idp.status(await signToken(a, { ...CLAIMS, sub: `gw-${i}` }));
      const text = await response.text();
      expect(response.status, text).toBe(503);
      expect(JSON.parse(text)).toMatchObject({ code: "auth-unavailable" });
      expect(Number(response.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      expect(response.headers.get("www-authenticate")).toBeNull();
      expect(text).not.toMatch(/HTTP 500|fetch|bad day|127\.0\.0\.1/i);
    }
    expect(await idp.fetches()).toBe(1);
  });

  it("shares one fetch among concurrent requests", async () => {
    const a = await signingKey("ES256", "a");
    // Waiters give up after the fetch timeout: make it longer than any busy machine needs here.
    const idp = await provider([a], { AUTH_JWKS_TIMEOUT_MS: "60000" });
    await idp.set({ mode: { kind: "hold" } });
    const tokens = await Promise.all(Array.from({ length: 5 }, (_, i) => signToken(a, { ...CLAIMS, sub: `gw-${i}` })));
    const answers = Promise.all(tokens.map((token) => idp.status(token)));
    await expect.poll(() => idp.fetches(), { timeout: 30_000 }).toBe(1);
    await idp.set({ mode: { kind: "ok" } });
    expect((await answers).map((response) => response.status)).toEqual([200, 200, 200, 200, 200]);
    expect(await idp.fetches()).toBe(1);
  });

  it("keeps the last good key set when the provider publishes an empty set or repeats `keys`", async () => {
    const [a, b] = await Promise.all([signingKey("ES256", "a"), signingKey("ES256", "b")]);
    const idp = await provider([a], { AUTH_JWKS_COOLDOWN_MS: "0" });
    expect((await idp.status(await signToken(a, CLAIMS))).status).toBe(200);
    // Read last-wins, the second body would swap key a for key b; the first would refuse every token.
    const repeated = JSON.stringify({ keys: [a.jwk] }).replace(/}$/, `, "keys": [${JSON.stringify(b.jwk)}]}`);
    for (const body of ['{"keys": []}', repeated]) {
      await idp.set({ mode: { kind: "body", body } });
      const before = await idp.fetches();
      // b's kid is unknown: the set is fetched again, and the refused body counts as a failed fetch.
      expect((await idp.status(await signToken(b, { ...CLAIMS, sub: `b-${before}` }))).status).toBe(503);
      expect(await idp.fetches()).toBe(before + 1);
      expect((await idp.status(await signToken(a, { ...CLAIMS, sub: `a-${before}` }))).status).toBe(200);
      // Let the backoff pass before the next body (1 s at most after a first failure).
      await new Promise((resolve) => setTimeout(resolve, 1100));
    }
  });

  it("refuses a key set over AUTH_JWKS_MAX_BYTES", async () => {
    const a = await signingKey("ES256", "a");
    const idp = await provider([a], { AUTH_JWKS_MAX_BYTES: "4096" });
    await idp.set({ mode: { kind: "oversized", bytes: 16 * 1024 * 1024, declared: false } });
    expect((await idp.status(await signToken(a, CLAIMS))).status).toBe(503);
  });
});

describe("configuration rules (the Node server's, from the same schema)", () => {
  it.each([
    ["no audience", { AUTH_AUDIENCE: undefined }],
    ["no issuer", { AUTH_ISSUER: undefined }],
    ["a plain-HTTP key set on another host", { AUTH_JWKS_URL: "http://idp.example/jwks.json" }],
    ["HMAC among the algorithms", { AUTH_ALGORITHMS: "ES256,HS256" }],
  ])("%s: every request is answered 500 internal, misconfigured", async (_what, overrides) => {
    const env = workerEnv({
      AUTH_HS256_SECRET: undefined,
      AUTH_JWKS_URL: "https://idp.example/jwks.json",
      AUTH_ISSUER: ISSUER,
      AUTH_AUDIENCE: AUDIENCE,
      ...overrides,
    });
    const response = await callWorker(env, "/healthz");
    expect(response.status).toBe(500);
    const body = (await response.json()) as Record<string, unknown>;
    expect(body).toMatchObject({ code: "internal", detail: "the registry Worker is misconfigured; see its logs" });
  });

  it("accepts any issuer only when told to", async () => {
    const a = await signingKey("ES256", "a");
    const idp = await provider([a], { AUTH_ISSUER: "", AUTH_ALLOW_ANY_ISSUER: "true" });
    expect((await idp.status(await signToken(a, { ...CLAIMS, iss: "https://other-idp.test" }))).status).toBe(200);
  });
});
