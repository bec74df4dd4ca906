/**
 * Scale to zero on Node: the real server (src/entry/node.ts) with both pools connected through the local
 * Neon proxy's plain TCP path, which counts and logs every statement on the wire. Its lease
 * maintenance runs on a simulated clock through idle minutes: no statement while nothing is live,
 * expiry cycles only at or after lease deadlines it learned from its own lifecycle answers, none
 * again once the capacity is back. Then the proxy stands in for a suspended compute (connections
 * closed, the first answer delayed): the first calls after it wait and succeed; past the pool's
 * connection bound the answer is 503 `storage`, and the retry is safe.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPgPool, pgExecutor } from "../../src/db/pg.js";
import { startNeonProxy, type NeonProxy } from "../../dev/neon-proxy.js";
import { mintToken } from "../../src/http/tokens.js";
import { startServer, type RunningServer } from "../../src/entry/node.js";
import { RegistryError } from "../../src/registry/errors.js";
import { Registry } from "../../src/registry/registry.js";
import { useTestDatabase } from "../support/database.js";
import { hostPrincipal, registrationEvidence, requestId, type RegistrationEvidence } from "../../fixtures/records.js";
import { TEST_SECRET } from "../support/http.js";
import { provisionFleet, replicaRow, type ProvisionedFleet } from "../support/replicas.js";
import { MINUTE, SimulatedClock } from "../support/simulated-clock.js";

const db = useTestDatabase();
let proxy: NeonProxy;
let server: RunningServer;
let fleet: ProvisionedFleet;
let evidence: RegistrationEvidence;
const clock = new SimulatedClock(Date.now());

/** `url` (a test database URL) with its host and port replaced by the proxy's TCP port. */
function throughProxy(url: string): string {
  const parsed = new URL(url);
  parsed.hostname = "127.0.0.1";
  parsed.port = String(proxy.tcpPort);
  return parsed.toString();
}

