/**
 * `registration -f fleet.yaml REPLICA_ID`: the register body a replica's connector host sends, as
 * the fleet file admits it: the artifact and manifest digests of the replica's version, the
 * configuration revision of its instance and the number of capabilities the version serves
 * (manifest digests computed as `apply` computes them). A deployment pipeline that starts a host
 * from the same file hands it this; the registry refuses a registration whose values differ from
 * what it admitted. Local: the registry is not contacted.
 */
import { EXIT, UsageError, str, type CommandContext } from "./context.js";
import { FleetFileError } from "./errors.js";
import { loadFleetPlan } from "./fleet-file.js";

export async function registration(ctx: CommandContext): Promise<number> {
  const file = str(ctx.values, "file");
  const replicaId = ctx.positionals[0];
  if (!file || !replicaId) throw new UsageError("registration needs a fleet file and a replica: aip-registry registration -f fleet.yaml REPLICA_ID");
  const leaseTtl = str(ctx.values, "lease-ttl-ms");
  const requestId = str(ctx.values, "request-id");
  if (leaseTtl !== undefined && !/^\d+$/.test(leaseTtl)) throw new UsageError("--lease-ttl-ms takes milliseconds, e.g. 300000");

  const plan = await loadFleetPlan(file);
  const recordOf = (op: string, id: unknown) => plan.changes.find((change) => change.op === op && "id" in change && change.id === id);
  const replica = recordOf("put_replica", replicaId);
  if (replica?.op !== "put_replica") throw new FleetFileError(`${file} provisions no replica \`${replicaId}\``);
  const version = recordOf("admit_version", replica.version_id);
  const instance = recordOf("put_instance", replica.instance_id);
  if (version?.op !== "admit_version") throw new FleetFileError(`${file} admits no version \`${replica.version_id}\` for replica \`${replicaId}\``);
  if (instance?.op !== "put_instance") throw new FleetFileError(`${file} has no instance \`${replica.instance_id}\` for replica \`${replicaId}\``);

  const body = {
    ...(requestId ? { request_id: requestId } : {}),
    ...(leaseTtl ? { lease_ttl_ms: Number(leaseTtl) } : {}),
    artifact_digest: version.attestation.artifact_digest,
    manifest_digest: version.manifest_digest,
    config_revision: instance.config_revision,
    capability_count: version.manifest.capabilities.length,
  };
  ctx.io.out(JSON.stringify(body, null, 2));
  return EXIT.ok;
}
