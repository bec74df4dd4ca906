/**
 * Seeds the benchmark fleet (see layout.ts) with set-based SQL as the table owner, in one
 * transaction: seconds for the reference's 100,000 bindings, where publishing them one change at a
 * time would take minutes. The rows are what publication would have written: digests and
 * canonical sizes come from the registry's own SQL (aip_canonical_json, aip_sha256), every chain
 * is live, every replica registered with a far lease and no reservation, and the catalog stands at
 * revision 1. `verifySeed` and `publishProbe` prove what publication would otherwise have checked.
 */
import type { MigrationSession } from "../../src/db/migrate.js";
import type { Registry } from "../../src/registry/registry.js";
import { connectorType, version } from "../../test/support/fleet.js";
import { REGIONS, layout, type Layout, type Scale } from "./layout.js";

const regionArray = `ARRAY[${REGIONS.map((r) => `'${r}'`).join(", ")}]`;

function seedSql(l: Layout): string {
  const last = l.replicas - 1;
  const k = l.instancesPerTenant;
  return `
-- Rows are consistent by construction: skip the per-row foreign-key triggers (verifySeed checks
-- every reference set-based afterwards), which would otherwise take most of the time.
SET LOCAL session_replication_role = replica;

-- Capability definitions: 1,000 contracts shared by the versions of ten blocks. Their canonical
-- (JCS) text is written out directly, members in order, since every string is plain ASCII;
-- verifySeed and publishProbe check it against the registry's own canonicalization.
CREATE TEMP TABLE bench_caps ON COMMIT DROP AS
SELECT c, c / 100 AS block, id, canonical, canonical::jsonb AS cap
FROM (SELECT c, 'cap:bench.c' || lpad(c::text, 4, '0') AS id,
             '{"description":"Benchmark capability ' || c || ' of block ' || c / 100 || '","id":"cap:bench.c' || lpad(c::text, 4, '0')
               || '","input_schema":{"properties":{"q":{"type":"string"}},"type":"object"},"kind":"tool","name":"bench.c'
               || lpad(c::text, 4, '0') || '","output_schema":{"type":"object"}}' AS canonical
      FROM generate_series(0, 999) c) x;

INSERT INTO aip_capability_definitions (capability_id, contract_digest, schema_digest, capability, definition_bytes, search_text)
SELECT id, contract, schema, cap,
       octet_length('{"capability":' || canonical || ',"contract_digest":"' || contract || '","schema_digest":"' || schema || '"}'),
       lower(concat_ws(' ', id, cap ->> 'name', cap ->> 'description'))
FROM (SELECT id, cap, canonical, aip_sha256(canonical) AS contract,
             aip_sha256('{"input":{"properties":{"q":{"type":"string"}},"type":"object"},"output":{"type":"object"}}') AS schema
      FROM bench_caps) d;

-- Types and their one active version each; the manifest's canonical text is assembled from the
-- capabilities' canonical texts (members in JCS order), so its digest costs one hash.
INSERT INTO aip_connector_types (type_id, name, owner, enabled)
SELECT 'ctype_bench_' || lpad(t::text, 4, '0'), 'Bench connector ' || t, 'org:bench', true
FROM generate_series(0, ${l.types - 1}) t;

WITH blocks AS (SELECT block, string_agg(canonical, ',' ORDER BY id) AS caps FROM bench_caps GROUP BY block),
manifests AS (
  SELECT t, 'ctype_bench_' || lpad(t::text, 4, '0') AS type_id,
         '{"agent":{"id":"service:ctype_bench_' || lpad(t::text, 4, '0') || '","kind":"service"},"capabilities":['
           || b.caps || '],"manifest_version":"1.0","profiles":["aip.native.http.v1"]}' AS canonical
  FROM generate_series(0, ${l.types - 1}) t JOIN blocks b ON b.block = t % 10),
stored AS (
  INSERT INTO aip_manifests (manifest_digest, manifest)
  SELECT aip_sha256(canonical), canonical::jsonb FROM manifests)
INSERT INTO aip_connector_versions (version_id, type_id, version, status, artifact_digest, manifest_digest, attestation, supply_chain_qualified)
SELECT 'cver_bench_' || lpad(t::text, 4, '0'), type_id, '1.0.0', 'active', aip_sha256('artifact:' || type_id),
       aip_sha256(canonical),
       jsonb_build_object(
         'artifact_digest', aip_sha256('artifact:' || type_id), 'sbom_digest', aip_sha256('sbom:' || type_id),
         'provenance_digest', aip_sha256('provenance:' || type_id), 'signature_ref', 'sigstore://rekor/bench',
         'signer_identity', 'build@bench.example', 'owner', 'org:bench', 'supported_aip_versions', '["1.0"]'::jsonb,
         'conformance_status', 'passed', 'vulnerability_policy_status', 'passed',
         'license_policy_status', 'passed', 'revocation_status', 'passed'),
       true
FROM manifests;

INSERT INTO aip_version_capabilities (version_id, capability_id)
SELECT 'cver_bench_' || lpad(t::text, 4, '0'), c.id
FROM generate_series(0, ${l.types - 1}) t JOIN bench_caps c ON c.block = t % 10;

INSERT INTO aip_version_profiles (version_id, profile_id)
SELECT 'cver_bench_' || lpad(t::text, 4, '0'), 'aip.native.http.v1' FROM generate_series(0, ${l.types - 1}) t;

-- Instance g belongs to tenant g/k (as its j = g%k) and runs type g % types.
CREATE TEMP TABLE bench_instances ON COMMIT DROP AS
SELECT g, g / ${k} AS n, (g % ${k}) / 10 AS q,
       'cinst_bench_' || lpad(g::text, 6, '0') AS instance_id,
       'tenant-' || lpad((g / ${k})::text, 5, '0') AS tenant_id,
       'ctype_bench_' || lpad((g % ${l.types})::text, 4, '0') AS type_id,
       'cver_bench_' || lpad((g % ${l.types})::text, 4, '0') AS version_id
FROM generate_series(0, ${last}) g;

INSERT INTO aip_connector_instances (instance_id, type_id, version_id, tenant_id, config_revision, secret_provider_ref, status)
SELECT instance_id, type_id, version_id, tenant_id, 1, 'vault://tenants/' || tenant_id || '/' || instance_id, 'enabled'
FROM bench_instances ORDER BY instance_id;

-- Ten bindings per instance: block g%10, group ((q % G) + tenant) % 10.
INSERT INTO aip_capability_bindings (tenant_id, capability_id, instance_id, priority, policy_revision, credential_revision_ref, quota_policy_ref, enabled)
SELECT i.tenant_id,
       'cap:bench.c' || lpad(((i.g % 10) * 100 + (((i.q % ${l.groups}) + i.n) % 10) * 10 + m)::text, 4, '0'),
       i.instance_id, 10, 1, 'credential-revision-1', NULL, true
FROM bench_instances i CROSS JOIN generate_series(0, 9) m
ORDER BY 1, 2, 3;

-- One registered replica per instance: the two candidates of a route are in different regions.
INSERT INTO aip_connector_replicas (replica_id, instance_id, version_id, endpoint, peer_principal_id, peer_principal_kind, peer_did,
  trust_domain, transport_profile, region, zone, capacity_class, status, lease_expires_at, capacity, active_assignments, health_revision)
SELECT 'crepl_bench_' || lpad(g::text, 6, '0'), instance_id, version_id,
       'https://crepl-bench-' || g || '.hosts.example/aip/v1/messages', 'service:' || instance_id, 'service',
       'did:key:z6MkBench' || g, 'hosts.example', 'aip.native.http.v1',
       region, region || '-1' || (ARRAY['a', 'b', 'c'])[g % 3 + 1],
       CASE WHEN q = 9 THEN 'large' ELSE 'standard' END,
       'ready', now() + interval '30 days', CASE WHEN q = 9 THEN 400 ELSE 100 END, 0, 1
FROM (SELECT i.*, (${regionArray})[(n + q) % 3 + 1] AS region FROM bench_instances i) x
ORDER BY 1;

-- What publication maintains for every change: the live binding chains the catalog and routing read.
SELECT aip_rebuild_catalog_entries();
UPDATE aip_catalog_revision SET revision = revision + 1, published_at = now() WHERE singleton;

-- Steady state: the counter of every scope a route can hold under the default policy (tenant,
-- instance, binding) exists, at 0, as on a registry that has routed through each binding before.
-- A binding's first route inserts them once; drawing uniformly from 100,000 bindings, a phase of
-- a few seconds would otherwise measure mostly first routes.
INSERT INTO aip_admission_counters (scope_kind, scope_key, active)
SELECT 'tenant', tenant_id, 0 FROM (SELECT DISTINCT tenant_id FROM aip_catalog_entries) t
UNION ALL SELECT 'instance', instance_id, 0 FROM (SELECT DISTINCT instance_id FROM aip_catalog_entries) i
UNION ALL SELECT 'binding', binding_key, 0 FROM aip_catalog_entries;
`;
}

