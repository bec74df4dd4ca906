/**
 * Model-based concurrency testing of the registry: fast-check generates one command list per
 * worker; the workers run them at the same time, each on its own connections (and half of them
 * through the HTTP app), against a fresh fleet of several tenants. A sampler on another connection
 * checks the bookkeeping throughout; an optional disruptor injects faults alongside.
 *
 * Outcomes under real concurrency are not predictable one by one, so the oracle checks what must
 * hold whatever the interleaving:
 * - one destination per action: every successful resolve of an action answers the JSON text of
 *   the first one (byte for byte: pinned retries, duplicates, reacquisitions), the action is
 *   created once, and the stored route equals it;
 * - every route was decided against one catalog revision: its binding, policy and admission
 *   snapshot are exactly the ones published at its catalog_revision (rebuilt from the
 *   publications' answers afterwards);
 * - every catalog page is exactly what its tenant's catalog revision holds; that revision is one
 *   at which the tenant's visible catalog changed (another tenant's publication never moves it)
 *   and no older than the last such change committed before the read began; a cursor continues
 *   at its own revision, and is stale only for a newer change of the tenant (the database's own
 *   answer says both revisions);
 * - capacity is never exceeded: sampled replica counts against capacity, counters against the
 *   highest limit pinned by their holders, and aip_check_invariants() on every sample and at the
 *   end; after draining every reservation, every counter of the run is back at zero;
 * - each refusal is one the operation may give (a settlement of a pinned route never fails, a
 *   forged one is always fence-lost...), and no statement deadlocks.
 *
 * Used by test/concurrency/model*.test.ts (a few seconds) and scripts/soak.ts (as long as asked).
 */
import fc from "fast-check";
import type pg from "pg";
import { createPgPool } from "../../src/db/pg.js";
import type { CatalogPage, LifecycleOperation, RouteAssignment, SettlementOutcome } from "../../src/schemas.js";
import {
  binding as bindingChange,
  connectorType,
  instance as instanceChange,
  policy as policyChange,
  replica as replicaChange,
  version,
} from "../../fixtures/records.js";
import { createGateway, sqlGateway, type Answer, type Gateway, type Refusal, type Transport } from "./model-gateway.js";

// Shape -----------------------------------------------------------------------------------------
export interface ModelShape {
  tenants: number;
  workers: number;
  commandsPerWorker: number;
  /** Action IDs per run: a small space, so workers collide on the same actions. */
  slots: number;
}

export const DEFAULT_SHAPE: ModelShape = { tenants: 4, workers: 8, commandsPerWorker: 8, slots: 40 };

const CAPABILITIES = 6;
/** Capabilities bound at the start; the others can be bound by a publication during the run. */
const BOUND_AT_START = 4;
const INSTANCES_PER_TENANT = 2;
const REPLICAS_PER_INSTANCE = 2;
const OUTCOMES: SettlementOutcome[] = ["completed", "outcome_unknown", "cancelled", "lease_expired"];

/** Admission limits a publication may switch a tenant's policy to (tenants 0..2 have a policy). */
const POLICY_VARIANTS: Record<string, unknown>[] = [
  { max_tenant_in_flight: 4, max_instance_in_flight: 3, max_binding_in_flight: 1, max_tenant_retry_in_flight: 1 },
  { max_tenant_in_flight: 2, max_instance_in_flight: 2, max_binding_in_flight: 1, max_tenant_retry_in_flight: 1 },
  { max_tenant_in_flight: 20, max_instance_in_flight: 10, max_binding_in_flight: 10, max_tenant_retry_in_flight: 6 },
  { max_tenant_in_flight: 4, max_instance_in_flight: 3, max_binding_in_flight: 1, max_tenant_retry_in_flight: 1, enabled: false },
];
const POLICY_TENANTS = 3;
/** Per-tenant extras: a global and a connector-type counter, and a quick circuit. */
const POLICY_EXTRAS = (tenant: number): Record<string, unknown> => ({
  max_global_in_flight: tenant === 0 ? 30 : null,
  max_connector_type_in_flight: tenant === 1 ? 8 : null,
  circuit_failure_threshold: 2,
  circuit_open_ms: 300,
});

// Commands --------------------------------------------------------------------------------------
type PublishCommand =
  | { op: "binding"; tenant: number; cap: number; inst: number; mutate: "toggle" | "priority" | "credential" }
  | { op: "instance"; tenant: number; inst: number }
  | { op: "policy"; tenant: number; variant: number }
  | { op: "version"; active: boolean }
  | { op: "capacity"; replica: number; capacity: number };

type Command =
  | { kind: "resolve"; slot: number; zone: string | null }
  | { kind: "retry"; pick: number }
  | { kind: "mismatch"; pick: number }
  | { kind: "settle"; pick: number; outcome: SettlementOutcome }
  | { kind: "forged"; pick: number }
  | { kind: "lifecycle"; replica: number; op: LifecycleOperation; ttl: number; fenced: boolean }
  | { kind: "lapse"; replica: number; pick: number | null }
  | { kind: "expire"; limit: number }
  | { kind: "publish"; change: PublishCommand }
  | { kind: "catalog"; tenant: number; limit: number }
  | { kind: "pause"; ms: number };

export type Plan = Command[][];

