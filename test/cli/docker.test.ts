/**
 * The container image (Dockerfile, .dockerignore) without a Docker engine, which CI does not have:
 *
 * - the build context is what .dockerignore yields from this very directory under Docker's own
 *   matching rules (@balena/dockerignore, a port of Docker's): exactly the sources, the lock file,
 *   the CLI and the SQL; never a secret (.dev.vars, .data/, .env, keys), node_modules/, dist/ or
 *   .git/, wherever they are;
 * - the Dockerfile's shape: two stages, the second running as a user that is not root, with a
 *   health check, node as PID 1 (exec form), no secret in ENV or ARG, and every file it copies
 *   in the context;
 * - what the two stages copy is enough: dist/ builds from the build stage's files alone, and the
 *   runtime stage's files start the server, pass the image's health check and stop on SIGTERM.
 */
import { spawn } from "node:child_process";
import { once } from "node:events";
import { cpSync, lstatSync, mkdirSync, readdirSync, readFileSync, symlinkSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import ignore from "@balena/dockerignore";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { cleanEnv, freePort, ROOT } from "./support.js";

// PGlite starts and migrates in process: slow on a busy machine.
vi.setConfig({ testTimeout: 240_000, hookTimeout: 60_000 });

const ignoreFile = readFileSync(join(ROOT, ".dockerignore"), "utf8");
const rules = ignore().add(ignoreFile);
/** The paths the exception patterns (`!...`) let back in: where the walk below must descend. */
const exceptions = ignoreFile
  .split("\n")
  .map((line) => line.trim())
  .filter((line) => line.startsWith("!"))
  .map((line) => line.slice(1).replace(/\/$/, ""));

/**
 * The build context Docker would send from ROOT: every file .dockerignore does not exclude. A
 * directory that is excluded and that no exception reaches into is not walked (Docker sends
 * nothing from it either); it is reported in `skipped` so the checks below can name it.
 */
function buildContext(): { files: string[]; skipped: string[] } {
  const files: string[] = [];
  const skipped: string[] = [];
  const walk = (dir: string) => {
    for (const entry of readdirSync(join(ROOT, dir), { withFileTypes: true })) {
      const path = dir ? `${dir}/${entry.name}` : entry.name;
      if (entry.isDirectory()) {
        const reached = exceptions.some((e) => e === path || e.startsWith(`${path}/`) || path.startsWith(`${e}/`));
        if (rules.ignores(path) && !reached) skipped.push(path);
        else walk(path);
      } else if (!rules.ignores(path)) {
        files.push(path);
      }
    }
  };
  walk("");
  return { files: files.sort(), skipped };
}

interface Instruction {
  keyword: string;
  args: string;
  stage: number;
}

/** The Dockerfile's instructions (continuations joined, comments and the parser directive dropped), by stage. */
function dockerfile(): Instruction[] {
  const text = readFileSync(join(ROOT, "Dockerfile"), "utf8");
  const lines = text.split("\n").filter((line) => !/^\s*#/.test(line));
  const joined = lines.join("\n").replace(/\\\n/g, " ");
  let stage = -1;
  return joined
    .split("\n")
    .map((line) => line.trim())
    .filter(Boolean)
    .map((line) => {
      const [, keyword = "", args = ""] = /^(\S+)\s*(.*)$/.exec(line) ?? [];
      if (keyword.toUpperCase() === "FROM") stage++;
      return { keyword: keyword.toUpperCase(), args: args.replace(/\s+/g, " "), stage };
    });
}

/** An exec-form (JSON array) argument, or undefined for the shell form. */
const execForm = (args: string): string[] | undefined => (args.startsWith("[") ? (JSON.parse(args) as string[]) : undefined);

const context = buildContext();

describe("the build context (.dockerignore)", () => {
  it("is the sources, the lock file, the CLI and the SQL, and nothing else", () => {
    const allowed =
      /^(package\.json|package-lock\.json|tsconfig\.json|tsconfig\.build\.json|scripts\/build\.mjs|src\/.+|bin\/.+|functions\/.+|drizzle\/[^/]+\.sql|drizzle\/meta\/_journal\.json)$/;
    expect(context.files.filter((path) => !allowed.test(path))).toEqual([]);
    for (const needed of ["package.json", "package-lock.json", "scripts/build.mjs", "src/entry/node.ts", "bin/aip-registry.mjs", "functions/90_grants.sql"]) {
      expect(context.files, needed).toContain(needed);
    }
    // Every migration the journal names is there.
    const journal = JSON.parse(readFileSync(join(ROOT, "drizzle/meta/_journal.json"), "utf8")) as { entries: { tag: string }[] };
    for (const { tag } of journal.entries) expect(context.files).toContain(`drizzle/${tag}.sql`);
    // What a clone holds besides stays out: the tests, the docs, the development tree, .git (a
    // directory in a clone, a file in a worktree).
    for (const left of ["test", "bench", "dev", "docs", "node_modules"]) expect(context.skipped, left).toContain(left);
    expect(rules.ignores(".git")).toBe(true);
  });

  it("keeps secrets and host builds out, wherever they are", () => {
    const secrets = [
      ".dev.vars",
      ".dev.vars.backup",
      ".data/auth-secret",
      ".data/dev-role-password",
      ".data/pglite/base/1/1259",
      ".env",
      ".env.production",
      "src/.env",
      "src/.dev.vars",
      "src/db/.data/auth-secret",
      "functions/.env",
      "server.pem",
      "src/tls/server.key",
      "bin/deploy.pem",
      "node_modules/pg/package.json",
      "src/node_modules/x/index.js",
      "dist/entry/node.js",
      "src/dist/client.js",
      ".git/config",
      ".npmrc",
      ".wrangler/state/v3/x",
      "bench/results/latest.json",
      "examples/fleet.yaml",
      "drizzle/schema.ts",
      "drizzle/meta/0009_snapshot.json",
    ];
    expect(secrets.filter((path) => !rules.ignores(path))).toEqual([]);
    // None of them, if present in this directory now, is in the context.
    expect(context.files.filter((path) => /(^|\/)(\.dev\.vars|\.env|\.data|node_modules|dist)(\/|$|\.)|\.(pem|key)$/.test(path))).toEqual([]);
  });
});

describe("the Dockerfile", () => {
  const instructions = dockerfile();
  const stages = instructions.filter((i) => i.keyword === "FROM");
  const final = instructions.filter((i) => i.stage === stages.length - 1);

  it("builds in one stage and runs in another, as a user that is not root, with a health check and node as PID 1", () => {
    expect(stages.length).toBe(2);
    expect(stages[0]?.args).toMatch(/^node:\S+ AS build$/);
    expect(stages[1]?.args).toMatch(/^node:\S+$/);
    // The build stage installs from the lock file and builds; the dependencies it keeps are the production ones.
    const build = instructions.filter((i) => i.stage === 0 && i.keyword === "RUN").map((i) => i.args);
    expect(build.join("\n")).toMatch(/npm ci /);
    expect(build.join("\n")).toMatch(/node scripts\/build\.mjs/);
    expect(build.join("\n")).toMatch(/npm prune --omit=dev/);

    const users = final.filter((i) => i.keyword === "USER").map((i) => i.args);
    expect(users.length).toBeGreaterThan(0);
    expect(users.at(-1)).not.toMatch(/^(root|0)(:|$)/);
    const health = final.find((i) => i.keyword === "HEALTHCHECK");
    expect(health?.args).toMatch(/ CMD \[/);
    expect(health?.args).toContain("/healthz");
    const cmd = execForm(final.find((i) => i.keyword === "CMD")?.args ?? "");
    expect(cmd).toEqual(["node", "dist/entry/node.js"]);
    expect(final.find((i) => i.keyword === "STOPSIGNAL")?.args ?? "SIGTERM").toBe("SIGTERM");
  });

  it("copies only files the context holds, never the whole context, and bakes no secret in", () => {
    const copies = instructions.filter((i) => i.keyword === "COPY" || i.keyword === "ADD");
    expect(copies.filter((i) => i.keyword === "ADD")).toEqual([]);
    for (const copy of copies) {
      const parts = copy.args.split(" ");
      if (parts.some((part) => part.startsWith("--from="))) {
        expect(parts.find((part) => part.startsWith("--from="))).toBe("--from=build");
        continue;
      }
      const sources = parts.filter((part) => !part.startsWith("--")).slice(0, -1);
      for (const source of sources) {
        expect(source, copy.args).not.toMatch(/^\.\/?$/);
        const path = source.replace(/\/$/, "");
        expect(
          context.files.some((file) => file === path || file.startsWith(`${path}/`)),
          `${copy.args}: ${source} in the context`,
        ).toBe(true);
      }
    }
    const settings = instructions.filter((i) => i.keyword === "ENV" || i.keyword === "ARG").map((i) => i.args);
    expect(settings.join(" ")).not.toMatch(/(PASSWORD|SECRET|TOKEN|DATABASE_URL|PRIVATE|_KEY)\b/i);
  });
});

describe("the image's files", () => {
  let work: string;
  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), "aip-docker-"));
  });
  afterAll(async () => {
    if (work) await rm(work, { recursive: true, force: true });
  });

  /** Copies the context's files under `from` (files or directories) into `dir`, as COPY does. */
  const copyFromContext = (dir: string, from: string[]) => {
    for (const file of context.files.filter((path) => from.some((f) => path === f || path.startsWith(`${f}/`)))) {
      mkdirSync(dirname(join(dir, file)), { recursive: true });
      cpSync(join(ROOT, file), join(dir, file));
    }
  };

  const node = (cwd: string, args: string[], env: Record<string, string> = {}) => {
    const child = spawn(process.execPath, args, { cwd, env: cleanEnv(env), stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()));
    const exited = once(child, "exit").then(([code]) => code as number | null);
    return { child, output: () => output, exited };
  };

  it("build dist/ from the build stage's files; the runtime stage's run the server, pass the health check and stop", async () => {
    // The build stage: what it copies, the dependencies (npm ci), the build.
    const build = join(work, "build");
    copyFromContext(build, ["package.json", "package-lock.json", "tsconfig.json", "tsconfig.build.json", "scripts/build.mjs", "src"]);
    symlinkSync(join(ROOT, "node_modules"), join(build, "node_modules"), "dir");
    const built = node(build, ["scripts/build.mjs", "--if-stale"]);
    expect(await built.exited, built.output()).toBe(0);

    // The runtime stage: package.json, the dependencies, dist/ from the build stage, bin/, functions/, drizzle/.
    const app = join(work, "app");
    copyFromContext(app, ["package.json", "bin", "functions", "drizzle"]);
    cpSync(join(build, "dist"), join(app, "dist"), { recursive: true });
    symlinkSync(join(ROOT, "node_modules"), join(app, "node_modules"), "dir");
    expect(lstatSync(join(app, "scripts"), { throwIfNoEntry: false })).toBeUndefined();
    const version = node(app, ["bin/aip-registry.mjs", "--version"]);
    expect(await version.exited, version.output()).toBe(0);
    expect(version.output().trim()).toBe((JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { version: string }).version);

    // The image's environment (HOST kept on loopback here), its CMD, then its HEALTHCHECK.
    const instructions = dockerfile();
    const final = instructions.filter((i) => i.stage === instructions.filter((x) => x.keyword === "FROM").length - 1);
    const env: Record<string, string> = {};
    for (const i of final.filter((x) => x.keyword === "ENV")) {
      for (const [, key, value] of i.args.matchAll(/(\w+)=(\S+)/g)) env[key as string] = value as string;
    }
    const port = await freePort();
    Object.assign(env, { HOST: "127.0.0.1", PORT: String(port), DATA_DIR: join(work, "data"), ACCESS_LOG: "false" });
    const [command, ...args] = execForm(final.find((i) => i.keyword === "CMD")?.args ?? "") as string[];
    expect(command).toBe("node");
    const server = node(app, args, env);
    try {
      const deadline = Date.now() + 200_000;
      while (!/listening on/.test(server.output()) && server.child.exitCode === null && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
      expect(server.output()).toMatch(/listening on/);
      const healthArgs = execForm(/CMD (\[.*\])$/.exec(final.find((i) => i.keyword === "HEALTHCHECK")?.args ?? "")?.[1] ?? "") as string[];
      expect(healthArgs[0]).toBe("node");
      const health = node(app, healthArgs.slice(1), env);
      expect(await health.exited, health.output()).toBe(0);
      server.child.kill("SIGTERM");
      expect(await server.exited, server.output()).toBe(0);
      // With the server gone, the same check fails: it does check.
      const down = node(app, healthArgs.slice(1), env);
      expect(await down.exited).toBe(1);
    } finally {
      if (server.child.exitCode === null) server.child.kill("SIGKILL");
    }
  });
});