export interface SeedReport {
  layout: Layout;
  seedMs: number;
  analyzeMs: number;
  rows: Record<string, number>;
}

/** Seeds an empty, migrated registry database and analyzes it. The session must be the owner. */
export async function seedFleet(session: MigrationSession, scale: Scale): Promise<SeedReport> {
  const l = layout(scale);
  const started = performance.now();
  await session.exec(`BEGIN; ${seedSql(l)} COMMIT;`);
  const seeded = performance.now();
  await session.exec("ANALYZE");
  const analyzed = performance.now();
  const [counts] = await session.query<Record<string, string>>(`
    SELECT (SELECT count(*) FROM aip_connector_types) AS connector_types,
           (SELECT count(*) FROM aip_connector_versions) AS versions,
           (SELECT count(*) FROM aip_capability_definitions) AS capabilities,
           (SELECT count(*) FROM aip_version_capabilities) AS version_capabilities,
           (SELECT count(*) FROM aip_connector_instances) AS instances,
           (SELECT count(*) FROM aip_connector_replicas) AS replicas,
           (SELECT count(DISTINCT tenant_id) FROM aip_connector_instances) AS tenants,
           (SELECT count(*) FROM aip_capability_bindings) AS bindings`);
  return {
    layout: l,
    seedMs: seeded - started,
    analyzeMs: analyzed - seeded,
    rows: Object.fromEntries(Object.entries(counts ?? {}).map(([k, v]) => [k, Number(v)])),
  };
}

