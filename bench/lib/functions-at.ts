/** functions/ as committed at another commit: the A side of bench/ab.ts and bench/profile-routing.ts (--functions-at). */
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";

const FUNCTIONS_DIR = fileURLToPath(new URL("../../functions/", import.meta.url));

/** functions/*.sql as committed at `commit`, in install order. */
export function functionSources(commit: string): string[] {
  const git = (...a: string[]) => execFileSync("git", ["-C", FUNCTIONS_DIR, ...a], { encoding: "utf8", maxBuffer: 64 << 20 });
  const files = git("ls-tree", "--name-only", "--full-name", commit, ".")
    .split("\n")
    .filter((f) => f.endsWith(".sql"))
    .sort();
  return files.map((f) => git("show", `${commit}:${f}`));
}
