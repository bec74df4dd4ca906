/**
 * The installable SQL of this package, read from disk (Node only): the numbered migrations that
 * drizzle-kit generated in drizzle/ and the function set in functions/. Checksums are SHA-256 of
 * the exact file text; the function set's checksum covers every file name and body in order, and
 * names the schema the set is installed in (functionSetName), so two builds with different
 * functions never share one.
 */
import { createHash } from "node:crypto";
import { readFile, readdir } from "node:fs/promises";
import { fileURLToPath } from "node:url";

export interface Migration {
  /** 1-based: drizzle's journal index + 1. */
  version: number;
  name: string;
  sql: string;
  checksum: string;
  /**
   * `expand` (the default): additive, applied by every `migrate`; the previous release's functions
   * keep working on its result. `contract`: removes what only older builds need, applied by
   * `migrate --finalize` once no such build is in use; marked by a first line
   * `-- aip:contract supports-from=<version>`: builds whose schema version is below that cannot
   * serve the database once it ran (docs/upgrades.md).
   */
  kind: "expand" | "contract";
  /** For a contract migration: the lowest build schema version that still works after it. */
  supportsFrom?: number;
}

export interface FunctionSet {
  files: { name: string; sql: string }[];
  checksum: string;
  /** The schema this set is installed in: `aip_fn_` and the checksum's first 12 hex digits. */
  name: string;
}

/** A build's schema version: its newest expand migration (what it needs the database to have). */
export const schemaVersionOf = (migrations: readonly Migration[]) => Math.max(0, ...migrations.filter((m) => m.kind === "expand").map((m) => m.version));

/** The schema a function set with this checksum is installed in. */
const functionSetName = (checksum: string) => `aip_fn_${checksum.slice(0, 12)}`;

const CONTRACT_MARK = /^-- aip:contract supports-from=(\d+)\s*$/m;

/** A migration's kind, from its first line. */
export function migrationKind(sql: string): Pick<Migration, "kind" | "supportsFrom"> {
  const firstLine = sql.split("\n", 1)[0] ?? "";
  const mark = CONTRACT_MARK.exec(firstLine);
  return mark ? { kind: "contract", supportsFrom: Number(mark[1]) } : { kind: "expand" };
}

export const packageRoot = fileURLToPath(new URL("../../", import.meta.url));
const sha256 = (text: string) => createHash("sha256").update(text, "utf8").digest("hex");

export async function loadMigrations(root = packageRoot): Promise<Migration[]> {
  const journal = JSON.parse(await readFile(`${root}drizzle/meta/_journal.json`, "utf8")) as {
    entries: { idx: number; tag: string }[];
  };
  return Promise.all(
    journal.entries.map(async (entry) => {
      const sql = await readFile(`${root}drizzle/${entry.tag}.sql`, "utf8");
      return { version: entry.idx + 1, name: entry.tag, sql, checksum: sha256(sql), ...migrationKind(sql) };
    }),
  );
}

export async function loadFunctionSet(root = packageRoot): Promise<FunctionSet> {
  const names = (await readdir(`${root}functions`)).filter((name) => name.endsWith(".sql")).sort();
  return functionSetOf(await Promise.all(names.map(async (name) => ({ name, sql: await readFile(`${root}functions/${name}`, "utf8") }))));
}

/** The set these files make, in file-name order: its checksum names its schema. */
export function functionSetOf(files: FunctionSet["files"]): FunctionSet {
  const checksum = sha256(files.map((file) => `${file.name}\n${file.sql}`).join("\n"));
  return { files, checksum, name: functionSetName(checksum) };
}
