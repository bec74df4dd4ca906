/**
 * Earlier builds of this registry, for the upgrade tests: the previous release (releases.json),
 * checked out from git history and built, and this checkout copied with an edit (another build of
 * the same release, as a hotfix makes). Each gets this checkout's node_modules (a symlink): the
 * dependencies a release pins are what its lock file had, and the tests say so if one is missing.
 */
import { execFileSync } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { createHash } from "node:crypto";
import { tmpdir, userInfo } from "node:os";
import { join } from "node:path";
import { packageRoot } from "../../src/db/sql-files.js";

export interface Build {
  /** Its version (package.json). */
  version: string;
  /** Where it is checked out and built (dist/ beside src/). */
  dir: string;
  /** node dist/entry/node.js of this build. */
  server: string;
  /** node bin/aip-registry.mjs of this build. */
  cli: string;
}

interface Release {
  version: string;
  commit: string;
}

const git = (...args: string[]) =>
  execFileSync("git", ["-C", packageRoot, ...args], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], maxBuffer: 1 << 30 });

const buildAt = (dir: string): Build => ({
  version: (JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) as { version: string }).version,
  dir,
  server: join(dir, "dist/entry/node.js"),
  cli: join(dir, "bin/aip-registry.mjs"),
});

/** Builds the checkout at `dir` with this checkout's node_modules (its own build script). */
function prepare(dir: string): void {
  symlinkSync(join(packageRoot, "node_modules"), join(dir, "node_modules"), "dir");
  execFileSync(process.execPath, [join(dir, "scripts/build.mjs"), "--if-stale"], { cwd: dir, stdio: "pipe" });
}

/**
 * `fill` makes a checkout in a fresh directory, which is then built and moved to `target`
 * (atomically: two test files asking at once both get a complete one).
 */
function materialize(target: string, fill: (dir: string) => void): Build {
  if (!existsSync(join(target, ".complete"))) {
    const staging = mkdtempSync(`${target}.staging-`);
    try {
      fill(staging);
      prepare(staging);
      writeFileSync(join(staging, ".complete"), "");
      try {
        renameSync(staging, target);
      } catch {
        // Another test file got there first with the same content.
      }
    } finally {
      rmSync(staging, { recursive: true, force: true });
    }
  }
  return buildAt(target);
}

/** The newest release in releases.json other than this checkout's version. */
export function previous(): Release {
  const { releases } = JSON.parse(readFileSync(join(packageRoot, "releases.json"), "utf8")) as { releases: Release[] };
  const { version } = JSON.parse(readFileSync(join(packageRoot, "package.json"), "utf8")) as { version: string };
  const release = releases.filter((r) => r.version !== version).at(-1);
  if (!release) throw new Error("releases.json names no release before this one");
  return release;
}

/** Why the previous release cannot be read from git history (an archive, a shallow clone), or undefined. */
export function previousReleaseUnavailable(): string | undefined {
  const release = previous();
  try {
    git("cat-file", "-e", `${release.commit}^{commit}`);
    return undefined;
  } catch {
    return `release ${release.version} (commit ${release.commit}) is not in this checkout's git history (an archive or a shallow clone)`;
  }
}

/**
 * The previous release, checked out from git history and built; or why it cannot be (this
 * checkout has no history: an archive, or a shallow clone without that commit).
 */
export function previousRelease(): Build | { unavailable: string } {
  const release = previous();
  const unavailable = previousReleaseUnavailable();
  if (unavailable) return { unavailable };
  // Per checkout (its node_modules are linked in) and per user (another user's copy may link a private one).
  const checkout = createHash("sha256").update(`${packageRoot}\n${userInfo().uid}`).digest("hex").slice(0, 8);
  return materialize(join(tmpdir(), `aip-release-${release.version}-${release.commit.slice(0, 12)}-${checkout}`), (dir) => {
    execFileSync("sh", ["-c", `git -C "${packageRoot}" archive "${release.commit}" | tar -x -C "${dir}"`], { stdio: "pipe" });
  });
}

/** The files a build is made of (what `npm start` and the CLI need), copied from this checkout. */
const BUILD_FILES = ["package.json", "src", "functions", "drizzle", "scripts", "bin", "tsconfig.json", "tsconfig.build.json", "wrangler.toml", "dev"];

/**
 * This checkout copied and changed by `edit` (paths relative to the copy): another build of this
 * release, with its own function set. `tag` names the copy (one per kind of edit).
 */
export function editedBuild(tag: string, edit: (dir: string) => void): Build {
  return materialize(join(tmpdir(), `aip-build-${tag}-${process.pid}`), (dir) => {
    for (const file of BUILD_FILES) cpSync(join(packageRoot, file), join(dir, file), { recursive: true });
    edit(dir);
    // What the hidden rollout check runs in its clone: the generated schema version, then the build.
    execFileSync(process.execPath, [join(packageRoot, "node_modules/tsx/dist/cli.mjs"), join(dir, "scripts/generate-schema-version.ts")], {
      cwd: dir,
      stdio: "pipe",
    });
  });
}

/** The function set a build calls (its generated src/db/schema-version.ts). */
export function functionSetOf(build: Build): string | null {
  const text = readFileSync(join(build.dir, "src/db/schema-version.ts"), "utf8");
  return /FUNCTION_SET = "([^"]+)"/.exec(text)?.[1] ?? null;
}
