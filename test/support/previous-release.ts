/**
 * The previous release's SQL functions beside this one's, on the same tables: what a database
 * serves during a rolling upgrade (TEAM.md rule 2, issue 32), when servers of the previous release
 * keep calling their functions while this release's migration has run and its servers call the
 * new ones.
 *
 * installPreviousRelease() installs functions/ as committed at PREVIOUS_RELEASE into a schema of
 * its own (PREVIOUS_SCHEMA): every entry point's search_path gets that schema before public, so
 * an old entry point calls the old helpers and reaches the shared tables in public. (The lead's
 * general mechanism, one schema per build, installs them the same way.) previousRegistry() is a
 * Registry whose calls go to those functions, as an old server's would.
 */
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import type pg from "pg";
import { pgExecutor } from "../../src/db/pg.js";
import { Registry } from "../../src/registry/registry.js";
import { previous } from "./releases.js";

/** The release before this one (releases.json), and the schema its functions go to here. */
const PREVIOUS_RELEASE = previous().commit;
const PREVIOUS_SCHEMA = `aip_release_${previous().version.replace(/\W/g, "_")}`;

const REPOSITORY = fileURLToPath(new URL("../..", import.meta.url));

/** functions/*.sql at PREVIOUS_RELEASE, in install order; the grants file is this release's business. */
function previousFunctionFiles(): { name: string; sql: string }[] {
  const git = (...args: string[]) => {
    try {
      return execFileSync("git", ["-C", REPOSITORY, ...args], { encoding: "utf8", maxBuffer: 64 << 20, stdio: ["ignore", "pipe", "pipe"] });
    } catch (error) {
      throw new Error(
        `the previous release's functions are read from git (commit ${PREVIOUS_RELEASE}), which this checkout cannot give: ${(error as Error).message}`,
      );
    }
  };
  return git("ls-tree", "--name-only", PREVIOUS_RELEASE, "functions/")
    .split("\n")
    .filter((name) => name.endsWith(".sql") && !name.endsWith("90_grants.sql"))
    .sort()
    .map((name) => ({ name, sql: git("show", `${PREVIOUS_RELEASE}:${name}`) }));
}

/** Installs the previous release's functions into PREVIOUS_SCHEMA (as the owner). */
export async function installPreviousRelease(owner: pg.Pool): Promise<void> {
  const client = await owner.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS ${PREVIOUS_SCHEMA} CASCADE; CREATE SCHEMA ${PREVIOUS_SCHEMA}`);
    // Unqualified CREATE FUNCTION goes to the first schema of the path. Bodies are not checked:
    // 0.1.0's schema status reads bookkeeping a database made by this release does not have.
    await client.query(`SET search_path = ${PREVIOUS_SCHEMA}, public; SET check_function_bodies = off`);
    for (const file of previousFunctionFiles()) {
      const sql = file.sql.replaceAll("SET search_path = pg_catalog, public, pg_temp", `SET search_path = pg_catalog, ${PREVIOUS_SCHEMA}, public, pg_temp`);
      try {
        await client.query(sql);
      } catch (error) {
        throw new Error(`${PREVIOUS_RELEASE}:${file.name}: ${(error as Error).message}`);
      }
    }
  } finally {
    await client.query("RESET search_path; RESET check_function_bodies").catch(() => {});
    client.release();
  }
}

/**
 * A registry as a server of the previous release has it, over the owner's pool (no grants needed):
 * its calls go to the previous release's functions (the entry points this tests kept their
 * signatures).
 */
export function previousRegistry(owner: pg.Pool): Registry {
  const executor = pgExecutor(owner);
  return new Registry({ data: executor, control: executor, functionSet: PREVIOUS_SCHEMA });
}
