/**
 * Catalog test helpers: a fleet-scale catalog seeded with set-based SQL as the owner (seconds,
 * not the minutes 100,000 bindings would take through publication), page walks, and the
 * auto_explain capture that shows the plans the catalog functions really execute.
 */
import type pg from "pg";
import type { Registry } from "../../src/registry/registry.js";
import type { CatalogPage } from "../../src/schemas.js";
import { catalogPage } from "../../fixtures/catalog-reads.js";

export const idsOf = (page: CatalogPage) => page.capabilities.map((d) => String(d.capability.id));

export interface FleetShape {
  tenants: number;
  instancesPerTenant: number;
  capabilities: number;
  types: number;
}

const FLEET_SCALE: FleetShape = { tenants: 100, instancesPerTenant: 100, capabilities: 1000, types: 10 };

export const fleetTenant = (t: number) => `tenant-fleet-${String(t).padStart(3, "0")}`;
export const fleetCapability = (n: number) => `cap:fleet.${String(n).padStart(4, "0")}`;

/**
 * Every tenant binds every capability once. Capability n is implemented by the active version of
 * type n % types and bound to the tenant's instance n % instancesPerTenant (whose type is that
 * instance number % types, so the chain is consistent). Noise the filters must skip: each type
 * also has a revoked older version, the last instance of every tenant is disabled, and bindings
 * with n % 50 = 49 are disabled. Even types also declare the profile `aip.mcp.v1`.
 * `fleetVisible` states what a tenant must see. No replicas: the catalog never reads them.
 */
export async function seedCatalogFleet(owner: pg.Pool | pg.Client, shape: FleetShape = FLEET_SCALE): Promise<void> {
  const { tenants, instancesPerTenant, capabilities, types } = shape;
  if (instancesPerTenant % types !== 0) throw new Error("instancesPerTenant must be a multiple of types");
  // The data is consistent by construction, so the bulk load skips the per-row foreign-key
  // triggers (session_replication_role, superuser only): that alone halves the seeding time.
  // Test setup, not a registry call: on a busy machine one of its statements can take longer than
  // the pool's 10 s statement timeout (it did, on the embedded server), so it has none; the
  // hook's timeout bounds it.
  await owner.query(`
    BEGIN;
    SET LOCAL statement_timeout = 0;
    SET LOCAL session_replication_role = replica;
    INSERT INTO aip_capability_definitions (capability_id, contract_digest, schema_digest, capability, definition_bytes, search_text)
    SELECT s.id, 'sha256:' || encode(sha256(convert_to(c.cap::text, 'UTF8')), 'hex'),
           'sha256:' || encode(sha256(convert_to((c.cap -> 'input_schema')::text, 'UTF8')), 'hex'),
           c.cap, octet_length(c.cap::text) + 150, lower(concat_ws(' ', s.id, c.cap ->> 'name', c.cap ->> 'description'))
    FROM (SELECT n, 'cap:fleet.' || lpad(n::text, 4, '0') AS id FROM generate_series(0, ${capabilities - 1}) n) s,
    LATERAL (SELECT jsonb_build_object('id', s.id, 'name', 'Fleet ' || lpad(s.n::text, 4, '0'), 'kind', 'tool',
                    'description', 'Fleet capability number ' || s.n, 'input_schema', '{"type": "object"}'::jsonb) AS cap) c;

    INSERT INTO aip_connector_types (type_id, name, owner, enabled)
    SELECT 'ctype_fleet_' || t, 'Fleet type ' || t, 'org:fleet', true FROM generate_series(0, ${types - 1}) t;

    INSERT INTO aip_manifests (manifest_digest, manifest)
    SELECT 'sha256:' || encode(sha256(convert_to('manifest ' || t || k, 'UTF8')), 'hex'), '{}'
    FROM generate_series(0, ${types - 1}) t, unnest(ARRAY['active', 'old']) k;

    INSERT INTO aip_connector_versions (version_id, type_id, version, status, artifact_digest, manifest_digest, attestation, supply_chain_qualified)
    SELECT 'cver_fleet_' || t || '_' || k, 'ctype_fleet_' || t, k, CASE k WHEN 'active' THEN 'active' ELSE 'revoked' END,
           'sha256:' || encode(sha256(convert_to('artifact ' || t || k, 'UTF8')), 'hex'),
           'sha256:' || encode(sha256(convert_to('manifest ' || t || k, 'UTF8')), 'hex'), '{}', true
    FROM generate_series(0, ${types - 1}) t, unnest(ARRAY['active', 'old']) k;

    INSERT INTO aip_version_capabilities (version_id, capability_id)
    SELECT v.version_id, 'cap:fleet.' || lpad(n::text, 4, '0')
    FROM aip_connector_versions v, generate_series(0, ${capabilities - 1}) n
    WHERE v.version_id LIKE 'cver\\_fleet\\_%' AND v.type_id = 'ctype_fleet_' || (n % ${types});

    INSERT INTO aip_version_profiles (version_id, profile_id)
    SELECT v.version_id, p FROM aip_connector_versions v, unnest(ARRAY['aip.native.http.v1', 'aip.mcp.v1']) p
    WHERE v.version_id LIKE 'cver\\_fleet\\_%' AND (p = 'aip.native.http.v1' OR right(v.type_id, 1)::integer % 2 = 0);

    INSERT INTO aip_connector_instances (instance_id, type_id, version_id, tenant_id, config_revision, secret_provider_ref, status)
    SELECT 'cinst_fleet_' || lpad(t::text, 3, '0') || '_' || lpad(i::text, 3, '0'), 'ctype_fleet_' || (i % ${types}),
           'cver_fleet_' || (i % ${types}) || '_active', 'tenant-fleet-' || lpad(t::text, 3, '0'), 1, 'vault://fleet',
           CASE WHEN i = ${instancesPerTenant - 1} THEN 'disabled' ELSE 'enabled' END
    FROM generate_series(0, ${tenants - 1}) t, generate_series(0, ${instancesPerTenant - 1}) i;

    INSERT INTO aip_capability_bindings (tenant_id, capability_id, instance_id, priority, policy_revision, enabled)
    SELECT 'tenant-fleet-' || lpad(t::text, 3, '0'), 'cap:fleet.' || lpad(n::text, 4, '0'),
           'cinst_fleet_' || lpad(t::text, 3, '0') || '_' || lpad((n % ${instancesPerTenant})::text, 3, '0'), 10, 1, n % 50 <> 49
    FROM generate_series(0, ${tenants - 1}) t, generate_series(0, ${capabilities - 1}) n;

    -- What publication maintains for every change: the live binding chains the catalog reads.
    SELECT aip_rebuild_catalog_entries();
    UPDATE aip_catalog_revision SET revision = revision + 1, published_at = now() WHERE singleton;
    COMMIT;
    ANALYZE aip_capability_definitions, aip_connector_types, aip_connector_versions, aip_version_capabilities,
            aip_version_profiles, aip_connector_instances, aip_capability_bindings;
  `);
}

