/**
 * `npm run dev`: the real Worker (src/worker.ts) in `wrangler dev`, on the production Neon driver,
 * against a local PostgreSQL through the local Neon proxy (src/dev/neon-proxy.ts).
 *
 * 1. DATABASE_URL (default postgres://postgres@127.0.0.1:5432/aip_registry_dev) is the owner:
 *    the database is created if missing and migrated, as a trusted machine would in production.
 * 2. Login roles aip_dev_data / aip_dev_control join the migration's group roles, so the Worker
 *    runs with the production grants (without CREATEROLE it falls back to the owner, and says so).
 * 3. The proxy starts; the Worker's connection strings name the fake host db.localtest.me, which
 *    only the proxy serves (NEON_LOCAL_PROXY tells the Worker where it is).
 * 4. wrangler dev starts with those bindings and the development secret (.data/auth-secret, the
 *    same one `npm start` uses); ready-to-use tokens are printed.
 *
 * Extra arguments go to wrangler dev, e.g. `npm run dev -- --port 8788`.
 * Environment: DATABASE_URL, DEV_PORT (8787), NEON_TRANSPORT (http | websocket).
 */
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { prepareLocalWorkerDatabase } from "../src/dev/local-database.js";
import { startNeonProxy } from "../src/dev/neon-proxy.js";
import { mintToken } from "../src/http/tokens.js";

const DATA_DIR = ".data";

async function developmentSecret(): Promise<string> {
  const path = join(DATA_DIR, "auth-secret");
  try {
    return (await readFile(path, "utf8")).trim();
  } catch {
    await mkdir(DATA_DIR, { recursive: true });
    const secret = randomBytes(32).toString("base64url");
    await writeFile(path, `${secret}\n`, { mode: 0o600 });
    return secret;
  }
}

async function main(): Promise<void> {
  const ownerUrl = new URL(process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/aip_registry_dev");
  const port = process.env.DEV_PORT ?? "8787";
  const database = await prepareLocalWorkerDatabase(ownerUrl.toString(), { data: "aip_dev_data", control: "aip_dev_control", password: "aip-dev-password" }, console.log);
  const { migration } = database;
  console.log(`schema version ${migration.schemaVersion}${migration.applied.length ? ` (applied ${migration.applied.join(", ")})` : ""}`);

  const proxy = await startNeonProxy({ pgHost: ownerUrl.hostname, pgPort: Number(ownerUrl.port || 5432) });
  const secret = await developmentSecret();
  const vars = {
    DATABASE_URL: database.dataUrl,
    CONTROL_DATABASE_URL: database.controlUrl,
    AUTH_HS256_SECRET: secret,
    NEON_LOCAL_PROXY: proxy.url,
    NEON_TRANSPORT: process.env.NEON_TRANSPORT ?? "http",
  };

  const ttlSeconds = 30 * 24 * 3600;
  const admin = await mintToken(secret, { subject: "dev-operator", scopes: ["registry:admin", "fleet:read"], ttlSeconds });
  const tenant = await mintToken(secret, { subject: "dev-gateway", tenantId: "tenant-a", scopes: ["catalog:read", "routes:write", "routes:read"], ttlSeconds });
  const host = await mintToken(secret, { subject: "dev-connector-host", scopes: ["replicas:write"], ttlSeconds });
  const url = `http://127.0.0.1:${port}`;
  console.log(
    [
      `Neon proxy ${proxy.url} -> PostgreSQL ${ownerUrl.hostname}:${ownerUrl.port || 5432}${ownerUrl.pathname}`,
      "Development tokens (valid 30 days):",
      `  ADMIN_TOKEN=${admin}`,
      `  TENANT_TOKEN=${tenant}      # tenant_id=tenant-a`,
      `  HOST_TOKEN=${host}`,
      "Try (once wrangler is ready):",
      `  curl -s ${url}/readyz`,
      `  curl -s -H "Authorization: Bearer $TENANT_TOKEN" ${url}/v1/catalog/capabilities`,
      "Lease maintenance runs from the LeaseClock Durable Object's alarm at lease deadlines (wrangler dev fires it);",
      "a batch on demand: curl -s -X POST -H \"Authorization: Bearer $ADMIN_TOKEN\" " + `${url}/v1/fleet/lease-expiry`,
      "",
    ].join("\n"),
  );

  const args = ["wrangler", "dev", "--port", port, "--ip", "127.0.0.1"];
  for (const [name, value] of Object.entries(vars)) args.push("--var", `${name}:${value}`);
  const wrangler = spawn("npx", [...args, ...process.argv.slice(2)], {
    stdio: "inherit",
    env: { ...process.env, CLOUDFLARE_CF_FETCH_ENABLED: "false", WRANGLER_SEND_METRICS: "false" },
  });
  const stop = () => wrangler.kill("SIGINT");
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
  const code = await new Promise<number>((resolve) => wrangler.once("exit", (exitCode) => resolve(exitCode ?? 0)));
  await proxy.close();
  process.exit(code);
}

main().catch((error: unknown) => {
  console.error(error instanceof Error ? error.message : error);
  process.exit(1);
});
