/**
 * The registry as a client of the model-based and fault tests sees it: one method per operation,
 * answering an outcome instead of throwing, over either transport:
 *
 * - `sql`: the typed Registry client straight on its own pg pools (what the Node server runs);
 * - `http`: the Hono app (createApp) in-process over its own Registry, with real tokens, so the
 *   problem+json mapping is exercised too. Its answers are the raw response text, and every
 *   refusal is checked to be problem+json, with Retry-After on a retryable 503.
 *
 * Both produce the assignment as the same JSON text (c.json is JSON.stringify of what the driver
 * parsed), so "byte-identical" compares one string with another whatever the transport.
 */
import type pg from "pg";
import { createPgPool, pgExecutor } from "../../src/db/pg.js";
import { RegistryError } from "../../src/registry/errors.js";
import { Registry, type LifecycleRequest, type TopologyPreference } from "../../src/registry/registry.js";
import type { CatalogPage, LifecycleOperation, PublicationResult, RouteAssignment, SettlementOutcome } from "../../src/schemas.js";
import { createTestApi, type TestApi } from "./http.js";
import { hostPrincipal } from "../../fixtures/records.js";
import { catalogPage } from "../../fixtures/catalog-reads.js";

export type Transport = "sql" | "http";

export interface Refusal {
  ok: false;
  code: string;
  /** SQLSTATE of a `storage` refusal (sql transport), when the database reported one. */
  sqlstate?: string;
  retryable: boolean;
  extensions: Record<string, unknown>;
  /** HTTP transport only: what was wrong with the problem response itself (not problem+json, no Retry-After...). */
  malformed?: string;
}

export type Answer<T> = ({ ok: true } & T) | Refusal;

interface Resolved {
  outcome: "created" | "existing" | "reacquired";
  /** The assignment exactly as the client received it (JSON text). */
  json: string;
  assignment: RouteAssignment;
}

export interface Gateway {
  readonly transport: Transport;
  resolve(actionId: string, tenantId: string, capabilityId: string, topology?: TopologyPreference): Promise<Answer<Resolved>>;
  settle(actionId: string, tenantId: string, assignment: unknown, outcome: SettlementOutcome): Promise<Answer<{ released: boolean }>>;
  getRoute(actionId: string, tenantId: string): Promise<Answer<{ json: string; reserved: boolean } | { json: null; reserved: false }>>;
  catalogPage(tenantId: string, query: { limit: number; cursor?: string }): Promise<Answer<{ page: CatalogPage }>>;
  lifecycle(replicaId: string, operation: LifecycleOperation, request: LifecycleRequest): Promise<Answer<{ sequence: number }>>;
  /** The replica's current sequence (health revision), read through the control plane. */
  replicaSequence(replicaId: string): Promise<Answer<{ sequence: number }>>;
  expireLeases(limit: number): Promise<Answer<{ expired: number; released: number }>>;
  publish(changes: Record<string, unknown>[]): Promise<Answer<{ result: PublicationResult }>>;
  close(): Promise<void>;
}

export interface GatewayUrls {
  dataUrl: string;
  controlUrl: string;
}

export interface GatewayOptions {
  /** Connections per role (default 1: one worker, one session per role). */
  connections?: number;
  statementTimeoutMs?: number;
  applicationName?: string;
}

function refusalOf(error: unknown): Refusal {
  if (error instanceof RegistryError) {
    const sqlstate = typeof error.extensions.sqlstate === "string" ? error.extensions.sqlstate : undefined;
    return { ok: false, code: error.code, retryable: error.retryable, extensions: error.extensions, ...(sqlstate ? { sqlstate } : {}) };
  }
  // The Registry maps every driver error; anything else escaping it is a bug worth seeing.
  return { ok: false, code: `unexpected: ${String((error as Error)?.stack ?? error)}`, retryable: false, extensions: {} };
}

async function answer<T>(call: () => Promise<T>): Promise<Answer<T>> {
  try {
    return { ok: true, ...(await call()) };
  } catch (error) {
    return refusalOf(error);
  }
}

