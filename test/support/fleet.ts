/**
 * Builders of valid publication changes for tests: each returns a change record that the
 * registry accepts as is; tests override single fields to break exactly one rule.
 */
import { canonicalDigest, schemaBundleDigest } from "../../src/canonical-json.js";
import type { Registry } from "../../src/registry/registry.js";

export interface CapabilitySpec {
  id: string;
  name?: string;
  description?: string;
  input_schema?: Record<string, unknown>;
  output_schema?: Record<string, unknown>;
  [key: string]: unknown;
}

const hex = (n: number) => n.toString(16).padStart(64, "0");
let artifactCounter = 0;
/** A fresh, well-formed sha256 digest (artifact digests must be unique per version). */
export const uniqueDigest = () => `sha256:${hex(Date.now() * 1000 + ++artifactCounter)}`;

export function capability(spec: CapabilitySpec): CapabilitySpec {
  return {
    name: spec.id.replace(/^cap:/, ""),
    description: `Capability ${spec.id}`,
    kind: "tool",
    input_schema: { type: "object", properties: { q: { type: "string" } } },
    output_schema: { type: "object" },
    ...spec,
  };
}

export function connectorType(id: string, owner = "org:acme") {
  return { op: "put_connector_type" as const, id, name: `Connector ${id}`, owner, enabled: true };
}

/**
 * Passing supply-chain evidence without its schema_bundle_digest, which depends on the manifest:
 * version() adds it unless the attestation states one.
 */
export function attestation(owner = "org:acme", overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    artifact_digest: uniqueDigest(),
    sbom_digest: `sha256:${"b".repeat(64)}`,
    provenance_digest: `sha256:${"c".repeat(64)}`,
    conformance_report_digest: `sha256:${"d".repeat(64)}`,
    vulnerability_report_digest: `sha256:${"e".repeat(64)}`,
    license_report_digest: `sha256:${"f".repeat(64)}`,
    signature_ref: "sigstore://rekor/1234",
    signer_identity: "build@acme.example",
    owner,
    supported_aip_versions: ["1.0"],
    sdk_version_requirement: "^1.0",
    conformance_status: "passed",
    vulnerability_policy_status: "passed",
    license_policy_status: "passed",
    revocation_status: "passed",
    ...overrides,
  };
}

/** An implementation claim of invocation for every capability: what a plain tool needs. */
export const invocationClaims = (capabilities: readonly { id: unknown }[]) => Object.fromEntries(capabilities.map((c) => [String(c.id), { invocation: true }]));

export async function version(
  id: string,
  typeId: string,
  capabilities: (string | CapabilitySpec)[],
  options: {
    version?: string;
    status?: string;
    profiles?: string[];
    owner?: string;
    attestation?: Record<string, unknown>;
    implementation_support?: Record<string, unknown>;
  } = {},
) {
  const manifest = {
    manifest_version: "1.0",
    agent: { id: `service:${typeId}`, kind: "service" },
    capabilities: capabilities.map((c) => capability(typeof c === "string" ? { id: c } : c)),
    profiles: options.profiles ?? ["aip.native.http.v1"],
  };
  const evidence = options.attestation ?? attestation(options.owner);
  return {
    op: "admit_version" as const,
    id,
    connector_type_id: typeId,
    version: options.version ?? id,
    status: options.status ?? "active",
    manifest,
    manifest_digest: await canonicalDigest(manifest),
    attestation: "schema_bundle_digest" in evidence ? evidence : { ...evidence, schema_bundle_digest: await schemaBundleDigest(manifest.capabilities) },
    implementation_support: options.implementation_support ?? invocationClaims(manifest.capabilities),
  };
}

export function instance(id: string, typeId: string, versionId: string, tenantId: string, configRevision = 1, extra: Record<string, unknown> = {}) {
  return {
    op: "put_instance" as const,
    id,
    connector_type_id: typeId,
    version_id: versionId,
    tenant_id: tenantId,
    config_revision: configRevision,
    secret_provider_ref: `vault://tenants/${tenantId}/${id}`,
    status: "enabled",
    ...extra,
  };
}

export function binding(tenantId: string, capabilityId: string, instanceId: string, extra: Record<string, unknown> = {}) {
  return {
    op: "put_binding" as const,
    tenant_id: tenantId,
    capability_id: capabilityId,
    instance_id: instanceId,
    priority: 10,
    policy_revision: 1,
    credential_revision_ref: "credential-revision-1",
    enabled: true,
    ...extra,
  };
}

export function policy(policyRef: string, extra: Record<string, unknown> = {}) {
  return {
    op: "put_admission_policy" as const,
    policy_ref: policyRef,
    revision: 1,
    enabled: true,
    max_global_in_flight: null,
    max_tenant_in_flight: 1000,
    max_connector_type_in_flight: null,
    max_instance_in_flight: 500,
    max_binding_in_flight: 250,
    max_tenant_retry_in_flight: 100,
    circuit_failure_threshold: 3,
    circuit_open_ms: 30000,
    ...extra,
  };
}

