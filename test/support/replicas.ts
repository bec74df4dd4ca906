import type { LifecycleOperation } from "../../src/schemas.js";
import type { LifecycleRequest, Registry } from "../../src/registry/registry.js";
import type { TestDatabase } from "./database.js";
import { hostPrincipal, publishTenantFleet, registrationEvidence, requestId } from "../../fixtures/records.js";

export interface ProvisionedFleet {
  typeId: string;
  versionId: string;
  capability: string;
  /** tenant -> its instance and replica IDs */
  tenants: { tenant: string; instanceId: string; replicas: string[] }[];
  replicas: string[];
}

/**
 * One type and active version with one capability; per tenant one instance, bound to the
 * capability, with `replicasPerTenant` provisioned replicas that have not registered yet
 * (publishTenantFleet).
 */
export async function provisionFleet(
  registry: Registry,
  options: { prefix: string; tenants?: string[]; replicasPerTenant?: number; capacity?: number; policy?: Record<string, unknown> },
): Promise<ProvisionedFleet> {
  const { prefix } = options;
  const capability = `cap:${prefix}.run`;
  const fleet = await publishTenantFleet(registry, {
    prefix,
    tenants: options.tenants ?? [`tenant-${prefix}`],
    capabilities: [capability],
    replicaIds: (tenant) => Array.from({ length: options.replicasPerTenant ?? 1 }, (_, n) => `crepl_${prefix}_${tenant}_${n}`),
    ...(options.capacity !== undefined ? { capacity: options.capacity } : {}),
    ...(options.policy ? { policy: { ref: `policy:${prefix}`, overrides: options.policy } } : {}),
  });
  return { typeId: fleet.typeId, versionId: fleet.versionId, capability, tenants: fleet.tenants, replicas: fleet.replicas };
}

/**
 * One transition of the replica's own host. A register that states no evidence of what the host
 * runs gets the evidence of the replica's admitted version and instance (registrationEvidence).
 */
export async function lifecycle(registry: Registry, replicaId: string, operation: LifecycleOperation, request: Partial<LifecycleRequest> = {}) {
  const evidence = operation === "register" && !("artifact_digest" in request) ? await registrationEvidence(registry, replicaId) : {};
  return registry.replicaLifecycle(replicaId, operation, { request_id: requestId(), ...evidence, ...request }, hostPrincipal(replicaId));
}

export interface ReplicaRow {
  status: string;
  lease_expires_at: string | null;
  health_revision: number;
  active_assignments: number;
  capacity: number;
}

export async function replicaRow(db: TestDatabase, replicaId: string): Promise<ReplicaRow> {
  const { rows } = await db.owner.query(
    `SELECT status, aip_time(lease_expires_at) AS lease_expires_at, health_revision::int AS health_revision,
            active_assignments, capacity
     FROM aip_connector_replicas WHERE replica_id = $1`,
    [replicaId],
  );
  if (!rows[0]) throw new Error(`no replica ${replicaId}`);
  return rows[0] as ReplicaRow;
}

/** Every admission counter, as "kind:key" -> active. */
export async function counters(db: TestDatabase): Promise<Record<string, number>> {
  const { rows } = await db.owner.query<{ k: string; active: number }>(
    "SELECT scope_kind || ':' || scope_key AS k, active FROM aip_admission_counters ORDER BY 1",
  );
  return Object.fromEntries(rows.map((r) => [r.k, r.active]));
}

/** The database clock, in epoch milliseconds. */
export async function dbNowMs(db: TestDatabase): Promise<number> {
  const { rows } = await db.owner.query<{ ms: string }>("SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS ms");
  return Number(rows[0]!.ms);
}

/**
 * Ends the given live replicas' leases in `ttlMs` (a heartbeat each with that lease, as a host
 * that then stops would send). Tests register with long leases, do whatever needs the replicas
 * live, and only then call this: on a busy machine no step can race a short lease.
 */
export async function shortenLeases(db: TestDatabase, replicaIds: string[], ttlMs = 1000) {
  const answers = [];
  for (const id of replicaIds) {
    const { health_revision } = await replicaRow(db, id);
    answers.push(await lifecycle(db.registry, id, "heartbeat", { previous_sequence: health_revision, lease_ttl_ms: ttlMs }));
  }
  return answers;
}

/** Polls the database clock until every given replica's lease has ended (a 1 s lease: ~1 s). */
export async function waitForLeaseEnd(db: TestDatabase, replicaIds: string[], timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const { rows } = await db.owner.query<{ live: number }>(
      "SELECT count(*)::int AS live FROM aip_connector_replicas WHERE replica_id = ANY ($1) AND lease_expires_at > clock_timestamp()",
      [replicaIds],
    );
    if (rows[0]!.live === 0) return;
    if (Date.now() > deadline) throw new Error("leases did not end in time");
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
