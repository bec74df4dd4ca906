/**
 * Fleet status, on-demand lease expiry and the invariant checker over HTTP. The status is global
 * (other suites may share the database), so counts are checked as lower bounds.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { type Api, expectProblem, lifecycleRequestId, publishFleet, sleep, smallFleet, type SmallFleet } from "./target.js";

const FLEET_STATUS_FIELDS = [
  "catalog_revision",
  "connector_types",
  "active_versions",
  "enabled_instances",
  "replicas",
  "ready_replicas",
  "draining_replicas",
  "offline_replicas",
  "expired_leases",
  "ready_capacity",
  "active_assignments",
  "observed_at",
];

/**
 * Lets a live replica's lease run out: a heartbeat with the shortest lease a host may ask for
 * (1 s), then polling until the lease is past on the database clock (via the admin view). Routes
 * that need the replica are created before: nothing here depends on how fast requests are.
 */
async function letLeaseExpire(api: Api, replicaId: string, sequence: number): Promise<void> {
  const beat = await api.lifecycle(replicaId, "heartbeat", { request_id: lifecycleRequestId(api.prefix), previous_sequence: sequence, lease_ttl_ms: 1000 });
  expect(beat.status, JSON.stringify(beat.body)).toBe(200);
  const admin = await api.admin();
  for (let attempt = 0; attempt < 100; attempt++) {
    const view = await api.call("GET", `/v1/admin/replicas/${replicaId}`, { token: admin });
    const status = await api.call("GET", "/v1/fleet/status", { token: admin });
    if (Date.parse(view.body.lease_expires_at) <= Date.parse(status.body.observed_at)) return;
    await sleep(100);
  }
  throw new Error(`lease of ${replicaId} did not expire`);
}

export function fleetConformance(api: Api): void {
  describe("fleet", () => {
    let fleet: SmallFleet;
    let tenant: string;
    let shortLived: string;
    let sequence: number;

    beforeAll(async () => {
      tenant = `${api.prefix}-fleet-tenant`;
      fleet = await smallFleet(`${api.prefix}_fleet`, { tenants: [tenant] });
      shortLived = fleet.replicas[tenant] as string;
      sequence = (await publishFleet(api, fleet)).sequences[shortLived] as number;
    });

    it("GET /v1/fleet/status: aggregates only, no identifiers", async () => {
      const response = await api.call("GET", "/v1/fleet/status", { token: await api.fleetReader() });
      expect(response.status).toBe(200);
      expect(Object.keys(response.body)).toEqual(expect.arrayContaining(FLEET_STATUS_FIELDS));
      for (const [field, value] of Object.entries(response.body)) {
        if (field === "observed_at") expect(value).toMatch(/Z$/);
        else expect(Number.isInteger(value) && (value as number) >= 0, field).toBe(true);
      }
      expect(response.body.replicas).toBeGreaterThanOrEqual(1);
      expect(JSON.stringify(response.body)).not.toContain(api.prefix);
    });

    it("POST /v1/fleet/lease-expiry marks the expired replica offline and releases its routes", async () => {
      const token = await api.tenant(tenant);
      const created = await api.call("PUT", `/v1/routes/act_${api.prefix}_fleet_1`, { token, body: { capability_id: fleet.capabilities[0] } });
      expect(created.status).toBe(201);
      await letLeaseExpire(api, shortLived, sequence);
      const admin = await api.admin();
      const expiry = await api.call("POST", "/v1/fleet/lease-expiry?limit=1000", { token: admin });
      expect(expiry.status).toBe(200);
      expect(expiry.body).toMatchObject({ expired: expect.any(Number), released: expect.any(Number) });
      expect(expiry.body.expired).toBeGreaterThanOrEqual(1);
      expect(expiry.body.released).toBeGreaterThanOrEqual(1);
      const view = await api.call("GET", `/v1/admin/replicas/${shortLived}`, { token: admin });
      expect(view.body).toMatchObject({ status: "offline", active_assignments: 0 });
      const route = await api.call("GET", `/v1/routes/act_${api.prefix}_fleet_1`, { token });
      expect(route.headers.get("aip-route-reserved")).toBe("false");
      expect(route.headers.get("aip-last-settlement")).toBe("lease_expired");
      // The host comes back by registering again.
      const back = await api.lifecycle(shortLived, "register", { request_id: lifecycleRequestId(api.prefix), lease_ttl_ms: 60_000 });
      expect(back.body.status).toBe("ready");
    });

    it("lease expiry needs registry:admin and a limit in range", async () => {
      expectProblem(await api.call("POST", "/v1/fleet/lease-expiry", { token: await api.fleetReader() }), 403, "forbidden");
      expectProblem(await api.call("POST", "/v1/fleet/lease-expiry?limit=0", { token: await api.admin() }), 400, "invalid");
    });

    it("GET /v1/admin/invariants: the bookkeeping is consistent", async () => {
      const response = await api.call("GET", "/v1/admin/invariants", { token: await api.admin() });
      expect(response.status).toBe(200);
      expect(response.body).toMatchObject({ healthy: true, violations: [] });
    });
  });
}
