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

/** 0.1.0's last migration: every later one binds the expand/contract rule (docs/upgrades.md). */
const BASE_RELEASE_VERSION = 10;

/** What an expand migration may not do to what the previous release reads or writes. */
const CONTRACTING: [RegExp, string][] = [
  [/\bDROP\s+(TABLE|COLUMN|VIEW|INDEX)\b/i, "drops something"],
  [/\bRENAME\b/i, "renames something"],
  [/\bALTER\s+COLUMN\s+\S+\s+(SET\s+DATA\s+)?TYPE\b/i, "retypes a column"],
  [/\bSET\s+NOT\s+NULL\b/i, "makes a column NOT NULL"],
];

/** An ADD COLUMN clause that is NOT NULL with no DEFAULT (the previous release's inserts would fail). */
const addsRequiredColumn = (sql: string) =>
  sql
    .split(";")
    .flatMap((statement) => statement.split(/(?=\bADD\s+COLUMN\b)/i).slice(1))
    .some((clause) => /\bNOT\s+NULL\b/i.test(clause) && !/\bDEFAULT\b/i.test(clause));

/** Everything an expand migration does that it may not (docs/upgrades.md). */
const contracting = (sql: string) => [
  ...CONTRACTING.filter(([pattern]) => pattern.test(sql)).map(([, what]) => what),
  ...(addsRequiredColumn(sql) ? ["adds a NOT NULL column without a default"] : []),
];

describe("expand migrations after the base release", () => {
  it("contract nothing the previous release uses (the rule of docs/upgrades.md; contract migrations are marked)", async () => {
    const broken = (await loadMigrations())
      .filter((m) => m.version > BASE_RELEASE_VERSION && m.kind === "expand")
      .flatMap((m) => {
        return contracting(m.sql.replace(/--[^\n]*/g, "")).map((what) => `${m.name} ${what}`);
      });
    expect(broken).toEqual([]);
  });

  it("the check recognises what it refuses", () => {
    const hits = contracting;
    expect(hits("ALTER TABLE t DROP COLUMN c")).toEqual(["drops something"]);
    expect(hits("ALTER TABLE t ADD COLUMN c text NOT NULL")).toEqual(["adds a NOT NULL column without a default"]);
    expect(hits("ALTER TABLE t ADD COLUMN c text NOT NULL DEFAULT ''")).toEqual([]);
    expect(hits('ALTER TABLE "t" ADD COLUMN "c" integer DEFAULT 30 NOT NULL;--> statement-breakpoint')).toEqual([]);
    expect(hits("ALTER TABLE t ADD COLUMN a text DEFAULT '', ADD COLUMN b text NOT NULL")).toEqual(["adds a NOT NULL column without a default"]);
    expect(hits("ALTER TABLE t ALTER COLUMN c TYPE bigint")).toEqual(["retypes a column"]);
    expect(hits("CREATE TABLE t (c text NOT NULL); CREATE INDEX IF NOT EXISTS i ON t (c)")).toEqual([]);
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
