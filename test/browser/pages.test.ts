/**
 * The two pages people open, rendered by headless Chromium (Debian's `chromium`, driven by
 * playwright-core) from a real Node server: the fleet dashboard, fed by /v1/fleet/status with a
 * token kept in sessionStorage, and the /docs API reference (Swagger UI), each checked for content
 * and captured as a screenshot. Without Chromium the file is skipped with a warning
 * (test/support/browser.ts); REQUIRE_BROWSER=1 makes that a failure.
 */
import { readFileSync } from "node:fs";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { serve, type ServerType } from "@hono/node-server";
import { chromium, type BrowserContext, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { createApp } from "../../src/app.js";
import { CDN_ASSET_PREFIX } from "../../src/docs/assets.js";
import { createAuthenticator } from "../../src/http/auth.js";
import { mintToken } from "../../src/http/tokens.js";
import { startServer, type RunningServer } from "../../src/entry/node.js";
import { browserGate } from "../support/browser.js";
import { useTestDatabase } from "../support/database.js";
import { publishSimpleFleet, requestId, hostPrincipal } from "../../fixtures/records.js";
import { TEST_SECRET } from "../support/http.js";

vi.setConfig({ testTimeout: 120_000, hookTimeout: 120_000 });

const gate = browserGate();
if (!gate.run) {
  const banner = "#".repeat(100);
  console.warn(`\n${banner}\n# ${gate.reason}\n${banner}\n`);
}
const CHROMIUM_ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

const db = useTestDatabase();
let server: RunningServer;
let context: BrowserContext;
let dir: string;

async function expectScreenshot(page: Page, name: string): Promise<void> {
  const path = join(dir, `${name}.png`);
  await page.screenshot({ path, fullPage: true });
  const png = await readFile(path);
  expect(png.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])), "PNG signature").toBe(true);
  expect(png.subarray(12, 16).toString("ascii")).toBe("IHDR");
  expect(png.readUInt32BE(16), "width").toBe(1280);
  expect(png.readUInt32BE(20), "height").toBeGreaterThanOrEqual(600);
  // A blank or near-blank page compresses to a few KB; a rendered one does not.
  expect(png.length, `${name}.png size`).toBeGreaterThan(20_000);
}

beforeAll(async () => {
  if (!gate.run) return;
  dir = await mkdtemp(join(tmpdir(), "aip-browser-"));
  server = await startServer(
    {
      DATABASE_URL: db.dataUrl,
      CONTROL_DATABASE_URL: db.controlUrl,
      AUTH_HS256_SECRET: TEST_SECRET,
      PORT: "0",
      MIGRATE_ON_START: "false",
      ACCESS_LOG: "false",
      // The expired lease below must stay expired while the page looks at it.
      LEASE_MAINTENANCE_INTERVAL_MS: "0",
      DATA_DIR: dir,
    },
    () => {},
  );
  // Three tenants, one replica each (capacity 8): tenant-a ready with two routes, tenant-b
  // draining, tenant-c's lease ended without its host going offline.
  await publishSimpleFleet(db.registry, { prefix: "ui", tenants: ["tenant-a", "tenant-b", "tenant-c"], capacity: 8 });
  await db.owner.query("UPDATE aip_connector_replicas SET lease_expires_at = now() + interval '1 hour' WHERE replica_id <> 'crepl_ui_tenant-c'");
  await db.registry.resolveRoute("act_ui_1", "tenant-a", "cap:ui.search");
  await db.registry.resolveRoute("act_ui_2", "tenant-a", "cap:ui.search");
  const drainingSequence = (await db.registry.adminGet("replica", "crepl_ui_tenant-b"))?.health_revision as number;
  await db.registry.replicaLifecycle(
    "crepl_ui_tenant-b",
    "drain",
    { request_id: requestId(), previous_sequence: drainingSequence },
    hostPrincipal("crepl_ui_tenant-b"),
  );
  await db.owner.query("UPDATE aip_connector_replicas SET lease_expires_at = now() - interval '1 minute' WHERE replica_id = 'crepl_ui_tenant-c'");

  context = await chromium.launchPersistentContext(join(dir, "profile"), {
    executablePath: gate.run ? gate.chromium : "",
    headless: true,
    args: CHROMIUM_ARGS,
    viewport: { width: 1280, height: 800 },
  });
});

