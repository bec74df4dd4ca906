/**
 * The two pages people open, rendered by headless Chromium (Debian's `chromium`, driven by
 * playwright-core) from a real Node server: the fleet dashboard, fed by /v1/fleet/status with a
 * token kept in sessionStorage, and the /docs API reference (Scalar), each checked for content
 * and captured as a screenshot.
 */
import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { chromium, type BrowserContext, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { mintToken } from "../../src/http/tokens.js";
import { startServer, type RunningServer } from "../../src/node.js";
import { createTestDatabase, type TestDatabase } from "../support/database.js";
import { publishSimpleFleet, requestId, hostPrincipal } from "../support/fleet.js";
import { TEST_SECRET } from "../support/http.js";

vi.setConfig({ testTimeout: 120_000, hookTimeout: 120_000 });

const CHROMIUM = "/usr/bin/chromium";
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
const SCALAR_CDN = "https://cdn.jsdelivr.net/npm/@scalar/api-reference";

let db: TestDatabase;
let server: RunningServer;
let context: BrowserContext;
let dir: string;

/** The Scalar bundle the /docs page loads from its CDN, served from node_modules (tests run offline). */
function scalarBundle(): string {
  try {
    const entry = createRequire(import.meta.url).resolve("@scalar/api-reference");
    return join(dirname(entry), "browser", "standalone.js");
  } catch {
    throw new Error("the /docs test needs the Scalar bundle from the npm package @scalar/api-reference (devDependency): the page loads it from a CDN this machine cannot reach");
  }
}

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
  if (!existsSync(CHROMIUM)) {
    throw new Error(`Chromium is missing at ${CHROMIUM}: install Debian's package (apt-get install -y chromium); CI installs it in .ci/run`);
  }
  dir = await mkdtemp(join(tmpdir(), "aip-browser-"));
  db = await createTestDatabase();
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
  await db.registry.replicaLifecycle("crepl_ui_tenant-b", "drain", { request_id: requestId(), previous_sequence: drainingSequence }, hostPrincipal("crepl_ui_tenant-b"));
  await db.owner.query("UPDATE aip_connector_replicas SET lease_expires_at = now() - interval '1 minute' WHERE replica_id = 'crepl_ui_tenant-c'");

  context = await chromium.launchPersistentContext(join(dir, "profile"), {
    executablePath: CHROMIUM,
    headless: true,
    args: CHROMIUM_ARGS,
    viewport: { width: 1280, height: 800 },
  });
});

afterAll(async () => {
  await context?.close();
  await server?.close();
  await db?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe("/dashboard", () => {
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

  it("takes a token from the URL fragment and removes it from the address bar", async () => {
    const page = await context.newPage();
    const token = await mintToken(TEST_SECRET, { subject: "ops", scopes: ["fleet:read"] });
    await page.goto(`${server.url}/dashboard#token=${token}`);
    await expect.poll(() => page.textContent("#m-replicas")).toBe("3");
    expect(page.url()).toBe(`${server.url}/dashboard`);
    await page.close();
  });
});

describe("/docs", () => {
  it("renders the API reference from /openapi.json", async () => {
    const bundle = await readFile(scalarBundle());
    const page = await context.newPage();
    // Offline and deterministic: the CDN script comes from node_modules, nothing else leaves the machine.
    await page.route(
      (url) => url.origin !== new URL(server.url).origin,
      (route) => (route.request().url().startsWith(SCALAR_CDN) ? route.fulfill({ body: bundle, contentType: "text/javascript" }) : route.abort()),
    );
    const documentFetched = page.waitForResponse((response) => response.url() === `${server.url}/openapi.json` && response.status() === 200, { timeout: 60_000 });
    // The bundle is 5 MB of script: wait for the document, then for what it renders.
    await page.goto(`${server.url}/docs`, { waitUntil: "domcontentloaded", timeout: 60_000 });
    await documentFetched;
    expect(await page.title()).toBe("AIP registry API");
    const visible = (text: string) => () => page.getByText(text, { exact: true }).first().isVisible();
    await expect.poll(visible("AIP connector registry and router"), { timeout: 30_000 }).toBe(true);
    await expect.poll(visible("OpenAPI 3.1.0")).toBe(true);
    for (const tag of ["catalog", "routes", "replicas", "admin", "fleet", "operations"]) expect(await visible(tag)(), `tag ${tag}`).toBe(true);
    // The first tag is open; another opens on click and lists its operations by summary.
    await expect.poll(visible("A page of the capabilities the token's tenant may call")).toBe(true);
    await page.getByText("routes", { exact: true }).first().click();
    await expect.poll(visible("Resolve an action to its durable route")).toBe(true);
    await expectScreenshot(page, "docs");
    await page.close();
  });
});
