/**
 * Scale to zero on Workers: the LeaseClock Durable Object (src/maintenance/lease-clock.ts) inside workerd,
 * with every statement counted and time-stamped by the local Neon proxy. An idle deployment has no
 * alarm and sends nothing through simulated minutes; live leases put the alarm at the earliest
 * deadline and statements come only at or after it; once the last lease has expired its capacity
 * is back and nothing is sent again. The invariant "while a lease is live, an alarm exists at or
 * before its end" is checked through heartbeats that shorten and extend leases, a replica another
 * transaction holds, and a failing cycle. Then the proxy stands in for a suspended compute: the
 * first calls after it wait and succeed on both transports and in the alarm; past the HTTP bound
 * the answer is 503 `storage`, and the retry is safe.
 *
 * The suite's bindings turn the clock off (vitest.config.ts); this file turns it on for its calls.
 * Alarms fire by themselves at their time, as on the platform; `runDurableObjectAlarm` runs one
 * early where a test says so.
 */
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { Pool } from "@neondatabase/serverless";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { LEASE_CLOCK_NAME } from "../../src/maintenance/lease-clock.js";
import worker, { type LeaseClock } from "../../dev/worker.js";
import { conformancePrefix } from "../conformance/index.js";
import { Api, expectProblem, lifecycleRequestId, sleep, smallFleet, type SmallFleet } from "../conformance/target.js";
import { FUNCTION_SET } from "../../src/db/schema-version.js";
import { ownerSql, ownerUrl, proxyStats, registryStatements, resetProxyStats, suspendDatabase, workerEnv, workerTarget } from "./support.js";

const bindings = workerEnv({ LEASE_MAINTENANCE_INTERVAL_MS: "1000" });
const api = new Api(workerTarget(bindings, conformancePrefix("clk")));
const database = inject("workerDatabase");
const owner = ownerSql(database);
const namespace = env.LEASE_CLOCK as unknown as DurableObjectNamespace;
const clock = () => namespace.get(namespace.idFromName(LEASE_CLOCK_NAME));

interface ClockView {
  alarm: number | null;
  received: number;
  cycles: number;
  failed: number;
}
const view = (): Promise<ClockView> =>
  runInDurableObject(clock(), async (instance, state) => {
    const object = instance as unknown as LeaseClock;
    return { alarm: await state.storage.getAlarm(), received: object.received, cycles: object.cycles, failed: object.failed };
  });

/** Waits until the clock has run `n` more cycles (successful or failed) than in `since`, as the platform fires its alarms. */
async function cyclesAfter(since: ClockView, n = 1, timeoutMs = 20_000): Promise<ClockView> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const now = await view();
    if (now.cycles + now.failed >= since.cycles + since.failed + n) return now;
    if (Date.now() > deadline) throw new Error(`the clock ran no cycle: ${JSON.stringify(now)}`);
    await sleep(25);
  }
}

/** What the platform would run in `minutes` of idle time, one tick a minute: only a due alarm. */
async function idleMinutes(minutes: number): Promise<void> {
  for (let tick = 0; tick < minutes; tick++) expect(await runDurableObjectAlarm(clock())).toBe(false);
}

const ms = (time: string) => Date.parse(time);

/** A fleet of this file, published; replicas provisioned, not registered. */
async function fleetOf(name: string, tenants = 1): Promise<SmallFleet> {
  const fleet = await smallFleet(`${api.prefix}_${name}`, { tenants: Array.from({ length: tenants }, (_, n) => `${api.prefix}-${name}-t${n}`) });
  await api.publish(fleet.changes);
  return fleet;
}

/** An owner session of its own, to hold row locks in a transaction. */
async function ownerSession() {
  const pool = new Pool({ connectionString: ownerUrl(database), max: 1 });
  // Ended sessions may still see their socket close under them (a suspension closes them all).
  pool.on("error", () => {});
  const holder = await pool.connect();
  holder.on("error", () => {});
  return { pool, holder };
}

