/**
 * `npm run dev`: the real Worker (src/entry/worker.ts, through its development entry dev/worker.ts)
 * in `wrangler dev`, on the production Neon driver,
 * against a local PostgreSQL through the local Neon proxy (dev/neon-proxy.ts).
 *
 * 1. The port (DEV_PORT, default 8788: `npm start` keeps 8787) must be free, or nothing starts.
 * 2. DATABASE_URL (default postgres://postgres@127.0.0.1:5432/aip_registry_dev) is the owner:
 *    the database is created if missing and migrated, as a trusted machine would in production.
 * 3. Login roles aip_dev_data / aip_dev_control join the migration's group roles, so the Worker
 *    runs with the production grants (without CREATEROLE it falls back to the owner, and says so).
 *    Their password is random, kept in .data/dev-role-password, and reaches the server only as a
 *    SCRAM verifier; every run sets it, so no role keeps an old or well-known one.
 * 4. The proxy starts; the Worker's connection strings name the fake host db.localtest.me, which
 *    only the proxy serves (NEON_LOCAL_PROXY tells the Worker where it is).
 * 5. The Worker's secrets go to a wrangler env file (`.dev.vars`, mode 0600; DEV_VARS_FILE), never
 *    onto a command line that `ps` shows. wrangler dev starts with it and the development secret
 *    (.data/auth-secret, the same one `npm start` uses); ready-to-use tokens are printed, the host
 *    token bound to a replica of examples/fleet.yaml (DEV_REPLICA).
 * 6. wrangler runs in its own process group: when it stops, fails, or this script is stopped, the
 *    whole group (esbuild included) is stopped and the proxy closed.
 *
 * Extra arguments go to wrangler dev, e.g. `npm run dev -- --log-level debug` (the port is DEV_PORT).
 * Environment: DATABASE_URL, DEV_PORT, DEV_VARS_FILE, DEV_REPLICA, DATA_DIR (.data), NEON_TRANSPORT (http | websocket).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmod, mkdir, readFile, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { createServer } from "node:net";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { readFleetFile, validateFleet } from "../src/cli/fleet-file.js";
import { prepareLocalWorkerDatabase } from "../dev/local-database.js";
import { startNeonProxy } from "../dev/neon-proxy.js";
import { mintToken } from "../src/http/tokens.js";

const DATA_DIR = process.env.DATA_DIR ?? ".data";
export const DEFAULT_DEV_PORT = 8788;
const DEV_VARS_HEADER = "# Written by `npm run dev` (scripts/dev-worker.ts) on every start: do not edit, it is replaced.";

/** A secret kept in the data directory (mode 0600), created on first use. */
async function persistentSecret(name: string): Promise<string> {
  const path = join(DATA_DIR, name);
  try {
    return (await readFile(path, "utf8")).trim();
  } catch {
    await mkdir(DATA_DIR, { recursive: true });
    const secret = randomBytes(32).toString("base64url");
    await writeFile(path, `${secret}\n`, { mode: 0o600 });
    return secret;
  }
}

/** Fails unless something can listen on 127.0.0.1:`port` right now. */
export function assertPortFree(port: number): Promise<void> {
  return new Promise((resolvePort, reject) => {
    const probe = createServer();
    probe.once("error", (error: NodeJS.ErrnoException) =>
      reject(
        new Error(
          error.code === "EADDRINUSE"
            ? `port ${port} is in use (is \`npm start\` or another \`npm run dev\` running?): stop it or choose another port with DEV_PORT=<port> npm run dev`
            : `cannot listen on 127.0.0.1:${port}: ${error.message}`,
        ),
      ),
    );
    probe.listen(port, "127.0.0.1", () => probe.close(() => resolvePort()));
  });
}

/** The dotenv text wrangler reads with --env-file. Values are quoted; none of ours holds a quote or newline. */
export function devVarsText(vars: Record<string, string>): string {
  const lines = Object.entries(vars).map(([name, value]) => {
    if (/["\n\r\\]/.test(value)) throw new Error(`${name} cannot be written to an env file: it contains a quote, backslash or newline`);
    return `${name}="${value}"`;
  });
  return `${DEV_VARS_HEADER}\n${lines.join("\n")}\n`;
}

/** Writes the env file (0600), refusing to replace one this script did not write. */
export async function writeDevVars(path: string, vars: Record<string, string>): Promise<void> {
  const existing = await readFile(path, "utf8").catch(() => undefined);
  if (existing !== undefined && !existing.startsWith(DEV_VARS_HEADER)) {
    throw new Error(`${path} exists and was not written by \`npm run dev\`: move it away, or set DEV_VARS_FILE to another path`);
  }
  await writeFile(path, devVarsText(vars), { mode: 0o600 });
  // writeFile keeps an existing file's mode.
  await chmod(path, 0o600);
}

/** The replica a development host token is bound to: DEV_REPLICA or the fleet file's first. */
export async function devReplica(fleetFile: string, replicaId?: string): Promise<{ id: string; peerPrincipalId: string }> {
  const fleet = validateFleet(await readFleetFile(fleetFile));
  const replicas = fleet.replicas.map((replica) => ({ id: replica.id, peerPrincipalId: replica.peer_principal_id }));
  const replica = replicaId ? replicas.find((candidate) => candidate.id === replicaId) : replicas[0];
  if (!replica?.peerPrincipalId) {
    throw new Error(
      `no replica ${replicaId ?? ""} with a peer_principal_id in ${fleetFile} (DEV_REPLICA names one of: ${replicas.map((r) => r.id).join(", ")})`,
    );
  }
  return replica;
}

/** Stops wrangler's whole process group (it leaves esbuild behind otherwise). */
function stopGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, signal);
  } catch {
    // Already gone.
  }
}

