/**
 * functions/ as committed at another commit, installed as this build's function set: the A side of
 * bench/ab.ts, bench/profile-routing.ts and bench/instructions.ts (--functions-at).
 */
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { FUNCTION_SET } from "../../src/db/schema-version.js";

const FUNCTIONS_DIR = fileURLToPath(new URL("../../functions/", import.meta.url));

/**
 * SQL that replaces this build's set (the schema the bench's registries call) with functions/ as
 * committed at `commit`. Sets from before function sets named `public` in their search paths: they
 * get the set's own. Grants are every function of the set to both runtime roles (an older grants
 * file names other roles): grants cost nothing per call.
 */
export function functionSetAt(commit: string): string {
  const git = (...a: string[]) => execFileSync("git", ["-C", FUNCTIONS_DIR, ...a], { encoding: "utf8", maxBuffer: 64 << 20 });
  const files = git("ls-tree", "--name-only", "--full-name", commit, ".")
    .split("\n")
    .filter((f) => f.endsWith(".sql") && !f.endsWith("90_grants.sql"))
    .sort();
  const sources = files.map((f) => git("show", `${commit}:${f}`).replaceAll("SET search_path = pg_catalog, public, pg_temp", "SET search_path FROM CURRENT"));
  return [
    // An older set may name bookkeeping this database never had (0.1.0's status function reads
    // aip_schema_functions): the bench calls only the routing and catalog entry points.
    `DROP SCHEMA ${FUNCTION_SET} CASCADE; CREATE SCHEMA ${FUNCTION_SET}; SET search_path = ${FUNCTION_SET}, public, pg_temp; SET check_function_bodies = off;`,
    ...sources,
    `DO $$
     DECLARE r aip_schema_roles; f regprocedure;
     BEGIN
       SELECT * INTO STRICT r FROM aip_schema_roles;
       EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I, %I', current_schema(), r.data_role, r.control_role);
       FOR f IN SELECT p.oid::regprocedure FROM pg_proc p WHERE p.pronamespace = current_schema()::regnamespace LOOP
         EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I, %I', f, r.data_role, r.control_role);
       END LOOP;
     END $$;
     RESET search_path; RESET check_function_bodies;`,
  ].join("\n");
}