/**
 * Settled route history: up to `limit` completed routes, one per binding (the table a long-lived
 * registry is mostly made of), so plans are chosen against a realistic aip_route_assignments.
 * Nothing stays reserved, so counters and replica loads are untouched.
 */
export async function seedRouteHistory(session: MigrationSession, limit: number): Promise<number> {
  await session.exec("BEGIN; SET LOCAL session_replication_role = replica");
  const [row] = await session.query<{ n: number }>(
    `
    WITH inserted AS (
      INSERT INTO aip_route_assignments (
        action_id, capability_id, tenant_id, instance_id, version_id, replica_id,
        catalog_revision, binding_policy_revision, credential_revision_ref, quota_policy_ref, replica_health_revision,
        fence_token, admission_policy_revision, admission_max_tenant_in_flight, admission_max_instance_in_flight,
        admission_max_tenant_retry_in_flight, admission_circuit_failure_threshold, admission_circuit_open_ms,
        assigned_at, reserved, last_settlement, settled_at, updated_at)
      SELECT 'act_history_' || md5(b.tenant_id || b.capability_id || b.instance_id), b.capability_id, b.tenant_id,
             i.instance_id, v.version_id, r.replica_id,
             1, b.policy_revision, b.credential_revision_ref, b.quota_policy_ref, r.health_revision,
             'route_' || md5(b.instance_id || b.capability_id), 1, 1000, 500, 100, 5, 30000,
             now() - interval '1 day', false, 'completed', now() - interval '1 day', now() - interval '1 day'
      FROM aip_capability_bindings b
      JOIN aip_connector_instances i ON i.instance_id = b.instance_id
      JOIN aip_connector_versions v ON v.version_id = i.version_id
      JOIN aip_connector_replicas r ON r.instance_id = i.instance_id
      LIMIT $1
      RETURNING 1)
    SELECT count(*)::int AS n FROM inserted`,
    [limit],
  );
  await session.exec("COMMIT; ANALYZE aip_route_assignments");
  return row?.n ?? 0;
}

