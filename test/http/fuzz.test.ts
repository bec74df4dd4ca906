/**
 * Property-based fuzzing of every route the app serves (enumerated from `app.routes`): hostile
 * bodies (valid-shaped documents with mutated members, wrong types, huge strings and arrays,
 * nesting around and far beyond the 128-level limit, astral characters, lone surrogates, NUL,
 * numbers at the 2^31 / 2^53 boundaries and beyond a double), hostile path segments, query
 * strings, headers and methods. Every answer is a 2xx/304 or a problem+json 4xx with a documented
 * code and the request id, never a 500, never `storage`, and nothing internal leaks; a refusal
 * decided by the database is checked against a snapshot of every registry table (catalog
 * revision, row counts, a digest of all rows), and each family ends with a full comparison.
 *
 * FUZZ_SEED=<n> replays a run (fast-check prints the seed and the counterexample on failure).
 */
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApp } from "../../src/app.js";
import { createAuthenticator, SCOPES, type Scope } from "../../src/http/auth.js";
import { mintToken } from "../../src/http/tokens.js";
import { useTestDatabase } from "../support/database.js";
import { binding, connectorType, instance, policy, registerReplica, replica, version } from "../../fixtures/records.js";
import {
  expectSaneAnswer,
  FUZZ_SEED,
  fromPlain,
  fuzzParameters,
  hostileHeaders,
  hostileJson,
  hostileQuery,
  hostileSegment,
  jsonText,
  METHODS,
  mutated,
  Raw,
  refusedBeforeDatabase,
  send,
  stringsOf,
  type FuzzRequest,
  type Json,
  type Verdict,
} from "../support/fuzz.js";
import { TEST_SECRET } from "../support/http.js";
import { registryState, type RegistryState } from "../support/registry-state.js";

const TENANT = "tenant-fuzz";
const CAPABILITY = "cap:fz.search";
const REPLICA = "crepl_fz_a";
const PINNED = "act_fz_pinned";

const db = useTestDatabase();
let app: ReturnType<typeof createApp>;
let tokens: Record<"all" | "tenant" | "admin" | "host" | "untenanted", string>;
let publication: Record<string, unknown>[];
let pinned: Record<string, unknown>;
let routes: { method: string; path: string }[];
/** The routes the random families pick from: all but the OpenAPI document, which reads no input and costs a generation per request. */
let fuzzed: { method: string; path: string }[];
let bodyRoutes: Set<string>;
let baseline: RegistryState;
const stats = { requests: 0, accepted: 0, refusedBeforeDatabase: 0, refusedByDatabase: 0, snapshots: 0 };

beforeAll(async () => {
  const typeId = "ctype_fz";
  const versionId = "cver_fz_1";
  publication = [
    connectorType(typeId),
    await version(versionId, typeId, [CAPABILITY, "cap:fz.other"]),
    policy("quota:fz"),
    instance("cinst_fz", typeId, versionId, TENANT),
    binding(TENANT, CAPABILITY, "cinst_fz", { quota_policy_ref: "quota:fz" }),
    instance("cinst_fz_other", typeId, versionId, "tenant-other"),
    binding("tenant-other", CAPABILITY, "cinst_fz_other"),
    replica(REPLICA, "cinst_fz", versionId, { capacity: 1000 }),
    replica("crepl_fz_other", "cinst_fz_other", versionId),
  ];
  await db.registry.publish(publication);
  await registerReplica(db.registry, REPLICA, 300_000);
  await registerReplica(db.registry, "crepl_fz_other", 300_000);
  pinned = (await db.registry.resolveRoute(PINNED, TENANT, CAPABILITY)).assignment as Record<string, unknown>;
  // The export the route-exports sample records was read: its pages, from the beginning.
  await db.registry.routesPage({ settledBefore: "2026-10-01T00:00:00Z" });

  app = createApp({
    registry: db.registry,
    authenticator: createAuthenticator({ hs256Secret: TEST_SECRET }),
    metrics: {},
    routeRetention: { days: 30, requireExport: false },
  });
  const token = (scopes: Scope[], tenantId?: string) => mintToken(TEST_SECRET, { subject: "fuzz", scopes, ...(tenantId ? { tenantId } : {}) });
  tokens = {
    all: await token([...SCOPES], TENANT),
    tenant: await token(["catalog:read", "routes:read", "routes:write"], TENANT),
    admin: await token(["registry:admin", "fleet:read"]),
    host: await token(["replicas:write"]),
    untenanted: await token([...SCOPES]),
  };
  routes = [...new Map(app.routes.filter((r) => r.method !== "ALL").map((r) => [`${r.method} ${r.path}`, { method: r.method, path: r.path }])).values()];
  fuzzed = routes.filter((r) => r.path !== "/openapi.json");
  const doc = (await (await app.request("/openapi.json")).json()) as { paths: Record<string, Record<string, { requestBody?: unknown }>> };
  bodyRoutes = new Set(
    routes.filter((r) => doc.paths[r.path.replace(/:(\w+)/g, "{$1}")]?.[r.method.toLowerCase()]?.requestBody).map((r) => `${r.method} ${r.path}`),
  );
  baseline = await registryState(db.owner);
}, 120_000);

