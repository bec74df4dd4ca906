/**
 * What every CLI command shares: output streams, exit codes, and how a command finds its
 * registry (HTTP URL and token, or a database URL) and its signing secret.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import type { Scope } from "../http/auth.js";
import { httpBackend, type Backend } from "./backend.js";
import { UsageError } from "./errors.js";

export { Annotated, UsageError } from "./errors.js";

export const EXIT = {
  ok: 0,
  /** The registry refused (a problem answer), or doctor found something wrong. */
  failed: 1,
  /** Bad arguments, an invalid fleet file, no token or secret. */
  usage: 2,
  /** The registry or its database could not be reached or is unavailable: retry later. */
  unavailable: 3,
} as const;

export interface Io {
  /** Results (tables, tokens, JSON): stdout. */
  out(text: string): void;
  /** Progress and diagnostics: stderr. */
  err(text: string): void;
}

export type Values = Record<string, string | boolean | string[] | undefined>;

export interface CommandContext {
  values: Values;
  positionals: string[];
  env: Record<string, string | undefined>;
  io: Io;
}

const UNITS: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** `90s`, `15m`, `12h`, `30d` in milliseconds; undefined for anything else. */
export function durationMs(text: string): number | undefined {
  const match = /^(\d+)([smhd])$/.exec(text);
  return match ? Number(match[1]) * (UNITS[match[2] as string] as number) : undefined;
}

export const str = (values: Values, name: string): string | undefined => {
  const value = values[name];
  return typeof value === "string" ? value : undefined;
};

export function dataDir(ctx: CommandContext): string {
  return str(ctx.values, "data-dir") ?? ctx.env.DATA_DIR ?? ".data";
}

/** AUTH_HS256_SECRET, or the development secret `npm start` generated under the data dir. */
export async function signingSecret(ctx: CommandContext): Promise<string | undefined> {
  const configured = ctx.env.AUTH_HS256_SECRET?.trim();
  if (configured) return configured;
  try {
    return (await readFile(join(dataDir(ctx), "auth-secret"), "utf8")).trim() || undefined;
  } catch {
    return undefined;
  }
}

export function registryUrl(ctx: CommandContext): string {
  return (str(ctx.values, "url") ?? ctx.env.AIP_REGISTRY_URL ?? `http://127.0.0.1:${ctx.env.PORT || 8787}`).replace(/\/+$/, "");
}

/** The token the operator gave (--token, else AIP_REGISTRY_TOKEN); undefined when the CLI mints its own. */
export function givenToken(ctx: CommandContext): string | undefined {
  return str(ctx.values, "token") || ctx.env.AIP_REGISTRY_TOKEN || undefined;
}

/**
 * The `tenant_id` claim of a JWT, read without verifying it (the registry verifies; this only
 * lets a command say what is missing before asking): the tenant, null for a JWT that names none,
 * undefined for a token that is not a readable JWT.
 */
export function tokenTenant(token: string): string | null | undefined {
  const payload = token.split(".")[1];
  if (!payload) return undefined;
  try {
    const claims = JSON.parse(Buffer.from(payload, "base64url").toString("utf8")) as { tenant_id?: unknown };
    if (typeof claims !== "object" || claims === null) return undefined;
    return typeof claims.tenant_id === "string" && claims.tenant_id.trim() !== "" ? claims.tenant_id : null;
  } catch {
    return undefined;
  }
}

/**
 * The command's registry. --database-url selects SQL; otherwise HTTP with --token,
 * AIP_REGISTRY_TOKEN, or a short-lived token minted for exactly `scopes` from the signing secret
 * (development setups, where the CLI runs next to the server's data directory).
 */
async function openBackend(ctx: CommandContext, scopes: Scope[], claims: { tenantId?: string } = {}): Promise<Backend> {
  const databaseUrl = str(ctx.values, "database-url");
  // Loaded on demand: an HTTP command should not pay for the database driver.
  if (databaseUrl) return (await import("./sql-backend.js")).sqlBackend(databaseUrl);
  const url = registryUrl(ctx);
  const timeoutMs = Number(str(ctx.values, "timeout") ?? 30) * 1000;
  if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) throw new UsageError("--timeout must be a positive number of seconds");
  const given = givenToken(ctx);
  if (given) return httpBackend({ url, token: given, timeoutMs });
  const secret = await signingSecret(ctx);
  if (!secret) {
    throw new UsageError(
      `no token for ${url}: pass --token or set AIP_REGISTRY_TOKEN (a token with ${scopes.join(" or ")}); ` +
        `for a development server, set AUTH_HS256_SECRET or run next to its data directory (${join(dataDir(ctx), "auth-secret")})`,
    );
  }
  const { mintToken } = await import("../http/tokens.js");
  let token: Promise<string> | undefined;
  const mint = () =>
    (token ??= mintToken(secret, {
      subject: "aip-registry-cli",
      scopes,
      ...(claims.tenantId ? { tenantId: claims.tenantId } : {}),
      ttlSeconds: 300,
      ...(ctx.env.AUTH_ISSUER ? { issuer: ctx.env.AUTH_ISSUER } : {}),
      ...(ctx.env.AUTH_AUDIENCE ? { audience: ctx.env.AUTH_AUDIENCE } : {}),
    }));
  return httpBackend({ url, token: mint, timeoutMs });
}

export async function withBackend<T>(
  ctx: CommandContext,
  scopes: Scope[],
  fn: (backend: Backend) => Promise<T>,
  claims: { tenantId?: string } = {},
): Promise<T> {
  const backend = await openBackend(ctx, scopes, claims);
  try {
    return await fn(backend);
  } finally {
    await backend.close();
  }
}
