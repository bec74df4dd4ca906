/**
 * What the HTTP conformance suite needs from an API under test, and the small client and fixture
 * builders it shares. Written once, run against createApp() in Node (test/http/conformance.test.ts)
 * and against the Worker in workerd over both Neon transports (test/worker/conformance.test.ts):
 * any difference between the runs is a bug. Only web-standard APIs here (fetch types, crypto).
 */
import { expect } from "vitest";
import { sha256Digest } from "../../src/canonical-json.js";
import type { Scope } from "../../src/http/auth.js";
import { attestation, binding, connectorType, hostPrincipal, instance, policy, replica, version } from "../../fixtures/records.js";
import { OpenApiSchemas } from "./openapi-schema.js";

export interface ConformanceTarget {
  /** Sends one request to the API under test; `path` starts with `/`. */
  fetch(path: string, init?: RequestInit): Promise<Response>;
  /** An HS256 token the API under test accepts. */
  mintToken(claims: { scopes: Scope[]; tenantId?: string; subject?: string; peerPrincipalId?: string }): Promise<string>;
  /** Unique per run: every ID and tenant the suite creates starts with it. */
  prefix: string;
}

export interface ApiResponse {
  status: number;
  headers: Headers;
  // Test code reads arbitrary members of JSON bodies.
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  body: any;
}

export interface CallOptions {
  token?: string;
  body?: unknown;
  headers?: Record<string, string>;
}

export class Api {
  private schemas: Promise<OpenApiSchemas> | undefined;
  /** `METHOD /template status` of every response checked against the document. */
  readonly checked = new Set<string>();

  constructor(readonly target: ConformanceTarget) {}

  /** The OpenAPI document this target publishes, as validators. */
  openApi(): Promise<OpenApiSchemas> {
    this.schemas ??= this.target.fetch("/openapi.json").then(async (response) => {
      expect(response.status).toBe(200);
      return new OpenApiSchemas((await response.json()) as Record<string, unknown>);
    });
    return this.schemas;
  }

  get prefix(): string {
    return this.target.prefix;
  }

  async call(method: string, path: string, { token, body, headers = {} }: CallOptions = {}): Promise<ApiResponse> {
    const response = await this.target.fetch(path, {
      method,
      headers: {
        ...(token ? { authorization: `Bearer ${token}` } : {}),
        ...(body !== undefined ? { "content-type": "application/json" } : {}),
        ...headers,
      },
      ...(body !== undefined ? { body: typeof body === "string" ? body : JSON.stringify(body) } : {}),
    });
    const text = await response.text();
    const contentType = response.headers.get("content-type") ?? "";
    const json = /json/.test(contentType) && text !== "";
    const answer = json ? JSON.parse(text) : text;
    // Every answer must be what the published document says this route answers (the document
    // itself is JSON Schema's business, not its own).
    if (path === "/openapi.json") return { status: response.status, headers: response.headers, body: answer };
    const schemas = await this.openApi();
    const mismatches = schemas.check({ method, path, status: response.status, contentType: json ? contentType : "", body: answer });
    expect(mismatches, "the response matches the published OpenAPI document").toEqual([]);
    const operation = schemas.operation(method, path);
    if (json) this.checked.add(`${method} ${operation?.template ?? "(no route)"} ${response.status}`);
    return { status: response.status, headers: response.headers, body: answer };
  }

  admin = () => this.target.mintToken({ subject: "conformance-operator", scopes: ["registry:admin", "fleet:read"] });
  /** The connector host that fixtures/records.ts provisions `replicaId` for. */
  host = (replicaId: string) =>
    this.target.mintToken({ subject: hostPrincipal(replicaId), scopes: ["replicas:write"], peerPrincipalId: hostPrincipal(replicaId) });
  fleetReader = () => this.target.mintToken({ subject: "conformance-observer", scopes: ["fleet:read"] });
  tenant = (tenantId: string, scopes: Scope[] = ["catalog:read", "routes:write", "routes:read"]) =>
    this.target.mintToken({ subject: `gateway-${tenantId}`, tenantId, scopes });

  /** Publishes and expects success; returns the publication result. */
  async publish(changes: unknown[]) {
    const response = await this.call("POST", "/v1/admin/publications", { token: await this.admin(), body: { changes } });
    expect(response.status, JSON.stringify(response.body)).toBe(200);
    return response.body as { catalog_revision: number; changed: number; results: { op: string; outcome: string }[] };
  }

  /**
   * One transition by the replica's host. A register that states no evidence of what the host runs
   * gets the evidence of the replica's admitted version and instance (registration()).
   */
  async lifecycle(replicaId: string, operation: string, body: Record<string, unknown>) {
    const evidence = operation === "register" && !("artifact_digest" in body) ? await this.registration(replicaId) : {};
    return this.call("POST", `/v1/replicas/${encodeURIComponent(replicaId)}/${operation}`, {
      token: await this.host(replicaId),
      body: { ...evidence, ...body },
    });
  }

