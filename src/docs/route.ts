/**
 * GET /docs: the API reference (Swagger UI) over /openapi.json.
 *
 * `bundled` (the Node server): the page loads Swagger UI from this server, which serves the files
 * of the installed, pinned `swagger-ui-dist` package, so the page works offline. `cdn` (the
 * Worker, whose bundle budget cannot carry 1.9 MB of assets): the page loads the same pinned
 * files from jsDelivr. Either way every asset carries its SHA-384 integrity, and the content
 * security policy (like the dashboard's) runs only the page's nonce-bearing scripts and styles
 * and lets it talk to its own origin only.
 */
import type { OpenAPIHono } from "@hono/zod-openapi";
import type { AppEnv } from "../http/env.js";
import { BUNDLED_ASSET_PREFIX, CDN_ASSET_PREFIX, SWAGGER_UI_FILES, readBundledAsset, type SwaggerUiFile } from "./assets.js";

export type DocsAssets = "bundled" | "cdn";

/** The paths this module serves besides /docs (the OpenAPI document does not describe them). */
export const DOCS_ASSET_PATHS = Object.keys(SWAGGER_UI_FILES).map((file) => `${BUNDLED_ASSET_PREFIX}${file}`);

function nonce(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return btoa(String.fromCharCode(...bytes));
}

function docsCsp(nonce: string): string {
  return [
    "default-src 'none'",
    `script-src 'nonce-${nonce}'`,
    `style-src 'nonce-${nonce}'`,
    "connect-src 'self'",
    "img-src 'self' data:",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join("; ");
}

function docsPage(nonce: string, assets: DocsAssets): string {
  const prefix = assets === "bundled" ? BUNDLED_ASSET_PREFIX : CDN_ASSET_PREFIX;
  const attributes = (file: SwaggerUiFile) => `integrity="${SWAGGER_UI_FILES[file].integrity}" crossorigin="anonymous" nonce="${nonce}"`;
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>AIP registry API</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="${prefix}swagger-ui.css" ${attributes("swagger-ui.css")}>
</head>
<body>
<div id="swagger-ui"></div>
<script src="${prefix}swagger-ui-bundle.js" ${attributes("swagger-ui-bundle.js")}></script>
<script nonce="${nonce}">
if (typeof SwaggerUIBundle === "function") {
  // validatorUrl null: Swagger UI would otherwise send the document to a public validator.
  window.ui = SwaggerUIBundle({ url: "/openapi.json", dom_id: "#swagger-ui", deepLinking: true, validatorUrl: null });
} else {
  document.getElementById("swagger-ui").textContent = "The API reference script did not load. The document itself is at /openapi.json.";
}
</script>
</body>
</html>`;
}

export function registerDocsRoutes(app: OpenAPIHono<AppEnv>, assets: DocsAssets): void {
  app.get("/docs", (c) => {
    const value = nonce();
    c.header("content-security-policy", docsCsp(value));
    c.header("cache-control", "no-store");
    c.header("x-content-type-options", "nosniff");
    return c.html(docsPage(value, assets), 200);
  });
  if (assets !== "bundled") return;
  for (const [file, { contentType }] of Object.entries(SWAGGER_UI_FILES) as [SwaggerUiFile, (typeof SWAGGER_UI_FILES)[SwaggerUiFile]][]) {
    app.get(`${BUNDLED_ASSET_PREFIX}${file}`, async (c) => {
      const bytes = await readBundledAsset(file);
      return c.body(bytes as Uint8Array<ArrayBuffer>, 200, {
        "content-type": contentType,
        // The version is in the path: these bytes never change.
        "cache-control": "public, max-age=31536000, immutable",
        "x-content-type-options": "nosniff",
      });
    });
  }
}
