/**
 * The Worker's configuration is the Node server's schema (src/config.ts): wrangler.toml's [vars]
 * are all settings it knows and parses, and the shared parsers apply (flags take true/false and
 * 1/0, bounded numbers are refused outside their range).
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { ConfigSchema, WorkerConfigSchema } from "../../src/config.js";
import { NEON_HTTP_TIMEOUT_MS } from "../../src/limits.js";

const base = { DATABASE_URL: "postgres://data@db.example/registry", AUTH_HS256_SECRET: "x".repeat(32) };

/** The [vars] table of wrangler.toml: `NAME = "value"` lines up to the next table. */
function wranglerVars(): Record<string, string> {
  const toml = readFileSync(new URL("../../wrangler.toml", import.meta.url), "utf8");
  const table = toml.slice(toml.indexOf("\n[vars]\n")).split(/\n\[(?!vars\])/)[0] as string;
  return Object.fromEntries([...table.matchAll(/^([A-Z_]+)\s*=\s*"([^"]*)"/gm)].map((m) => [m[1] as string, m[2] as string]));
}

describe("the Worker's configuration", () => {
  it("knows every wrangler.toml var and parses them all", () => {
    const vars = wranglerVars();
    expect(Object.keys(vars).length).toBeGreaterThan(5);
    const known = new Set(Object.keys(WorkerConfigSchema.shape));
    for (const name of Object.keys(vars)) expect(known.has(name), name).toBe(true);
    expect(WorkerConfigSchema.safeParse({ ...vars, ...base }).success).toBe(true);
  });

  it("parses the settings it shares with the Node server exactly as the Node server does", () => {
    const env = { ...base, ACCESS_LOG: "0", LEASE_EXPIRY_BATCH: "250", ROUTE_RETENTION_REQUIRE_EXPORT: "1", CATALOG_MAX_STALENESS_MS: "500" };
    const worker = WorkerConfigSchema.parse(env);
    const node = ConfigSchema.parse(env);
    for (const name of ["ACCESS_LOG", "LEASE_EXPIRY_BATCH", "ROUTE_RETENTION_REQUIRE_EXPORT", "CATALOG_MAX_STALENESS_MS"] as const) {
      expect(worker[name], name).toEqual(node[name]);
    }
  });

  it("CATALOG_CACHE takes the shared flag values", () => {
    for (const [value, expected] of [
      ["true", true],
      ["1", true],
      ["false", false],
      ["0", false],
      [undefined, true],
    ] as const) {
      expect(WorkerConfigSchema.parse({ ...base, CATALOG_CACHE: value }).CATALOG_CACHE, String(value)).toBe(expected);
    }
    expect(WorkerConfigSchema.safeParse({ ...base, CATALOG_CACHE: "yes" }).success).toBe(false);
  });

  it("NEON_HTTP_TIMEOUT_MS is bounded by src/limits.ts", () => {
    expect(WorkerConfigSchema.parse(base).NEON_HTTP_TIMEOUT_MS).toBe(NEON_HTTP_TIMEOUT_MS.default);
    expect(WorkerConfigSchema.parse({ ...base, NEON_HTTP_TIMEOUT_MS: String(NEON_HTTP_TIMEOUT_MS.min) }).NEON_HTTP_TIMEOUT_MS).toBe(NEON_HTTP_TIMEOUT_MS.min);
    expect(WorkerConfigSchema.safeParse({ ...base, NEON_HTTP_TIMEOUT_MS: String(NEON_HTTP_TIMEOUT_MS.min - 1) }).success).toBe(false);
    expect(WorkerConfigSchema.safeParse({ ...base, NEON_HTTP_TIMEOUT_MS: String(NEON_HTTP_TIMEOUT_MS.max + 1) }).success).toBe(false);
  });

  it("requires the data role's connection string", () => {
    expect(WorkerConfigSchema.safeParse({ AUTH_HS256_SECRET: base.AUTH_HS256_SECRET }).success).toBe(false);
  });
});
