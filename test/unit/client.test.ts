/**
 * The typed client (src/client/, published as @aip-registry/client) against the real app (in
 * process, real auth, real SQL functions): results arrive typed, problem+json answers surface as
 * RegistryProblem with their code and extension members, every documented operation is reachable
 * through a client method, catalog reads revalidate through an EtagCache (304s answered from it),
 * and a call ends at its timeout or its caller's AbortSignal. test/cli/client-package.test.ts
 * installs the packed package and uses it against a running server.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { EtagCache, etagRevision, RegistryClient, RegistryProblem, RegistryTimeoutError, type Change } from "../../src/client/index.js";
import { useTestDatabase } from "../support/database.js";
import { binding, connectorType, instance, registrationEvidence, replica, requestId, version } from "../../fixtures/records.js";
import { createTestApi, type TestApi } from "../support/http.js";

const db = useTestDatabase();
let api: TestApi;
/** Every request the clients send, as "METHOD /path" (no query). */
const sent: string[] = [];

function client(token?: string | (() => Promise<string>)): RegistryClient {
  return new RegistryClient({
    baseUrl: "http://registry.test/",
    ...(token ? { token } : {}),
    fetch: (url, init) => {
      sent.push(`${init.method} ${new URL(url).pathname}`);
      return Promise.resolve(api.app.request(url, init));
    },
  });
}

let admin: RegistryClient;
let host: RegistryClient;
let gateway: RegistryClient;

const fleet = async (): Promise<Change[]> =>
  [
    connectorType("ctype_client"),
    await version("cver_client_1", "ctype_client", ["cap:client.search", "cap:client.write"]),
    instance("cinst_client_a", "ctype_client", "cver_client_1", "tenant-a"),
    binding("tenant-a", "cap:client.search", "cinst_client_a"),
    replica("crepl_client_a", "cinst_client_a", "cver_client_1", { capacity: 1 }),
  ] as Change[];

beforeAll(async () => {
  api = createTestApi(db.registry);
  admin = client(await api.adminToken());
  host = client(await api.hostTokenFor("crepl_client_a"));
  // A token function: called per request, as a rotating credential would be.
  const tenantToken = await api.tenantToken("tenant-a");
  gateway = client(async () => tenantToken);
});

