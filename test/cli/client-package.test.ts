/**
 * @aip-registry/client as an integrator gets it: `npm pack` in packages/client (which builds it from
 * src/client/), then `npm install <tarball>` into an empty project. It installs alone (no
 * dependency, a few tens of KB, where the server package brings 61 MB), its JavaScript works
 * against a running registry (catalog reads revalidated with ETags, the change feed, a route,
 * problems, a timeout and an abort), and TypeScript users get exact types: a heartbeat without
 * `previous_sequence` does not compile.
 */
import { execFile } from "node:child_process";
import { readdirSync, statSync } from "node:fs";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { mintToken } from "../../src/http/tokens.js";
import { publishSimpleFleet } from "../../fixtures/records.js";
import { createTestDatabase, type TestDatabase } from "../support/database.js";
import { TEST_SECRET } from "../support/http.js";
import { cleanEnv, ROOT, startApiServer, type ApiServer } from "./support.js";

vi.setConfig({ testTimeout: 180_000, hookTimeout: 180_000 });

const run = promisify(execFile);
const PACKAGE = join(ROOT, "packages", "client");
const manifest = JSON.parse(await readFile(join(PACKAGE, "package.json"), "utf8")) as { name: string; version: string; license: string; dependencies?: object };
/** What the installed package may weigh at most: the JavaScript (~16 KB) and its declarations (~40 KB). */
const MAX_INSTALLED_BYTES = 150 * 1024;

let work: string;
let consumer: string;
let packed: { filename: string; files: { path: string }[] };
let db: TestDatabase;
let server: ApiServer;
const TENANT = "tenant-pkg";

/** npm as a user runs it: its output, and no warnings. */
async function npm(args: string[], cwd: string): Promise<string> {
  const { stdout, stderr } = await run("npm", args, { cwd, env: cleanEnv({ npm_config_audit: "false", npm_config_fund: "false" }), maxBuffer: 16 << 20 });
  expect(stderr.split("\n").filter((line) => /^npm (warn|err)/i.test(line))).toEqual([]);
  return stdout;
}

function bytesUnder(dir: string): number {
  return readdirSync(dir, { withFileTypes: true }).reduce((sum, entry) => {
    const path = join(dir, entry.name);
    return sum + (entry.isDirectory() ? bytesUnder(path) : statSync(path).size);
  }, 0);
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "aip-client-package-"));
  consumer = join(work, "consumer");
  await mkdir(consumer);
  [db, packed] = await Promise.all([
    createTestDatabase(),
    npm(["pack", "--json", "--pack-destination", work], PACKAGE).then((out) => (JSON.parse(out) as (typeof packed)[])[0] as typeof packed),
  ]);
  await writeFile(join(consumer, "package.json"), `${JSON.stringify({ name: "consumer", version: "1.0.0", private: true, type: "module" })}\n`);
  // Nothing to fetch: the tarball is the whole install, so npm never needs a registry here.
  await npm(["install", "--offline", join(work, packed.filename)], consumer);
  server = await startApiServer(db.registry);
  await publishSimpleFleet(db.registry, { prefix: "pkg", tenants: [TENANT], capabilities: ["cap:pkg.a", "cap:pkg.b"] });
});
afterAll(async () => {
  await server?.close();
  await db?.close();
  if (work) await rm(work, { recursive: true, force: true });
});

