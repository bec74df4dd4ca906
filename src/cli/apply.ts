/**
 * `apply -f fleet.yaml [--dry-run]`: publishes a fleet file as one batch. A dry run asks the
 * registry what each record would do (created / updated / unchanged: the registry decides, with
 * its own rules, inside a rolled-back publication) and shows, for updated records, which fields
 * differ from what is stored now.
 */
import { RegistryProblem, type PublicationResult } from "../client/index.js";
import { RegistryError } from "../registry/errors.js";
import type { Backend } from "./backend.js";
import { Annotated, EXIT, UsageError, str, withBackend, type CommandContext } from "./context.js";
import { loadFleetPlan, type FleetPlan, type FleetRecord } from "./fleet-file.js";
import { table } from "./table.js";

type Outcome = "created" | "updated" | "unchanged";

interface FieldChange {
  field: string;
  from: unknown;
  to: unknown;
}

interface RecordResult {
  kind: FleetRecord["kind"];
  key: string;
  origin: string;
  outcome: Outcome;
  changes?: FieldChange[];
}

/** Never printed: an operator's terminal and CI logs are no place for credential references. */
const SECRET_FIELDS = new Set(["secret_provider_ref", "credential_revision_ref"]);
/** Immutable once admitted: a differing re-put is refused, so there is nothing to diff. */
const VERSION_CONTENT = new Set(["manifest", "manifest_digest", "attestation"]);

const RANK: Record<Outcome, number> = { unchanged: 0, updated: 1, created: 2 };

function combine(plan: FleetPlan, result: PublicationResult): RecordResult[] {
  const outcomes = plan.records.map<Outcome>(() => "unchanged");
  result.results.forEach((entry, i) => {
    const record = plan.recordOf[i];
    if (record === undefined) return;
    const outcome = entry.outcome as Outcome;
    if (RANK[outcome] > RANK[outcomes[record] as Outcome]) outcomes[record] = outcome;
  });
  return plan.records.map((record, i) => ({ kind: record.kind, key: record.key, origin: record.origin, outcome: outcomes[i] as Outcome }));
}

const same = (a: unknown, b: unknown): boolean => JSON.stringify(a ?? null) === JSON.stringify(b ?? null);

async function fieldChanges(backend: Backend, record: FleetRecord, bindingsOf: (tenant: string) => Promise<Record<string, unknown>[]>): Promise<FieldChange[]> {
  const desired = record.desired;
  let current: Record<string, unknown> | null | undefined;
  if (record.kind === "binding") {
    const bindings = await bindingsOf(String(desired.tenant_id));
    current = bindings.find((b) => b.capability_id === desired.capability_id && b.instance_id === desired.instance_id);
  } else {
    current = await backend.adminGet(record.kind, record.kind === "admission_policy" ? String(desired.policy_ref) : String(desired.id));
  }
  if (!current) return [];
  const changes: FieldChange[] = [];
  for (const [field, to] of Object.entries(desired)) {
    if (record.kind === "version" && VERSION_CONTENT.has(field)) continue;
    if (field === "topology" && to && typeof to === "object") {
      const stored = (current.topology ?? {}) as Record<string, unknown>;
      for (const [key, value] of Object.entries(to)) if (!same(stored[key], value)) changes.push({ field: `topology.${key}`, from: stored[key], to: value });
      continue;
    }
    if (!same(current[field], to)) changes.push({ field, from: current[field], to });
  }
  return changes;
}

function describeChange(change: FieldChange): string {
  if (SECRET_FIELDS.has(change.field)) return `${change.field} (changed)`;
  return `${change.field}: ${JSON.stringify(change.from ?? null)} -> ${JSON.stringify(change.to ?? null)}`;
}

const label = (kind: FleetRecord["kind"]) => kind.replace("_", " ");

function counts(records: RecordResult[]) {
  const by = { created: 0, updated: 0, unchanged: 0 };
  for (const record of records) by[record.outcome]++;
  return by;
}