function createPools(urls: GatewayUrls, options: GatewayOptions = {}): { data: pg.Pool; control: pg.Pool; registry: Registry } {
  const common = {
    max: options.connections ?? 1,
    // A loaded machine may queue a connection attempt for a long time: that is not under test.
    connectionTimeoutMs: 60_000,
    ...(options.statementTimeoutMs !== undefined ? { statementTimeoutMs: options.statementTimeoutMs } : {}),
    ...(options.applicationName ? { applicationName: options.applicationName } : {}),
  };
  const data = createPgPool(urls.dataUrl, common);
  const control = createPgPool(urls.controlUrl, common);
  return { data, control, registry: new Registry({ data: pgExecutor(data), control: pgExecutor(control) }) };
}

export function sqlGateway(urls: GatewayUrls, options: GatewayOptions = {}): Gateway {
  const { data, control, registry } = createPools(urls, options);
  return {
    transport: "sql",
    resolve: (actionId, tenantId, capabilityId, topology = {}) =>
      answer(async () => {
        const result = await registry.resolveRoute(actionId, tenantId, capabilityId, topology);
        return { outcome: result.outcome, json: JSON.stringify(result.assignment), assignment: result.assignment };
      }),
    settle: (actionId, tenantId, assignment, outcome) =>
      answer(async () => ({ released: (await registry.settleRoute(actionId, tenantId, assignment, outcome)).released })),
    getRoute: (actionId, tenantId) =>
      answer(async () => {
        const state = await registry.getRoute(actionId, tenantId);
        return state ? { json: JSON.stringify(state.assignment), reserved: state.reserved } : { json: null, reserved: false as const };
      }),
    catalogPage: (tenantId, query) => answer(async () => ({ page: await catalogPage(registry, tenantId, query) })),
    lifecycle: (replicaId, operation, request) =>
      answer(async () => ({ sequence: (await registry.replicaLifecycle(replicaId, operation, request, hostPrincipal(replicaId))).sequence })),
    replicaSequence: (replicaId) =>
      answer(async () => {
        const record = await registry.adminGet("replica", replicaId);
        if (!record) throw new RegistryError("not-found", `replica ${replicaId} is not provisioned`);
        return { sequence: Number(record.health_revision) };
      }),
    expireLeases: (limit) => answer(() => registry.expireLeases(limit)),
    publish: (changes) => answer(async () => ({ result: await registry.publish(changes) })),
    close: async () => {
      await Promise.all([data.end(), control.end()]);
    },
  };
}

/** Checks a refusal's response is a proper problem: problem+json, its code, Retry-After on a retryable 503. */
async function problemOf(response: Response): Promise<Refusal> {
  const text = await response.text();
  const type = response.headers.get("content-type") ?? "";
  let body: Record<string, unknown> = {};
  try {
    body = JSON.parse(text) as Record<string, unknown>;
  } catch {
    return { ok: false, code: `non-json ${response.status}`, retryable: false, extensions: {}, malformed: `body is not JSON: ${text.slice(0, 200)}` };
  }
  const code = String(body.code);
  const problems: string[] = [];
  if (!type.startsWith("application/problem+json")) problems.push(`content-type ${type}`);
  if (body.status !== response.status) problems.push(`status member ${String(body.status)} on a ${response.status}`);
  if (response.status >= 500 && code !== "storage" && code !== "busy" && code !== "replica-unavailable")
    problems.push(`a ${response.status} that is not storage, busy or replica-unavailable`);
  const retryAfter = response.headers.get("retry-after");
  if ((code === "storage" || code === "busy") && (response.status !== 503 || !retryAfter || !(Number(retryAfter) >= 1))) {
    problems.push(`${code} answered ${response.status} with Retry-After ${retryAfter}`);
  }
  const { type: _t, title: _ti, status: _s, detail: _d, code: _c, request_id: _r, ...extensions } = body;
  return {
    ok: false,
    code,
    retryable: code === "storage" || code === "busy",
    extensions,
    ...(typeof extensions.sqlstate === "string" ? { sqlstate: extensions.sqlstate } : {}),
    ...(problems.length ? { malformed: problems.join("; ") } : {}),
  };
}

