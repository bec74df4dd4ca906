/**
 * Contention over HTTP, on real PostgreSQL: a settlement, a host's heartbeat and a publication that
 * wait out their lock timeout while another session holds what they need answer 503 `busy` with
 * `Retry-After` and `retry_after_ms`, and the Node metrics count them as `busy`, never as
 * `storage` (a 503 alone cannot tell the two apart).
 */
import type pg from "pg";
import { beforeAll, describe, expect, it } from "vitest";
import { createApp } from "../../src/app.js";
import { createAuthenticator } from "../../src/http/auth.js";
import { RETRY_AFTER_MS } from "../../src/registry/errors.js";
import { useTestDatabase } from "../support/database.js";
import { connectorType } from "../../fixtures/records.js";
import { createTestApi, TEST_SECRET, type TestApi } from "../support/http.js";
import { replicaRow } from "../support/replicas.js";
import { publishRoutingFleet, type RoutingFleet } from "../support/routing-fleet.js";

const db = useTestDatabase();
let api: TestApi;
let app: ReturnType<typeof createApp>;
let fleet: RoutingFleet;

beforeAll(async () => {
  api = createTestApi(db.registry);
  app = createApp({ registry: db.registry, authenticator: createAuthenticator({ hs256Secret: TEST_SECRET }), metrics: {} });
  fleet = await publishRoutingFleet(db.registry, {
    prefix: "hbusy",
    tenant: "tenant-hbusy",
    instances: [{ name: "main", replicas: [{ name: "a", capacity: 8 }] }],
  });
});

const call = async (method: string, path: string, token: string, body?: unknown) => {
  const response = await app.request(path, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body ? { "content-type": "application/json" } : {}) },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  return { status: response.status, headers: response.headers, body: (await response.json().catch(() => null)) as Record<string, unknown> };
};

async function whileHeld<T>(sql: string, params: unknown[], body: () => Promise<T>): Promise<T> {
  const holder: pg.PoolClient = await db.owner.connect();
  try {
    await holder.query("BEGIN");
    await holder.query(sql, params);
    return await body();
  } finally {
    await holder.query("ROLLBACK");
    holder.release();
  }
}

function expectBusy(answer: Awaited<ReturnType<typeof call>>, retryAfterMs: number) {
  expect(answer.status, JSON.stringify(answer.body)).toBe(503);
  expect(answer.headers.get("content-type")).toBe("application/problem+json");
  expect(answer.body).toMatchObject({ code: "busy", title: "Registry busy", retry_after_ms: retryAfterMs });
  expect(answer.headers.get("retry-after")).toBe("1");
}

describe("contention over HTTP", () => {
  it("answers busy (not storage) for settlement, a heartbeat and a publication, and the metrics count busy", async () => {
    const tenant = await api.tenantToken(fleet.tenant);
    const replicaId = fleet.replica.a as string;
    const holdReplica = "SELECT 1 FROM aip_connector_replicas WHERE replica_id = $1 FOR UPDATE";

    const created = await call("PUT", "/v1/routes/act_hbusy_1", tenant, { capability_id: fleet.capability });
    expect(created.status).toBe(201);
    const settlement = { assignment: created.body, outcome: "completed" };
    expectBusy(await whileHeld(holdReplica, [replicaId], () => call("POST", "/v1/routes/act_hbusy_1/settlement", tenant, settlement)), RETRY_AFTER_MS.soon);
    expect((await call("POST", "/v1/routes/act_hbusy_1/settlement", tenant, settlement)).body).toMatchObject({ released: true });

    const host = await api.hostTokenFor(replicaId);
    const heartbeat = { request_id: "msg_hbusy_1", previous_sequence: (await replicaRow(db, replicaId)).health_revision };
    expectBusy(await whileHeld(holdReplica, [replicaId], () => call("POST", `/v1/replicas/${replicaId}/heartbeat`, host, heartbeat)), RETRY_AFTER_MS.soon);
    expect((await call("POST", `/v1/replicas/${replicaId}/heartbeat`, host, heartbeat)).status).toBe(200);

    const admin = await api.adminToken();
    const publication = { changes: [connectorType("ctype_hbusy_new")] };
    expectBusy(
      await whileHeld("SELECT pg_advisory_xact_lock_shared(hashtext(current_database()), 1095323715)", [], () =>
        call("POST", "/v1/admin/publications", admin, publication),
      ),
      RETRY_AFTER_MS.later,
    );
    expect((await call("POST", "/v1/admin/publications", admin, publication)).status).toBe(200);

    const metrics = await app.request("/metrics", { headers: { authorization: `Bearer ${admin}` } });
    const text = await metrics.text();
    const count = (route: string, method: string, code: string) =>
      Number(
        new RegExp(`^aip_http_problems_total\\{method="${method}",route="${route.replace(/[/:]/g, (c) => `\\${c}`)}",code="${code}"\\} (\\d+)$`, "m").exec(
          text,
        )?.[1] ?? 0,
      );
    expect(count("/v1/routes/:action_id/settlement", "POST", "busy")).toBe(1);
    expect(count("/v1/replicas/:replica_id/:operation", "POST", "busy")).toBe(1);
    expect(count("/v1/admin/publications", "POST", "busy")).toBe(1);
    expect(text).not.toMatch(/^aip_http_problems_total\{[^}]*code="storage"\}/m);
  });
});