/** Names the fleet-file record of a refused change: `changes[7]` means nothing to an operator. */
function locate(error: unknown, plan: FleetPlan): unknown {
  const index = error instanceof RegistryProblem ? error.problem.change_index : error instanceof RegistryError ? error.extensions.change_index : undefined;
  if (typeof index !== "number") return error;
  const record = plan.records[plan.recordOf[index] ?? -1];
  return record ? new Annotated(error, [`in ${record.origin}: ${label(record.kind)} ${record.key}`]) : error;
}

export async function apply(ctx: CommandContext): Promise<number> {
  const { io, values } = ctx;
  const file = str(values, "file") ?? ctx.positionals[0];
  if (!file) throw new UsageError("apply needs a fleet file: aip-registry apply -f fleet.yaml");
  const dryRun = values["dry-run"] === true;

  io.err(`reading ${file}`);
  const plan = await loadFleetPlan(file);
  io.err(
    `${plan.records.length} records in ${plan.changes.length} changes` +
      (plan.computedDigests ? ` (computed ${plan.computedDigests} manifest ${plan.computedDigests === 1 ? "digest" : "digests"})` : ""),
  );

  return withBackend(ctx, ["registry:admin"], async (backend) => {
    const before = await backend.readiness().then(
      (r) => r.catalog_revision,
      () => null,
    );
    io.err(`${dryRun ? "dry run: checking" : "publishing"} ${plan.changes.length} changes as one batch at ${backend.target}`);
    const started = performance.now();
    let result: PublicationResult;
    try {
      result = await backend.publish(plan.changes, dryRun);
    } catch (error) {
      throw locate(error, plan);
    }
    const elapsed = Math.round(performance.now() - started);
    const records = combine(plan, result);

    if (dryRun) {
      const updated = records.filter((r) => r.outcome === "updated");
      if (updated.length) io.err(`reading the ${updated.length} updated ${updated.length === 1 ? "record" : "records"} to show what changes`);
      const byTenant = new Map<string, Promise<Record<string, unknown>[]>>();
      const bindingsOf = (tenant: string) => {
        let pending = byTenant.get(tenant);
        if (!pending) {
          pending = backend.bindings(tenant);
          byTenant.set(tenant, pending);
        }
        return pending;
      };
      for (const record of updated) {
        const source = plan.records.find((r) => r.kind === record.kind && r.key === record.key) as FleetRecord;
        record.changes = await fieldChanges(backend, source, bindingsOf);
      }
    }

    const total = counts(records);
    if (values.json === true) {
      const masked = records.map((r) => ({
        ...r,
        ...(r.changes ? { changes: r.changes.map((c) => (SECRET_FIELDS.has(c.field) ? { field: c.field, changed: true } : c)) } : {}),
      }));
      io.out(
        JSON.stringify(
          {
            file,
            target: backend.target,
            dry_run: dryRun,
            catalog_revision_before: before,
            catalog_revision: result.catalog_revision,
            changed: result.changed,
            ...total,
            records: masked,
          },
          null,
          2,
        ),
      );
      return EXIT.ok;
    }

    // A dry run lists every record (it is the diff); an apply lists what it changed.
    const shown = dryRun ? records : records.filter((r) => r.outcome !== "unchanged");
    if (shown.length) {
      io.out(
        table(
          ["RECORD", "OUTCOME", dryRun ? "CHANGES" : ""],
          shown.map((r) => [`${label(r.kind)} ${r.key}`, r.outcome, (r.changes ?? []).map(describeChange).join(", ")]),
        ),
      );
      io.out("");
    }
    const tally = `${total.created} created, ${total.updated} updated, ${total.unchanged} unchanged`;
    const revision =
      before === null || before === result.catalog_revision
        ? `catalog revision ${dryRun ? "would stay" : "stays"} ${result.catalog_revision}`
        : `catalog revision ${before} -> ${result.catalog_revision}`;
    io.out(dryRun ? `dry run: ${tally}; ${revision}. Nothing was changed.` : `applied: ${tally}; ${revision} (${elapsed} ms)`);
    return EXIT.ok;
  });
}
