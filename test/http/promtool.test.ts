/**
 * What Prometheus itself says of the registry's metrics and rules, with `promtool` (Debian's
 * `prometheus` package; CI installs it, .ci/run): `check metrics` on a live /metrics (names, types,
 * help; prom-client's three gauges named `_total` fail it), `check rules` and `test rules` on
 * ops/prometheus/ (every alert fires on what should page, only after its `for`), and every
 * expression of the Grafana dashboard (ops/grafana/aip-registry.json) parsed as a rule. Every
 * metric the rules and the dashboard name is documented in docs/observability.md, and no alert
 * lacks its runbook in docs/runbooks.md.
 *
 * Without promtool the promtool cases are skipped with a warning (REQUIRE_PROMTOOL=1 makes that a
 * failure); the documentation checks run anyway.
 */
import { execFile, spawn } from "node:child_process";
import { accessSync, constants, readFileSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import YAML from "yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startServer, type RunningServer } from "../../src/entry/node.js";
import { mintToken } from "../../src/http/tokens.js";
import { publishSimpleFleet } from "../../fixtures/records.js";
import { useTestDatabase } from "../support/database.js";
import { TEST_SECRET } from "../support/http.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const RULES = join(ROOT, "ops/prometheus/aip-registry.rules.yml");
const RULE_TESTS = join(ROOT, "ops/prometheus/aip-registry.rules.test.yml");
const DASHBOARD = join(ROOT, "ops/grafana/aip-registry.json");

function findPromtool(): string | undefined {
  const candidates = process.env.PROMTOOL ? [process.env.PROMTOOL] : (process.env.PATH ?? "").split(delimiter).map((dir) => join(dir, "promtool"));
  return candidates.find((path) => {
    try {
      accessSync(path, constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}

const promtool = findPromtool();
const required = process.env.REQUIRE_PROMTOOL === "1";
if (!promtool) {
  const banner = "#".repeat(100);
  console.warn(
    `\n${banner}\n# no promtool on PATH: the promtool checks are ${required ? "REQUIRED (REQUIRE_PROMTOOL=1) and fail" : "SKIPPED"}. ` +
      `Install Debian's package (apt-get install -y prometheus) or point PROMTOOL at the binary.\n${banner}\n`,
  );
}

const run = promisify(execFile);
/** promtool with `input` on stdin: its exit code and output. */
function promtoolWith(args: string[], input = ""): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(promtool as string, args, { stdio: ["pipe", "pipe", "pipe"] });
    let output = "";
    child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()));
    child.once("error", reject);
    child.once("close", (code) => resolve({ code, output }));
    child.stdin.end(input);
  });
}

/** Every expression of the dashboard's panels, with Grafana's variables given values. */
function dashboardExpressions(): { title: string; expr: string }[] {
  const dashboard = JSON.parse(readFileSync(DASHBOARD, "utf8")) as { panels: { title: string; targets?: { expr: string }[] }[] };
  return dashboard.panels.flatMap((panel) =>
    (panel.targets ?? []).map((target) => ({
      title: panel.title,
      expr: target.expr.replaceAll("$__rate_interval", "5m").replaceAll("$job", "aip-registry").replaceAll("$instance", ".*"),
    })),
  );
}

const metricNames = (text: string) => new Set([...text.matchAll(/\b(aip_[a-z_]+|nodejs_[a-z_0-9]+|process_[a-z_]+)\b/g)].map((m) => m[1] as string));

