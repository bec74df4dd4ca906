/**
 * Writes the OpenAPI document the Node server publishes at /openapi.json, without a database:
 *
 *   npm run openapi                 (to dist/openapi.json)
 *   npm run lint:openapi            (that file through Redocly's `recommended` ruleset)
 */
import { mkdir, writeFile } from "node:fs/promises";
import { dirname, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { createApp } from "../src/app.js";
import { createAuthenticator } from "../src/http/auth.js";
import { Registry } from "../src/registry/registry.js";

/** The document of a Node server with its defaults (metrics behind a token). */
export async function openApiDocument(): Promise<string> {
  const registry = new Registry({ data: { query: () => Promise.reject(new Error("the document needs no database")) } });
  const app = createApp({ registry, authenticator: createAuthenticator({ hs256Secret: "x".repeat(32) }), metrics: {} });
  return (await app.request("/openapi.json")).text();
}

export async function writeOpenApiDocument(path: string): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  await writeFile(path, `${JSON.stringify(JSON.parse(await openApiDocument()), null, 2)}\n`);
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const path = resolve(process.argv[2] ?? "dist/openapi.json");
  await writeOpenApiDocument(path);
  console.log(`wrote ${path}`);
}
