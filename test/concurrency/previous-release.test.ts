/**
 * A rolling upgrade under load: the previous release's functions (0.1.0,
 * test/support/previous-release.ts) and this release's serve the same fleet at once, each call of
 * each worker going to one or the other at random, on real parallel connections: resolves (new
 * routes and retries), settlements, host transitions, lease expiry and publications that change
 * the fleet's bindings. Neither release may deadlock, fail on storage, or break the bookkeeping
 * of the other: both invariant checkers find the registry healthy while it runs and after, every
 * assignment digest this release stored matches its route's record, and once everything is
 * settled every counter and replica slot is back at zero.
 */
import type pg from "pg";
import { afterAll, beforeAll, expect, it } from "vitest";
import { createPgPool } from "../../src/db/pg.js";
import { RegistryError } from "../../src/registry/errors.js";
import type { Registry } from "../../src/registry/registry.js";
import type { RouteAssignment } from "../../src/schemas.js";
import { binding } from "../../fixtures/records.js";
import { useTestDatabase } from "../support/database.js";
import { expectHealthy } from "../support/invariants.js";
import { installPreviousRelease, previousRegistry } from "../support/previous-release.js";
import { previousReleaseUnavailable } from "../support/releases.js";

// The previous release's functions come from git history; a checkout without it skips, saying so.
const unavailable = previousReleaseUnavailable();
if (unavailable) console.warn(`previous-release tests skipped: ${unavailable}`);
import { counters, publishRoutingFleet, replicaState, replicaTransition } from "../support/routing-fleet.js";

const WORKERS = 24;
const STEPS = 8;

const db = useTestDatabase();
let current: Registry;
let previous: Registry;
/** Owner connections: the previous release's calls (it needs no grants) and the direct reads. */
let owner: pg.Pool;

beforeAll(async () => {
  if (unavailable) return;
  ({ registry: current } = db.registryWithPool(WORKERS));
  owner = createPgPool(db.ownerUrl, { max: WORKERS + 4, connectionTimeoutMs: 60_000 });
  await installPreviousRelease(owner);
  previous = previousRegistry(owner);
}, 60_000);
afterAll(async () => {
  await owner?.end();
});