async function call(method: string, path: string, token: string, body?: unknown) {
  const response = await fetch(`${server.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body ? { "content-type": "application/json" } : {}) },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  return { status: response.status, headers: response.headers, body: (await response.json()) as Record<string, any> };
}

const statements = () => proxy.stats.statements();
const settle = () => server.maintenance!.settled();

beforeAll(async () => {
  const pgServer = new URL(db.server.adminUrl);
  proxy = await startNeonProxy({ pgHost: pgServer.hostname, pgPort: Number(pgServer.port || 5432), tcp: true });
  fleet = await provisionFleet(db.registry, { prefix: "stz", replicasPerTenant: 1 });
  // What the host runs, read once, directly: its registers then cost one statement each.
  evidence = await registrationEvidence(db.registry, fleet.replicas[0]!);
  server = await startServer(
    {
      DATABASE_URL: throughProxy(db.dataUrl),
      CONTROL_DATABASE_URL: throughProxy(db.controlUrl),
      AUTH_HS256_SECRET: TEST_SECRET,
      PORT: "0",
      MIGRATE_ON_START: "false",
      ACCESS_LOG: "false",
      LEASE_MAINTENANCE_INTERVAL_MS: "100",
    },
    () => {},
    { maintenanceClock: clock },
  );
  // Start-up: the schema check and one maintenance cycle, which finds no live lease.
  await settle();
});
afterAll(async () => {
  await server?.close();
  await proxy?.close();
});

describe("an idle Node server", () => {
  it("sends no statement for ten simulated minutes with an empty fleet", async () => {
    expect(proxy.stats.log.some((s) => s.text.includes("aip_expire_leases"))).toBe(true);
    expect(server.maintenance!.nextCycleAt).toBeNull();
    proxy.stats.reset();
    const start = clock.t;
    for (let tick = 1; tick <= 600; tick++) expect(await clock.advanceTo(start + tick * 1000, settle)).toBe(0);
    expect(statements()).toBe(0);
  });

  it("with a live lease, expires it only at or after its deadline, then sends nothing again", async () => {
    const replicaId = fleet.replicas[0]!;
    const tenant = fleet.tenants[0]!.tenant;
    const host = await mintToken(TEST_SECRET, { subject: "host", scopes: ["replicas:write"], peerPrincipalId: hostPrincipal(replicaId) });
    const gateway = await mintToken(TEST_SECRET, { subject: "gw", scopes: ["routes:write", "routes:read"], tenantId: tenant });
    const operator = await mintToken(TEST_SECRET, { subject: "op", scopes: ["registry:admin", "fleet:read"] });
    clock.t = Date.now();

    proxy.stats.reset();
    const registered = await call("POST", `/v1/replicas/${replicaId}/register`, host, { request_id: requestId(), lease_ttl_ms: 60_000, ...evidence });
    expect(registered.status).toBe(200);
    const route = await call("PUT", "/v1/routes/act_stz_1", gateway, { capability_id: fleet.capability });
    expect(route.status).toBe(201);
    // The host's last heartbeat asks for a 1.5 s lease (the route needed the replica live first).
    const beat = await call("POST", `/v1/replicas/${replicaId}/heartbeat`, host, {
      request_id: requestId(),
      previous_sequence: registered.body.sequence,
      lease_ttl_ms: 1500,
    });
    expect(beat.status).toBe(200);
    // One statement per call, and the timer learned the deadline from the answer it served.
    expect(statements()).toBe(3);
    const deadline = Date.parse(beat.body.lease_expires_at);
    expect(server.maintenance!.nextCycleAt).toBe(deadline);

    // Simulated minutes pass while the lease is live... none: the clock follows the real one,
    // because the database's clock ends the lease.
    proxy.stats.reset();
    while ((await replicaRow(db, replicaId)).status !== "offline") {
      if (Date.now() > deadline + 10_000) throw new Error("the lease was not expired");
      await clock.advanceTo(Date.now(), settle);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const expiries = proxy.stats.log;
    expect(expiries.length).toBeGreaterThanOrEqual(1);
    for (const statement of expiries) {
      expect(statement.text).toContain("aip_expire_leases");
      expect(statement.at).toBeGreaterThanOrEqual(deadline);
    }

    // Capacity returned and counted; then no timer and no statement for ten simulated minutes.
    expect(server.maintenance!.nextCycleAt).toBeNull();
    const status = await call("GET", "/v1/fleet/status", operator);
    expect(status.body).toMatchObject({ expired_leases: 0, active_assignments: 0, ready_replicas: 0 });
    const released = await call("GET", "/v1/routes/act_stz_1", gateway);
    expect(released.headers.get("aip-last-settlement")).toBe("lease_expired");
    proxy.stats.reset();
    for (let minute = 1; minute <= 10; minute++) await clock.advanceTo(clock.t + minute * MINUTE, settle);
    expect(statements()).toBe(0);
  });
});

describe("waking up", () => {
  it("serves the first calls after a suspension once the compute is up, without a false storage error", async () => {
    const operator = await mintToken(TEST_SECRET, { subject: "op", scopes: ["registry:admin", "fleet:read"] });
    const gateway = await mintToken(TEST_SECRET, { subject: "gw", scopes: ["routes:write"], tenantId: fleet.tenants[0]!.tenant });
    const replicaId = fleet.replicas[0]!;
    const host = await mintToken(TEST_SECRET, { subject: "host", scopes: ["replicas:write"], peerPrincipalId: hostPrincipal(replicaId) });
    proxy.stats.reset();
    // The pools' open connections are closed, as a suspending compute closes them; the next
    // connection waits 1.5 s for the compute (the pool's connection bound is 5 s).
    proxy.suspend(1500);
    // By the time a compute suspends, the pools have long noticed its closed connections.
    while (server.pools().some((pool) => pool.total > 0)) await new Promise((resolve) => setTimeout(resolve, 5));
    const [status, registered] = await Promise.all([
      call("GET", "/v1/fleet/status", operator),
      call("POST", `/v1/replicas/${replicaId}/register`, host, { request_id: requestId(), lease_ttl_ms: 60_000, ...evidence }),
    ]);
    expect(status.status).toBe(200);
    expect(registered.status).toBe(200);
    expect(proxy.stats.wakes).toBe(1);
    const route = await call("PUT", "/v1/routes/act_stz_2", gateway, { capability_id: fleet.capability });
    expect(route.status).toBe(201);
    await call("POST", `/v1/replicas/${replicaId}/offline`, host, { request_id: requestId(), previous_sequence: registered.body.sequence });
  });

  it("past the connection bound answers storage (retryable), and the retry resolves the same route once", async () => {
    // The same pool settings as the server's, with a connection bound shorter than the wake-up.
    const pool = createPgPool(throughProxy(db.dataUrl), { max: 2, connectionTimeoutMs: 200 });
    const registry = new Registry({ data: pgExecutor(pool) });
    const replicaId = fleet.replicas[0]!;
    try {
      const answer = await registry.replicaLifecycle(
        replicaId,
        "register",
        { request_id: requestId(), lease_ttl_ms: 60_000, ...evidence },
        hostPrincipal(replicaId),
      );
      proxy.suspend(1000);
      // A compute suspends after minutes without a statement: the pool has long noticed its
      // closed connections by then (and closes idle ones itself after 30 s).
      while (pool.totalCount > 0) await new Promise((resolve) => setTimeout(resolve, 5));
      const error = await registry.resolveRoute("act_stz_3", fleet.tenants[0]!.tenant, fleet.capability).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(RegistryError);
      expect(error).toMatchObject({ code: "storage", retryable: true });
      // The client retries after Retry-After until the compute is up (on a busy machine a retry
      // can still run into the wake-up, or a connection slower than the 200 ms bound): the route
      // is created once.
      let retried: Awaited<ReturnType<Registry["resolveRoute"]>> | undefined;
      const deadline = Date.now() + 60_000;
      while (!retried) {
        await new Promise((resolve) => setTimeout(resolve, 1000));
        retried = await registry.resolveRoute("act_stz_3", fleet.tenants[0]!.tenant, fleet.capability).catch((e: unknown) => {
          expect(e).toMatchObject({ code: "storage", retryable: true });
          if (Date.now() > deadline) throw e;
          return undefined;
        });
      }
      expect(retried.outcome).toBe("created");
      const again = await registry.resolveRoute("act_stz_3", fleet.tenants[0]!.tenant, fleet.capability);
      expect(again).toEqual({ outcome: "existing", assignment: retried.assignment });
      await registry.replicaLifecycle(replicaId, "offline", { request_id: requestId(), previous_sequence: answer.sequence }, hostPrincipal(replicaId));
    } finally {
      await pool.end();
    }
  });
});