/** What seedCatalogFleet makes visible to any of its tenants, in order, for a profile filter. */
export function fleetVisible(shape: FleetShape = FLEET_SCALE, profile?: string): string[] {
  const ids: string[] = [];
  for (let n = 0; n < shape.capabilities; n++) {
    if (n % 50 === 49 || n % shape.instancesPerTenant === shape.instancesPerTenant - 1) continue;
    if (profile === "aip.mcp.v1" && (n % shape.types) % 2 !== 0) continue;
    if (profile !== undefined && profile !== "aip.mcp.v1" && profile !== "aip.native.http.v1") continue;
    ids.push(fleetCapability(n));
  }
  return ids;
}

export interface Walk {
  ids: string[];
  pages: CatalogPage[];
}

/** Follows next_cursor from the first page to the last. */
async function walkCatalog(read: (cursor: string | undefined) => Promise<CatalogPage>, maxPages = 10_000): Promise<Walk> {
  const pages: CatalogPage[] = [];
  let cursor: string | undefined;
  do {
    const page = await read(cursor);
    pages.push(page);
    cursor = page.next_cursor ?? undefined;
    if (pages.length > maxPages) throw new Error("catalog walk does not terminate");
  } while (cursor);
  return { ids: pages.flatMap((page) => page.capabilities.map((d) => String(d.capability.id))), pages };
}

export const tenantWalk = (registry: Registry, tenantId: string, query: Record<string, unknown> = {}) =>
  walkCatalog((cursor) => catalogPage(registry, tenantId, { ...query, ...(cursor ? { cursor } : {}) }));

/**
 * Runs `statement` on a dedicated owner session with auto_explain logging every nested statement
 * as a NOTICE, and returns the text plans (one per statement the functions executed). This is the
 * plan PostgreSQL really chose inside PL/pgSQL, not an EXPLAIN of a look-alike query.
 */
export async function capturePlans(client: pg.Client, statement: string, params: unknown[] = []): Promise<string[]> {
  const plans: string[] = [];
  const onNotice = (notice: { message?: string }) => {
    if (notice.message?.includes("plan:")) plans.push(notice.message);
  };
  await client.query(`LOAD 'auto_explain';
    SET auto_explain.log_min_duration = 0; SET auto_explain.log_nested_statements = on;
    SET auto_explain.log_level = notice; SET auto_explain.log_format = text`);
  client.on("notice", onNotice);
  try {
    await client.query(statement, params);
  } finally {
    await client.query("SET auto_explain.log_min_duration = -1");
    client.off("notice", onNotice);
  }
  return plans;
}