it.runIf(!unavailable)("old and new functions serving one fleet at once keep every invariant of both", async () => {
  const names = ["a", "b", "c", "d", "e", "f"];
  const fleet = await publishRoutingFleet(current, {
    prefix: "upgrade",
    tenant: "tenant-upgrade",
    capabilities: ["cap:upgrade.run", "cap:upgrade.alt"],
    policy: {
      max_global_in_flight: 60,
      max_tenant_in_flight: 40,
      max_connector_type_in_flight: 50,
      max_instance_in_flight: 30,
      max_tenant_retry_in_flight: 10,
      circuit_failure_threshold: 1000,
    },
    instances: [
      { name: "i1", priority: 1, replicas: names.slice(0, 3).map((name, i) => ({ name, capacity: 6, zone: `z${i}` })) },
      { name: "i2", priority: 1, replicas: names.slice(3).map((name, i) => ({ name, capacity: 6, zone: `z${i}` })) },
    ],
  });
  const unexpected: string[] = [];
  const known = new Map<string, RouteAssignment>();
  let next = 0;
  let bindingRevision = 1;
  // The sampler: both releases' checkers, while the storm runs (one statement, one snapshot each).
  let running = true;
  const sampled: string[] = [];
  const sampler = (async () => {
    while (running) {
      for (const [label, registry] of [
        ["current", current],
        ["previous", previous],
      ] as const) {
        const report = await registry.checkInvariants();
        if (!report.healthy) sampled.push(`${label}: ${JSON.stringify(report.violations)}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  })();
  const worker = async (w: number) => {
    for (let step = 0; step < STEPS; step++) {
      const registry = Math.random() < 0.5 ? previous : current;
      const pick = Math.floor(Math.random() * 12);
      let lifecycle = false;
      try {
        if (pick < 5 || known.size === 0) {
          const actionId = `act_upgrade_${next++}`;
          const capability = fleet.capabilities[step % 2]!;
          const { assignment } = await registry.resolveRoute(actionId, fleet.tenant, capability, { zone: `z${step % 3}` });
          known.set(actionId, assignment);
        } else if (pick < 8) {
          const list = [...known.values()];
          const a = list[Math.floor(Math.random() * list.length)]!;
          await registry.settleRoute(a.action_id, a.tenant_id, a, pick === 7 ? "outcome_unknown" : "completed");
        } else if (pick === 8) {
          const list = [...known.values()];
          const a = list[Math.floor(Math.random() * list.length)]!;
          await registry.resolveRoute(a.action_id, fleet.tenant, a.capability_id);
        } else if (pick === 9) {
          lifecycle = true;
          // A publication: the second capability's binding of one instance off or on again (a
          // newer policy revision each time; one that lost a race to a newer one is a conflict).
          const revision = ++bindingRevision;
          const instance = fleet.instance[revision % 4 < 2 ? "i1" : "i2"]!;
          await registry.publish([
            binding(fleet.tenant, "cap:upgrade.alt", instance, { enabled: revision % 2 === 0, policy_revision: revision, quota_policy_ref: fleet.policyRef }),
          ]);
        } else {
          lifecycle = true;
          const replicaId = fleet.replica[names[(w + step) % names.length]!]!;
          const state = await replicaState(owner, replicaId);
          if (pick === 10) {
            // The host dies: its lease runs out and maintenance releases its routes.
            await owner.query("UPDATE aip_connector_replicas SET lease_expires_at = now() WHERE replica_id = $1 AND status <> 'offline'", [replicaId]);
            await registry.expireLeases(10);
          } else if (state.status === "offline") await replicaTransition(registry, owner, replicaId, "register");
          else await replicaTransition(registry, owner, replicaId, step % 2 ? "offline" : "drain");
        }
      } catch (error) {
        const code = error instanceof RegistryError ? error.code : String(error);
        // Contention may refuse (no replica, counters full, the binding off; for host transitions
        // and publications, a sequence fence or a revision that moved on). Never storage, busy
        // or anything else.
        const allowed = ["replica-unavailable", "capacity-exceeded", "binding-unavailable", ...(lifecycle ? ["conflict"] : [])];
        if (!allowed.includes(code))
          unexpected.push(
            `${registry === previous ? "previous" : "current"} pick ${pick}: ${code} ${JSON.stringify((error as RegistryError).extensions)}: ${(error as Error).message}`,
          );
      }
    }
  };
  await Promise.all(Array.from({ length: WORKERS }, (_, w) => worker(w)));
  running = false;
  await sampler;
  expect(unexpected).toEqual([]);
  expect(sampled).toEqual([]);
  await expectHealthy(current);
  await expectHealthy(previous);
  const { rows } = await owner.query<{ action_id: string }>(
    `SELECT action_id FROM aip_route_assignments a
     WHERE a.assignment_digest IS NOT NULL AND a.assignment_digest <> aip_assignment_digest(aip_assignment_json(a)::jsonb)`,
  );
  expect(rows).toEqual([]);
  const { rows: written } = await owner.query<{ old: number; new: number }>(
    "SELECT count(*) FILTER (WHERE assignment_digest IS NULL)::int AS old, count(*) FILTER (WHERE assignment_digest IS NOT NULL)::int AS new FROM aip_route_assignments",
  );
  // Both releases really created routes (the storm is not vacuous).
  expect(written[0]!.old).toBeGreaterThan(0);
  expect(written[0]!.new).toBeGreaterThan(0);
  // Everything still reserved settles, by either release, and every count returns to zero.
  await Promise.all([...known.values()].map((a, i) => (i % 2 ? previous : current).settleRoute(a.action_id, a.tenant_id, a, "cancelled")));
  const all = await counters(owner);
  for (const [key, value] of Object.entries(all)) if (key.includes("upgrade") || key === "global:fleet") expect(value, key).toBe(0);
  for (const id of Object.values(fleet.replica)) expect((await replicaState(owner, id)).active_assignments, id).toBe(0);
  await expectHealthy(current);
  await expectHealthy(previous);
});
