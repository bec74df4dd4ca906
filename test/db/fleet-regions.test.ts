/**
 * aip_fleet_regions(): the fleet status counts per topology region, in label order, bounded,
 * summing to aip_fleet_status()'s totals.
 */
import { expect, it } from "vitest";
import { useTestDatabase } from "../support/database.js";
import { connectorType, instance, registerReplica, replica, version } from "../../fixtures/records.js";

const db = useTestDatabase();

it("lists no region for an empty fleet", async () => {
  expect((await db.registry.fleetRegions()).regions).toEqual([]);
});

it("counts replicas, leases, circuits and capacity per region, summing to the fleet totals", async () => {
  await db.registry.publish([
    connectorType("ctype_rg"),
    await version("cver_rg", "ctype_rg", ["cap:rg.search"]),
    instance("cinst_rg", "ctype_rg", "cver_rg", "tenant-a"),
    replica("crepl_rg_eu1", "cinst_rg", "cver_rg", { region: "eu-west", zone: "eu-west-1a", capacity: 4 }),
    replica("crepl_rg_eu2", "cinst_rg", "cver_rg", { region: "eu-west", zone: "eu-west-1b", capacity: 6 }),
    replica("crepl_rg_us1", "cinst_rg", "cver_rg", { region: "us-east", zone: "us-east-1a", capacity: 8 }),
    replica("crepl_rg_ap1", "cinst_rg", "cver_rg", { region: "ap-south", zone: "ap-south-1a", capacity: 2 }),
  ]);
  for (const id of ["crepl_rg_eu1", "crepl_rg_eu2", "crepl_rg_us1"]) await registerReplica(db.registry, id, 300_000);
  await db.owner.query("UPDATE aip_connector_replicas SET lease_expires_at = now() - interval '1 minute' WHERE replica_id = 'crepl_rg_eu2'");
  await db.owner.query("UPDATE aip_connector_replicas SET circuit_open_until = now() + interval '1 minute' WHERE replica_id = 'crepl_rg_us1'");

  const { regions, observed_at } = await db.registry.fleetRegions();
  expect(observed_at).toMatch(/Z$/);
  expect(regions).toEqual([
    { region: "ap-south", replicas: 1, ready: 0, draining: 0, offline: 1, expired: 0, open_circuits: 0, ready_capacity: 0, active_assignments: 0 },
    { region: "eu-west", replicas: 2, ready: 1, draining: 0, offline: 0, expired: 1, open_circuits: 0, ready_capacity: 4, active_assignments: 0 },
    { region: "us-east", replicas: 1, ready: 1, draining: 0, offline: 0, expired: 0, open_circuits: 1, ready_capacity: 8, active_assignments: 0 },
  ]);
  const status = await db.registry.fleetStatus();
  const sum = (key: Exclude<keyof (typeof regions)[number], "region">) => regions.reduce((n, r) => n + r[key], 0);
  expect([sum("replicas"), sum("ready"), sum("offline"), sum("expired"), sum("open_circuits"), sum("ready_capacity")]).toEqual([
    status.replicas,
    status.ready_replicas,
    status.offline_replicas,
    status.expired_leases,
    status.open_circuits,
    status.ready_capacity,
  ]);

  expect((await db.registry.fleetRegions(2)).regions.map((r) => r.region)).toEqual(["ap-south", "eu-west"]);
});