afterAll(async () => {
  console.log(`fuzz seed ${FUZZ_SEED} (replay with FUZZ_SEED=${FUZZ_SEED}): ${JSON.stringify(stats)}`);
});

// Valid-shaped requests, one per route: the documents the mutations start from ---------------------
interface Sample {
  params?: () => Record<string, string>;
  query?: string;
  body?: () => Json;
}

let fresh = 0;
const SAMPLES: Record<string, Sample> = {
  "GET /v1/catalog/capabilities": { query: "q=search&limit=10" },
  "GET /v1/catalog/capabilities/:capability_id": { params: () => ({ capability_id: CAPABILITY }) },
  "GET /v1/catalog/changes": { query: "since=0&limit=10" },
  "PUT /v1/routes/:action_id": {
    // The pinned action (200, nothing changes) or a new one (201: a legitimate change).
    params: () => ({ action_id: ++fresh % 2 === 0 ? PINNED : `act_fz_${fresh}` }),
    body: () =>
      fromPlain({ capability_id: CAPABILITY, topology: { region: "eu-west", zone: "eu-west-1a", capacity_class: "standard", allow_cross_region: true } }),
  },
  "GET /v1/routes/:action_id": { params: () => ({ action_id: PINNED }) },
  "POST /v1/routes/:action_id/settlement": {
    params: () => ({ action_id: PINNED }),
    body: () => fromPlain({ assignment: pinned, outcome: "cancelled" }),
  },
  "POST /v1/replicas/:replica_id/:operation": {
    params: () => ({ replica_id: REPLICA, operation: "heartbeat" }),
    body: () => fromPlain({ request_id: "msg_fz_heartbeat", previous_sequence: 1, lease_ttl_ms: 300_000 }),
  },
  "GET /v1/registry/versions/:id": { params: () => ({ id: "cver_fz_1" }) },
  "GET /v1/registry/instances/:id": { params: () => ({ id: "cinst_fz" }) },
  "GET /v1/registry/replicas/:id": { params: () => ({ id: REPLICA }) },
  "POST /v1/admin/publications": { query: "dry_run=false", body: () => fromPlain({ changes: publication }) },
  "GET /v1/admin/bindings": { query: `tenant_id=${TENANT}&limit=10` },
  "GET /v1/admin/catalog/capabilities": { query: "unbound=true&q=search" },
  "GET /v1/admin/:kind/:id": { params: () => ({ kind: "replicas", id: REPLICA }) },
  "POST /v1/fleet/lease-expiry": { query: "limit=10" },
  "POST /v1/fleet/route-retention": { query: "limit=10" },
  "GET /v1/admin/routes": { query: "settled_before=2026-11-01T00:00:00Z&settled_after=2026-10-01T00:00:00Z&limit=10" },
  "POST /v1/admin/route-exports": { body: () => fromPlain({ settled_before: "2026-10-01T00:00:00Z" }) },
};

const sampleOf = (route: { method: string; path: string }): Sample => SAMPLES[`${route.method} ${route.path}`] ?? {};

function url(route: { path: string }, params: Record<string, string>, query?: string): string {
  const path = route.path.replace(/:(\w+)/g, (_m, name: string) => params[name] ?? "x");
  return query ? `${path}?${query}` : path;
}