function commandArbitrary(shape: ModelShape): fc.Arbitrary<Command> {
  const replicas = shape.tenants * INSTANCES_PER_TENANT * REPLICAS_PER_INSTANCE;
  const tenant = fc.nat(shape.tenants - 1);
  const inst = fc.nat(INSTANCES_PER_TENANT - 1);
  const replica = fc.nat(replicas - 1);
  const pick = fc.nat(1000);
  // Policy, instance and version changes touch every route decision of a tenant (or of all): the
  // ones most likely to land while a resolve or a catalog read is deciding.
  const publish: fc.Arbitrary<PublishCommand> = fc.oneof(
    {
      weight: 4,
      arbitrary: fc.record({
        op: fc.constant("binding" as const),
        tenant,
        cap: fc.nat(CAPABILITIES - 1),
        inst,
        mutate: fc.constantFrom("toggle" as const, "priority" as const, "credential" as const),
      }),
    },
    { weight: 3, arbitrary: fc.record({ op: fc.constant("instance" as const), tenant, inst }) },
    {
      weight: 4,
      arbitrary: fc.record({ op: fc.constant("policy" as const), tenant: fc.nat(POLICY_TENANTS - 1), variant: fc.nat(POLICY_VARIANTS.length - 1) }),
    },
    { weight: 1, arbitrary: fc.record({ op: fc.constant("version" as const), active: fc.boolean() }) },
    { weight: 2, arbitrary: fc.record({ op: fc.constant("capacity" as const), replica, capacity: fc.integer({ min: 1, max: 3 }) }) },
  );
  return fc.oneof(
    { weight: 10, arbitrary: fc.record({ kind: fc.constant("resolve" as const), slot: fc.nat(shape.slots - 1), zone: fc.constantFrom(null, "z0", "z1") }) },
    { weight: 5, arbitrary: fc.record({ kind: fc.constant("retry" as const), pick }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant("mismatch" as const), pick }) },
    { weight: 4, arbitrary: fc.record({ kind: fc.constant("settle" as const), pick, outcome: fc.constantFrom(...OUTCOMES) }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant("forged" as const), pick }) },
    {
      weight: 4,
      arbitrary: fc.record({
        kind: fc.constant("lifecycle" as const),
        replica,
        op: fc.constantFrom<LifecycleOperation>("register", "heartbeat", "drain", "offline"),
        ttl: fc.constantFrom(1000, 30_000),
        fenced: fc.boolean(),
      }),
    },
    // Half of the lapses hit a replica that holds (or held) a route, so expiry has routes to release.
    { weight: 2, arbitrary: fc.record({ kind: fc.constant("lapse" as const), replica, pick: fc.option(pick, { nil: null }) }) },
    { weight: 2, arbitrary: fc.record({ kind: fc.constant("expire" as const), limit: fc.constantFrom(1, 3, 50) }) },
    { weight: 5, arbitrary: fc.record({ kind: fc.constant("publish" as const), change: publish }) },
    { weight: 3, arbitrary: fc.record({ kind: fc.constant("catalog" as const), tenant, limit: fc.integer({ min: 1, max: 3 }) }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant("pause" as const), ms: fc.integer({ min: 10, max: 60 }) }) },
  );
}

export function planArbitrary(shape: ModelShape): fc.Arbitrary<Plan> {
  const worker = fc.array(commandArbitrary(shape), { minLength: shape.commandsPerWorker, maxLength: shape.commandsPerWorker });
  return fc.array(worker, { minLength: shape.workers, maxLength: shape.workers });
}

// Catalog model -----------------------------------------------------------------------------------
interface BindingState {
  enabled: boolean;
  priority: number;
  policy_revision: number;
  credential: string;
  quota: string | null;
}
interface InstanceState {
  enabled: boolean;
  config_revision: number;
}
interface PolicyState {
  revision: number;
  variant: number;
}
interface CatalogState {
  bindings: Map<string, BindingState>;
  instances: Map<string, InstanceState>;
  policies: Map<number, PolicyState>;
  versionActive: boolean;
}

const bindingKey = (tenant: number, cap: number, inst: number) => `${tenant}|${cap}|${inst}`;
const instanceKey = (tenant: number, inst: number) => `${tenant}|${inst}`;

function cloneState(s: CatalogState): CatalogState {
  return {
    bindings: new Map([...s.bindings].map(([k, v]) => [k, { ...v }])),
    instances: new Map([...s.instances].map(([k, v]) => [k, { ...v }])),
    policies: new Map([...s.policies].map(([k, v]) => [k, { ...v }])),
    versionActive: s.versionActive,
  };
}

type StateUpdate = (s: CatalogState) => void;

// The fleet of one run ------------------------------------------------------------------------------
interface ModelFleet {
  prefix: string;
  typeId: string;
  versionId: string;
  tenants: string[];
  caps: string[];
  instances: string[][];
  replicas: { id: string; tenant: number; inst: number; zone: string }[];
  /** What every host runs (the fleet's one version), as a register states it; config_revision is the instance's. */
  evidence: { artifact_digest: string; manifest_digest: string; capability_count: number };
  /** The catalog state the setup publication produced, and its revision. */
  base: CatalogState;
  baseRevision: number;
}

const capId = (prefix: string, n: number) => `cap:${prefix}.c${n}`;

async function publishFleet(gateway: Gateway, prefix: string, shape: ModelShape): Promise<ModelFleet> {
  const typeId = `ctype_${prefix}`;
  const versionId = `cver_${prefix}`;
  const caps = Array.from({ length: CAPABILITIES }, (_, n) => capId(prefix, n));
  const tenants = Array.from({ length: shape.tenants }, (_, t) => `tenant-${prefix}-${t}`);
  const admitted = await version(versionId, typeId, caps);
  const evidence = { artifact_digest: String(admitted.attestation.artifact_digest), manifest_digest: admitted.manifest_digest, capability_count: caps.length };
  const changes: Record<string, unknown>[] = [connectorType(typeId), admitted];
  const base: CatalogState = { bindings: new Map(), instances: new Map(), policies: new Map(), versionActive: true };
  const instances: string[][] = [];
  const replicas: ModelFleet["replicas"] = [];
  for (let t = 0; t < shape.tenants; t++) {
    const quota = t < POLICY_TENANTS ? `quota:${prefix}:${t}` : null;
    if (quota) {
      changes.push(policyChange(quota, { ...POLICY_VARIANTS[0], ...POLICY_EXTRAS(t) }));
      base.policies.set(t, { revision: 1, variant: 0 });
    }
    instances.push([]);
    for (let i = 0; i < INSTANCES_PER_TENANT; i++) {
      const instanceId = `cinst_${prefix}_${t}_${i}`;
      instances[t]!.push(instanceId);
      changes.push(instanceChange(instanceId, typeId, versionId, tenants[t]!));
      base.instances.set(instanceKey(t, i), { enabled: true, config_revision: 1 });
      for (let c = 0; c < BOUND_AT_START; c++) {
        const state: BindingState = { enabled: true, priority: i + 1, policy_revision: 1, credential: "credential-revision-1", quota };
        changes.push(bindingChange(tenants[t]!, caps[c]!, instanceId, { priority: state.priority, quota_policy_ref: quota }));
        base.bindings.set(bindingKey(t, c, i), state);
      }
      for (let k = 0; k < REPLICAS_PER_INSTANCE; k++) {
        const id = `crepl_${prefix}_${t}_${i}_${k}`;
        changes.push(replicaChange(id, instanceId, versionId, { capacity: 2, zone: `z${k}` }));
        replicas.push({ id, tenant: t, inst: i, zone: `z${k}` });
      }
    }
  }
  const published = await gateway.publish(changes);
  if (!published.ok) throw new Error(`model fleet publication refused: ${published.code} ${JSON.stringify(published.extensions)}`);
  // Hosts come up; one replica per tenant on a 1 s lease, so leases really end during a run.
  await Promise.all(
    replicas.map(async (r, n) => {
      const answered = await gateway.lifecycle(r.id, "register", {
        request_id: `msg_${prefix}_setup_${n}`,
        lease_ttl_ms: n % 4 === 3 ? 1000 : 60_000,
        ...evidence,
        config_revision: 1,
      });
      if (!answered.ok) throw new Error(`model replica registration refused: ${answered.code}`);
    }),
  );
  return { prefix, typeId, versionId, tenants, caps, instances, replicas, evidence, base, baseRevision: published.result.catalog_revision };
}