it("documents every metric the rules and the dashboard use, and gives every alert a runbook", () => {
  const docs = readFileSync(join(ROOT, "docs/observability.md"), "utf8");
  const runbooks = readFileSync(join(ROOT, "docs/runbooks.md"), "utf8");
  const rules = readFileSync(RULES, "utf8");
  const used = new Set([...metricNames(rules), ...dashboardExpressions().flatMap((e) => [...metricNames(e.expr)])]);
  // Histogram series and recording rules' own names are not metrics of their own.
  const undocumented = [...used].filter((name) => !docs.includes(name.replace(/_(bucket|count|sum)$/, ""))).filter((name) => !name.startsWith("aip:"));
  expect(undocumented).toEqual([]);
  const parsed = YAML.parse(rules) as { groups: { rules: { alert?: string; annotations?: { runbook_url?: string } }[] }[] };
  const alerts = parsed.groups.flatMap((g) => g.rules).filter((r) => r.alert);
  expect(alerts.length).toBeGreaterThanOrEqual(15);
  for (const alert of alerts) {
    const anchor = alert.annotations?.runbook_url?.replace(/^docs\/runbooks\.md#/, "");
    expect(anchor, `${alert.alert} runbook_url`).toBeDefined();
    expect(runbooks, `docs/runbooks.md has a section for ${alert.alert}`).toMatch(new RegExp(`^#+ .*\\{#${anchor}\\}$|^#+ ${anchor}$`, "im"));
  }
});

describe.skipIf(!promtool)("promtool", () => {
  const db = useTestDatabase();
  let server: RunningServer;
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "aip-promtool-"));
    server = await startServer(
      {
        DATABASE_URL: db.dataUrl,
        CONTROL_DATABASE_URL: db.controlUrl,
        CATALOG_DATABASE_URL: db.dataUrl,
        AUTH_HS256_SECRET: TEST_SECRET,
        PORT: "0",
        MIGRATE_ON_START: "false",
        LEASE_MAINTENANCE_INTERVAL_MS: "60000",
        ACCESS_LOG: "false",
        METRICS_PUBLIC: "true",
      },
      () => {},
    );
  });
  afterAll(async () => {
    await server?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("`promtool check metrics` accepts a live /metrics, every family present", async () => {
    await publishSimpleFleet(db.registry, { prefix: "prom" });
    const token = await mintToken(TEST_SECRET, { subject: "gw", tenantId: "tenant-a", scopes: ["catalog:read", "routes:write"] });
    const headers = { authorization: `Bearer ${token}`, "content-type": "application/json" };
    await fetch(`${server.url}/v1/catalog/capabilities`, { headers });
    await fetch(`${server.url}/v1/routes/act_prom_1`, { method: "PUT", headers, body: JSON.stringify({ capability_id: "cap:prom.search" }) });
    await fetch(`${server.url}/v1/routes/act_prom_2`, { method: "PUT", headers, body: JSON.stringify({ capability_id: "cap:prom.none" }) });
    const text = await (await fetch(`${server.url}/metrics`)).text();
    for (const family of [
      "aip_http_problems_total",
      "aip_route_resolutions_total",
      "aip_catalog_cache_requests_total",
      "aip_catalog_replica_state",
      "nodejs_active_handles_all",
    ]) {
      expect(text).toContain(`# TYPE ${family} `);
    }
    expect(await promtoolWith(["check", "metrics"], text)).toEqual({ code: 0, output: "" });
  });

  it("`promtool check rules` and `promtool test rules` pass on ops/prometheus/", async () => {
    const checked = await run(promtool as string, ["check", "rules", RULES]);
    expect(checked.stdout).toMatch(/SUCCESS: \d+ rules found/);
    const tested = await run(promtool as string, ["test", "rules", RULE_TESTS]);
    expect(tested.stdout).toMatch(/SUCCESS/);
  });

  it("parses every expression of the Grafana dashboard", async () => {
    const expressions = dashboardExpressions();
    expect(expressions.length).toBeGreaterThan(20);
    const file = join(dir, "dashboard-expressions.yml");
    await writeFile(
      file,
      YAML.stringify({ groups: [{ name: "dashboard", rules: expressions.map((e, i) => ({ record: `dashboard:expr_${i}`, expr: e.expr })) }] }),
    );
    const checked = await promtoolWith(["check", "rules", file]);
    expect(checked, expressions.map((e) => `${e.title}: ${e.expr}`).join("\n")).toMatchObject({ code: 0 });
  });
});

it.runIf(!promtool && required)("needs promtool (REQUIRE_PROMTOOL=1)", () => {
  throw new Error("no promtool on PATH (apt-get install -y prometheus)");
});
