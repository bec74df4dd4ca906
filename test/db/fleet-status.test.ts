/**
 * aip_fleet_status on a fleet whose every count is known: a database of its own, so the
 * aggregate is exact.
 */
import { expect, it } from "vitest";
import { useTestDatabase } from "../support/database.js";
import { binding, connectorType, instance, policy, replica, version } from "../../fixtures/records.js";
import { dbNowMs, lifecycle, shortenLeases, waitForLeaseEnd } from "../support/replicas.js";
import { catalogRevision } from "../support/assertions.js";

const db = useTestDatabase();

const FIELDS = [
  "active_assignments",
  "active_versions",
  "catalog_revision",
  "connector_types",
  "draining_replicas",
  "enabled_instances",
  "expired_leases",
  "observed_at",
  "offline_replicas",
  "open_circuits",
  "ready_capacity",
  "ready_replicas",
  "replicas",
];

it("counts replicas by status, live leases, open circuits, ready capacity and active assignments", async () => {
  const empty = await db.registry.fleetStatus();
  expect(Object.keys(empty).sort()).toEqual(FIELDS);
  expect(empty).toMatchObject({ replicas: 0, ready_replicas: 0, ready_capacity: 0, active_assignments: 0, expired_leases: 0 });

  const cap = "cap:fs.run";
  const capacities = { fs_ready_a: 10, fs_ready_b: 5, fs_circuit: 4, fs_draining: 7, fs_never: 9, fs_gone: 6, fs_expired: 3 };
  await db.registry.publish([
    connectorType("ctype_fs"),
    connectorType("ctype_fs_off"),
    { op: "set_connector_type_enabled", id: "ctype_fs_off", enabled: false },
    await version("cver_fs_1", "ctype_fs", [cap]),
    await version("cver_fs_2", "ctype_fs", [cap], { status: "admitted" }),
    policy("policy:fs", { circuit_failure_threshold: 1 }),
    instance("cinst_fs", "ctype_fs", "cver_fs_1", "tenant-fs"),
    instance("cinst_fs_off", "ctype_fs", "cver_fs_1", "tenant-fs-off", 1, { status: "disabled" }),
    binding("tenant-fs", cap, "cinst_fs", { quota_policy_ref: "policy:fs" }),
    ...Object.entries(capacities).map(([id, capacity]) => replica(`crepl_${id}`, "cinst_fs", "cver_fs_1", { capacity })),
  ]);

  // The circuit replica alone is ready: its route fails once and opens the circuit (threshold 1).
  await lifecycle(db.registry, "crepl_fs_circuit", "register", { lease_ttl_ms: 120_000 });
  const failed = (await db.registry.resolveRoute("act_fs_fail", "tenant-fs", cap)).assignment;
  expect(failed.replica_id).toBe("crepl_fs_circuit");
  await db.registry.settleRoute(failed.action_id, "tenant-fs", failed, "outcome_unknown");

  for (const id of ["fs_ready_a", "fs_ready_b", "fs_draining", "fs_gone"]) await lifecycle(db.registry, `crepl_${id}`, "register", { lease_ttl_ms: 120_000 });
  await lifecycle(db.registry, "crepl_fs_draining", "drain", { previous_sequence: 1, lease_ttl_ms: 120_000 });
  await lifecycle(db.registry, "crepl_fs_gone", "offline", { previous_sequence: 1 });
  await lifecycle(db.registry, "crepl_fs_expired", "register", { lease_ttl_ms: 120_000 });
  // Three reserved routes, wherever routing puts them (the expired replica is still live here).
  const routes = [];
  for (let n = 0; n < 3; n++) routes.push((await db.registry.resolveRoute(`act_fs_${n}`, "tenant-fs", cap)).assignment);
  await shortenLeases(db, ["crepl_fs_expired"]);
  expect(routes.every((r) => !["crepl_fs_circuit", "crepl_fs_draining", "crepl_fs_gone", "crepl_fs_never"].includes(r.replica_id))).toBe(true);
  await waitForLeaseEnd(db, ["crepl_fs_expired"]);

  const before = await dbNowMs(db);
  const status = await db.registry.fleetStatus();
  const after = await dbNowMs(db);
  expect(Object.keys(status).sort()).toEqual(FIELDS);
  expect(status).toEqual({
    catalog_revision: await catalogRevision(db.owner),
    connector_types: 2,
    active_versions: 1,
    enabled_instances: 1,
    replicas: 7,
    // ready_a, ready_b and the circuit replica (an open circuit does not change the status).
    ready_replicas: 3,
    draining_replicas: 1,
    offline_replicas: 2,
    expired_leases: 1,
    open_circuits: 1,
    ready_capacity: 10 + 5 + 4,
    active_assignments: 3,
    observed_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
  });
  expect(Date.parse(status.observed_at)).toBeGreaterThanOrEqual(before);
  expect(Date.parse(status.observed_at)).toBeLessThanOrEqual(after);
  // The reference's expired_leases counts every replica whose lease ended, offline ones included
  // (reference-behaviour.md 6.5); ours is the maintenance backlog. Every offline replica's lease
  // has ended, so the reference's figure is always ours plus offline_replicas.
  const { rows } = await db.owner.query<{ n: number }>("SELECT count(*)::int AS n FROM aip_connector_replicas WHERE lease_expires_at <= clock_timestamp()");
  expect(rows[0]!.n).toBe(status.expired_leases + status.offline_replicas);

  const onExpired = routes.filter((r) => r.replica_id === "crepl_fs_expired").length;
  expect(await db.registry.expireLeases(10)).toMatchObject({ expired: 1, released: onExpired });
  expect(await db.registry.fleetStatus()).toMatchObject({
    ready_replicas: 3,
    offline_replicas: 3,
    expired_leases: 0,
    ready_capacity: 19,
    active_assignments: 3 - onExpired,
  });
});