async function main(): Promise<number> {
  const extra = process.argv.slice(2);
  if (extra.some((arg) => arg === "--port" || arg.startsWith("--port=")))
    throw new Error("set the port with DEV_PORT=<port>, not --port: it is checked before anything starts");
  const port = Number(process.env.DEV_PORT ?? DEFAULT_DEV_PORT);
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new Error(`DEV_PORT must be a port number, not ${process.env.DEV_PORT}`);
  await assertPortFree(port);
  const devVarsFile = resolve(process.env.DEV_VARS_FILE ?? ".dev.vars");
  const replica = await devReplica("examples/fleet.yaml", process.env.DEV_REPLICA);

  const ownerUrl = new URL(process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/aip_registry_dev");
  const rolePassword = await persistentSecret("dev-role-password");
  const database = await prepareLocalWorkerDatabase(
    ownerUrl.toString(),
    { data: "aip_dev_data", control: "aip_dev_control", password: rolePassword },
    console.log,
  );
  const { migration } = database;
  console.log(`schema version ${migration.schemaVersion}${migration.applied.length ? ` (applied ${migration.applied.join(", ")})` : ""}`);

  const proxy = await startNeonProxy({ pgHost: ownerUrl.hostname, pgPort: Number(ownerUrl.port || 5432) });
  let wrangler: ChildProcess | undefined;
  try {
    const secret = await persistentSecret("auth-secret");
    await writeDevVars(devVarsFile, {
      DATABASE_URL: database.dataUrl,
      CONTROL_DATABASE_URL: database.controlUrl,
      AUTH_HS256_SECRET: secret,
      NEON_LOCAL_PROXY: proxy.url,
      NEON_TRANSPORT: process.env.NEON_TRANSPORT ?? "http",
    });

    const ttlSeconds = 30 * 24 * 3600;
    const admin = await mintToken(secret, { subject: "dev-operator", scopes: ["registry:admin", "fleet:read"], ttlSeconds });
    const tenant = await mintToken(secret, {
      subject: "dev-gateway",
      tenantId: "tenant-a",
      scopes: ["catalog:read", "routes:write", "routes:read"],
      ttlSeconds,
    });
    const host = await mintToken(secret, {
      subject: replica.peerPrincipalId,
      peerPrincipalId: replica.peerPrincipalId,
      scopes: ["replicas:write"],
      ttlSeconds,
    });
    const url = `http://127.0.0.1:${port}`;
    console.log(
      [
        `Neon proxy ${proxy.url} -> PostgreSQL ${ownerUrl.hostname}:${ownerUrl.port || 5432}${ownerUrl.pathname}`,
        `Worker secrets: ${devVarsFile} (mode 0600)`,
        "Development tokens (valid 30 days):",
        `  ADMIN_TOKEN=${admin}`,
        `  TENANT_TOKEN=${tenant}      # tenant_id=tenant-a`,
        `  HOST_TOKEN=${host}      # peer_principal_id=${replica.peerPrincipalId}: drives replica ${replica.id} only`,
        "Try (once wrangler is ready):",
        `  curl -s ${url}/readyz`,
        `  AIP_REGISTRY_URL=${url} npx --no-install aip-registry apply -f examples/fleet.yaml`,
        `  npx --no-install aip-registry registration -f examples/fleet.yaml ${replica.id} --request-id msg_dev_register_1 --lease-ttl-ms 300000 > register.json`,
        `  curl -s -X POST ${url}/v1/replicas/${replica.id}/register -H "Authorization: Bearer $HOST_TOKEN" \\`,
        `    -H 'Content-Type: application/json' -d @register.json`,
        `  curl -s -H "Authorization: Bearer $TENANT_TOKEN" ${url}/v1/catalog/capabilities`,
        "Lease maintenance runs from the LeaseClock Durable Object's alarm at lease deadlines (wrangler dev fires it);",
        `a batch on demand: curl -s -X POST -H "Authorization: Bearer $ADMIN_TOKEN" ${url}/v1/fleet/lease-expiry`,
        "",
      ].join("\n"),
    );

    const wranglerBin = join(dirname(createRequire(import.meta.url).resolve("wrangler/package.json")), "bin", "wrangler.js");
    const child = spawn(
      process.execPath,
      [
        wranglerBin,
        "dev",
        fileURLToPath(new URL("../dev/worker.ts", import.meta.url)),
        "--port",
        String(port),
        "--ip",
        "127.0.0.1",
        "--env-file",
        devVarsFile,
        ...extra,
      ],
      {
        stdio: "inherit",
        // Its own process group, so that stopping it stops esbuild and workerd too.
        detached: true,
        env: { ...process.env, CLOUDFLARE_CF_FETCH_ENABLED: "false", WRANGLER_SEND_METRICS: "false" },
      },
    );
    wrangler = child;
    const forward = (signal: NodeJS.Signals) => () => stopGroup(child, signal);
    process.once("SIGINT", forward("SIGINT"));
    process.once("SIGTERM", forward("SIGTERM"));
    process.once("exit", () => stopGroup(child, "SIGKILL"));
    return await new Promise<number>((resolveExit) => child.once("exit", (code, signal) => resolveExit(code ?? (signal ? 1 : 0))));
  } finally {
    // Whatever wrangler left running (its esbuild), and the proxy.
    if (wrangler) stopGroup(wrangler, "SIGTERM");
    await proxy.close();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  main().then(
    (code) => process.exit(code),
    (error: unknown) => {
      console.error(`npm run dev: ${error instanceof Error ? error.message : String(error)}`);
      process.exit(1);
    },
  );
}
