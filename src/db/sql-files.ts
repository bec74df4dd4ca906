/**
 * The installable SQL of this package, read from disk (Node only): the numbered migrations that
 * drizzle-kit generated in drizzle/ and the function set in functions/. Checksums are SHA-256 of
 * the exact file text; the function set's checksum covers every file name and body in order.
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
}

export interface FunctionSet {
  files: { name: string; sql: string }[];
  checksum: string;
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
      return { version: entry.idx + 1, name: entry.tag, sql, checksum: sha256(sql) };
    }),
  );
}

export async function loadFunctionSet(root = packageRoot): Promise<FunctionSet> {
  const names = (await readdir(`${root}functions`)).filter((name) => name.endsWith(".sql")).sort();
  const files = await Promise.all(names.map(async (name) => ({ name, sql: await readFile(`${root}functions/${name}`, "utf8") })));
  const checksum = sha256(files.map((file) => `${file.name}\n${file.sql}`).join("\n"));
  return { files, checksum };
}