// The run ---------------------------------------------------------------------------------------------
export interface ModelEnv {
  ownerUrl: string;
  dataUrl: string;
  controlUrl: string;
}

export interface DisruptContext {
  owner: pg.Pool;
  database: string;
  /** True while the workers run. */
  running: () => boolean;
  /** The share of the plan's commands already executed, 0 to 1. */
  progress: () => number;
  note: (line: string) => void;
}

export interface ModelOptions {
  shape?: ModelShape;
  /** Which transport worker w uses (default: every third worker goes through HTTP). */
  transport?: (worker: number) => Transport;
  /** Faults are injected: retryable `storage` refusals are expected, and a lost answer may hide a commit. */
  faults?: boolean;
  /** Runs alongside the workers (fault injection). */
  disrupt?: (context: DisruptContext) => Promise<void>;
  /** Prefix of the run's identifiers (unique per run in one database). */
  prefix: string;
}

export interface ModelReport {
  prefix: string;
  workers: number;
  commands: number;
  /** Registry calls made (a catalog walk or a fenced transition is several). */
  operations: number;
  /** Per command kind, how often each outcome happened. */
  outcomes: Record<string, Record<string, number>>;
  samples: number;
  checks: { routes: number; pages: number; staleCursors: number; decisions: number };
  expired: number;
  released: number;
  notes: string[];
  violations: string[];
}

interface First {
  json: string;
  assignment: RouteAssignment;
}

interface PageObservation {
  worker: number;
  tenant: number;
  limit: number;
  after: string;
  cursorRevision: number | null;
  page: CatalogPage;
  /** The newest publication answered before this read began: the read must see it. */
  floor: number;
}

interface StaleObservation {
  worker: number;
  tenant: number;
  cursorRevision: number;
  catalogRevision: number;
  floor: number;
}

interface HistoryEntry {
  revision: number;
  update: StateUpdate;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** fn over items, at most `limit` at a time. */
async function eachLimit<T>(items: T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) await fn(items[next++]!);
    }),
  );
}

/** Allowed refusals per command kind, besides `busy` and `storage` (see storageAllowed). */
const ALLOWED: Record<string, string[]> = {
  resolve: ["binding-unavailable", "replica-unavailable", "capacity-exceeded", "admission"],
  retry: ["replica-unavailable", "capacity-exceeded"],
  mismatch: ["conflict"],
  settle: [],
  forged: ["fence-lost"],
  // A sequence fence that moved on, a live replica, a lease that ended; register of a version that
  // is no longer active.
  lifecycle: ["conflict", "admission"],
  sequence: [],
  expire: [],
  // A revision another publisher overtook; a capacity below the replica's active count.
  publish: ["conflict"],
  catalog: ["stale-cursor"],
};

