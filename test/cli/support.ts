/**
 * Running the CLI the way an operator does: `node bin/aip-registry.mjs ...` as a subprocess,
 * against an HTTP server started here over a test database, with a scrubbed environment.
 */
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { serve, type ServerType } from "@hono/node-server";
import { createApp } from "../../src/app.js";
import { createAuthenticator } from "../../src/http/auth.js";
import type { Registry } from "../../src/registry/registry.js";
import { TEST_SECRET } from "../support/http.js";

export { freePort } from "../../fixtures/free-port.js";

export const ROOT = fileURLToPath(new URL("../..", import.meta.url));
export const BIN = fileURLToPath(new URL("../../bin/aip-registry.mjs", import.meta.url));

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** The caller's environment without anything that would point the CLI somewhere by accident. */
export function cleanEnv(extra: Record<string, string> = {}): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (value === undefined) continue;
    if (/^(DATABASE_URL|CONTROL_DATABASE_URL|AUTH_|AIP_REGISTRY_|DATA_DIR$|PORT$|HOST$|NODE_OPTIONS$|VITEST)/.test(key)) continue;
    env[key] = value;
  }
  return { ...env, ...extra };
}

export function runCli(args: string[], options: { env?: Record<string, string>; cwd?: string; timeoutMs?: number } = {}): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], { cwd: options.cwd ?? ROOT, env: options.env ?? cleanEnv(), stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`aip-registry ${args.join(" ")} did not finish in time\nstdout: ${stdout}\nstderr: ${stderr}`));
    }, options.timeoutMs ?? 60_000);
    child.once("error", reject);
    child.once("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

export interface ApiServer {
  url: string;
  close(): Promise<void>;
}

/** The app over `registry` on a real socket, HS256 tokens signed with TEST_SECRET. */
export async function startApiServer(registry: Registry): Promise<ApiServer> {
  // On-demand route retention with the server's default window (ROUTE_RETENTION_DAYS=30).
  const app = createApp({ registry, authenticator: createAuthenticator({ hs256Secret: TEST_SECRET }), routeRetention: { days: 30, requireExport: false } });
  const { server, port } = await new Promise<{ server: ServerType; port: number }>((resolve) => {
    const server = serve({ fetch: app.fetch, port: 0, hostname: "127.0.0.1" }, (info) => resolve({ server, port: info.port }));
  });
  return {
    url: `http://127.0.0.1:${port}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** Environment of a CLI that mints its own tokens with the test server's secret. */
export function cliEnv(url: string, extra: Record<string, string> = {}): Record<string, string> {
  return cleanEnv({ AIP_REGISTRY_URL: url, AUTH_HS256_SECRET: TEST_SECRET, ...extra });
}
