/**
 * `aip-registry apply -f FILE [--dry-run]` as a subprocess against a real server: one batch,
 * per-record outcomes, field diffs for updates, file positions for refusals, exit codes.
 */
import { mkdtemp, readFile, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { useTestDatabase } from "../support/database.js";
import { cleanEnv, cliEnv, ROOT, runCli, startApiServer, type ApiServer } from "./support.js";

// Each test runs the CLI as a subprocess (a Node start-up each): give them room on a busy machine.
vi.setConfig({ testTimeout: 180_000, hookTimeout: 120_000 });

const db = useTestDatabase();
let server: ApiServer;
let dir: string;
let example: string;

beforeAll(async () => {
  server = await startApiServer(db.registry);
  dir = await mkdtemp(join(tmpdir(), "aip-cli-apply-"));
  example = await readFile(join(ROOT, "examples/fleet.yaml"), "utf8");
});
afterAll(async () => {
  await server?.close();
});

const apply = (...args: string[]) => runCli(["apply", ...args], { env: cliEnv(server.url) });
const countTypes = async () => Number((await db.owner.query("SELECT count(*) AS n FROM aip_connector_types")).rows[0].n);
const revision = async () => Number((await db.owner.query("SELECT revision FROM aip_catalog_revision")).rows[0].revision);

async function variant(name: string, edit: (text: string) => string): Promise<string> {
  const path = join(dir, name);
  const text = edit(example);
  expect(text, `${name} differs from the example`).not.toBe(example);
  await writeFile(path, text);
  return path;
}

describe("apply", () => {
  it("dry-runs the example fleet: every record would be created, nothing changes", async () => {
    const result = await apply("-f", "examples/fleet.yaml", "--dry-run");
    // Each type and version is its fixed content plus its lifecycle operation: 28 records, 35 changes.
    expect(result.stderr).toContain("28 records in 35 changes (computed 4 manifest digests)");
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toMatch(/^RECORD\s+OUTCOME\s+CHANGES$/m);
    expect(result.stdout).toMatch(/^version cver_crm_1_5_0\s+created$/m);
    expect(result.stdout).toMatch(/^binding tenant-b \/ cap:payments\.refund -> cinst_tenant_b_payments\s+created$/m);
    expect(result.stdout).toContain("dry run: 28 created, 0 updated, 0 unchanged; catalog revision 0 -> 1. Nothing was changed.");
    expect(await countTypes()).toBe(0);
    expect(await revision()).toBe(0);
  });

  it("applies the fleet as one batch (one revision), then finds nothing to change", async () => {
    const first = await apply("-f", "examples/fleet.yaml");
    expect(first.code, first.stderr).toBe(0);
    expect(first.stderr).toContain("publishing 35 changes as one batch");
    expect(first.stdout).toMatch(/applied: 28 created, 0 updated, 0 unchanged; catalog revision 0 -> 1 \(\d+ ms\)/);
    expect(await countTypes()).toBe(3);
    expect(await revision()).toBe(1);
    const replicas = await db.owner.query("SELECT region, zone, status FROM aip_connector_replicas ORDER BY replica_id");
    expect(replicas.rows).toHaveLength(9);
    expect(new Set(replicas.rows.map((r) => r.region))).toEqual(new Set(["eu-west", "us-east"]));
    expect(new Set(replicas.rows.map((r) => r.status))).toEqual(new Set(["offline"]));

    const again = await apply("-f", "examples/fleet.yaml", "--json");
    expect(again.code, again.stderr).toBe(0);
    const report = JSON.parse(again.stdout);
    expect(report).toMatchObject({ dry_run: false, catalog_revision_before: 1, catalog_revision: 1, changed: 0, created: 0, updated: 0, unchanged: 28 });
    expect(report.records).toHaveLength(28);
    expect(await revision()).toBe(1);
  });

  it("prints the register body a replica's host sends, which the registry accepts as proof of what it runs", async () => {
    const replicaId = "crepl_tenant_b_crm_use1b";
    const printed = await runCli(["registration", "-f", "examples/fleet.yaml", replicaId, "--request-id", "msg_cli_registration_1"], { env: cleanEnv() });
    expect(printed.code, printed.stderr).toBe(0);
    const body = JSON.parse(printed.stdout);
    expect(body).toEqual({
      request_id: "msg_cli_registration_1",
      artifact_digest: "sha256:2bf565e2bdbcf616014f760dce098fd240801387d7dfe3d934ab8ae3e47e88ff",
      manifest_digest: expect.stringMatching(/^sha256:[0-9a-f]{64}$/),
      config_revision: 1,
      capability_count: 1,
    });
    const stored = (await db.registry.adminGet("version", "cver_crm_1_4_0")) as Record<string, unknown>;
    expect(body.manifest_digest).toBe(stored.manifest_digest);
    const registered = await db.registry.replicaLifecycle(replicaId, "register", body, "service:crm-use1b.tenant-b");
    expect(registered).toMatchObject({ replica_id: replicaId, status: "ready" });

    const unknown = await runCli(["registration", "-f", "examples/fleet.yaml", "crepl_nowhere"], { env: cleanEnv() });
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("provisions no replica `crepl_nowhere`");
  });

  it("turns a status or enabled flag changed in the file into its lifecycle operation, and re-applying that file is a no-op", async () => {
    const path = await variant("lifecycle.yaml", (text) =>
      text
        .replace(
          "id: cver_crm_1_4_0\n    connector_type_id: ctype_crm\n    version: 1.4.0\n    status: active",
          "id: cver_crm_1_4_0\n    connector_type_id: ctype_crm\n    version: 1.4.0\n    status: admitted",
        )
        .replace(
          "{ id: ctype_payments, name: Payments, owner: org:paystream, enabled: true }",
          "{ id: ctype_payments, name: Payments, owner: org:paystream, enabled: false }",
        ),
    );
    const before = await revision();
    const dry = await apply("-f", path, "--dry-run");
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.stdout).toMatch(/^version cver_crm_1_4_0\s+updated\s+status: "active" -> "admitted"$/m);
    expect(dry.stdout).toMatch(/^connector type ctype_payments\s+updated\s+enabled: true -> false$/m);
    expect(dry.stdout).toContain("dry run: 0 created, 2 updated, 26 unchanged");

    const applied = await apply("-f", path, "--json");
    expect(applied.code, applied.stderr).toBe(0);
    expect(JSON.parse(applied.stdout)).toMatchObject({ catalog_revision_before: before, catalog_revision: before + 1, changed: 2, updated: 2 });
    const stored = await db.owner.query(
      "SELECT (SELECT status FROM aip_connector_versions WHERE version_id = 'cver_crm_1_4_0') AS status, (SELECT enabled FROM aip_connector_types WHERE type_id = 'ctype_payments') AS enabled",
    );
    expect(stored.rows[0]).toEqual({ status: "admitted", enabled: false });
    const again = await apply("-f", path, "--json");
    expect(JSON.parse(again.stdout)).toMatchObject({ catalog_revision: before + 1, changed: 0, unchanged: 28 });

    // And back, through the same operations.
    const restored = await apply("-f", "examples/fleet.yaml", "--json");
    expect(restored.code, restored.stderr).toBe(0);
    expect(JSON.parse(restored.stdout)).toMatchObject({ catalog_revision: before + 2, changed: 2 });
  });

  it("shows which fields an update changes, never a credential reference", async () => {
    const path = await variant("changed.yaml", (text) =>
      text
        .replace(
          'config_revision: 1, secret_provider_ref: "vault://tenants/tenant-a/crm"',
          'config_revision: 2, secret_provider_ref: "vault://tenants/tenant-a/crm-rotated"',
        )
        .replace(
          /(capability_id: cap:crm\.contacts\.search\n\s+instance_id: cinst_tenant_b_crm\n\s+)priority: 10\n(\s+)policy_revision: 1\n(\s+)credential_revision_ref: "credrev:tenant-b\/crm\/1"/,
          '$1priority: 3\n$2policy_revision: 2\n$3credential_revision_ref: "credrev:tenant-b/crm/2"',
        )
        .replace(
          "topology: { region: us-east, zone: us-east-1a, capacity_class: pci }\n    capacity: 4",
          "topology: { region: us-east, zone: us-east-1a, capacity_class: pci }\n    capacity: 6",
        ),
    );
    const before = await revision();
    const dry = await apply("-f", path, "--dry-run");
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.stdout).toMatch(/^instance cinst_tenant_a_crm\s+updated\s+config_revision: 1 -> 2, secret_provider_ref \(changed\)$/m);
    expect(dry.stdout).toMatch(
      /^binding tenant-b \/ cap:crm\.contacts\.search -> cinst_tenant_b_crm\s+updated\s+priority: 10 -> 3, policy_revision: 1 -> 2, credential_revision_ref \(changed\)$/m,
    );
    expect(dry.stdout).toMatch(/^replica crepl_tenant_b_payments_use1a\s+updated\s+capacity: 4 -> 6$/m);
    expect(dry.stdout).toContain(`dry run: 0 created, 3 updated, 25 unchanged; catalog revision ${before} -> ${before + 1}. Nothing was changed.`);
    for (const secret of ["crm-rotated", "credrev:tenant-b/crm/2", "vault://"]) expect(dry.stdout + dry.stderr).not.toContain(secret);
    expect(await revision()).toBe(before);

    const json = JSON.parse((await apply("-f", path, "--dry-run", "--json")).stdout);
    const instance = json.records.find((r: { key: string }) => r.key === "cinst_tenant_a_crm");
    expect(instance.changes).toEqual([
      { field: "config_revision", from: 1, to: 2 },
      { field: "secret_provider_ref", changed: true },
    ]);

    const applied = await apply("-f", path);
    expect(applied.code, applied.stderr).toBe(0);
    // An apply lists only what it changed.
    expect(applied.stdout.split("\n").filter((line) => /^(instance|binding|replica) .* updated$/.test(line))).toHaveLength(3);
    expect(applied.stdout).not.toMatch(/unchanged\s*$/m);
    expect(applied.stdout).toContain(`applied: 0 created, 3 updated, 25 unchanged; catalog revision ${before} -> ${before + 1}`);
    expect(await revision()).toBe(before + 1);
  });

  it("names the fleet-file record the registry refused, and changes nothing (exit 1)", async () => {
    const path = await variant("refused.yaml", (text) =>
      text
        .replace("owner: org:paystream # must equal", "owner: org:somebody-else # must equal")
        .replaceAll("cver_payments_0_9_0", "cver_payments_0_9_1")
        .replace("sha256:77d56e2b0762", "sha256:77d56e2b0763"),
    );
    const before = await revision();
    const result = await apply("-f", path);
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/error: admission: .*does not match connector type owner/);
    expect(result.stderr).toContain("in versions[3]: version cver_payments_0_9_1");
    expect(await revision()).toBe(before);
    expect((await db.owner.query("SELECT 1 FROM aip_connector_versions WHERE version_id = 'cver_payments_0_9_1'")).rowCount).toBe(0);
  });

  it("reports every problem of an invalid file with its place, before contacting the registry (exit 2)", async () => {
    const path = join(dir, "invalid.yaml");
    await writeFile(path, "connector_types:\n  - id: ctype_x\n    name: X\nversions:\n  - id: cver_x\n    version: 2.0\nreplicas: []\nextra: true\n");
    const duplicate = await variant("duplicate.yaml", (text) => text.replace("id: ctype_tickets", "id: ctype_crm"));
    const [result, dup, missing, none] = await Promise.all([
      runCli(["apply", "-f", path], { env: cleanEnv({ AIP_REGISTRY_URL: "http://127.0.0.1:9" }) }),
      apply("-f", duplicate, "--dry-run"),
      apply("-f", join(dir, "nope.yaml")),
      apply(),
    ]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("error: the fleet file is invalid");
    expect(result.stderr).toContain("connector_types[0].owner:");
    expect(result.stderr).toContain("versions[0].version: Invalid input: expected string, received number");
    expect(result.stderr).toContain('(file): Unrecognized key: "extra"');
    expect(dup.code).toBe(2);
    expect(dup.stderr).toContain("connector_types[1] repeats connector type `ctype_crm` of connector_types[0]");
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain("cannot read");
    expect(none.code).toBe(2);
    expect(none.stderr).toContain("apply needs a fleet file");
  });

  it("publishes JSON files too, disables a type at the end of the batch, and works over SQL (--database-url)", async () => {
    const path = join(dir, "small.json");
    await writeFile(
      path,
      JSON.stringify({
        connector_types: [{ id: "ctype_json", name: "From JSON", owner: "org:json", enabled: false }],
        admission_policies: [{ policy_ref: "quota:json", revision: 1, max_tenant_in_flight: 5, circuit_failure_threshold: 2, circuit_open_ms: 1000 }],
      }),
    );
    const sql = await runCli(["apply", "-f", path, "--database-url", db.controlUrl], { env: cleanEnv() });
    expect(sql.code, sql.stderr).toBe(0);
    // The disabled type is put (created enabled) and disabled last: two records, three changes.
    expect(sql.stderr).toContain("2 records in 3 changes");
    expect(sql.stdout).toMatch(/^connector type ctype_json\s+created$/m);
    expect(sql.stderr).not.toContain("aip-test-password");
    const type = await db.owner.query("SELECT enabled FROM aip_connector_types WHERE type_id = 'ctype_json'");
    expect(type.rows[0].enabled).toBe(false);
  });

  it("needs a token or a secret for HTTP (exit 2) and reports an unreachable registry (exit 3)", async () => {
    const [noToken, down, refused] = await Promise.all([
      runCli(["apply", "-f", "examples/fleet.yaml", "--data-dir", dir], { env: cleanEnv({ AIP_REGISTRY_URL: server.url }) }),
      runCli(["apply", "-f", "examples/fleet.yaml", "--url", "http://127.0.0.1:9", "--token", "x"], { env: cleanEnv() }),
      runCli(["apply", "-f", "examples/fleet.yaml", "--token", "not-a-jwt"], { env: cleanEnv({ AIP_REGISTRY_URL: server.url }) }),
    ]);
    expect(noToken.code).toBe(2);
    expect(noToken.stderr).toContain("no token for");
    expect(down.code).toBe(3);
    expect(down.stderr).toContain("error: the registry at http://127.0.0.1:9 is unreachable");
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain("error: unauthorized:");
  });
});
