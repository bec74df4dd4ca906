/**
 * Declarative fleet files (YAML or JSON): a whole fleet in sections an operator reads top to
 * bottom, translated into one publication batch (`changes[]`) in dependency order.
 *
 *   connector_types     put_connector_type (identity) + set_connector_type_enabled (`enabled: true` at
 *                       once, `enabled: false` last in the batch)
 *   admission_policies  put_admission_policy
 *   versions            admit_version (content; manifest_digest computed when omitted) + set_version_status
 *   instances           put_instance
 *   bindings            put_binding (one per capability_id, or per entry of capability_ids)
 *   replicas            put_replica
 *
 * Top-level `x-` keys are ignored: they hold YAML anchors that records share (`<<: *name`).
 * Records are validated with the API's own zod schemas, so a mistake is reported with its place
 * in the file (`versions[1].attestation.owner: ...`) before anything is sent. The registry
 * re-validates everything and decides every state-dependent rule.
 */
import { readFile } from "node:fs/promises";
import { extname } from "node:path";
import { z } from "@hono/zod-openapi";
import { parse as parseYaml } from "yaml";
import { canonicalDigest } from "../canonical-json.js";
import { Change, Digest } from "../schemas.js";
import { FleetFileError } from "./errors.js";

type ChangeRecord = z.infer<typeof Change>;
type Op = ChangeRecord["op"];

function variant<O extends Op>(op: O) {
  const found = Change.options.find((option) => option.shape.op.value === op);
  if (!found) throw new Error(`no change schema for ${op}`);
  return found as Extract<(typeof Change.options)[number], { shape: { op: z.ZodLiteral<O> } }>;
}

const Binding = variant("put_binding")
  .omit({ op: true, capability_id: true })
  .extend({ capability_id: z.string().optional(), capability_ids: z.array(z.string()).min(1).optional() })
  .strict()
  .refine((b) => (b.capability_id === undefined) !== (b.capability_ids === undefined), "give exactly one of capability_id or capability_ids");

export const FleetFile = z
  .object({
    /** Format version of the file itself; 1 is the only one. */
    fleet_format: z.literal(1).optional(),
    connector_types: z.array(variant("put_connector_type").omit({ op: true }).strict()).default([]),
    admission_policies: z.array(variant("put_admission_policy").omit({ op: true }).strict()).default([]),
    versions: z.array(variant("admit_version").omit({ op: true, manifest_digest: true }).extend({ manifest_digest: Digest.optional() }).strict()).default([]),
    instances: z.array(variant("put_instance").omit({ op: true }).strict()).default([]),
    bindings: z.array(Binding).default([]),
    replicas: z.array(variant("put_replica").omit({ op: true }).strict()).default([]),
  })
  .strict();
export type FleetFile = z.infer<typeof FleetFile>;

type RecordKind = "connector_type" | "admission_policy" | "version" | "instance" | "binding" | "replica";

/** One record of the file, which one or two changes publish. */
export interface FleetRecord {
  kind: RecordKind;
  /** The record's key: an ID, a policy_ref, or `tenant / capability -> instance` for bindings. */
  key: string;
  /** Where it is in the file, e.g. `versions[2]`. */
  origin: string;
  /** The fields the file sets, as published (for diffs against the registry). */
  desired: Record<string, unknown>;
}

export interface FleetPlan {
  records: FleetRecord[];
  changes: ChangeRecord[];
  /** For each change, the index of the record it publishes. */
  recordOf: number[];
  /** How many manifest digests were computed because the file omitted them. */
  computedDigests: number;
}

function parseFleetText(text: string, format: "yaml" | "json"): unknown {
  try {
    // YAML merge keys (`<<: *anchor`) let a file share attestation and topology blocks.
    return format === "json" ? JSON.parse(text) : parseYaml(text, { merge: true, maxAliasCount: 10_000 });
  } catch (error) {
    throw new FleetFileError(`not valid ${format.toUpperCase()}: ${(error as Error).message}`);
  }
}