beforeAll(async () => {
  // The suite's files share one database: end the leases earlier files left live, so "nothing
  // is live" holds here, and forget any alarm.
  await owner.query(`UPDATE aip_connector_replicas SET lease_expires_at = ${FUNCTION_SET}.aip_now() WHERE status <> 'offline'`);
  for (;;) {
    const [{ result }] = (await owner.query(`SELECT ${FUNCTION_SET}.aip_expire_leases(10000) AS result`)) as [{ result: { expired: number } }];
    if (result.expired === 0) break;
  }
  await runInDurableObject(clock(), (_instance, state) => state.storage.deleteAlarm());
});
// No alarm of this file may fire during the next one.
afterAll(() => runInDurableObject(clock(), (_instance, state) => state.storage.deleteAlarm()));

describe("an idle deployment", () => {
  it("has no alarm, no cron, and sends no statement through ten simulated minutes", async () => {
    await resetProxyStats();
    expect((await view()).alarm).toBeNull();
    expect("scheduled" in worker).toBe(false);
    await idleMinutes(12);
    expect((await proxyStats()).statements).toBe(0);
  });
});

describe("live leases", () => {
  it("put the alarm at the earliest deadline; statements come only at or after it; capacity returns; then nothing again", async () => {
    const fleet = await fleetOf("live", 2);
    const [first, second] = fleet.tenants.map((t) => fleet.replicas[t] as string) as [string, string];
    const before = await view();
    const sequences: Record<string, number> = {};
    for (const id of [first, second]) {
      sequences[id] = (await api.lifecycle(id, "register", { request_id: lifecycleRequestId(api.prefix), lease_ttl_ms: 60_000 })).body.sequence;
    }
    const gateway = await api.tenant(fleet.tenants[0] as string);
    const route = await api.call("PUT", `/v1/routes/act_${api.prefix}_live`, { token: gateway, body: { capability_id: fleet.capabilities[0] } });
    expect(route.status).toBe(201);
    expect(route.body.replica_id).toBe(first);
    // The hosts' last heartbeats ask for 1.5 s and 2.5 s (the route needed `first` live before).
    // The margin of this test: the second heartbeat and the look at the alarm take well under
    // the 1.5 s before the first alarm fires.
    const beat = (id: string, ttl: number) =>
      api.lifecycle(id, "heartbeat", { request_id: lifecycleRequestId(api.prefix), previous_sequence: sequences[id], lease_ttl_ms: ttl });
    const early = await beat(first, 1500);
    const late = await beat(second, 2500);
    // The shortened lease told the clock; the alarm is the earlier end.
    const armed = await view();
    expect(armed.received).toBeGreaterThan(before.received);
    expect(armed.alarm).toBe(ms(early.body.lease_expires_at));

    await resetProxyStats();
    // The platform fires the alarm at the first end (expires `first`), then at the second.
    let now = await cyclesAfter(armed, 1);
    if (now.alarm !== null) now = await cyclesAfter(now, 1);
    expect(now.alarm).toBeNull();
    const sent = await registryStatements();
    const expiries = sent.filter((s) => s.text.includes("aip_expire_leases"));
    expect(expiries.length).toBe(2);
    for (const statement of sent) expect(statement.at).toBeGreaterThanOrEqual(ms(early.body.lease_expires_at));
    expect(expiries[1]!.at).toBeGreaterThanOrEqual(ms(late.body.lease_expires_at));
    // The two cycles, route retention once (an isolate that does not know when it is due runs it
    // in its first cycle; then not for 15 minutes), and the clock's own schema check once per isolate.
    expect(sent.filter((s) => s.text.includes("aip_remove_settled_routes")).length).toBeLessThanOrEqual(1);
    expect(sent.length).toBeLessThanOrEqual(4);

    // Capacity is back and counted.
    const admin = await api.admin();
    expect((await api.call("GET", `/v1/admin/replicas/${first}`, { token: admin })).body).toMatchObject({ status: "offline", active_assignments: 0 });
    const settled = await api.call("GET", `/v1/routes/act_${api.prefix}_live`, { token: gateway });
    expect(settled.headers.get("aip-last-settlement")).toBe("lease_expired");
    expect((await api.call("GET", "/v1/fleet/status", { token: admin })).body).toMatchObject({ expired_leases: 0 });

    // Nothing is live: no alarm, and idle minutes send nothing.
    await resetProxyStats();
    await idleMinutes(12);
    expect((await proxyStats()).statements).toBe(0);
  });
});