afterAll(async () => {
  await context?.close();
  await server?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

it.runIf(!gate.run && gate.required)("needs Chromium (REQUIRE_BROWSER=1)", () => {
  throw new Error(gate.run ? "" : gate.reason);
});

describe.skipIf(!gate.run)("/dashboard", () => {
  it("asks for a token, refuses a wrong one, then shows the fleet and keeps refreshing", async () => {
    const page = await context.newPage();
    const cspViolations: string[] = [];
    page.on("console", (message) => {
      if (message.type() === "error" && /Content Security Policy/i.test(message.text())) cspViolations.push(message.text());
    });
    await page.goto(`${server.url}/dashboard?refresh=2`);
    await expect.poll(() => page.textContent("#state")).toBe("Enter a token with the fleet:read scope");
    expect(await page.isVisible("#fleet")).toBe(false);

    const gatewayToken = await mintToken(TEST_SECRET, { subject: "gw", scopes: ["routes:write"], tenantId: "tenant-a" });
    await page.fill("#token", gatewayToken);
    await page.click("button[type=submit]");
    await expect.poll(() => page.textContent("#state")).toMatch(/^Token refused: this operation needs the fleet:read/);

    const token = await mintToken(TEST_SECRET, { subject: "ops", scopes: ["fleet:read"] });
    await page.fill("#token", token);
    await page.click("button[type=submit]");
    await expect.poll(() => page.textContent("#m-replicas")).toBe("3");
    const text = async (selector: string) => (await page.textContent(selector))?.trim();
    expect(await text("#m-ready")).toBe("1");
    expect(await text("#m-draining")).toBe("1");
    expect(await text("#m-offline")).toBe("0");
    expect(await text("#m-expired")).toBe("1");
    expect(await text("#m-circuits")).toBe("0");
    expect(await text("#m-capacity")).toBe("25%");
    expect(await text("#capacity-text")).toBe("2 of 8 ready slots reserved (25%)");
    expect(await page.getAttribute("#t-expired", "class")).toContain("warn");
    expect(await text("#state")).toMatch(/^Live · revision \d+ · refreshed /);
    expect(await page.isVisible("#regions-missing")).toBe(false);
    const regionRows = await page.$$eval("#regions-body tr", (rows) =>
      rows.map((row) => Array.from((row as unknown as { children: ArrayLike<{ textContent: string | null }> }).children, (cell) => cell.textContent)),
    );
    expect(regionRows).toEqual([["eu-west", "3", "1", "1", "0", "1", "0", "2 / 8"]]);
    // The token stays in this tab's sessionStorage and out of the input field.
    expect(await page.evaluate("sessionStorage.getItem('aip-registry.dashboard.token')")).toBe(token);
    expect(await page.inputValue("#token")).toBe("");

    // The page refreshes by itself: a new route shows up without a reload.
    await db.registry.resolveRoute("act_ui_3", "tenant-a", "cap:ui.search");
    await expect.poll(() => page.textContent("#m-capacity"), { timeout: 20_000 }).toBe("37.5%");

    await expectScreenshot(page, "dashboard");
    expect(cspViolations).toEqual([]);

    await page.click("#forget");
    expect(await page.evaluate("sessionStorage.getItem('aip-registry.dashboard.token')")).toBeNull();
    expect(await page.isVisible("#fleet")).toBe(false);
    await page.close();
  });

  it("shows what happened: rates, refusals by problem code, latency, the busiest tenants and one tenant's own view", async () => {
    const tenantToken = await mintToken(TEST_SECRET, { subject: "gw", scopes: ["routes:write", "catalog:read"], tenantId: "tenant-a" });
    const call = (method: string, path: string, body?: unknown) =>
      fetch(`${server.url}${path}`, {
        method,
        headers: { authorization: `Bearer ${tenantToken}`, ...(body ? { "content-type": "application/json" } : {}) },
        ...(body ? { body: JSON.stringify(body) } : {}),
      });
    for (let i = 0; i < 2; i++) expect((await call("PUT", `/v1/routes/act_ui_http_${i}`, { capability_id: "cap:ui.search" })).status).toBe(201);
    expect((await call("PUT", "/v1/routes/act_ui_http_refused", { capability_id: "cap:ui.nowhere" })).status).toBe(404);
    expect((await call("GET", "/v1/catalog/capabilities")).status).toBe(200);

    const page = await context.newPage();
    const cspViolations: string[] = [];
    page.on("console", (message) => {
      if (message.type() === "error" && /Content Security Policy/i.test(message.text())) cspViolations.push(message.text());
    });
    const token = await mintToken(TEST_SECRET, { subject: "ops", scopes: ["fleet:read"] });
    await page.goto(`${server.url}/dashboard?refresh=2#token=${token}`);
    await expect.poll(() => page.isVisible("#activity")).toBe(true);
    const text = async (selector: string) => (await page.textContent(selector))?.trim();
    expect(await text("#activity-scope")).toMatch(/^this server's requests · all tenants · \d\d:\d\d–\d\d:\d\d$/);
    expect(await text("#build")).toMatch(/^v\d+\.\d+\.\d+ · node · schema \d+$/);
    await expect.poll(() => text("#db-schema")).toMatch(/^database schema \d+$/);
    expect(Number(await text("#a-refusals"))).toBeGreaterThanOrEqual(1);
    expect(await page.getAttribute("#t-refusals", "class")).toContain("warn");
    expect(await text("#legend-refusals")).toContain("binding-unavailable");
    expect(await page.$$eval("#chart-refusals rect", (rects) => rects.length)).toBeGreaterThan(0);
    expect(await page.$$eval("#chart-rates polyline", (lines) => lines.length)).toBe(4);
    expect(await text("#a-p99")).toMatch(/^\d+(\.\d)? (ms|s)$/);
    const tenants = await page.$$eval("#tenants-body tr", (rows) =>
      rows.map((row) => Array.from((row as unknown as { children: ArrayLike<{ textContent: string | null }> }).children, (cell) => cell.textContent)),
    );
    // tenant-a: two routes created and one refused here, and the refused dashboard calls of its gateway token above.
    expect(tenants[0]?.[0]).toBe("tenant-a");
    expect(tenants[0]?.[2]).toBe("3");
    expect(Number(tenants[0]?.[4])).toBeGreaterThanOrEqual(1);
    await expectScreenshot(page, "dashboard-activity");

    // One tenant's own view: the same charts for its requests alone, and the way back.
    await page.click("#tenants-body tr:first-child");
    await expect.poll(() => text("#activity-scope")).toMatch(/ · tenant tenant-a · /);
    expect(page.url()).toBe(`${server.url}/dashboard?refresh=2&tenant=tenant-a`);
    expect(await page.isVisible("#tenants-card")).toBe(false);
    expect(await text("#a-p99-label")).toBe("p99, all requests");
    await page.click("#tenant-back");
    await expect.poll(() => text("#activity-scope")).toMatch(/ · all tenants · /);
    expect(cspViolations).toEqual([]);
    await page.close();
  });

  it("takes a token from the URL fragment and removes it from the address bar", async () => {
    const page = await context.newPage();
    const token = await mintToken(TEST_SECRET, { subject: "ops", scopes: ["fleet:read"] });
    await page.goto(`${server.url}/dashboard#token=${token}`);
    await expect.poll(() => page.textContent("#m-replicas")).toBe("3");
    expect(page.url()).toBe(`${server.url}/dashboard`);
    await page.close();
  });
});

/** Swagger UI's files as the npm package has them (what the pinned CDN URLs serve). */
const packageFile = (file: string) => readFileSync(createRequire(import.meta.url).resolve(`swagger-ui-dist/${file}`));

/** Opens /docs, failing any request that would leave `origin` unless `cdn` answers it; returns what left. */
async function openDocs(origin: string, cdn?: (url: string) => Buffer) {
  const page = await context.newPage();
  const cspViolations: string[] = [];
  const external: string[] = [];
  page.on("console", (message) => {
    if (message.type() === "error" && /Content Security Policy/i.test(message.text())) cspViolations.push(message.text());
  });
  await page.route(
    (url) => url.origin !== origin,
    (route) => {
      const url = route.request().url();
      external.push(url);
      const body = cdn && url.startsWith(CDN_ASSET_PREFIX) ? cdn(url) : undefined;
      // jsDelivr answers with CORS headers; integrity checks need them on a cross-origin asset.
      return body
        ? route.fulfill({ body, contentType: url.endsWith(".css") ? "text/css" : "text/javascript", headers: { "access-control-allow-origin": "*" } })
        : route.abort();
    },
  );
  const documentFetched = page.waitForResponse((response) => response.url() === `${origin}/openapi.json` && response.status() === 200, { timeout: 60_000 });
  // A page whose script is refused never asks for the document; its closing must not be an error.
  documentFetched.catch(() => {});
  await page.goto(`${origin}/docs`, { waitUntil: "domcontentloaded", timeout: 60_000 });
  return { page, cspViolations, external, documentFetched };
}

async function expectReference(page: Page): Promise<void> {
  expect(await page.title()).toBe("AIP registry API");
  const visible = (text: string) => () => page.getByText(text, { exact: true }).first().isVisible();
  await expect.poll(() => page.locator(".info .title").first().textContent(), { timeout: 30_000 }).toMatch(/^AIP connector registry and router/);
  expect(await page.locator(".info .version-stamp").first().textContent()).toMatch(/OAS 3\.1/);
  for (const tag of ["catalog", "routes", "replicas", "admin", "fleet", "operations"]) {
    await expect.poll(() => page.locator(`[data-tag="${tag}"]`).first().isVisible(), { message: `tag ${tag}` }).toBe(true);
  }
  // Tags open as lists of their operations; one expands on click, showing its responses.
  await expect.poll(visible("A page of the capabilities the token's tenant may call")).toBe(true);
  await page.getByText("Resolve an action to its durable route", { exact: true }).first().click();
  await expect.poll(() => page.locator(".opblock.is-open .responses-wrapper").first().isVisible()).toBe(true);
}

describe.skipIf(!gate.run)("/docs", () => {
  it("renders the API reference from the server's own pinned Swagger UI files, with nothing from elsewhere", async () => {
    const { page, cspViolations, external, documentFetched } = await openDocs(server.url);
    await documentFetched;
    await expectReference(page);
    await expectScreenshot(page, "docs");
    expect(external).toEqual([]);
    expect(cspViolations).toEqual([]);
    await page.close();
  });

  describe("as the Worker serves it (pinned CDN files with integrity)", () => {
    let cdnServer: ServerType;
    let origin: string;
    beforeAll(async () => {
      const app = createApp({ registry: db.registry, authenticator: createAuthenticator({ hs256Secret: TEST_SECRET }), docsAssets: "cdn" });
      const listening = await new Promise<{ server: ServerType; port: number }>((resolve) => {
        const server = serve({ fetch: app.fetch, port: 0, hostname: "127.0.0.1" }, (info) => resolve({ server, port: info.port }));
      });
      cdnServer = listening.server;
      origin = `http://127.0.0.1:${listening.port}`;
    });
    afterAll(async () => {
      if (!cdnServer) return;
      const closed = new Promise<void>((resolve) => cdnServer.close(() => resolve()));
      // The browser keeps its connections alive; they would hold close() open.
      (cdnServer as import("node:http").Server).closeAllConnections();
      await closed;
    });

    it("renders from the CDN's bytes when they are the pinned ones", async () => {
      const { page, cspViolations, external, documentFetched } = await openDocs(origin, (url) => packageFile(url.slice(CDN_ASSET_PREFIX.length)));
      await documentFetched;
      await expectReference(page);
      expect(external.sort()).toEqual([`${CDN_ASSET_PREFIX}swagger-ui-bundle.js`, `${CDN_ASSET_PREFIX}swagger-ui.css`]);
      expect(cspViolations).toEqual([]);
      await page.close();
    });

    it("runs nothing when the CDN serves other bytes", async () => {
      const tampered = (url: string) => Buffer.concat([packageFile(url.slice(CDN_ASSET_PREFIX.length)), Buffer.from("\n/* changed */\n")]);
      const { page } = await openDocs(origin, tampered);
      await expect.poll(() => page.textContent("#swagger-ui")).toMatch(/did not load.*\/openapi\.json/);
      expect(await page.evaluate("typeof SwaggerUIBundle")).toBe("undefined");
      await page.close();
    });
  });
});