export function replica(
  id: string,
  instanceId: string,
  versionId: string,
  extra: { region?: string; zone?: string; capacity_class?: string; capacity?: number; endpoint?: string } = {},
) {
  return {
    op: "put_replica" as const,
    id,
    instance_id: instanceId,
    version_id: versionId,
    endpoint: extra.endpoint ?? `https://${id.replace(/[^a-z0-9-]/gi, "-")}.hosts.example/aip/v1/messages`,
    peer_principal_id: hostPrincipal(id),
    peer_principal_kind: "service",
    peer_did: `did:key:z6Mk${id.replace(/[^a-z0-9]/gi, "")}`,
    trust_domain: "hosts.example",
    transport_profile: "aip.native.http.v1",
    topology: { region: extra.region ?? "eu-west", zone: extra.zone ?? "eu-west-1a", capacity_class: extra.capacity_class ?? "standard" },
    capacity: extra.capacity ?? 10,
  };
}

/** The peer principal the builders provision each replica for: one host identity per replica. */
export const hostPrincipal = (replicaId: string) => `service:${replicaId}`;

let requestCounter = 0;
export const requestId = () => `msg_${Date.now().toString(16)}${(++requestCounter).toString(16).padStart(8, "0")}`;

/** What a registering host proves it runs (the register body's evidence members). */
export interface RegistrationEvidence {
  artifact_digest: string;
  manifest_digest: string;
  config_revision: number;
  capability_count: number;
}

/** Well-formed evidence that proves nothing: for registers the registry refuses before it looks at evidence (an unknown replica). */
export const WELL_FORMED_EVIDENCE: RegistrationEvidence = {
  artifact_digest: `sha256:${"0".repeat(64)}`,
  manifest_digest: `sha256:${"1".repeat(64)}`,
  config_revision: 1,
  capability_count: 1,
};

/**
 * The evidence a host running exactly the replica's admitted version, with its instance's current
 * configuration, states at register: read from the registry reader, as a test's stand-in for the
 * host's own knowledge of its build.
 */
export async function registrationEvidence(registry: Registry, replicaId: string): Promise<RegistrationEvidence> {
  const everything = { tenantId: null, peerPrincipalId: null };
  const replica = await registry.registryRead("replica", replicaId, everything);
  if (!replica) throw new Error(`no replica ${replicaId}`);
  const [version, instance] = await Promise.all([
    registry.registryRead("version", String(replica.version_id), everything),
    registry.registryRead("instance", String(replica.instance_id), everything),
  ]);
  if (!version || !instance) throw new Error(`replica ${replicaId} has no version or instance`);
  return {
    artifact_digest: String(version.artifact_digest),
    manifest_digest: String(version.manifest_digest),
    config_revision: Number(instance.config_revision),
    capability_count: (version.capabilities as unknown[]).length,
  };
}

/** Register a provisioned replica (proving it runs its admitted version) and return its sequence. */
export async function registerReplica(registry: Registry, replicaId: string, leaseTtlMs = 60_000): Promise<number> {
  const request = { request_id: requestId(), lease_ttl_ms: leaseTtlMs, ...(await registrationEvidence(registry, replicaId)) };
  const answer = await registry.replicaLifecycle(replicaId, "register", request, hostPrincipal(replicaId));
  return answer.sequence;
}

/**
 * A small fleet: one type, one active version with `capabilities`, and per tenant one instance
 * with one replica (registered), bound to every capability.
 */
export async function publishSimpleFleet(
  registry: Registry,
  options: { prefix?: string; tenants?: string[]; capabilities?: string[]; capacity?: number; policyRef?: string } = {},
) {
  const prefix = options.prefix ?? "t";
  const tenants = options.tenants ?? ["tenant-a"];
  const capabilities = options.capabilities ?? [`cap:${prefix}.search`];
  const typeId = `ctype_${prefix}`;
  const versionId = `cver_${prefix}_1`;
  const changes: Record<string, unknown>[] = [connectorType(typeId), await version(versionId, typeId, capabilities)];
  if (options.policyRef) changes.push(policy(options.policyRef));
  const replicas: string[] = [];
  for (const tenant of tenants) {
    const instanceId = `cinst_${prefix}_${tenant}`;
    changes.push(instance(instanceId, typeId, versionId, tenant));
    for (const cap of capabilities) changes.push(binding(tenant, cap, instanceId, options.policyRef ? { quota_policy_ref: options.policyRef } : {}));
    const replicaId = `crepl_${prefix}_${tenant}`;
    changes.push(replica(replicaId, instanceId, versionId, { capacity: options.capacity ?? 10 }));
    replicas.push(replicaId);
  }
  const result = await registry.publish(changes);
  for (const replicaId of replicas) await registerReplica(registry, replicaId);
  return { typeId, versionId, tenants, capabilities, replicas, revision: result.catalog_revision };
}
