/**
 * This package's version, from the nearest package.json named `aip-registry` above this module:
 * found the same way whether it runs from src/ (tsx) or from compiled output. Read once.
 */
import { readFileSync } from "node:fs";

let version: string | undefined;

export function packageVersion(): string {
  version ??= find(new URL(".", import.meta.url));
  return version;
}

function find(from: URL): string {
  for (let dir = from; ; dir = new URL("..", dir)) {
    try {
      const manifest = JSON.parse(readFileSync(new URL("package.json", dir), "utf8")) as { name?: string; version?: string };
      if (manifest.name === "aip-registry" && manifest.version) return manifest.version;
    } catch {
      // No package.json here: look further up.
    }
    if (dir.pathname === "/") return "unknown";
  }
}