export async function runModel(env: ModelEnv, plan: Plan, options: ModelOptions): Promise<ModelReport> {
  const shape = options.shape ?? DEFAULT_SHAPE;
  const faults = options.faults ?? false;
  const transportOf = options.transport ?? ((w: number) => (w % 3 === 2 ? "http" : "sql"));
  const report: ModelReport = {
    prefix: options.prefix,
    workers: plan.length,
    commands: plan.reduce((n, w) => n + w.length, 0),
    operations: 0,
    outcomes: {},
    samples: 0,
    checks: { routes: 0, pages: 0, staleCursors: 0, decisions: 0 },
    expired: 0,
    released: 0,
    notes: [],
    violations: [],
  };
  const violation = (line: string) => {
    if (report.violations.length < 50) report.violations.push(line);
  };
  const tally = (kind: string, outcome: string) => {
    report.outcomes[kind] ??= {};
    const byKind = report.outcomes[kind];
    byKind[outcome] = (byKind[outcome] ?? 0) + 1;
  };

  const owner = createPgPool(env.ownerUrl, { max: 4, connectionTimeoutMs: 60_000, applicationName: "aip-model-owner" });
  const setup = sqlGateway(env, { applicationName: "aip-model-setup", connections: 4 });
  const database = new URL(env.ownerUrl).pathname.slice(1);
  const started = Date.now();
  const phase = (name: string) => report.notes.push(`${name} at ${Date.now() - started} ms`);
  try {
    const fleet = await publishFleet(setup, options.prefix, shape);
    phase("fleet published");

    // Shared state of the run (one process: plain maps are enough).
    const first = new Map<string, First>();
    const created = new Map<string, number>();
    const known: string[] = [];
    const attempted = new Set<string>();
    const uncertain = new Set<string>();
    const history: HistoryEntry[] = [];
    let historyComplete = true;
    const latest = cloneState(fleet.base);
    const pages: PageObservation[] = [];
    const staleCursors: StaleObservation[] = [];
    /** The newest catalog revision a publication has answered (so committed) so far. */
    let committedFloor = 0;
    let nextRevision = 1000;
    let requests = 0;

    // Few actions per binding and tenant, so admission limits are reached; the last capability
    // is bound only by a publication during the run.
    const slotAction = (slot: number) => ({
      actionId: `act_${options.prefix}_${slot}`,
      tenant: slot % shape.tenants,
      cap: Math.floor(slot / shape.tenants) % (BOUND_AT_START + 1),
    });
    const actionTenant = new Map<string, { tenant: number; cap: number }>();

    const gateways = plan.map((_, w) => createGateway(transportOf(w), env, { applicationName: `aip-model-w${w}` }));
    // Contention (a lock wait that ran out: nothing committed) may happen to any command; storage
    // only when faults are injected.
    const storageAllowed = (r: Refusal) => (r.code === "busy" && r.retryable) || (r.code === "storage" && r.retryable && faults);
    /** Tallies a refusal and reports it if this command may not give it. */
    const refused = (w: number, kind: string, r: Refusal): void => {
      tally(kind, r.code === "storage" ? `storage ${r.sqlstate ?? "(connection)"}` : r.code);
      if (r.malformed) violation(`w${w} ${kind}: malformed problem response (${r.code}): ${r.malformed}`);
      if (!(ALLOWED[kind] ?? []).includes(r.code) && !storageAllowed(r)) {
        violation(`w${w} ${kind}: unexpected refusal ${r.code} ${JSON.stringify(r.extensions)}`);
      }
    };
    // Monotonic reads: a worker runs its commands one after another, so no later answer may carry
    // an older catalog revision than one it already saw.
    // Pages carry their tenant's catalog revision, monotonic per tenant.
    const seenRevision = plan.map(() => 0);
    const observeRevision = (w: number, revision: number, what: string) => {
      if (revision < seenRevision[w]!) violation(`w${w} ${what}: catalog revision ${revision} after having seen ${seenRevision[w]}`);
      seenRevision[w] = Math.max(seenRevision[w]!, revision);
    };
    const seenTenantRevision = plan.map(() => new Map<number, number>());
    const observeTenantRevision = (w: number, tenant: number, revision: number, what: string) => {
      const seen = seenTenantRevision[w]!.get(tenant) ?? 0;
      if (revision < seen) violation(`w${w} ${what}: tenant ${tenant}'s catalog revision ${revision} after having seen ${seen}`);
      seenTenantRevision[w]!.set(tenant, Math.max(seen, revision));
    };

    const recordResolve = (w: number, kind: string, actionId: string, answered: Answer<{ outcome: string; json: string; assignment: RouteAssignment }>) => {
      report.operations++;
      if (!answered.ok) {
        refused(w, kind, answered);
        if (answered.code === "storage") uncertain.add(actionId);
        return;
      }
      tally(kind, answered.outcome);
      if (answered.outcome === "created") {
        created.set(actionId, (created.get(actionId) ?? 0) + 1);
        observeRevision(w, answered.assignment.catalog_revision, `${kind} ${actionId}`);
      }
      const seen = first.get(actionId);
      if (!seen) {
        first.set(actionId, { json: answered.json, assignment: answered.assignment });
        known.push(actionId);
      } else if (seen.json !== answered.json) {
        violation(`w${w} ${kind} ${actionId}: answered another record than its first resolve:\n  first ${seen.json}\n  now   ${answered.json}`);
      }
    };

    const pickKnown = (pick: number) => (known.length ? known[pick % known.length]! : undefined);

    const composePublish = (change: PublishCommand): { changes: Record<string, unknown>[]; update?: StateUpdate } | undefined => {
      switch (change.op) {
        case "binding": {
          const key = bindingKey(change.tenant, change.cap, change.inst);
          const current = latest.bindings.get(key);
          const quota = change.tenant < POLICY_TENANTS ? `quota:${options.prefix}:${change.tenant}` : null;
          const next: BindingState = current
            ? {
                ...current,
                policy_revision: ++nextRevision,
                ...(change.mutate === "toggle" ? { enabled: !current.enabled } : {}),
                ...(change.mutate === "priority" ? { priority: current.priority === 1 ? 3 : 1 } : {}),
                ...(change.mutate === "credential" ? { credential: `credential-revision-${nextRevision}` } : {}),
              }
            : // A new binding of a capability not bound before.
              { enabled: true, priority: change.inst + 1, policy_revision: ++nextRevision, credential: "credential-revision-1", quota };
          const record = bindingChange(fleet.tenants[change.tenant]!, fleet.caps[change.cap]!, fleet.instances[change.tenant]![change.inst]!, {
            priority: next.priority,
            policy_revision: next.policy_revision,
            credential_revision_ref: next.credential,
            quota_policy_ref: next.quota,
            enabled: next.enabled,
          });
          return { changes: [record], update: (s) => void s.bindings.set(key, { ...next }) };
        }
        case "instance": {
          const key = instanceKey(change.tenant, change.inst);
          const current = latest.instances.get(key)!;
          const next: InstanceState = { enabled: !current.enabled, config_revision: ++nextRevision };
          const record = instanceChange(
            fleet.instances[change.tenant]![change.inst]!,
            fleet.typeId,
            fleet.versionId,
            fleet.tenants[change.tenant]!,
            next.config_revision,
            {
              status: next.enabled ? "enabled" : "disabled",
            },
          );
          return { changes: [record], update: (s) => void s.instances.set(key, { ...next }) };
        }
        case "policy": {
          const next: PolicyState = { revision: ++nextRevision, variant: change.variant };
          const record = policyChange(`quota:${options.prefix}:${change.tenant}`, {
            ...POLICY_VARIANTS[0],
            ...POLICY_EXTRAS(change.tenant),
            ...POLICY_VARIANTS[change.variant],
            revision: next.revision,
          });
          return { changes: [record], update: (s) => void s.policies.set(change.tenant, { ...next }) };
        }
        case "version":
          return {
            changes: [{ op: "set_version_status", id: fleet.versionId, status: change.active ? "active" : "admitted" }],
            update: (s) => {
              s.versionActive = change.active;
            },
          };
        case "capacity": {
          const r = fleet.replicas[change.replica]!;
          // Not a catalog change: no revision, nothing for the catalog model.
          return { changes: [replicaChange(r.id, fleet.instances[r.tenant]![r.inst]!, fleet.versionId, { capacity: change.capacity, zone: r.zone })] };
        }
      }
    };

    const execute = async (w: number, gateway: Gateway, command: Command): Promise<void> => {
      switch (command.kind) {
        case "resolve": {
          const { actionId, tenant, cap } = slotAction(command.slot);
          attempted.add(actionId);
          actionTenant.set(actionId, { tenant, cap });
          const answered = await gateway.resolve(actionId, fleet.tenants[tenant]!, fleet.caps[cap]!, command.zone ? { zone: command.zone } : {});
          recordResolve(w, "resolve", actionId, answered);
          return;
        }
        case "retry": {
          const actionId = pickKnown(command.pick);
          if (!actionId) return;
          const { tenant, cap } = actionTenant.get(actionId)!;
          const answered = await gateway.resolve(actionId, fleet.tenants[tenant]!, fleet.caps[cap]!);
          // It was created before this call started: a retry never creates.
          if (answered.ok && answered.outcome === "created") violation(`w${w} retry ${actionId}: created a second time`);
          recordResolve(w, "retry", actionId, answered);
          return;
        }
        case "mismatch": {
          const actionId = pickKnown(command.pick);
          if (!actionId) return;
          const { tenant, cap } = actionTenant.get(actionId)!;
          const answered = await gateway.resolve(actionId, fleet.tenants[tenant]!, fleet.caps[(cap + 1) % CAPABILITIES]!);
          report.operations++;
          if (answered.ok) violation(`w${w} mismatch ${actionId}: another capability got ${answered.outcome}`);
          else refused(w, "mismatch", answered);
          return;
        }
        case "settle":
        case "forged": {
          const actionId = pickKnown(command.pick);
          if (!actionId) return;
          const route = first.get(actionId)!;
          const assignment = command.kind === "forged" ? { ...route.assignment, fence_token: `route_${"f".repeat(32)}` } : route.assignment;
          const answered = await gateway.settle(actionId, route.assignment.tenant_id, assignment, command.kind === "settle" ? command.outcome : "completed");
          report.operations++;
          if (!answered.ok) refused(w, command.kind, answered);
          else if (command.kind === "forged") violation(`w${w} forged settlement of ${actionId} was accepted`);
          else tally("settle", answered.released ? `released ${command.outcome}` : "already released");
          return;
        }
        case "lifecycle": {
          const replicaId = fleet.replicas[command.replica]!.id;
          let previous: number | undefined;
          if (command.op !== "register" || command.fenced) {
            const sequence = await gateway.replicaSequence(replicaId);
            report.operations++;
            if (!sequence.ok) return refused(w, "sequence", sequence);
            previous = sequence.sequence;
          }
          // A host states what it runs at register: the version, and the instance configuration
          // as last published (a publication racing it makes the register an admission refusal).
          const replica = fleet.replicas[command.replica]!;
          const config = latest.instances.get(instanceKey(replica.tenant, replica.inst))!.config_revision;
          const answered = await gateway.lifecycle(replicaId, command.op, {
            request_id: `msg_${options.prefix}_${w}_${++requests}`,
            ...(previous !== undefined ? { previous_sequence: previous } : {}),
            ...(command.op === "offline" ? {} : { lease_ttl_ms: command.ttl }),
            ...(command.op === "register" ? { ...fleet.evidence, config_revision: config } : {}),
          });
          report.operations++;
          if (!answered.ok) refused(w, "lifecycle", answered);
          else tally("lifecycle", command.op);
          return;
        }
        case "lapse": {
          // The host goes silent past its lease: on the database clock, the lease ends now.
          const routed = command.pick === null ? undefined : pickKnown(command.pick);
          await owner.query(
            "UPDATE aip_connector_replicas SET lease_expires_at = least(lease_expires_at, clock_timestamp()) WHERE replica_id = $1 AND status <> 'offline'",
            [routed ? first.get(routed)!.assignment.replica_id : fleet.replicas[command.replica]!.id],
          );
          tally("lapse", "ok");
          return;
        }
        case "expire": {
          const answered = await gateway.expireLeases(command.limit);
          report.operations++;
          if (!answered.ok) return refused(w, "expire", answered);
          report.expired += answered.expired;
          report.released += answered.released;
          tally("expire", answered.expired > 0 ? "expired some" : "nothing to expire");
          return;
        }
        case "publish": {
          const composed = composePublish(command.change);
          if (!composed) return;
          const answered = await gateway.publish(composed.changes);
          report.operations++;
          if (!answered.ok) {
            refused(w, "publish", answered);
            // A lost answer may hide a commit: the catalog history is no longer known for sure.
            if (answered.code === "storage") historyComplete = false;
            return;
          }
          tally("publish", `${command.change.op} ${answered.result.changed ? "changed" : "unchanged"}`);
          observeRevision(w, answered.result.catalog_revision, "publish");
          committedFloor = Math.max(committedFloor, answered.result.catalog_revision);
          if (composed.update && answered.result.changed > 0) {
            composed.update(latest);
            history.push({ revision: answered.result.catalog_revision, update: composed.update });
          }
          return;
        }
        case "catalog": {
          let cursor: string | undefined;
          let after = "";
          let cursorRevision: number | null = null;
          for (let n = 0; n < 8; n++) {
            const floor = committedFloor;
            const answered = await gateway.catalogPage(fleet.tenants[command.tenant]!, { limit: command.limit, ...(cursor ? { cursor } : {}) });
            report.operations++;
            if (!answered.ok) {
              refused(w, "catalog", answered);
              if (answered.code === "stale-cursor") {
                report.checks.staleCursors++;
                // Stale only for a newer revision of the tenant: the database names both revisions
                // (checked against the publication history below).
                const { cursor_revision, catalog_revision } = answered.extensions;
                if (cursor_revision !== cursorRevision || typeof catalog_revision !== "number" || catalog_revision <= cursorRevision!) {
                  violation(`w${w} catalog: stale-cursor for a cursor of revision ${cursorRevision}: ${JSON.stringify(answered.extensions)}`);
                } else {
                  observeTenantRevision(w, command.tenant, catalog_revision, "stale cursor");
                  staleCursors.push({ worker: w, tenant: command.tenant, cursorRevision: cursorRevision!, catalogRevision: catalog_revision, floor });
                }
              }
              return;
            }
            const { page } = answered;
            tally("catalog", cursor ? "continued" : "first page");
            // A cursor that outlived publications newer than its revision (none reached its tenant).
            if (cursor && floor > page.catalog_revision) tally("catalog", "continued past newer publications");
            observeTenantRevision(w, command.tenant, page.catalog_revision, "catalog page");
            if (cursorRevision !== null && page.catalog_revision !== cursorRevision) {
              violation(`w${w} catalog: a cursor of revision ${cursorRevision} continued at revision ${page.catalog_revision}`);
            }
            if (page.next_cursor !== null && !page.next_cursor.startsWith(`${page.catalog_revision}:`)) {
              violation(`w${w} catalog: next_cursor ${page.next_cursor} does not carry revision ${page.catalog_revision}`);
            }
            pages.push({ worker: w, tenant: command.tenant, limit: command.limit, after, cursorRevision, page, floor });
            if (!page.next_cursor) return;
            cursor = page.next_cursor;
            after = page.capabilities.at(-1)?.capability.id ?? after;
            cursorRevision = page.catalog_revision;
          }
          return;
        }
        case "pause":
          await sleep(command.ms);
          return;
      }
    };

    // The sampler: the bookkeeping must hold at every instant, not only when everything is quiet.
    // One statement sees one snapshot, and every registry transition is one transaction.
    let running = true;
    const sampler = (async () => {
      while (running) {
        try {
          const { rows } = await owner.query<{ report: { healthy: boolean; violations: unknown[] }; over_capacity: unknown; over_limit: unknown }>(`
            WITH held AS (
              SELECT e ->> 'kind' AS kind, e ->> 'key' AS key, max((e ->> 'limit')::bigint) AS lim
              FROM aip_route_assignments a, jsonb_array_elements(aip_held_scopes(a)) e
              WHERE a.reserved GROUP BY 1, 2)
            SELECT aip_check_invariants() AS report,
              (SELECT json_agg(json_build_object('replica_id', r.replica_id, 'active', r.active_assignments, 'capacity', r.capacity))
               FROM aip_connector_replicas r WHERE r.active_assignments > r.capacity OR r.active_assignments < 0) AS over_capacity,
              (SELECT json_agg(json_build_object('scope', c.scope_kind, 'key', c.scope_key, 'active', c.active, 'pinned_limit', h.lim))
               FROM aip_admission_counters c LEFT JOIN held h ON h.kind = c.scope_kind AND h.key = c.scope_key
               WHERE c.active > coalesce(h.lim, 0) OR c.active < 0) AS over_limit`);
          const row = rows[0]!;
          report.samples++;
          if (!row.report.healthy) violation(`sampler: invariants violated mid-run: ${JSON.stringify(row.report.violations)}`);
          if (row.over_capacity) violation(`sampler: replica over capacity: ${JSON.stringify(row.over_capacity)}`);
          if (row.over_limit) violation(`sampler: counter over its pinned limits: ${JSON.stringify(row.over_limit)}`);
        } catch (error) {
          // Only an injected fault may interrupt the sampler.
          if (!faults) violation(`sampler: ${String(error)}`);
          await sleep(50);
        }
        await sleep(5);
      }
    })();
    let executedCommands = 0;
    const disruption = options.disrupt?.({
      owner,
      database,
      running: () => running,
      progress: () => executedCommands / Math.max(1, report.commands),
      note: (line) => report.notes.push(line),
    });

    const latency: Record<string, number> = {};
    const executed: Record<string, number> = {};
    // Open every worker's connections first, so the commands really run at the same time.
    await Promise.all(gateways.map((g) => g.expireLeases(1).then(() => report.operations++)));
    await Promise.all(
      plan.map(async (commands, w) => {
        for (const command of commands) {
          const began = Date.now();
          try {
            await execute(w, gateways[w]!, command);
            executedCommands++;
            latency[command.kind] = (latency[command.kind] ?? 0) + Date.now() - began;
            executed[command.kind] = (executed[command.kind] ?? 0) + 1;
          } catch (error) {
            // Direct owner statements (lapse) may be cut by an injected fault too.
            if (!faults) violation(`w${w} ${command.kind}: threw ${String((error as Error)?.stack ?? error)}`);
          }
        }
      }),
    );
    running = false;
    phase("workers done");
    report.notes.push(
      `mean latency: ${Object.keys(executed)
        .map((k) => `${k} ${executed[k]}x ${Math.round(latency[k]! / executed[k]!)} ms`)
        .join(", ")}`,
    );
    await Promise.all([sampler, disruption]);
    await Promise.all(gateways.map((g) => g.close()));
    if (faults) await waitForDatabase(owner);

    // Afterwards ----------------------------------------------------------------------------------
    const verifier = sqlGateway(env, { applicationName: "aip-model-verify", connections: 4 });
    try {
      /** A call that retries retryable storage refusals (faults: the server may still be recovering). */
      const settled = async <T>(call: () => Promise<Answer<T>>): Promise<Answer<T>> => {
        for (let attempt = 1; ; attempt++) {
          const answered = await call();
          if (answered.ok || !((answered.code === "storage" || answered.code === "busy") && answered.retryable) || attempt >= 60) return answered;
          await sleep(250);
        }
      };

      // 1. One destination per action: the stored route is the one every client saw; any route a
      // lost answer hid is the one a retry returns, and an action that never committed is created
      // by its retry exactly once.
      const stored = await owner.query<{ action_id: string }>("SELECT action_id FROM aip_route_assignments WHERE tenant_id = ANY ($1)", [fleet.tenants]);
      for (const { action_id } of stored.rows) if (!attempted.has(action_id)) violation(`route ${action_id} exists but was never asked for`);
      await eachLimit([...attempted], 4, async (actionId) => {
        const { tenant, cap } = actionTenant.get(actionId)!;
        const read = await settled(() => verifier.getRoute(actionId, fleet.tenants[tenant]!));
        if (!read.ok) return violation(`verify ${actionId}: route read refused ${read.code}`);
        report.checks.routes++;
        const seen = first.get(actionId);
        if (read.json !== null && seen && read.json !== seen.json)
          violation(`verify ${actionId}: stored route differs from the one answered:\n  answered ${seen.json}\n  stored   ${read.json}`);
        if (read.json === null && seen) violation(`verify ${actionId}: a route a client received is not stored`);
        if (read.json !== null && !seen && !faults) violation(`verify ${actionId}: a route is stored that no client saw created`);
        if (!seen && (faults || uncertain.has(actionId))) {
          // A retry after an uncertain outcome: the same route if one committed, otherwise at most one new one.
          const retried = await settled(() => verifier.resolve(actionId, fleet.tenants[tenant]!, fleet.caps[cap]!));
          report.operations++;
          if (retried.ok) {
            if (read.json !== null && (retried.outcome === "created" || retried.json !== read.json)) {
              violation(`verify ${actionId}: the retry after a lost answer returned ${retried.outcome} ${retried.json} instead of ${read.json}`);
            }
            if (retried.outcome === "created") created.set(actionId, (created.get(actionId) ?? 0) + 1);
            first.set(actionId, { json: retried.json, assignment: retried.assignment });
            tally("verify retry", retried.outcome);
          } else if (!["replica-unavailable", "capacity-exceeded", "binding-unavailable", "admission"].includes(retried.code)) {
            violation(`verify ${actionId}: the retry after a lost answer was refused ${retried.code}`);
          } else tally("verify retry", retried.code);
        }
        const n = created.get(actionId) ?? 0;
        if (n > 1) violation(`verify ${actionId}: created ${n} times`);
        if (!faults && (n === 1) !== first.has(actionId))
          violation(`verify ${actionId}: created ${n} times but ${first.has(actionId) ? "answered" : "never answered"}`);
      });

      // 2. Decisions and pages against the publication history (complete unless a publication's
      // answer was lost).
      if (historyComplete) {
        const ordered = [...history].sort((a, b) => a.revision - b.revision);
        const cache = new Map<number, CatalogState>();
        const stateAt = (revision: number): CatalogState => {
          let state = cache.get(revision);
          if (!state) {
            state = cloneState(fleet.base);
            for (const entry of ordered) if (entry.revision <= revision) entry.update(state);
            cache.set(revision, state);
          }
          return state;
        };
        const revisions = ordered.map((e) => e.revision);
        if (new Set(revisions).size !== revisions.length) violation(`two publications that changed the catalog answered the same revision: ${revisions}`);

        const visible = (state: CatalogState, t: number) =>
          fleet.caps.filter((_, c) =>
            Array.from({ length: INSTANCES_PER_TENANT }, (_, i) => i).some(
              (i) => state.versionActive && state.bindings.get(bindingKey(t, c, i))?.enabled && state.instances.get(instanceKey(t, i))?.enabled,
            ),
          );
        // The revisions at which each tenant's visible catalog changed (the setup publication first).
        const changes = fleet.tenants.map((_, t) => {
          const at = [fleet.baseRevision];
          let before = JSON.stringify(visible(stateAt(fleet.baseRevision), t));
          for (const r of revisions.filter((r) => r > fleet.baseRevision)) {
            const now = JSON.stringify(visible(stateAt(r), t));
            if (now !== before) at.push(r);
            before = now;
          }
          return at;
        });
        /** The tenant's catalog revision once every publication up to `revision` committed. */
        const tenantRevisionAt = (t: number, revision: number) => changes[t]!.filter((r) => r <= revision).at(-1) ?? 0;
        const checkTenantRevision = (where: string, t: number, revision: number, floor: number) => {
          if (!changes[t]!.includes(revision))
            violation(`${where}: tenant ${t} is at revision ${revision}, which did not change its catalog (changes: ${changes[t]})`);
          if (revision < tenantRevisionAt(t, floor)) {
            violation(`${where}: tenant ${t} answered at revision ${revision}, before its change at ${tenantRevisionAt(t, floor)} committed ahead of the read`);
          }
        };
        for (const o of staleCursors) {
          checkTenantRevision(`w${o.worker} stale cursor of revision ${o.cursorRevision}`, o.tenant, o.catalogRevision, o.floor);
        }
        for (const o of pages) {
          report.checks.pages++;
          checkTenantRevision(`w${o.worker} catalog page after "${o.after}"`, o.tenant, o.page.catalog_revision, o.floor);
          const all = visible(stateAt(o.page.catalog_revision), o.tenant);
          const rest = all.filter((id) => id > o.after);
          const ids = o.page.capabilities.map((d) => d.capability.id);
          const expected = rest.slice(0, o.limit);
          if (JSON.stringify(ids) !== JSON.stringify(expected) || o.page.total !== all.length || (o.page.next_cursor !== null) !== rest.length > o.limit) {
            violation(
              `w${o.worker} catalog page of tenant ${o.tenant} at revision ${o.page.catalog_revision} after "${o.after}": ` +
                `got ${JSON.stringify(ids)} total ${o.page.total} next ${o.page.next_cursor !== null}, expected ${JSON.stringify(expected)} total ${all.length}`,
            );
          }
        }

        for (const [actionId, { assignment: a }] of first) {
          if (a.catalog_revision < fleet.baseRevision) {
            violation(`route ${actionId} pinned revision ${a.catalog_revision}, before the fleet existed (${fleet.baseRevision})`);
            continue;
          }
          report.checks.decisions++;
          const state = stateAt(a.catalog_revision);
          const t = fleet.tenants.indexOf(a.tenant_id);
          const c = fleet.caps.indexOf(a.capability_id);
          const i = fleet.instances[t]?.indexOf(a.instance_id) ?? -1;
          const b = state.bindings.get(bindingKey(t, c, i));
          const where = `route ${actionId} at revision ${a.catalog_revision}`;
          if (!b?.enabled || !state.instances.get(instanceKey(t, i))?.enabled || !state.versionActive) {
            violation(`${where}: its binding chain was not live at that revision`);
            continue;
          }
          if (a.binding_policy_revision !== b.policy_revision || a.credential_revision_ref !== b.credential || a.quota_policy_ref !== b.quota) {
            violation(
              `${where}: pinned binding ${a.binding_policy_revision}/${a.credential_revision_ref}/${a.quota_policy_ref}, published ${b.policy_revision}/${b.credential}/${b.quota}`,
            );
          }
          if (!fleet.replicas.some((r) => r.id === a.replica_id && r.tenant === t && r.inst === i))
            violation(`${where}: replica ${a.replica_id} is not one of instance ${a.instance_id}`);
          const policy = b.quota ? state.policies.get(t) : undefined;
          if (policy) {
            const limits = { ...POLICY_VARIANTS[0], ...POLICY_EXTRAS(t), ...POLICY_VARIANTS[policy.variant] } as Record<string, number | null | boolean>;
            const byKind: Record<string, unknown> = {
              global: limits.max_global_in_flight,
              tenant: limits.max_tenant_in_flight,
              connector_type: limits.max_connector_type_in_flight,
              instance: limits.max_instance_in_flight,
              binding: limits.max_binding_in_flight,
            };
            const pinned = Object.fromEntries(a.admission.scopes.map((s) => [s.kind, s.limit]));
            const published = Object.fromEntries(Object.entries(byKind).filter(([, v]) => v !== null));
            if (
              a.admission.policy_revision !== policy.revision ||
              JSON.stringify(pinned) !== JSON.stringify(published) ||
              a.admission.retry_scope?.limit !== limits.max_tenant_retry_in_flight
            ) {
              violation(`${where}: pinned admission ${JSON.stringify(a.admission)}, published revision ${policy.revision} ${JSON.stringify(limits)}`);
            }
            if (limits.enabled === false) violation(`${where}: admitted under a disabled policy`);
          }
        }
      } else report.notes.push("a publication's answer was lost: catalog and decision checks skipped");

      // 3. The bookkeeping after the storm, then after draining every reservation of the run.
      const checked = await invariants(owner);
      if (checked.length) violation(`invariants after the run: ${JSON.stringify(checked)}`);
      await eachLimit([...first.keys()], 4, async (actionId) => {
        const { tenant } = actionTenant.get(actionId)!;
        const state = await settled(() => verifier.getRoute(actionId, fleet.tenants[tenant]!));
        if (state.ok && state.reserved) {
          const released = await settled(() => verifier.settle(actionId, fleet.tenants[tenant]!, first.get(actionId)!.assignment, "cancelled"));
          report.operations++;
          if (!released.ok || !released.released) violation(`drain ${actionId}: ${released.ok ? "not released" : released.code}`);
        }
      });
      const left = await owner.query<{ what: string; n: number }>(
        `SELECT 'replica ' || replica_id AS what, active_assignments AS n FROM aip_connector_replicas
         WHERE replica_id = ANY ($1) AND active_assignments <> 0
         UNION ALL
         SELECT scope_kind || ' ' || scope_key, active FROM aip_admission_counters
         WHERE active <> 0 AND (scope_key = ANY ($2) OR scope_key IN (
           SELECT aip_binding_scope_key(t, c, i) FROM unnest($3::text[]) t, unnest($4::text[]) c, unnest($5::text[]) i))`,
        [fleet.replicas.map((r) => r.id), [...fleet.tenants, ...fleet.instances.flat(), fleet.typeId], fleet.tenants, fleet.caps, fleet.instances.flat()],
      );
      for (const row of left.rows) violation(`after draining, ${row.what} still holds ${row.n}`);
      const after = await invariants(owner);
      if (after.length) violation(`invariants after draining: ${JSON.stringify(after)}`);
      phase("verified and drained");
    } finally {
      await verifier.close();
    }
    return report;
  } finally {
    await setup.close();
    await owner.end();
  }
}