  /**
   * What a host running exactly the replica's admitted version with its instance's current
   * configuration states at register, read through the registry reader (as a deployment pipeline
   * could): artifact and manifest digests, configuration revision, capability count.
   */
  async registration(replicaId: string): Promise<Record<string, unknown>> {
    const token = await this.target.mintToken({ subject: "conformance-reader", scopes: ["registry:read"] });
    const read = async (kind: string, id: string) => {
      const response = await this.call("GET", `/v1/registry/${kind}/${encodeURIComponent(id)}`, { token });
      expect(response.status, JSON.stringify(response.body)).toBe(200);
      return response.body;
    };
    const replica = await read("replicas", replicaId);
    const [version, instance] = await Promise.all([read("versions", replica.version_id), read("instances", replica.instance_id)]);
    return {
      artifact_digest: version.artifact_digest,
      manifest_digest: version.manifest_digest,
      config_revision: instance.config_revision,
      capability_count: version.capabilities.length,
    };
  }

  async catalogRevision(): Promise<number> {
    const ready = await this.call("GET", "/readyz");
    expect(ready.status).toBe(200);
    return ready.body.catalog_revision as number;
  }
}

/** A problem+json answer with this status and code, carrying the request id. */
export function expectProblem(response: ApiResponse, status: number, code: string): void {
  expect({ status: response.status, code: response.body?.code }, JSON.stringify(response.body)).toEqual({ status, code });
  expect(response.headers.get("content-type")).toMatch(/^application\/problem\+json/);
  expect(response.body).toMatchObject({ type: expect.any(String), title: expect.any(String), status, detail: expect.any(String) });
  expect(response.body.request_id).toBe(response.headers.get("x-request-id"));
}

let requestCounter = 0;
/** A lifecycle request id unique in this run. */
export const lifecycleRequestId = (prefix: string) => `msg_${prefix}_${(++requestCounter).toString(36)}`;

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export interface SmallFleet {
  typeId: string;
  versionId: string;
  capabilities: string[];
  tenants: string[];
  instances: Record<string, string>;
  replicas: Record<string, string>;
  policyRef?: string;
  changes: Record<string, unknown>[];
}

/**
 * Changes for one connector type and one active version implementing `capabilities`, and per
 * tenant one instance bound to every capability with one provisioned (not yet registered)
 * replica. IDs derive from `prefix`, so runs never collide.
 */
export async function smallFleet(
  prefix: string,
  options: { tenants?: string[]; capabilities?: string[]; capacity?: number; policy?: Record<string, unknown> } = {},
): Promise<SmallFleet> {
  const tenants = options.tenants ?? [`${prefix}-tenant-a`];
  const capabilities = options.capabilities ?? [`cap:${prefix}.search`];
  const typeId = `ctype_${prefix}`;
  const versionId = `cver_${prefix}_1`;
  const policyRef = options.policy ? `quota:${prefix}` : undefined;
  const changes: Record<string, unknown>[] = [
    connectorType(typeId),
    await version(versionId, typeId, capabilities, { attestation: attestation("org:acme", { artifact_digest: await sha256Digest(`${prefix}:${versionId}`) }) }),
  ];
  if (policyRef) changes.push(policy(policyRef, options.policy));
  const instances: Record<string, string> = {};
  const replicas: Record<string, string> = {};
  for (const tenant of tenants) {
    const instanceId = `cinst_${prefix}_${tenant}`;
    const replicaId = `crepl_${prefix}_${tenant}`;
    instances[tenant] = instanceId;
    replicas[tenant] = replicaId;
    changes.push(instance(instanceId, typeId, versionId, tenant));
    for (const capability of capabilities) changes.push(binding(tenant, capability, instanceId, policyRef ? { quota_policy_ref: policyRef } : {}));
    changes.push(replica(replicaId, instanceId, versionId, { capacity: options.capacity ?? 10 }));
  }
  return { typeId, versionId, capabilities, tenants, instances, replicas, ...(policyRef ? { policyRef } : {}), changes };
}

/** Publishes the fleet and registers every replica (lease `leaseTtlMs`). */
export async function publishFleet(api: Api, fleet: SmallFleet, leaseTtlMs = 300_000): Promise<{ revision: number; sequences: Record<string, number> }> {
  const result = await api.publish(fleet.changes);
  const sequences: Record<string, number> = {};
  for (const replicaId of Object.values(fleet.replicas)) {
    const registered = await api.lifecycle(replicaId, "register", { request_id: lifecycleRequestId(api.prefix), lease_ttl_ms: leaseTtlMs });
    expect(registered.status, JSON.stringify(registered.body)).toBe(200);
    sequences[replicaId] = registered.body.sequence as number;
  }
  return { revision: result.catalog_revision, sequences };
}