describe("the invariant: while a lease is live, an alarm exists at or before its end", () => {
  it("a shortened lease moves the alarm earlier; an extension is not told, and the early alarm follows the new end", async () => {
    const fleet = await fleetOf("beat");
    const id = fleet.replicas[fleet.tenants[0] as string] as string;
    const start = await view();
    const registered = await api.lifecycle(id, "register", { request_id: lifecycleRequestId(api.prefix), lease_ttl_ms: 60_000 });
    expect(await view()).toMatchObject({ alarm: ms(registered.body.lease_expires_at), received: start.received + 1 });

    const shorter = await api.lifecycle(id, "heartbeat", {
      request_id: lifecycleRequestId(api.prefix),
      previous_sequence: registered.body.sequence,
      lease_ttl_ms: 30_000,
    });
    expect(ms(shorter.body.lease_expires_at)).toBeLessThan(ms(registered.body.lease_expires_at));
    expect(await view()).toMatchObject({ alarm: ms(shorter.body.lease_expires_at), received: start.received + 2 });

    // An extension of a lease this isolate saw covered: nothing to tell, the alarm stays earlier.
    const longer = await api.lifecycle(id, "heartbeat", {
      request_id: lifecycleRequestId(api.prefix),
      previous_sequence: shorter.body.sequence,
      lease_ttl_ms: 120_000,
    });
    const extended = await view();
    expect(extended).toMatchObject({ alarm: ms(shorter.body.lease_expires_at), received: start.received + 2 });

    // The alarm fires before the lease ends (run early here): the cycle expires nothing and the
    // next alarm is the lease's new end, read from the database.
    await resetProxyStats();
    expect(await runDurableObjectAlarm(clock())).toBe(true);
    expect(await view()).toMatchObject({ alarm: ms(longer.body.lease_expires_at), cycles: extended.cycles + 1 });
    expect((await registryStatements()).filter((s) => s.text.includes("aip_expire_leases"))).toHaveLength(1);
    expect((await api.call("GET", `/v1/admin/replicas/${id}`, { token: await api.admin() })).body.status).toBe("ready");

    // A drain with a shorter lease is told; offline is not (no lease left); the next cycle then
    // finds nothing live and sets no alarm.
    const drained = await api.lifecycle(id, "drain", {
      request_id: lifecycleRequestId(api.prefix),
      previous_sequence: longer.body.sequence,
      lease_ttl_ms: 10_000,
    });
    expect(await view()).toMatchObject({ alarm: ms(drained.body.lease_expires_at), received: start.received + 3 });
    await api.lifecycle(id, "offline", { request_id: lifecycleRequestId(api.prefix), previous_sequence: drained.body.sequence });
    expect((await view()).received).toBe(start.received + 3);
    expect(await runDurableObjectAlarm(clock())).toBe(true);
    expect((await view()).alarm).toBeNull();
  });

  it("a replica another transaction holds at its deadline: the clock retries soon, and expires it once released", async () => {
    const fleet = await fleetOf("held");
    const id = fleet.replicas[fleet.tenants[0] as string] as string;
    const { pool, holder } = await ownerSession();
    try {
      // 3 s: the margin for the lock and the look at the alarm before it fires (the lock keeps
      // the lease from being shortened later instead).
      const registered = await api.lifecycle(id, "register", { request_id: lifecycleRequestId(api.prefix), lease_ttl_ms: 3000 });
      await holder.query("BEGIN");
      await holder.query("SELECT 1 FROM aip_connector_replicas WHERE replica_id = $1 FOR UPDATE", [id]);
      const armed = await view();
      expect(armed.alarm).toBe(ms(registered.body.lease_expires_at));
      // At the deadline the cycle skips the held replica: a backlog remains, the next alarm is
      // soon (the minimum interval, doubled while nothing moves), not at any future lease.
      const skipped = await cyclesAfter(armed);
      expect(skipped.cycles).toBe(armed.cycles + 1);
      expect(skipped.alarm).not.toBeNull();
      expect((skipped.alarm as number) - Date.now()).toBeLessThanOrEqual(2000);
      await holder.query("COMMIT");
      // The retry expires it.
      const done = await cyclesAfter(skipped);
      expect(done.alarm).toBeNull();
      expect((await api.call("GET", `/v1/admin/replicas/${id}`, { token: await api.admin() })).body.status).toBe("offline");
    } finally {
      await holder.query("ROLLBACK").catch(() => {});
      holder.release();
      await pool.end();
    }
  });

  it("a failing cycle never ends the chain: it retries with backoff and returns the capacity once the database answers", async () => {
    const fleet = await fleetOf("fail");
    const tenant = fleet.tenants[0] as string;
    const id = fleet.replicas[tenant] as string;
    const gateway = await api.tenant(tenant);
    const { pool, holder } = await ownerSession();
    try {
      const live = await api.lifecycle(id, "register", { request_id: lifecycleRequestId(api.prefix), lease_ttl_ms: 60_000 });
      expect((await api.call("PUT", `/v1/routes/act_${api.prefix}_fail`, { token: gateway, body: { capability_id: fleet.capabilities[0] } })).status).toBe(201);
      // A long transaction holds the route: releasing it runs into the lock timeout (2 s).
      await holder.query("BEGIN");
      await holder.query("SELECT 1 FROM aip_route_assignments WHERE action_id = $1 FOR UPDATE", [`act_${api.prefix}_fail`]);
      // Then the host's last heartbeat asks for a 3 s lease (the margin for the look at the alarm).
      const registered = await api.lifecycle(id, "heartbeat", {
        request_id: lifecycleRequestId(api.prefix),
        previous_sequence: live.body.sequence,
        lease_ttl_ms: 3000,
      });
      const armed = await view();
      expect(armed.alarm).toBe(ms(registered.body.lease_expires_at));
      const failed = await cyclesAfter(armed);
      expect(failed.failed).toBe(armed.failed + 1);
      // Not thrown to the platform (whose retries end after six): rescheduled by the clock itself.
      expect(failed.alarm).not.toBeNull();
      expect((failed.alarm as number) - Date.now()).toBeLessThanOrEqual(2000);
      await holder.query("ROLLBACK");
      const done = await cyclesAfter(failed);
      expect(done).toMatchObject({ alarm: null, failed: failed.failed });
      const route = await api.call("GET", `/v1/routes/act_${api.prefix}_fail`, { token: gateway });
      expect(route.headers.get("aip-last-settlement")).toBe("lease_expired");
    } finally {
      await holder.query("ROLLBACK").catch(() => {});
      holder.release();
      await pool.end();
    }
  });
});

