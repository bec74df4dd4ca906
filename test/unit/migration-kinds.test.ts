/**
 * What the migrator reads off names and files: a migration's kind from its first line (a contract
 * migration waits for `migrate --finalize`), and a database's own group role names.
 */
import { describe, expect, it } from "vitest";
import { registryRoleNames } from "../../src/db/migrate.js";
import { loadMigrations, migrationKind } from "../../src/db/sql-files.js";

describe("migration kinds", () => {
  it("are expand unless the first line marks a contract migration with the lowest build version it supports", () => {
    expect(migrationKind("ALTER TABLE t ADD COLUMN c text")).toEqual({ kind: "expand" });
    expect(migrationKind("-- aip:contract supports-from=12\nALTER TABLE t DROP COLUMN c")).toEqual({ kind: "contract", supportsFrom: 12 });
    // Only the first line counts, and only the exact mark.
    expect(migrationKind("SELECT 1;\n-- aip:contract supports-from=12")).toEqual({ kind: "expand" });
    expect(migrationKind("-- aip:contract\nALTER TABLE t DROP COLUMN c")).toEqual({ kind: "expand" });
  });

  it("of every shipped migration are expand so far (none needs a finalize yet)", async () => {
    expect((await loadMigrations()).filter((m) => m.kind !== "expand")).toEqual([]);
  });
});

describe("a database's group roles", () => {
  it("are named after a plain database name, never as 0.1.0's shared roles", () => {
    expect(registryRoleNames("neondb")).toEqual({ data: "neondb_aip_data", control: "neondb_aip_control" });
    expect(registryRoleNames("aip_registry")).toEqual({ data: "aip_registry_aip_data", control: "aip_registry_aip_control" });
    expect(registryRoleNames("registry").data).not.toBe("aip_registry_data");
  });

  it("carry a digest for a name that is not a plain lower-case identifier, within PostgreSQL's 63 bytes", () => {
    const odd = registryRoleNames("Registry-Prod");
    expect(odd.data).toMatch(/^registry_prod_[0-9a-f]{8}_aip_data$/);
    expect(registryRoleNames("registry-prod").data).not.toBe(odd.data);
    const long = registryRoleNames("x".repeat(63));
    expect(Buffer.byteLength(long.control)).toBeLessThanOrEqual(63);
  });
});