describe("RegistryClient", () => {
  it("publishes (dry run first), registers a replica and reads the catalog", async () => {
    const changes = await fleet();
    const dry = await admin.publish(changes, { dryRun: true });
    expect(dry.dry_run).toBe(true);
    expect(dry.results.map((r) => r.outcome)).toEqual(["created", "created", "created", "created", "created"]);
    expect(await admin.adminGet("connector-types", "ctype_client")).toBeNull();

    const published = await admin.publish(changes);
    expect(published).toMatchObject({ dry_run: false, changed: 5, catalog_revision: dry.catalog_revision });
    expect(await admin.adminGet("connector-types", "ctype_client")).toMatchObject({ id: "ctype_client", enabled: true });

    const evidence = await registrationEvidence(db.registry, "crepl_client_a");
    const lease = await host.replicaLifecycle("crepl_client_a", "register", { request_id: requestId(), lease_ttl_ms: 60_000, ...evidence });
    expect(lease).toMatchObject({ replica_id: "crepl_client_a", status: "ready" });
    const beat = await host.replicaLifecycle("crepl_client_a", "heartbeat", { request_id: requestId(), previous_sequence: lease.sequence });
    expect(beat.sequence).toBeGreaterThan(lease.sequence);
    expect((await host.heartbeat("crepl_client_a", { request_id: requestId(), previous_sequence: beat.sequence })).sequence).toBeGreaterThan(beat.sequence);
    // What each operation requires is a type error when missing (the server answers 400 otherwise).
    const untyped = host.replicaLifecycle("crepl_client_a", "heartbeat", { request_id: requestId() } as never);
    await expect(untyped).rejects.toMatchObject({ code: "invalid", problem: { errors: [{ field: "previous_sequence" }] } });
    if (Date.now() < 0) {
      // Compiled, never run: each line fails `npm run typecheck` if the types let it through.
      // @ts-expect-error heartbeat needs previous_sequence
      await host.heartbeat("crepl_client_a", { request_id: "r" });
      // @ts-expect-error drain needs previous_sequence
      await host.replicaLifecycle("crepl_client_a", "drain", { request_id: "r" });
      // @ts-expect-error only register states registration evidence
      await host.heartbeat("crepl_client_a", { request_id: "r", previous_sequence: 1, capability_count: 2 });
      // @ts-expect-error register states all of its evidence or none
      await host.register("crepl_client_a", { request_id: "r", artifact_digest: "sha256:00" });
      // @ts-expect-error offline takes no lease length
      await host.offline("crepl_client_a", { request_id: "r", previous_sequence: 1, lease_ttl_ms: 1000 });
    }

    const page = await gateway.catalogPage({ limit: 10 });
    expect(page.catalog_revision).toBe(published.catalog_revision);
    expect(page.capabilities.map((d) => d.capability.id)).toEqual(["cap:client.search"]);
    const entry = await gateway.catalogGet("cap:client.search");
    expect(entry.definition.contract_digest).toMatch(/^sha256:/);
    const all: string[] = [];
    for await (const definition of gateway.catalogAll({ limit: 1 })) all.push(definition.capability.id);
    expect(all).toEqual(["cap:client.search"]);
    // Nothing changed since the page's revision (an empty last page); from before it, the capability was added.
    expect(await gateway.catalogChanges({ since: page.catalog_revision })).toEqual({
      catalog_revision: page.catalog_revision,
      since: page.catalog_revision,
      changes: [],
      next_cursor: null,
    });
    const feed = await gateway.catalogChangesAll(0);
    expect(feed.catalog_revision).toBe(page.catalog_revision);
    expect(feed.changes.map((c) => [c.capability_id, c.change])).toEqual([["cap:client.search", "added"]]);
  });

  it("resolves, reads, settles and reacquires a route, reporting outcome and reservation from the headers", async () => {
    const created = await gateway.resolveRoute("act_client_1", { capability_id: "cap:client.search", topology: { region: "eu-west" } });
    expect(created.outcome).toBe("created");
    expect(created.assignment).toMatchObject({ action_id: "act_client_1", replica_id: "crepl_client_a", tenant_id: "tenant-a" });

    const again = await gateway.resolveRoute("act_client_1", { capability_id: "cap:client.search" });
    expect(again).toEqual({ outcome: "existing", assignment: created.assignment });

    expect(await gateway.getRoute("act_client_1")).toEqual({ assignment: created.assignment, reserved: true, last_settlement: null });
    expect(await gateway.settleRoute("act_client_1", created.assignment, "completed")).toEqual({
      action_id: "act_client_1",
      released: true,
      last_settlement: "completed",
    });
    expect(await gateway.getRoute("act_client_1")).toMatchObject({ reserved: false, last_settlement: "completed" });
    expect((await gateway.resolveRoute("act_client_1", { capability_id: "cap:client.search" })).outcome).toBe("reacquired");
  });

  it("surfaces problem+json answers as typed RegistryProblem errors", async () => {
    // The replica's one slot is held by act_client_1 (reacquired above).
    const full = await gateway.resolveRoute("act_client_2", { capability_id: "cap:client.search" }).catch((e: unknown) => e);
    expect(full).toBeInstanceOf(RegistryProblem);
    const problem = full as RegistryProblem;
    expect(problem.is("replica-unavailable")).toBe(true);
    expect(problem.status).toBe(503);
    expect(problem.problem.instance_id).toBe("cinst_client_a");
    expect(problem.retryAfterMs).toBe(1000);
    expect(problem.problem.request_id).toEqual(expect.any(String));

    const unbound = (await gateway.resolveRoute("act_client_3", { capability_id: "cap:client.write" }).catch((e: unknown) => e)) as RegistryProblem;
    expect(unbound).toMatchObject({ code: "binding-unavailable", status: 404 });
    expect(unbound.problem).toMatchObject({ tenant_id: "tenant-a", capability_id: "cap:client.write" });

    const invalid = (await gateway.resolveRoute("act_client_4", { capability_id: "" }).catch((e: unknown) => e)) as RegistryProblem;
    expect(invalid.code).toBe("invalid");
    expect(invalid.problem.errors?.[0]?.field).toBe("capability_id");

    await expect(client().fleetStatus()).rejects.toMatchObject({ code: "unauthorized", status: 401 });
    await expect(gateway.fleetStatus()).rejects.toMatchObject({ code: "forbidden", status: 403 });
    await expect(gateway.getRoute("act_never")).rejects.toMatchObject({ code: "not-found" });
  });

  it("reads version, instance and replica identities as a host, null for what it may not see", async () => {
    const reader = client(await api.token({ scopes: ["registry:read"], peerPrincipalId: "service:crepl_client_a" }));
    expect(await reader.readReplica("crepl_client_a")).toMatchObject({ id: "crepl_client_a", instance_id: "cinst_client_a", status: "ready" });
    expect(await reader.readInstance("cinst_client_a")).toMatchObject({ id: "cinst_client_a", tenant_id: "tenant-a", config_revision: 1 });
    expect(await reader.readVersion("cver_client_1")).toMatchObject({ id: "cver_client_1", status: "active", supply_chain_qualified: true });
    expect(await reader.readReplica("crepl_client_nobody")).toBeNull();
    await expect(gateway.readVersion("cver_client_1")).rejects.toMatchObject({ code: "forbidden" });
  });

  it("turns a non-registry error answer (a proxy's 502) into a RegistryProblem that keeps the status", async () => {
    const proxied = new RegistryClient({
      baseUrl: "http://registry.test",
      fetch: async () => new Response("Bad gateway", { status: 502, statusText: "Bad Gateway" }),
    });
    const error = (await proxied.health().catch((e: unknown) => e)) as RegistryProblem;
    expect(error).toBeInstanceOf(RegistryProblem);
    expect(error).toMatchObject({ status: 502, code: "http-502" });
    expect(error.problem.detail).toBe("Bad gateway");
  });

  it("reads fleet, invariants, bindings, the admin catalog and runs lease expiry", async () => {
    expect(await admin.health()).toEqual({ status: "ok" });
    expect(await admin.readiness()).toMatchObject({ status: "ready" });
    expect(await admin.fleetStatus()).toMatchObject({ replicas: 1, ready_replicas: 1, active_assignments: 1 });
    expect((await admin.fleetRegions()).regions).toEqual([
      { region: "eu-west", replicas: 1, ready: 1, draining: 0, offline: 0, expired: 0, open_circuits: 0, ready_capacity: 1, active_assignments: 1 },
    ]);
    expect(await admin.checkInvariants()).toMatchObject({ healthy: true, violations: [] });
    const bindings = await admin.adminBindings("tenant-a", { limit: 10 });
    expect(bindings.bindings).toEqual([expect.objectContaining({ capability_id: "cap:client.search", instance_id: "cinst_client_a" })]);
    const unbound = await admin.adminCatalogPage({ unbound: true });
    expect(unbound.capabilities.map((d) => d.capability.id)).toEqual(["cap:client.search", "cap:client.write"]);
    expect(await admin.expireLeases(10)).toMatchObject({ expired: 0, released: 0 });
  });

  it("runs route retention, pages routes for an export and records it", async () => {
    expect(await admin.removeSettledRoutes(10)).toMatchObject({ removed: 0, exported_before: null });
    const page = await admin.routesPage({ settledBefore: new Date().toISOString(), limit: 5 });
    expect(page).toMatchObject({ routes: [], next_cursor: null, settled_after: null });
    const before = new Date(Date.now() - 86_400_000).toISOString();
    expect(await admin.recordRouteExport(null, before)).toEqual({ exported_before: before, removed_before: null });
    const gap = await admin.recordRouteExport(new Date().toISOString(), new Date(Date.now() + 60_000).toISOString()).catch((error: unknown) => error);
    expect(gap).toBeInstanceOf(RegistryProblem);
    expect((gap as RegistryProblem).is("conflict")).toBe(true);
  });

  it("revalidates catalog reads through an EtagCache: a 304 answers the kept answer, a publication a fresh one", async () => {
    const etags = new EtagCache();
    const statuses: number[] = [];
    const tenantToken = await api.tenantToken("tenant-a");
    const cached = new RegistryClient({
      baseUrl: "http://registry.test",
      token: tenantToken,
      etags,
      fetch: async (url, init) => {
        const response = await api.app.request(url, init);
        statuses.push(response.status);
        return response;
      },
    });
    const first = await cached.catalogPage({ limit: 5 });
    const again = await cached.catalogPage({ limit: 5 });
    expect(again).toBe(first); // the kept answer itself
    const entry = await cached.catalogGet("cap:client.search");
    expect(await cached.catalogGet("cap:client.search")).toBe(entry);
    const since = first.catalog_revision;
    const feed = await cached.catalogChanges({ since });
    expect(await cached.catalogChanges({ since })).toBe(feed);
    expect(statuses).toEqual([200, 304, 200, 304, 200, 304]);
    expect(etags.size).toBe(3);

    // The explicit form, and the revision an ETag names.
    const conditional = await cached.catalogPageConditional({ limit: 5 }, undefined);
    expect(conditional.status).toBe(200);
    expect(etagRevision(conditional.etag)).toBe(since);
    expect((await cached.catalogPageConditional({ limit: 5 }, conditional.etag ?? undefined)).status).toBe(304);
    expect(etagRevision('W/"12-0123456789abcdef-br"')).toBe(12);
    expect(etagRevision('"x"')).toBeNull();

    // A publication that reaches the tenant: the same requests are answered afresh.
    await admin.publish([binding("tenant-a", "cap:client.write", "cinst_client_a")]);
    statuses.length = 0;
    const fresh = await cached.catalogPage({ limit: 5 });
    expect(fresh.catalog_revision).toBeGreaterThan(since);
    expect(fresh.capabilities.map((d) => d.capability.id)).toEqual(["cap:client.search", "cap:client.write"]);
    expect((await cached.catalogChanges({ since })).changes.map((c) => c.capability_id)).toEqual(["cap:client.write"]);
    expect(statuses).toEqual([200, 200]);
  });

  it("ends a call at its timeout (answer included) or at its caller's AbortSignal, whatever the fetch does", async () => {
    // A fetch that answers headers at once and never finishes the body, and one that never answers.
    const stalledBody = async () => new Response(new ReadableStream({ start: () => {} }), { status: 200, headers: { "content-type": "application/json" } });
    const hanging = () => new Promise<Response>(() => {});
    const slow = new RegistryClient({ baseUrl: "http://registry.test", timeoutMs: 200, fetch: stalledBody });
    const started = Date.now();
    const timedOut = await slow.fleetStatus().catch((e: unknown) => e);
    expect(timedOut).toBeInstanceOf(RegistryTimeoutError);
    expect(timedOut).toMatchObject({ name: "TimeoutError", timeoutMs: 200, method: "GET", path: "/v1/fleet/status" });
    expect(Date.now() - started).toBeLessThan(5000);
    // Per call, a longer or shorter bound; 0 for none (then only the signal ends it).
    const never = new RegistryClient({ baseUrl: "http://registry.test", fetch: hanging });
    await expect(never.health({ timeoutMs: 50 })).rejects.toBeInstanceOf(RegistryTimeoutError);
    const controller = new AbortController();
    const aborted = never.health({ timeoutMs: 0, signal: controller.signal });
    setTimeout(() => controller.abort(new Error("the gateway is shutting down")), 50);
    await expect(aborted).rejects.toThrow("the gateway is shutting down");
    await expect(never.health({ signal: AbortSignal.abort(new Error("already")) })).rejects.toThrow("already");
    // The signal reaches the fetch too, so a real fetch stops its request.
    let seen: AbortSignal | undefined;
    const watching = new RegistryClient({
      baseUrl: "http://registry.test",
      timeoutMs: 50,
      fetch: (_url, init) => {
        seen = init.signal ?? undefined;
        return hanging();
      },
    });
    await expect(watching.health()).rejects.toBeInstanceOf(RegistryTimeoutError);
    expect(seen?.aborted).toBe(true);
    expect(seen?.reason).toBeInstanceOf(RegistryTimeoutError);
  });

  it("reaches every documented operation through a client method", async () => {
    const doc = (await (await api.app.request("/openapi.json")).json()) as { paths: Record<string, Record<string, unknown>> };
    // Pages for people and scrapers, not API operations a gateway calls.
    const notForClients = new Set(["GET /dashboard", "GET /metrics"]);
    const templates = Object.entries(doc.paths).flatMap(([path, item]) =>
      Object.keys(item).map((method) => ({
        key: `${method.toUpperCase()} ${path}`,
        pattern: new RegExp(`^${method.toUpperCase()} ${path.replace(/\{[^}]+\}/g, "[^/]+")}$`),
      })),
    );
    const reached = new Set(sent.flatMap((request) => templates.filter((t) => t.pattern.test(request)).map((t) => t.key)));
    const unreached = templates.map((t) => t.key).filter((key) => !reached.has(key) && !notForClients.has(key));
    expect(unreached).toEqual([]);
  });
});
