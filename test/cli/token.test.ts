/**
 * `aip-registry token`: development tokens the registry accepts, with exactly the requested
 * scopes, tenant and lifetime, signed with AUTH_HS256_SECRET or the data directory's secret.
 */
import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { decodeJwt } from "jose";
import { beforeAll, expect, it, vi } from "vitest";
import { createAuthenticator } from "../../src/http/auth.js";
import { TEST_SECRET } from "../support/http.js";
import { cleanEnv, runCli } from "./support.js";

// Each test runs the CLI as a subprocess (a Node start-up each): give them room on a busy machine.
vi.setConfig({ testTimeout: 180_000, hookTimeout: 120_000 });

const verify = createAuthenticator({ hs256Secret: TEST_SECRET });
let dataDir: string;

beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), "aip-cli-token-"));
  await writeFile(join(dataDir, "auth-secret"), `${TEST_SECRET}\n`, { mode: 0o600 });
});

it("mints a token the registry verifies, from AUTH_HS256_SECRET", async () => {
  const result = await runCli(["token", "--tenant", "tenant-a", "--scope", "routes:write,routes:read", "--scope", "catalog:read", "--ttl", "15m"], {
    env: cleanEnv({ AUTH_HS256_SECRET: TEST_SECRET }),
  });
  expect(result.code, result.stderr).toBe(0);
  const token = result.stdout.trim();
  expect(result.stdout).toBe(`${token}\n`); // only the token: TOKEN=$(aip-registry token ...)
  const principal = await verify(token);
  expect(principal.tenantId).toBe("tenant-a");
  expect([...principal.scopes].sort()).toEqual(["catalog:read", "routes:read", "routes:write"]);
  const claims = decodeJwt(token);
  expect((claims.exp as number) - (claims.iat as number)).toBe(900);
  expect(claims.sub).toBe("aip-registry-cli");
});

it("uses the development secret under --data-dir, and prints JSON or a dashboard link", async () => {
  const [json, link] = await Promise.all([
    runCli(["token", "--scope", "fleet:read", "--subject", "ops", "--ttl", "2h", "--json", "--data-dir", dataDir], { env: cleanEnv() }),
    runCli(["token", "--scope", "fleet:read", "--dashboard", "--url", "http://registry.example:8080"], { env: cleanEnv({ DATA_DIR: dataDir }) }),
  ]);
  expect(json.code, json.stderr).toBe(0);
  const minted = JSON.parse(json.stdout);
  expect(minted).toMatchObject({ subject: "ops", tenant_id: null, scopes: ["fleet:read"] });
  expect(Date.parse(minted.expires_at) - Date.now()).toBeGreaterThan(7100_000);
  expect((await verify(minted.token)).tenantId).toBeNull();

  expect(link.code, link.stderr).toBe(0);
  const url = new URL(link.stdout.trim());
  expect(`${url.origin}${url.pathname}`).toBe("http://registry.example:8080/dashboard");
  expect(url.hash.startsWith("#token=")).toBe(true);
  expect((await verify(url.hash.slice("#token=".length))).scopes.has("fleet:read")).toBe(true);
});

it("refuses bad input with exit 2 and says why", async () => {
  const env = cleanEnv({ AUTH_HS256_SECRET: TEST_SECRET });
  const cases: [string[], RegExp][] = [
    [["token"], /needs at least one --scope/],
    [["token", "--scope", "routes:write,root"], /unknown scope root/],
    [["token", "--scope", "fleet:read", "--ttl", "forever"], /--ttl must be a duration/],
    [["token", "--scope", "fleet:read", "--tenant", " "], /--tenant must not be empty/],
  ];
  const [noSecret, ...results] = await Promise.all([
    runCli(["token", "--scope", "fleet:read", "--data-dir", join(dataDir, "missing")], { env: cleanEnv() }),
    ...cases.map(([args]) => runCli(args, { env })),
  ]);
  results.forEach((result, i) => {
    expect(result.code, cases[i]?.[0].join(" ")).toBe(2);
    expect(result.stderr).toMatch(cases[i]?.[1] as RegExp);
    expect(result.stdout).toBe("");
  });
  expect(noSecret.code).toBe(2);
  expect(noSecret.stderr).toContain("no signing secret");
});
