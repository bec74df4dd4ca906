/**
 * Fleets shaped for routing tests: one connector type and active version per prefix, one tenant,
 * any number of instances (each with a binding priority and its replicas' topology and
 * capacity), an optional admission policy, and the owner-side reads the assertions need
 * (counters, replica state). Everything is published in one batch; replicas then register.
 */
import type pg from "pg";
import type { Registry } from "../../src/registry/registry.js";
import { binding, connectorType, instance, policy, registerReplica, registrationEvidence, replica, version, hostPrincipal } from "../../fixtures/records.js";

interface ReplicaSpec {
  name: string;
  region?: string;
  zone?: string;
  capacity_class?: string;
  capacity?: number;
  /** Register the host (default true); an unregistered replica stays offline. */
  register?: boolean;
}

interface InstanceSpec {
  name: string;
  priority?: number;
  replicas: ReplicaSpec[];
}

export interface RoutingFleetSpec {
  prefix: string;
  tenant: string;
  capabilities?: string[];
  /** Overrides of the admission policy `quota:<prefix>`; `null`: bindings without a policy (the implicit default). */
  policy?: Record<string, unknown> | null;
  instances: InstanceSpec[];
}

export interface RoutingFleet {
  prefix: string;
  tenant: string;
  typeId: string;
  versionId: string;
  capability: string;
  capabilities: string[];
  policyRef: string | null;
  /** instance name -> ID */
  instance: Record<string, string>;
  /** replica name -> ID */
  replica: Record<string, string>;
}

export async function publishRoutingFleet(registry: Registry, spec: RoutingFleetSpec): Promise<RoutingFleet> {
  const { prefix, tenant } = spec;
  const capabilities = spec.capabilities ?? [`cap:${prefix}.run`];
  const typeId = `ctype_${prefix}`;
  const versionId = `cver_${prefix}_1`;
  const policyRef = spec.policy === null ? null : `quota:${prefix}`;
  const changes: Record<string, unknown>[] = [connectorType(typeId), await version(versionId, typeId, capabilities)];
  if (policyRef) changes.push(policy(policyRef, spec.policy ?? {}));
  const fleet: RoutingFleet = { prefix, tenant, typeId, versionId, capability: capabilities[0]!, capabilities, policyRef, instance: {}, replica: {} };
  const toRegister: string[] = [];
  for (const inst of spec.instances) {
    const instanceId = `cinst_${prefix}_${inst.name}`;
    fleet.instance[inst.name] = instanceId;
    changes.push(instance(instanceId, typeId, versionId, tenant));
    for (const cap of capabilities) {
      changes.push(binding(tenant, cap, instanceId, { priority: inst.priority ?? 10, ...(policyRef ? { quota_policy_ref: policyRef } : {}) }));
    }
    for (const r of inst.replicas) {
      const replicaId = `crepl_${prefix}_${r.name}`;
      fleet.replica[r.name] = replicaId;
      changes.push(replica(replicaId, instanceId, versionId, r));
      if (r.register !== false) toRegister.push(replicaId);
    }
  }
  await registry.publish(changes);
  for (const replicaId of toRegister) await registerReplica(registry, replicaId);
  return fleet;
}

/** Every admission counter, as `kind:key` -> active. */
export async function counters(owner: pg.Pool): Promise<Record<string, number>> {
  const { rows } = await owner.query<{ kind: string; key: string; active: number }>(
    "SELECT scope_kind AS kind, scope_key AS key, active FROM aip_admission_counters ORDER BY 1, 2",
  );
  return Object.fromEntries(rows.map((row) => [`${row.kind}:${row.key}`, row.active]));
}

export interface ReplicaState {
  status: string;
  active_assignments: number;
  consecutive_failures: number;
  circuit_open: boolean;
  health_revision: number;
}

export async function replicaState(owner: pg.Pool, replicaId: string): Promise<ReplicaState> {
  const { rows } = await owner.query<ReplicaState>(
    `SELECT status, active_assignments, consecutive_failures, circuit_open_until > clock_timestamp() AS circuit_open,
            health_revision::int AS health_revision
     FROM aip_connector_replicas WHERE replica_id = $1`,
    [replicaId],
  );
  if (!rows[0]) throw new Error(`no replica ${replicaId}`);
  return rows[0];
}

/** Number of routes stored for a tenant (a refusal must never leave one behind). */
export async function routeCount(owner: pg.Pool, tenant: string): Promise<number> {
  const { rows } = await owner.query<{ n: number }>("SELECT count(*)::int AS n FROM aip_route_assignments WHERE tenant_id = $1", [tenant]);
  return rows[0]!.n;
}

/** Move a replica through its lifecycle as its host would (sequence-fenced). */
export async function replicaTransition(registry: Registry, owner: pg.Pool, replicaId: string, operation: "heartbeat" | "drain" | "offline" | "register") {
  const { health_revision } = await replicaState(owner, replicaId);
  return registry.replicaLifecycle(
    replicaId,
    operation,
    {
      request_id: `msg_${replicaId}_${operation}_${health_revision}_${Math.random().toString(16).slice(2, 10)}`,
      previous_sequence: health_revision,
      ...(operation === "offline" ? {} : { lease_ttl_ms: 60_000 }),
      ...(operation === "register" ? await registrationEvidence(registry, replicaId) : {}),
    },
    hostPrincipal(replicaId),
  );
}
