/**
 * Helpers of the workerd suite: calling the Worker's handlers with a chosen configuration, the
 * local proxy's statement counters, and owner SQL through the proxy (test set-up only).
 */
import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { neon } from "@neondatabase/serverless";
import { inject } from "vitest";
import type { Scope } from "../../src/http/auth.js";
import { mintToken } from "../../src/http/tokens.js";
import worker, { type DevWorkerEnv as WorkerEnv } from "../../dev/worker.js";
import type { ConformanceTarget } from "../conformance/index.js";

export type Transport = "http" | "websocket";
export const TRANSPORTS: Transport[] = ["http", "websocket"];

/** The project's bindings (vitest.config.ts) with overrides. */
export function workerEnv(overrides: Partial<Record<keyof WorkerEnv, string | undefined>> = {}): WorkerEnv {
  const merged: Record<string, unknown> = { ...env, ...overrides };
  for (const [name, value] of Object.entries(merged)) if (value === undefined) delete merged[name];
  return merged as WorkerEnv;
}

/**
 * One request through the Worker's fetch handler, as the runtime would call it, waiting for its
 * waitUntil work (the WebSocket pool's end) before returning.
 */
export async function callWorker(bindings: WorkerEnv, path: string, init?: RequestInit): Promise<Response> {
  const ctx = createExecutionContext();
  const response = await worker.fetch(new Request(new URL(path, "http://registry.test"), init), bindings, ctx);
  const body = await response.arrayBuffer();
  await waitOnExecutionContext(ctx);
  return new Response(response.status === 304 ? null : body, { status: response.status, headers: response.headers });
}

export function mint(claims: { scopes: Scope[]; tenantId?: string; subject?: string; peerPrincipalId?: string }): Promise<string> {
  return mintToken(env.AUTH_HS256_SECRET as string, {
    subject: claims.subject ?? "workerd-test",
    scopes: claims.scopes,
    ...(claims.tenantId ? { tenantId: claims.tenantId } : {}),
    ...(claims.peerPrincipalId ? { peerPrincipalId: claims.peerPrincipalId } : {}),
  });
}

export function workerTarget(bindings: WorkerEnv, prefix: string): ConformanceTarget {
  return { prefix, fetch: (path, init) => callWorker(bindings, path, init), mintToken: mint };
}

export interface ProxyStats {
  http: { requests: number; statements: number; errors: number };
  ws: { opened: number; open: number; queries: number; parses: number };
  wakes: number;
  statements: number;
}

export async function proxyStats(): Promise<ProxyStats> {
  const response = await fetch(`${inject("neonProxyUrl")}/__stats`);
  return (await response.json()) as ProxyStats;
}

export async function resetProxyStats(): Promise<void> {
  await (await fetch(`${inject("neonProxyUrl")}/__stats/reset`, { method: "POST" })).arrayBuffer();
}

export interface ProxiedStatement {
  at: number;
  via: "http" | "ws" | "tcp";
  user?: string;
  database?: string;
  text: string;
}

/** The statements the registry's own roles sent since the last reset (owner SQL of the tests left out). */
export async function registryStatements(): Promise<ProxiedStatement[]> {
  const { statements } = (await (await fetch(`${inject("neonProxyUrl")}/__stats/log`)).json()) as { statements: ProxiedStatement[] };
  const owner = new URL(inject("pgServer").adminUrl).username;
  return statements.filter((s) => s.user !== owner);
}

/** The proxy stands in for a suspended compute: connections close, the next work waits `wakeMs`. */
export async function suspendDatabase(wakeMs: number): Promise<void> {
  const response = await fetch(`${inject("neonProxyUrl")}/__suspend?wake_ms=${wakeMs}`, { method: "POST" });
  if (!response.ok) throw new Error(`suspend failed: ${response.status}`);
  await response.arrayBuffer();
}

/** The owner's (superuser's) connection string for `database`, the way a Worker holds one. */
export function ownerUrl(database: string): string {
  const admin = new URL(inject("pgServer").adminUrl);
  return `postgres://${admin.username}:${admin.password}@db.localtest.me:5432/${database}`;
}

/** Owner (superuser) SQL on `database`, through the proxy's HTTP path. */
export function ownerSql(database: string) {
  return neon(ownerUrl(database));
}

/** The worker suite's database URL for `login`, on another database. */
export function databaseUrlOf(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
}

// The entry's structural parameter types must fit the runtime's handler type.
worker satisfies ExportedHandler<WorkerEnv>;
