/**
 * The documented CLI command runs this project's CLI or fails; it never installs and runs a
 * package of the same name from a registry. `npx aip-registry` outside the clone would: the name
 * is not this project's on the public registry, and npx installs without asking when there is no
 * terminal. The docs therefore say `npx --no-install aip-registry`, which inside the clone (any
 * directory of it) runs the clone's own bin and outside it fails.
 *
 * Here a local registry serves an impostor `aip-registry`, so the hazard is real and visible.
 */
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, expect, it, vi } from "vitest";
import { cleanEnv, ROOT } from "./support.js";

vi.setConfig({ testTimeout: 120_000, hookTimeout: 120_000 });

const run = promisify(execFile);
const IMPOSTOR = "this is not the registry's CLI";
const version = (JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { version: string }).version;

let work: string;
let registry: Server;
let registryUrl: string;
const requests: string[] = [];

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "aip-npx-"));
  const impostor = join(work, "impostor");
  await mkdir(impostor);
  await writeFile(join(impostor, "package.json"), JSON.stringify({ name: "aip-registry", version: "9.9.9", bin: { "aip-registry": "bin.js" } }));
  await writeFile(join(impostor, "bin.js"), `#!/usr/bin/env node\nconsole.log(${JSON.stringify(IMPOSTOR)});\n`);
  const { stdout } = await run("npm", ["pack", "--json", "--pack-destination", work], { cwd: impostor, env: cleanEnv() });
  const tarball = await readFile(join(work, (JSON.parse(stdout) as { filename: string }[])[0]?.filename as string));

  registry = createServer((req, res) => {
    requests.push(req.url ?? "");
    if (req.url === "/aip-registry") {
      const dist = {
        tarball: `${registryUrl}aip-registry/-/aip-registry-9.9.9.tgz`,
        shasum: createHash("sha1").update(tarball).digest("hex"),
        integrity: `sha512-${createHash("sha512").update(tarball).digest("base64")}`,
      };
      res.setHeader("content-type", "application/json");
      res.end(
        JSON.stringify({
          name: "aip-registry",
          "dist-tags": { latest: "9.9.9" },
          versions: { "9.9.9": { name: "aip-registry", version: "9.9.9", bin: { "aip-registry": "bin.js" }, dist } },
        }),
      );
    } else if (req.url === "/aip-registry/-/aip-registry-9.9.9.tgz") {
      res.end(tarball);
    } else {
      res.statusCode = 404;
      res.end("{}");
    }
  });
  await new Promise<void>((resolve) => registry.listen(0, "127.0.0.1", resolve));
  registryUrl = `http://127.0.0.1:${(registry.address() as { port: number }).port}/`;
});
afterAll(async () => {
  await new Promise<void>((resolve) => registry?.close(() => resolve()));
  if (work) await rm(work, { recursive: true, force: true });
});

/**
 * npx against the local registry, with an empty cache of its own and npm's stock settings (no
 * global or user npmrc: a machine's `yes=false` would hide the hazard), as a CI job runs it: no
 * terminal, so npx installs what it does not have without asking (in a terminal it asks "Ok to
 * proceed?", and a newcomer following the docs says yes).
 */
async function npx(args: string[], cwd: string): Promise<{ code: number; stdout: string; stderr: string }> {
  await writeFile(join(work, "global-npmrc"), "");
  await writeFile(join(work, "user-npmrc"), "");
  const env = cleanEnv({
    npm_config_globalconfig: join(work, "global-npmrc"),
    npm_config_userconfig: join(work, "user-npmrc"),
    npm_config_registry: registryUrl,
    npm_config_cache: join(work, "cache"),
    npm_config_update_notifier: "false",
  });
  try {
    const { stdout, stderr } = await run("npx", args, { cwd, env });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const { code, stdout, stderr } = error as { code: number; stdout: string; stderr: string };
    return { code, stdout, stderr };
  }
}

it("outside the clone, plain npx runs whatever the registry has under that name (the hazard)", async () => {
  const outside = await mkdtemp(join(work, "outside-"));
  const result = await npx(["aip-registry", "--version"], outside);
  expect(result.stdout, result.stderr).toContain(IMPOSTOR);
});

it("outside the clone, the documented command fails without installing anything", async () => {
  const outside = await mkdtemp(join(work, "outside-"));
  requests.length = 0;
  const result = await npx(["--no-install", "aip-registry", "--version"], outside);
  expect(result.code).not.toBe(0);
  expect(result.stdout).not.toContain(IMPOSTOR);
  expect(requests.filter((url) => url.endsWith(".tgz"))).toEqual([]);
});

it("inside the clone, from any of its directories, the documented command runs this CLI and asks no registry", async () => {
  requests.length = 0;
  for (const cwd of [ROOT, join(ROOT, "docs"), join(ROOT, "src", "cli")]) {
    const result = await npx(["--no-install", "aip-registry", "--version"], cwd);
    expect(result.code, cwd).toBe(0);
    expect(result.stdout.trim(), cwd).toBe(version);
  }
  expect(requests).toEqual([]);
});

it("is the only way the README, the docs and what the programs print spell the command", () => {
  const texts = [
    "README.md",
    ...readdirSync(join(ROOT, "docs")).map((name) => join("docs", name)),
    // What the server, the CLI and `npm run dev` print (hints, /readyz reasons).
    ...(readdirSync(join(ROOT, "src"), { recursive: true }) as string[]).filter((name) => name.endsWith(".ts")).map((name) => join("src", name)),
    "scripts/dev-worker.ts",
  ];
  const bare = texts.flatMap((path) =>
    readFileSync(join(ROOT, path), "utf8")
      .split("\n")
      .map((line, index) => ({ where: `${path}:${index + 1}`, line }))
      // Prose may name the hazard as "plain `npx aip-registry`".
      .filter(({ line }) => /(?<!plain `)\b(npx|npm exec)(?! --no-install)( -\S+)* aip-registry\b/.test(line))
      .map(({ where, line }) => `${where}: ${line.trim()}`),
  );
  expect(bare).toEqual([]);
});