function request(method: string, target: string, token: string | null, body?: Json): FuzzRequest {
  const headers: [string, string][] = [];
  if (token) headers.push(["authorization", `Bearer ${token}`]);
  if (body !== undefined) headers.push(["content-type", "application/json"]);
  // The answer may echo the path as sent or decoded, as Hono does it: each decodable run of
  // percent escapes on its own, the rest kept as is.
  const decoded = [decodeURIComponent, decodeURI].map((decode) =>
    target.replace(/(?:%[0-9A-Fa-f]{2})+/g, (run) => {
      try {
        return decode(run);
      } catch {
        return run;
      }
    }),
  );
  return {
    method,
    url: target,
    headers,
    ...(body !== undefined ? { body: jsonText(body) } : {}),
    inputs: [...(body !== undefined ? stringsOf(body) : []), ...[target, ...decoded].flatMap((t) => [t, ...t.split(/[/?&=]/)])],
  };
}

function sampleRequest(route: { method: string; path: string }, token = tokens.all): FuzzRequest {
  const sample = sampleOf(route);
  return request(
    route.method,
    url(route, sample.params?.() ?? {}, sample.query),
    token,
    bodyRoutes.has(`${route.method} ${route.path}`) ? sample.body?.() : undefined,
  );
}

/** Send, judge, and hold the database to the snapshot when the database refused a change. */
async function exercise(r: FuzzRequest): Promise<Verdict> {
  const { response, text } = await send(app, r);
  stats.requests++;
  const verdict = expectSaneAnswer(`${r.method} ${r.url}`, r.method, response, text, r.inputs);
  // An export page read records how far export pages reach (the bound of the export watermark).
  const changes = !["GET", "HEAD"].includes(r.method.toUpperCase()) || /^\/v1\/admin\/routes(\?|$)/.test(r.url);
  if (verdict.status < 400) {
    stats.accepted++;
    if (changes) baseline = await registryState(db.owner);
  } else if (refusedBeforeDatabase(verdict)) {
    stats.refusedBeforeDatabase++;
  } else {
    stats.refusedByDatabase++;
    if (changes) {
      stats.snapshots++;
      expect(await registryState(db.owner), `a refused ${r.method} ${r.url.slice(0, 200)} changed the database`).toEqual(baseline);
    }
  }
  return verdict;
}

async function expectUnchangedSinceBaseline() {
  expect(await registryState(db.owner)).toEqual(baseline);
}

const TOKEN_CHOICE = fc.constantFrom<keyof typeof tokens | "none">("all", "all", "all", "tenant", "admin", "host", "untenanted", "none");
const tokenOf = (choice: keyof typeof tokens | "none") => (choice === "none" ? null : tokens[choice]);

describe("the route table", () => {
  it("is enumerated from app.routes, and every route that takes a body has a valid-shaped sample", () => {
    expect(routes.length).toBeGreaterThanOrEqual(16);
    for (const key of bodyRoutes) expect(SAMPLES[key]?.body, `write a sample for ${key}`).toBeDefined();
  });

  it("answers every sample request with a 2xx: the mutations start from valid documents", async () => {
    for (const route of routes) {
      const verdict = await exercise(sampleRequest(route));
      expect(verdict.status, `${route.method} ${route.path}`).toBeLessThan(300);
    }
  });
});