/** Until the server answers again (after an injected restart), with every dead pooled session gone. */
export async function waitForDatabase(pool: pg.Pool, timeoutMs = 120_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let healthy = 0;
  while (healthy < 8) {
    try {
      await pool.query("SELECT 1");
      healthy++;
    } catch (error) {
      healthy = 0;
      if (Date.now() > deadline) throw error;
      await sleep(200);
    }
  }
}

async function invariants(owner: pg.Pool): Promise<unknown[]> {
  const { rows } = await owner.query<{ report: { violations: unknown[] } }>("SELECT aip_check_invariants() AS report");
  return rows[0]!.report.violations;
}

/** Sums reports (for the closing figures). */
export function summarize(reports: ModelReport[]): Omit<ModelReport, "prefix" | "notes" | "violations"> & { runs: number; violations: number } {
  const outcomes: Record<string, Record<string, number>> = {};
  for (const r of reports) {
    for (const [kind, byOutcome] of Object.entries(r.outcomes)) {
      outcomes[kind] ??= {};
      const into = outcomes[kind];
      for (const [outcome, n] of Object.entries(byOutcome)) into[outcome] = (into[outcome] ?? 0) + n;
    }
  }
  const sum = (f: (r: ModelReport) => number) => reports.reduce((n, r) => n + f(r), 0);
  return {
    runs: reports.length,
    workers: Math.max(0, ...reports.map((r) => r.workers)),
    commands: sum((r) => r.commands),
    operations: sum((r) => r.operations),
    outcomes,
    samples: sum((r) => r.samples),
    checks: {
      routes: sum((r) => r.checks.routes),
      pages: sum((r) => r.checks.pages),
      staleCursors: sum((r) => r.checks.staleCursors),
      decisions: sum((r) => r.checks.decisions),
    },
    expired: sum((r) => r.expired),
    released: sum((r) => r.released),
    violations: sum((r) => r.violations.length),
  };
}