describe("@aip-registry/client", () => {
  it("packs its bundle, declarations, README and LICENSE, and nothing else", () => {
    const paths = packed.files.map((file) => file.path).sort();
    expect(paths).toEqual(
      [
        "LICENSE",
        "README.md",
        "dist/client.d.ts",
        "dist/errors.d.ts",
        "dist/etags.d.ts",
        "dist/index.d.ts",
        "dist/index.js",
        "dist/lifecycle.d.ts",
        "dist/wire.d.ts",
        "package.json",
      ].sort(),
    );
    expect(manifest).toMatchObject({ name: "@aip-registry/client", license: "Apache-2.0" });
    expect(manifest.dependencies).toBeUndefined();
  });

  it("installs alone: no dependency, and a few tens of KB", () => {
    const modules = join(consumer, "node_modules");
    expect(readdirSync(modules).filter((name) => !name.startsWith("."))).toEqual(["@aip-registry"]);
    expect(readdirSync(join(modules, "@aip-registry"))).toEqual(["client"]);
    const bytes = bytesUnder(join(modules, "@aip-registry", "client"));
    console.log(`@aip-registry/client installed: ${bytes} bytes`);
    expect(bytes).toBeLessThan(MAX_INSTALLED_BYTES);
  });

  it("works against a running registry from plain JavaScript", async () => {
    await writeFile(
      join(consumer, "use.mjs"),
      `
import { createServer } from "node:net";
import { EtagCache, RegistryClient, RegistryProblem, RegistryTimeoutError, etagRevision } from "@aip-registry/client";

const statuses = [];
const counting = async (url, init) => {
  const response = await fetch(url, init);
  statuses.push(response.status);
  return response;
};
const gateway = new RegistryClient({ baseUrl: process.env.REGISTRY_URL, token: process.env.GATEWAY_TOKEN, etags: new EtagCache(), fetch: counting });
const out = {};

const page = await gateway.catalogPage({ limit: 10 });
out.capabilities = page.capabilities.map((d) => d.capability.id);
out.revalidated = (await gateway.catalogPage({ limit: 10 })) === page;
const conditional = await gateway.catalogPageConditional({ limit: 10 }, undefined);
out.etagRevision = etagRevision(conditional.etag) === page.catalog_revision;
out.feed = await gateway.catalogChanges({ since: page.catalog_revision });
out.all = (await gateway.catalogChangesAll(0, { limit: 1 })).changes.map((c) => c.change + " " + c.capability_id);

const { outcome, assignment } = await gateway.resolveRoute("act_pkg_1", { capability_id: "cap:pkg.a" });
out.route = [outcome, (await gateway.resolveRoute("act_pkg_1", { capability_id: "cap:pkg.a" })).outcome];
out.settled = await gateway.settleRoute("act_pkg_1", assignment, "completed");
const refused = await gateway.resolveRoute("act_pkg_2", { capability_id: "cap:pkg.none" }).catch((e) => e);
out.problem = refused instanceof RegistryProblem ? [refused.status, refused.code] : String(refused);

// A registry that accepts the connection and never answers: the call ends at its timeout.
const silent = createServer(() => {});
await new Promise((resolve) => silent.listen(0, "127.0.0.1", resolve));
const stuck = new RegistryClient({ baseUrl: "http://127.0.0.1:" + silent.address().port, timeoutMs: 300 });
const timedOut = await stuck.health().catch((e) => e);
out.timeout = timedOut instanceof RegistryTimeoutError ? timedOut.name : String(timedOut);
const controller = new AbortController();
const aborted = stuck.health({ timeoutMs: 0, signal: controller.signal }).catch((e) => e.message);
controller.abort(new Error("stopped by the caller"));
out.aborted = await aborted;
silent.close();
silent.unref();

out.statuses = statuses;
console.log(JSON.stringify(out));
process.exit(0);
`,
    );
    const token = await mintToken(TEST_SECRET, { subject: "gw", scopes: ["catalog:read", "routes:write", "routes:read"], tenantId: TENANT });
    const { stdout } = await run(process.execPath, ["use.mjs"], { cwd: consumer, env: cleanEnv({ REGISTRY_URL: server.url, GATEWAY_TOKEN: token }) });
    const out = JSON.parse(stdout) as Record<string, unknown>;
    expect(out).toMatchObject({
      capabilities: ["cap:pkg.a", "cap:pkg.b"],
      revalidated: true,
      etagRevision: true,
      feed: { changes: [], next_cursor: null },
      all: ["added cap:pkg.a", "added cap:pkg.b"],
      route: ["created", "existing"],
      settled: { action_id: "act_pkg_1", released: true, last_settlement: "completed" },
      problem: [404, "binding-unavailable"],
      timeout: "TimeoutError",
      aborted: "stopped by the caller",
    });
    // The second page read was a 304, answered from the EtagCache.
    expect((out.statuses as number[]).slice(0, 2)).toEqual([200, 304]);
  });

  it("gives TypeScript users exact types: a lifecycle request that misses what its operation needs does not compile", async () => {
    await writeFile(
      join(consumer, "check.ts"),
      [
        `import { RegistryClient, RegistryProblem, type HeartbeatRequest, type RouteAssignment } from "@aip-registry/client";`,
        `const client = new RegistryClient({ baseUrl: "http://127.0.0.1:8787", token: "t", timeoutMs: 5000 });`,
        `export async function route(signal: AbortSignal): Promise<string> {`,
        `  try {`,
        `    const { outcome, assignment } = await client.resolveRoute("act_1", { capability_id: "cap:x" }, { signal });`,
        `    const route: RouteAssignment = assignment;`,
        `    return \`\${outcome} \${route.fence_token}\`;`,
        `  } catch (error) {`,
        `    if (error instanceof RegistryProblem && error.is("capacity-exceeded")) return String(error.retryAfterMs);`,
        `    throw error;`,
        `  }`,
        `}`,
        `export const beat: HeartbeatRequest = { request_id: "r", previous_sequence: 3 };`,
        `export const fine = () => client.replicaLifecycle("crepl_1", "heartbeat", beat);`,
        `// @ts-expect-error a heartbeat needs previous_sequence`,
        `export const missing = () => client.replicaLifecycle("crepl_1", "heartbeat", { request_id: "r" });`,
        `// @ts-expect-error so does offline`,
        `export const offline = () => client.offline("crepl_1", { request_id: "r" });`,
        `// @ts-expect-error register states its registration evidence whole`,
        `export const partial = () => client.register("crepl_1", { request_id: "r", artifact_digest: "sha256:00" });`,
        `// @ts-expect-error fence_token is a string`,
        `export const wrong: number = ({} as RouteAssignment).fence_token;`,
        "",
      ].join("\n"),
    );
    await writeFile(
      join(consumer, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: { module: "nodenext", moduleResolution: "nodenext", target: "es2022", lib: ["es2023", "dom"], types: [], strict: true, noEmit: true },
        files: ["check.ts"],
      }),
    );
    const tsc = join(ROOT, "node_modules", "typescript", "bin", "tsc");
    const result = await run(process.execPath, [tsc, "-p", "tsconfig.json"], { cwd: consumer }).catch((error: { stdout: string }) => error);
    expect(result.stdout).toBe("");
  });
});
