/**
 * The API reference's browser assets: Swagger UI from the npm package `swagger-ui-dist`, pinned
 * to one version (package.json pins the same one exactly) and to the SHA-384 of each file. Every
 * <script> and <link> the /docs page emits carries that integrity, so a browser runs these exact
 * bytes or nothing, whether the Node server serves them from the installed package or a Worker
 * points at the public CDN (test/unit/docs-assets.test.ts checks the digests against the package).
 */
export const SWAGGER_UI_VERSION = "5.35.0";

export const SWAGGER_UI_FILES = {
  "swagger-ui-bundle.js": {
    contentType: "text/javascript; charset=utf-8",
    integrity: "sha384-gjRm0bEPMeTmMh5jT2cHccIwCUZSTd8YC+j0d0sXw0MdGEfScduGpSyF3ZSSLkX9",
  },
  "swagger-ui.css": {
    contentType: "text/css; charset=utf-8",
    integrity: "sha384-WlYgdmXYOOBWL5apwjDEZwN+U3HmXSSu5R6V5aGxEcf7z+KuRNwBhoxKVN1i3D5I",
  },
} as const;

export type SwaggerUiFile = keyof typeof SWAGGER_UI_FILES;

/** Where the Node server serves the files: the version is in the path, so they cache forever. */
export const BUNDLED_ASSET_PREFIX = `/docs/assets/swagger-ui-dist@${SWAGGER_UI_VERSION}/`;

/** The same files on jsDelivr, which serves npm package files byte for byte. */
export const CDN_ASSET_PREFIX = `https://cdn.jsdelivr.net/npm/swagger-ui-dist@${SWAGGER_UI_VERSION}/`;

interface NodeBuiltins {
  readFile(path: string): Promise<Uint8Array>;
  resolve(specifier: string): string;
}

/**
 * Node's file system and module resolution, reached through `process.getBuiltinModule` (Node
 * 20.16+) rather than an import: the Worker bundles this module too and must not contain `node:`
 * imports; it never calls this (it serves the CDN mode).
 */
function nodeBuiltins(): NodeBuiltins {
  const process = (globalThis as { process?: { getBuiltinModule?: (id: string) => unknown } }).process;
  if (typeof process?.getBuiltinModule !== "function") throw new Error("the bundled API-reference assets need Node (process.getBuiltinModule)");
  const fs = process.getBuiltinModule("node:fs/promises") as { readFile(path: string): Promise<Uint8Array> };
  const module = process.getBuiltinModule("node:module") as { createRequire(from: string): { resolve(specifier: string): string } };
  // Workers' ImportMeta type has no `url`; Node's always does.
  const require = module.createRequire((import.meta as { url: string }).url);
  return { readFile: (path) => fs.readFile(path), resolve: (specifier) => require.resolve(specifier) };
}

const loaded = new Map<SwaggerUiFile, Promise<Uint8Array>>();

/** One file of the installed package, read once per process. */
export function readBundledAsset(file: SwaggerUiFile): Promise<Uint8Array> {
  let bytes = loaded.get(file);
  if (!bytes) {
    bytes = (async () => {
      const { readFile, resolve } = nodeBuiltins();
      return readFile(resolve(`swagger-ui-dist/${file}`));
    })();
    // A failed read (package missing) is retried by the next request, not cached.
    bytes.catch(() => loaded.delete(file));
    loaded.set(file, bytes);
  }
  return bytes;
}