export async function readFleetFile(path: string): Promise<unknown> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    throw new FleetFileError(`cannot read ${path}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
  }
  return parseFleetText(text, extname(path).toLowerCase() === ".json" ? "json" : "yaml");
}

const formatPath = (path: PropertyKey[]) =>
  path.reduce<string>((out, part) => (typeof part === "number" ? `${out}[${part}]` : out ? `${out}.${String(part)}` : String(part)), "");

export function validateFleet(input: unknown): FleetFile {
  if (input === null || typeof input !== "object" || Array.isArray(input)) {
    throw new FleetFileError("a fleet file is a mapping with the sections connector_types, admission_policies, versions, instances, bindings, replicas");
  }
  // `x-` sections hold anchors for reuse (as in docker-compose and OpenAPI); they publish nothing.
  const sections = Object.fromEntries(Object.entries(input).filter(([key]) => !key.startsWith("x-")));
  const parsed = FleetFile.safeParse(sections);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((issue) => `${formatPath(issue.path) || "(file)"}: ${issue.message}`);
    throw new FleetFileError(`the fleet file is invalid (${issues.length} ${issues.length === 1 ? "problem" : "problems"})`, issues);
  }
  return parsed.data;
}

/** Translates a validated file into one batch, in the order the registry needs the records. */
async function planFleet(file: FleetFile): Promise<FleetPlan> {
  const records: FleetRecord[] = [];
  const changes: ChangeRecord[] = [];
  const recordOf: number[] = [];
  let computedDigests = 0;
  const seen = new Map<string, string>();

  const add = (record: FleetRecord, ...published: ChangeRecord[]) => {
    const identity = `${record.kind} ${record.key}`;
    const earlier = seen.get(identity);
    if (earlier) throw new FleetFileError(`${record.origin} repeats ${record.kind.replace("_", " ")} \`${record.key}\` of ${earlier}`);
    seen.set(identity, record.origin);
    records.push(record);
    for (const change of published) {
      changes.push(change);
      recordOf.push(records.length - 1);
    }
  };

  // Types first: every later record refers to one. A put states only the type's fixed identity;
  // the file's `enabled` is its own operation (a re-put stating another flag is a conflict): an
  // enabled type is enabled at once, so versions can still be admitted to it in this batch, a
  // disabled one at the end of the batch, for the same reason.
  const disable: { index: number; id: string }[] = [];
  file.connector_types.forEach((type, i) => {
    const { enabled, ...identity } = type;
    const record: FleetRecord = { kind: "connector_type", key: type.id, origin: `connector_types[${i}]`, desired: { ...type } };
    const put = { op: "put_connector_type" as const, ...identity };
    if (enabled === true) add(record, put, { op: "set_connector_type_enabled", id: type.id, enabled: true });
    else add(record, put);
    if (enabled === false) disable.push({ index: records.length - 1, id: type.id });
  });
  file.admission_policies.forEach((policy, i) => {
    add(
      { kind: "admission_policy", key: policy.policy_ref, origin: `admission_policies[${i}]`, desired: { ...policy } },
      { op: "put_admission_policy", ...policy },
    );
  });
  for (const [i, version] of file.versions.entries()) {
    let digest = version.manifest_digest;
    if (!digest) {
      digest = await canonicalDigest(version.manifest);
      computedDigests++;
    }
    // Admission states the version's fixed content; its status is a lifecycle move of its own
    // (set_version_status), so that re-applying the file never contradicts a stored status it
    // does not state and changing `status` in the file is exactly that move.
    const { status, ...content } = version;
    const record: FleetRecord = { kind: "version", key: version.id, origin: `versions[${i}]`, desired: { ...version, manifest_digest: digest } };
    const admit = { op: "admit_version" as const, ...content, manifest_digest: digest };
    if (status === undefined) add(record, admit);
    else add(record, admit, { op: "set_version_status", id: version.id, status });
  }
  file.instances.forEach((instance, i) => {
    add({ kind: "instance", key: instance.id, origin: `instances[${i}]`, desired: { ...instance } }, { op: "put_instance", ...instance });
  });
  file.bindings.forEach((entry, i) => {
    const { capability_id, capability_ids, ...rest } = entry;
    const capabilities = capability_ids ?? [capability_id as string];
    capabilities.forEach((capability, j) => {
      const binding = { ...rest, capability_id: capability };
      const origin = capability_ids ? `bindings[${i}].capability_ids[${j}]` : `bindings[${i}]`;
      add({ kind: "binding", key: `${rest.tenant_id} / ${capability} -> ${rest.instance_id}`, origin, desired: binding }, { op: "put_binding", ...binding });
    });
  });
  file.replicas.forEach((replica, i) => {
    add({ kind: "replica", key: replica.id, origin: `replicas[${i}]`, desired: { ...replica } }, { op: "put_replica", ...replica });
  });
  for (const { index, id } of disable) {
    changes.push({ op: "set_connector_type_enabled", id, enabled: false });
    recordOf.push(index);
  }
  if (changes.length === 0) throw new FleetFileError("the fleet file contains no records");
  return { records, changes, recordOf, computedDigests };
}

export async function loadFleetPlan(path: string): Promise<FleetPlan> {
  return planFleet(validateFleet(await readFleetFile(path)));
}