/**
 * What publication would have verified, checked on samples: the manifest digest is the registry's
 * own canonical digest, and every definition's digests and size are what admission computes.
 */
export async function verifySeed(session: MigrationSession, l: Layout): Promise<string[]> {
  const problems = await session.query<{ problem: string }>(`
    SELECT 'version ' || v.version_id || ': manifest_digest differs from aip_canonical_json' AS problem
    FROM (SELECT * FROM aip_connector_versions ORDER BY version_id LIMIT 3) v
    JOIN aip_manifests m ON m.manifest_digest = v.manifest_digest
    WHERE aip_sha256(aip_canonical_json(m.manifest)) <> v.manifest_digest
    UNION ALL
    SELECT 'capability ' || d.capability_id || ': digests or size differ from admission'
    FROM (SELECT * FROM aip_capability_definitions ORDER BY capability_id DESC LIMIT 5) d
    WHERE d.schema_digest <> aip_sha256(aip_canonical_json(jsonb_build_object('input', d.capability -> 'input_schema', 'output', d.capability -> 'output_schema')))
       OR d.contract_digest <> aip_sha256(aip_canonical_json(d.capability))
       OR d.definition_bytes <> octet_length(aip_canonical_json(jsonb_build_object(
            'capability', d.capability, 'contract_digest', d.contract_digest, 'schema_digest', d.schema_digest)))
    UNION ALL
    SELECT 'tenant ' || b.tenant_id || ' sees ' || count(DISTINCT b.capability_id) || ' capabilities, expected ${l.visiblePerTenant}'
    FROM aip_capability_bindings b GROUP BY b.tenant_id HAVING count(DISTINCT b.capability_id) <> ${l.visiblePerTenant}`);
  return [...problems.map((p) => p.problem), ...(await danglingReferences(session))];
}

/** Every foreign key of the schema, checked set-based (the seed skipped the per-row triggers). */
async function danglingReferences(session: MigrationSession): Promise<string[]> {
  const keys = await session.query<{ name: string; child: string; parent: string; child_columns: string[]; parent_columns: string[] }>(`
    SELECT c.conname AS name, c.conrelid::regclass::text AS child, c.confrelid::regclass::text AS parent,
           array(SELECT quote_ident(attname) FROM unnest(c.conkey) WITH ORDINALITY k(n, o)
                 JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n ORDER BY o) AS child_columns,
           array(SELECT quote_ident(attname) FROM unnest(c.confkey) WITH ORDINALITY k(n, o)
                 JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.n ORDER BY o) AS parent_columns
    FROM pg_constraint c WHERE c.contype = 'f' AND c.connamespace = 'public'::regnamespace`);
  const problems: string[] = [];
  for (const key of keys) {
    const match = key.child_columns.map((col, i) => `p.${key.parent_columns[i]} = c.${col}`).join(" AND ");
    const present = key.child_columns.map((col) => `c.${col} IS NOT NULL`).join(" AND ");
    const [row] = await session.query<{ n: string }>(
      `SELECT count(*) AS n FROM ${key.child} c WHERE ${present} AND NOT EXISTS (SELECT 1 FROM ${key.parent} p WHERE ${match})`,
    );
    if (Number(row?.n) > 0) problems.push(`${row?.n} rows of ${key.child} break foreign key ${key.name}`);
  }
  return problems;
}

/**
 * Admits, through real publication, a version that re-uses two seeded capability contracts:
 * publication refuses (`conflict`) a contract whose stored digests differ from what admission
 * computes, so this proves the seeded definitions are exactly the published form.
 */
export async function publishProbe(registry: Registry, session: MigrationSession): Promise<void> {
  const rows = await session.query<{ capability: { id: string } }>("SELECT capability FROM aip_capability_definitions ORDER BY capability_id LIMIT 2");
  await registry.publish([
    connectorType("ctype_bench_probe", "org:bench"),
    await version(
      "cver_bench_probe",
      "ctype_bench_probe",
      rows.map((r) => r.capability),
      { owner: "org:bench" },
    ),
  ]);
}