describe("waking up: the first calls after the database was suspended", () => {
  for (const transport of ["http", "websocket"] as const) {
    it(`wait for the compute and succeed (${transport})`, async () => {
      const woken = new Api(
        workerTarget(workerEnv({ NEON_TRANSPORT: transport, LEASE_MAINTENANCE_INTERVAL_MS: "1000" }), conformancePrefix(`wk${transport[0]}`)),
      );
      const fleet = await smallFleet(woken.prefix, { tenants: [`${woken.prefix}-t`] });
      await woken.publish(fleet.changes);
      const id = fleet.replicas[fleet.tenants[0] as string] as string;
      const registered = await woken.lifecycle(id, "register", { request_id: lifecycleRequestId(woken.prefix), lease_ttl_ms: 60_000 });
      const admin = await woken.admin();
      await resetProxyStats();
      await suspendDatabase(1500);
      const [status, route] = await Promise.all([
        woken.call("GET", "/v1/fleet/status", { token: admin }),
        woken.call("PUT", `/v1/routes/act_${woken.prefix}`, {
          token: await woken.tenant(fleet.tenants[0] as string),
          body: { capability_id: fleet.capabilities[0] },
        }),
      ]);
      expect(status.status).toBe(200);
      expect(route.status, JSON.stringify(route.body)).toBe(201);
      expect((await proxyStats()).wakes).toBe(1);
      await woken.lifecycle(id, "offline", { request_id: lifecycleRequestId(woken.prefix), previous_sequence: registered.body.sequence });
    });
  }

  it("the clock's alarm waits for the compute too", async () => {
    const fleet = await fleetOf("wake");
    const id = fleet.replicas[fleet.tenants[0] as string] as string;
    // 3 s: the margin for the look at the alarm and the suspension before it fires.
    const registered = await api.lifecycle(id, "register", { request_id: lifecycleRequestId(api.prefix), lease_ttl_ms: 3000 });
    const armed = await view();
    expect(armed.alarm).toBe(ms(registered.body.lease_expires_at));
    await resetProxyStats();
    await suspendDatabase(1500);
    const done = await cyclesAfter(armed);
    expect(done).toMatchObject({ alarm: null, failed: armed.failed, cycles: armed.cycles + 1 });
    expect((await proxyStats()).wakes).toBe(1);
    expect((await api.call("GET", `/v1/admin/replicas/${id}`, { token: await api.admin() })).body.status).toBe("offline");
  });

  it("past the HTTP bound answers 503 storage with Retry-After; the retry returns the one route", async () => {
    const bounded = new Api(workerTarget(workerEnv({ NEON_HTTP_TIMEOUT_MS: "300", LEASE_MAINTENANCE_INTERVAL_MS: "1000" }), conformancePrefix("wkb")));
    const fleet = await smallFleet(bounded.prefix, { tenants: [`${bounded.prefix}-t`] });
    await bounded.publish(fleet.changes);
    const id = fleet.replicas[fleet.tenants[0] as string] as string;
    const registered = await bounded.lifecycle(id, "register", { request_id: lifecycleRequestId(bounded.prefix), lease_ttl_ms: 60_000 });
    const gateway = await bounded.tenant(fleet.tenants[0] as string);
    const resolve = () => bounded.call("PUT", `/v1/routes/act_${bounded.prefix}`, { token: gateway, body: { capability_id: fleet.capabilities[0] } });
    await resetProxyStats();
    await suspendDatabase(1500);
    const refused = await resolve();
    expectProblem(refused, 503, "storage");
    expect(refused.headers.get("retry-after")).toBeTruthy();
    // The client retries after Retry-After, once the compute is up. The first attempt may have
    // committed meanwhile: the retry then returns that route, never a second one.
    // On a busy machine a retry can still exceed the 300 ms bound: a client retries again.
    while ((await proxyStats()).wakes === 0) await sleep(50);
    let retried = refused;
    for (const deadline = Date.now() + 60_000; retried.status === 503 && Date.now() < deadline; ) {
      await sleep(200);
      retried = await resolve();
    }
    expect([200, 201]).toContain(retried.status);
    const again = await resolve();
    expect(again.status).toBe(200);
    expect(again.headers.get("aip-route-outcome")).toBe("existing");
    expect(again.body).toEqual(retried.body);
    await bounded.lifecycle(id, "offline", { request_id: lifecycleRequestId(bounded.prefix), previous_sequence: registered.body.sequence });
  });
});