function httpGateway(urls: GatewayUrls, options: GatewayOptions = {}): Gateway {
  const { data, control, registry } = createPools(urls, options);
  const api: TestApi = createTestApi(registry);
  const tokens = new Map<string, Promise<string>>();
  const tenantToken = (tenantId: string) => {
    let token = tokens.get(tenantId);
    if (!token) {
      token = api.tenantToken(tenantId);
      tokens.set(tenantId, token);
    }
    return token;
  };
  const adminToken = api.adminToken();
  const call = async <T>(request: () => Promise<Response>, ok: (response: Response, text: string) => T): Promise<Answer<T>> => {
    let response: Response;
    try {
      response = await request();
    } catch (error) {
      return refusalOf(error);
    }
    if (response.status >= 400) return problemOf(response);
    const text = await response.text();
    return { ok: true, ...ok(response, text) };
  };
  const enc = encodeURIComponent;
  return {
    transport: "http",
    resolve: async (actionId, tenantId, capabilityId, topology = {}) => {
      const token = await tenantToken(tenantId);
      return call(
        () => api.call("PUT", `/v1/routes/${enc(actionId)}`, { token, body: { capability_id: capabilityId, topology } }),
        (response, text) => ({
          outcome: (response.headers.get("aip-route-outcome") ?? "unknown") as Resolved["outcome"],
          json: text,
          assignment: JSON.parse(text) as RouteAssignment,
        }),
      );
    },
    settle: async (actionId, tenantId, assignment, outcome) => {
      const token = await tenantToken(tenantId);
      return call(
        () => api.call("POST", `/v1/routes/${enc(actionId)}/settlement`, { token, body: { assignment, outcome } }),
        (_, text) => ({ released: (JSON.parse(text) as { released: boolean }).released }),
      );
    },
    getRoute: async (actionId, tenantId) => {
      const token = await tenantToken(tenantId);
      const answered = await call(
        () => api.call("GET", `/v1/routes/${enc(actionId)}`, { token }),
        (response, text) => ({ json: text as string | null, reserved: response.headers.get("aip-route-reserved") === "true" }),
      );
      if (!answered.ok && answered.code === "not-found" && !answered.malformed) return { ok: true, json: null, reserved: false };
      return answered as Answer<{ json: string; reserved: boolean }>;
    },
    catalogPage: async (tenantId, query) => {
      const token = await tenantToken(tenantId);
      const search = new URLSearchParams({ limit: String(query.limit), ...(query.cursor ? { cursor: query.cursor } : {}) });
      return call(
        () => api.call("GET", `/v1/catalog/capabilities?${search}`, { token }),
        (_, text) => ({ page: JSON.parse(text) as CatalogPage }),
      );
    },
    lifecycle: async (replicaId, operation, request) =>
      call(
        async () => api.call("POST", `/v1/replicas/${enc(replicaId)}/${operation}`, { token: await api.hostTokenFor(replicaId), body: request }),
        (_, text) => ({ sequence: (JSON.parse(text) as { sequence: number }).sequence }),
      ),
    replicaSequence: async (replicaId) =>
      call(
        async () => api.call("GET", `/v1/admin/replicas/${enc(replicaId)}`, { token: await adminToken }),
        (_, text) => ({ sequence: Number((JSON.parse(text) as { health_revision: number }).health_revision) }),
      ),
    expireLeases: async (limit) =>
      call(
        async () => api.call("POST", `/v1/fleet/lease-expiry?limit=${limit}`, { token: await adminToken }),
        (_, text) => JSON.parse(text) as { expired: number; released: number },
      ),
    publish: async (changes) =>
      call(
        async () => api.call("POST", "/v1/admin/publications", { token: await adminToken, body: { changes } }),
        (_, text) => ({ result: JSON.parse(text) as PublicationResult }),
      ),
    close: async () => {
      await Promise.all([data.end(), control.end()]);
    },
  };
}

export function createGateway(transport: Transport, urls: GatewayUrls, options: GatewayOptions = {}): Gateway {
  return transport === "sql" ? sqlGateway(urls, options) : httpGateway(urls, options);
}