describe("hostile input never produces a 500, a leak, or a change by a refused request", () => {
  it("bodies: mutated valid documents and arbitrary JSON, on every route that takes a body", async () => {
    const malformed = fc.constantFrom<Json>(
      new Raw("{"),
      new Raw('{"a":1,}'),
      new Raw(""),
      new Raw("\ufeff{}"),
      new Raw("[]"),
      new Raw("null"),
      new Raw('{"a":1} x'),
      new Raw("\u0000"),
      new Raw("'a'"),
    );
    const cases = fc.constantFrom(...fuzzed.filter((r) => bodyRoutes.has(`${r.method} ${r.path}`))).chain((route) =>
      fc.record({
        route: fc.constant(route),
        token: TOKEN_CHOICE,
        body: fc.oneof({ weight: 6, arbitrary: mutated(sampleOf(route).body!()) }, { weight: 2, arbitrary: hostileJson }, { weight: 1, arbitrary: malformed }),
      }),
    );
    await fc.assert(
      fc.asyncProperty(cases, async ({ route, token, body }) => {
        const sample = sampleOf(route);
        await exercise(request(route.method, url(route, sample.params?.() ?? {}, sample.query), tokenOf(token), body));
      }),
      fuzzParameters(200),
    );
    await expectUnchangedSinceBaseline();
  }, 300_000);

  it("paths: hostile segments in every path parameter, on every route", async () => {
    const cases = fc.constantFrom(...fuzzed).chain((route) =>
      fc.record({
        route: fc.constant(route),
        token: TOKEN_CHOICE,
        segments: fc.array(hostileSegment, { minLength: 3, maxLength: 3 }),
        suffix: fc.constantFrom("", "", "/", "//", "/..", "/%2e%2e/x", "/extra"),
      }),
    );
    await fc.assert(
      fc.asyncProperty(cases, async ({ route, token, segments, suffix }) => {
        let i = 0;
        const path = route.path.replace(/:(\w+)/g, () => segments[i++]!) + suffix;
        const sample = sampleOf(route);
        const body = bodyRoutes.has(`${route.method} ${route.path}`) ? sample.body?.() : undefined;
        await exercise(request(route.method, path, tokenOf(token), body));
      }),
      fuzzParameters(120),
    );
    await expectUnchangedSinceBaseline();
  }, 300_000);

  it("query strings: duplicated keys, arrays, unknown parameters, limits of -1, 1e309 and NaN, on every route", async () => {
    const cases = fc.record({ route: fc.constantFrom(...fuzzed), token: TOKEN_CHOICE, query: hostileQuery, keepSample: fc.boolean() });
    await fc.assert(
      fc.asyncProperty(cases, async ({ route, token, query, keepSample }) => {
        const sample = sampleOf(route);
        const full = [keepSample ? sample.query : undefined, query].filter(Boolean).join("&");
        const body = bodyRoutes.has(`${route.method} ${route.path}`) ? sample.body?.() : undefined;
        await exercise(request(route.method, url(route, sample.params?.() ?? {}, full), tokenOf(token), body));
      }),
      fuzzParameters(120),
    );
    await expectUnchangedSinceBaseline();
  }, 300_000);

  it("headers: content types and charsets, duplicated or huge Authorization, forged tenant headers, huge headers", async () => {
    const cases = fc.record({ route: fc.constantFrom(...fuzzed), token: TOKEN_CHOICE, headers: hostileHeaders });
    await fc.assert(
      fc.asyncProperty(cases, async ({ route, token, headers }) => {
        const r = sampleRequest(route, tokenOf(token) ?? undefined);
        const authorization = r.headers.find(([k]) => k === "authorization")?.[1] ?? "Bearer x";
        for (const { name, value, append } of headers) {
          const actual = value === "DUPLICATE" ? authorization : value;
          if (!append) r.headers = r.headers.filter(([k]) => k !== name);
          r.headers.push([name, actual]);
        }
        const verdict = await exercise(r);
        // Whatever the headers claim, an accepted route belongs to the token's tenant.
        if (route.method === "PUT" && verdict.status < 300) {
          const { text } = await send(app, { ...r, method: "GET", headers: [["authorization", `Bearer ${tokens.all}`]] });
          expect((JSON.parse(text) as { tenant_id: string }).tenant_id).toBe(TENANT);
        }
      }),
      fuzzParameters(120),
    );
    await expectUnchangedSinceBaseline();
  }, 300_000);

  it("methods: every method on every path is served only by its own route", async () => {
    const cases = fc.record({ route: fc.constantFrom(...fuzzed), method: fc.constantFrom(...METHODS), token: TOKEN_CHOICE, withBody: fc.boolean() });
    await fc.assert(
      fc.asyncProperty(cases, async ({ route, method, token, withBody }) => {
        const sample = sampleOf(route);
        const r = request(
          method,
          url(route, sample.params?.() ?? {}, sample.query),
          tokenOf(token),
          withBody ? (sample.body?.() ?? fromPlain({ a: 1 })) : undefined,
        );
        const verdict = await exercise(r);
        if (verdict.status < 400) {
          const own = routes.some((x) => x.path === route.path && (x.method === method || (method === "HEAD" && x.method === "GET")));
          expect(own, `${method} ${route.path} answered ${verdict.status}`).toBe(true);
        }
      }),
      fuzzParameters(80),
    );
    await expectUnchangedSinceBaseline();
  }, 300_000);
});
