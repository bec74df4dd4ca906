/**
 * GET /docs and its assets without a browser (test/browser/pages.test.ts renders them): the page
 * loads the pinned Swagger UI files, each with its SHA-384 integrity, under a nonce-only content
 * security policy; the Node server serves those files from the installed package (so /docs works
 * offline), the Worker's mode points at the same files on the CDN.
 */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { describe, expect, it } from "vitest";
import { createApp } from "../../src/app.js";
import { BUNDLED_ASSET_PREFIX, CDN_ASSET_PREFIX, SWAGGER_UI_FILES, SWAGGER_UI_VERSION, type SwaggerUiFile } from "../../src/docs/assets.js";
import { createAuthenticator } from "../../src/http/auth.js";
import { Registry } from "../../src/registry/registry.js";
import { TEST_SECRET } from "../support/http.js";

const require = createRequire(import.meta.url);
const FILES = Object.keys(SWAGGER_UI_FILES) as SwaggerUiFile[];
const packageFile = (file: string) => readFileSync(require.resolve(`swagger-ui-dist/${file}`));
/** Literal text inside a RegExp (nonces are base64: `+` and `/`). */
const literal = (text: string) => text.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
const sri = (bytes: Uint8Array) => `sha384-${createHash("sha384").update(bytes).digest("base64")}`;

// No database: neither the page nor its assets touch it.
const registry = new Registry({ data: { query: () => Promise.reject(new Error("no database in this test")) } });
const appWith = (docsAssets?: "bundled" | "cdn") =>
  createApp({ registry, authenticator: createAuthenticator({ hs256Secret: TEST_SECRET }), ...(docsAssets ? { docsAssets } : {}) });

describe("the pinned Swagger UI", () => {
  it("is the installed package's version, which package.json pins exactly", () => {
    const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { dependencies: Record<string, string> };
    expect(pkg.dependencies["swagger-ui-dist"]).toBe(SWAGGER_UI_VERSION);
    expect((require("swagger-ui-dist/package.json") as { version: string }).version).toBe(SWAGGER_UI_VERSION);
  });

  it.each(FILES)("%s has the integrity the page declares", (file) => {
    expect(sri(packageFile(file))).toBe(SWAGGER_UI_FILES[file].integrity);
  });
});

async function page(app: ReturnType<typeof appWith>) {
  const response = await app.request("/docs");
  expect(response.status).toBe(200);
  expect(response.headers.get("content-type")).toMatch(/^text\/html/);
  expect(response.headers.get("cache-control")).toBe("no-store");
  expect(response.headers.get("x-content-type-options")).toBe("nosniff");
  const csp = response.headers.get("content-security-policy") ?? "";
  const nonce = /script-src 'nonce-([A-Za-z0-9+/=]+)'/.exec(csp)?.[1];
  expect(nonce, csp).toBeDefined();
  // Only the page's own nonce-bearing scripts and styles; nothing else is fetched but its origin.
  expect(csp).toBe(
    `default-src 'none'; script-src 'nonce-${nonce}'; style-src 'nonce-${nonce}'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'`,
  );
  const html = await response.text();
  const scripts = [...html.matchAll(/<script\b([^>]*)>/g)].map((m) => m[1] as string);
  for (const attributes of scripts) expect(attributes).toContain(`nonce="${nonce}"`);
  return { html, nonce };
}

describe("GET /docs on Node (bundled assets)", () => {
  const app = appWith();

  it("loads the server's own copies of the pinned files, each with its integrity, and reads /openapi.json", async () => {
    const { html, nonce } = await page(app);
    for (const file of FILES) {
      const tag = new RegExp(
        `(?:src|href)="${literal(`${BUNDLED_ASSET_PREFIX}${file}`)}" integrity="([^"]+)" crossorigin="anonymous" nonce="${literal(nonce as string)}"`,
      ).exec(html);
      expect(tag?.[1], file).toBe(SWAGGER_UI_FILES[file].integrity);
    }
    expect(html).not.toMatch(/https?:\/\//);
    expect(html).toContain('url: "/openapi.json"');
    expect(html).toContain("validatorUrl: null");
  });

  it("gives every response its own nonce", async () => {
    expect((await page(app)).nonce).not.toBe((await page(app)).nonce);
  });

  it.each(FILES)("serves %s byte for byte from the package, cacheable forever", async (file) => {
    const response = await app.request(`${BUNDLED_ASSET_PREFIX}${file}`);
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toBe(SWAGGER_UI_FILES[file].contentType);
    expect(response.headers.get("cache-control")).toBe("public, max-age=31536000, immutable");
    expect(Buffer.from(await response.arrayBuffer()).equals(packageFile(file))).toBe(true);
  });

  it("serves nothing else of the package", async () => {
    for (const path of [`${BUNDLED_ASSET_PREFIX}index.html`, `${BUNDLED_ASSET_PREFIX}../package.json`, "/docs/assets/swagger-ui-dist@5.0.0/swagger-ui.css"]) {
      expect((await app.request(path)).status, path).toBe(404);
    }
  });
});

describe("GET /docs in the Worker's mode (CDN assets)", () => {
  const app = appWith("cdn");

  it("loads the pinned files from the CDN, each with its integrity, and serves no copies", async () => {
    const { html, nonce } = await page(app);
    expect(CDN_ASSET_PREFIX).toBe(`https://cdn.jsdelivr.net/npm/swagger-ui-dist@${SWAGGER_UI_VERSION}/`);
    for (const file of FILES) {
      const tag = new RegExp(
        `(?:src|href)="${literal(`${CDN_ASSET_PREFIX}${file}`)}" integrity="([^"]+)" crossorigin="anonymous" nonce="${literal(nonce as string)}"`,
      ).exec(html);
      expect(tag?.[1], file).toBe(SWAGGER_UI_FILES[file].integrity);
    }
    expect((await app.request(`${BUNDLED_ASSET_PREFIX}swagger-ui.css`)).status).toBe(404);
  });
});
