/**
 * The README quick start, end to end, exactly as a newcomer runs it: `npm start` (embedded
 * PGlite, generated secret, printed tokens), `npx --no-install aip-registry apply -f examples/fleet.yaml`,
 * then the two curl commands: a connector host registers a replica, a gateway resolves a route.
 * Only the data directory and the port differ (a temporary directory, a free port).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, expect, it, vi } from "vitest";
import { cleanEnv, freePort, ROOT } from "./support.js";

// PGlite starts and migrates in process: slow on a busy machine.
vi.setConfig({ testTimeout: 240_000, hookTimeout: 240_000 });

/** The README's commands after `npm start`, run by bash in the second terminal. */
const QUICK_START = [
  "npx --no-install aip-registry apply -f examples/fleet.yaml",
  `HOST_TOKEN=$(npx --no-install aip-registry token --scope replicas:write --peer-principal service:crm-euw1a.tenant-a)
curl -s -X POST http://127.0.0.1:8787/v1/replicas/crepl_tenant_a_crm_euw1a/register \\
  -H "Authorization: Bearer $HOST_TOKEN" -H 'Content-Type: application/json' \\
  -d '{"request_id": "msg_quickstart_register_1", "lease_ttl_ms": 300000,
       "artifact_digest": "sha256:8668784f841d955f7c975f36c1c86fa06a5cbcb04b1a4b25ce07d3e0d988c1c8",
       "manifest_digest": "sha256:e9a411ed68a3d3824f8102b81cb9326c07c462bf8055660fcde4b42f05d8628b",
       "config_revision": 1, "capability_count": 2}'`,
  `curl -s -X PUT http://127.0.0.1:8787/v1/routes/act_quickstart_1 \\
  -H "Authorization: Bearer $TENANT_TOKEN" -H 'Content-Type: application/json' \\
  -d '{"capability_id": "cap:crm.contacts.search", "topology": {"region": "eu-west"}}'`,
];

let dataDir: string;
let port: number;
let server: ChildProcess;
let serverOutput = "";

function bash(command: string, env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn("bash", ["-c", command], { cwd: ROOT, env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    child.once("error", reject);
    child.once("close", (code) => resolve({ code, stdout, stderr }));
  });
}

beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), "aip-quickstart-"));
  port = await freePort();
  // Its own process group, so that npm, tsx and node all stop together.
  server = spawn("npm", ["start"], { cwd: ROOT, env: cleanEnv({ DATA_DIR: dataDir, PORT: String(port) }), stdio: ["ignore", "pipe", "pipe"], detached: true });
  server.stdout?.on("data", (chunk: Buffer) => (serverOutput += chunk.toString()));
  server.stderr?.on("data", (chunk: Buffer) => (serverOutput += chunk.toString()));
  const deadline = Date.now() + 200_000;
  while (!/TENANT_TOKEN=\S+/.test(serverOutput) && server.exitCode === null && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
  if (!/TENANT_TOKEN=\S+/.test(serverOutput)) throw new Error(`npm start did not print its tokens:\n${serverOutput}`);
});

afterAll(async () => {
  if (server?.pid && server.exitCode === null) {
    const exited = new Promise((resolve) => server.once("close", resolve));
    process.kill(-server.pid, "SIGTERM");
    await exited;
  }
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

it("goes from npm start to a resolved route with the documented commands", async () => {
  expect(serverOutput).toContain(`aip-registry listening on http://127.0.0.1:${port} (embedded PGlite)`);
  const token = (name: string) => new RegExp(`(?:^|\\s)${name}=(\\S+)`).exec(serverOutput)?.[1] as string;
  // The user pastes the printed `export ADMIN_TOKEN=... TENANT_TOKEN=...` (the start-up line's `paste`) into the second terminal.
  const tokens = serverOutput.split("\n").find((line) => line.includes('"paste"'));
  expect(JSON.parse(tokens as string).paste).toMatch(/^export ADMIN_TOKEN=\S+ TENANT_TOKEN=\S+ # /);
  const env = cleanEnv({ ADMIN_TOKEN: token("ADMIN_TOKEN"), TENANT_TOKEN: token("TENANT_TOKEN"), DATA_DIR: dataDir, PORT: String(port) });
  const [apply, register, resolve] = QUICK_START.map((command) => command.replaceAll("127.0.0.1:8787", `127.0.0.1:${port}`));

  const applied = await bash(apply as string, env);
  expect(applied.code, applied.stderr).toBe(0);
  expect(applied.stdout).toContain("applied: 28 created, 0 updated, 0 unchanged; catalog revision 0 -> 1");

  // The evidence in the register body is what the CLI derives from the fleet file, as the README says.
  const printed = await bash("npx --no-install aip-registry registration -f examples/fleet.yaml crepl_tenant_a_crm_euw1a", env);
  expect(printed.code, printed.stderr).toBe(0);
  const body = JSON.parse(/-d '([^']*)'/.exec(register as string)?.[1] as string) as Record<string, unknown>;
  expect({ ...body, request_id: undefined, lease_ttl_ms: undefined }).toEqual({
    ...JSON.parse(printed.stdout),
    request_id: undefined,
    lease_ttl_ms: undefined,
  });

  const registered = await bash(register as string, env);
  expect(registered.code, registered.stderr).toBe(0);
  expect(JSON.parse(registered.stdout)).toMatchObject({ replica_id: "crepl_tenant_a_crm_euw1a", status: "ready", lease_expires_at: expect.any(String) });

  const resolved = await bash(resolve as string, env);
  expect(resolved.code, resolved.stderr).toBe(0);
  const route = JSON.parse(resolved.stdout);
  expect(route).toMatchObject({
    action_id: "act_quickstart_1",
    tenant_id: "tenant-a",
    capability_id: "cap:crm.contacts.search",
    instance_id: "cinst_tenant_a_crm",
    replica_id: "crepl_tenant_a_crm_euw1a",
    endpoint: "https://crm-euw1a.tenant-a.hosts.example/aip/v1/messages",
    topology: { region: "eu-west", zone: "eu-west-1a", capacity_class: "standard" },
    catalog_revision: 1,
  });
  expect(route.fence_token).toMatch(/^route_/);
});
