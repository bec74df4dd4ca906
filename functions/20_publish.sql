-- Catalog publication: one batch of changes applied atomically under the exclusive catalog
-- publication lock, in two passes.
--
-- 1. Prepare (no lock): every change is validated and normalized on its own by aip_prep_*:
--    field types and bounds, labels, endpoints, supply-chain evidence, and for a version the
--    canonical manifest, its digest and every capability's digests and size. Nothing here reads
--    stored state, so a large manifest (up to 4 MiB) is canonicalized while resolvers and
--    catalog readers go on unhindered.
-- 2. Apply (exclusive lock): aip_pub_* checks each prepared change against stored state and
--    writes it, returning its outcome ('created' | 'updated' | 'unchanged'). The revision
--    advances once if anything but replica provisioning changed.
--
-- The "Know what may change" rules of the specification live here:
--   connector type      id, name, owner fixed                  enabled mutable
--   connector version   everything fixed                       status: admitted <-> active, any -> revoked, never back from revoked;
--                                                              supply_chain_qualified: revoked and restored by operators (restoring re-checks the evidence)
--   capability          id, contract and schema digest fixed   a conflicting contract under the same id is refused
--   connector instance  id, type, tenant fixed                 the rest only with a newer config_revision; a rollout may not drop a bound capability
--   capability binding  (tenant, capability, instance) fixed   the rest only with a newer policy_revision
--   admission policy    policy_ref fixed                       the rest only with a newer revision
--   connector replica   identity, endpoint, topology fixed     capacity (operator), status/lease/health (hosts, replicas.sql)

-- Connector types ---------------------------------------------------------------------------------
CREATE FUNCTION aip_prep_put_connector_type(p jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
  SELECT jsonb_build_object(
    'id', aip_read_text(p, 'id'),
    'name', aip_read_text(p, 'name', true, 512),
    'owner', aip_read_text(p, 'owner', true, 512),
    'enabled', aip_read_bool(p, 'enabled', true),
    -- `enabled` moves only when a re-put states it; an absent or null flag keeps the stored one.
    'enabled_stated', jsonb_typeof(p -> 'enabled') = 'boolean')
$$;

CREATE FUNCTION aip_pub_put_connector_type(n jsonb) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  v_id text := n ->> 'id';
  v_enabled boolean := (n ->> 'enabled')::boolean;
  t aip_connector_types;
BEGIN
  SELECT * INTO t FROM aip_connector_types WHERE type_id = v_id FOR UPDATE;
  IF NOT FOUND THEN
    INSERT INTO aip_connector_types (type_id, name, owner, enabled) VALUES (v_id, n ->> 'name', n ->> 'owner', v_enabled);
    RETURN 'created';
  END IF;
  IF t.name <> n ->> 'name' OR t.owner <> n ->> 'owner' THEN
    PERFORM aip_fail('conflict', format('connector type `%s` already exists with another name or owner', v_id),
                     jsonb_build_object('connector_type_id', v_id));
  END IF;
  IF (n ->> 'enabled_stated')::boolean AND t.enabled <> v_enabled THEN
    UPDATE aip_connector_types SET enabled = v_enabled, updated_at = now() WHERE type_id = v_id;
    RETURN 'updated';
  END IF;
  RETURN 'unchanged';
END
$$;

CREATE FUNCTION aip_prep_set_connector_type_enabled(p jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
  SELECT jsonb_build_object('id', aip_read_text(p, 'id'), 'enabled', aip_read_bool(p, 'enabled'))
$$;

CREATE FUNCTION aip_pub_set_connector_type_enabled(n jsonb) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  v_id text := n ->> 'id';
  v_enabled boolean := (n ->> 'enabled')::boolean;
  t aip_connector_types;
BEGIN
  SELECT * INTO t FROM aip_connector_types WHERE type_id = v_id FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM aip_fail('not-found', format('connector type `%s` was not found', v_id), jsonb_build_object('connector_type_id', v_id));
  END IF;
  IF t.enabled = v_enabled THEN RETURN 'unchanged'; END IF;
  UPDATE aip_connector_types SET enabled = v_enabled, updated_at = now() WHERE type_id = v_id;
  RETURN 'updated';
END
$$;

-- Connector versions ------------------------------------------------------------------------------
CREATE FUNCTION aip_version_transition(v aip_connector_versions, p_status text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
  IF v.status = p_status THEN RETURN 'unchanged'; END IF;
  IF p_status = 'candidate' THEN
    PERFORM aip_invalid_field('status', 'cannot return an admitted version to candidate');
  END IF;
  IF v.status = 'revoked' THEN
    PERFORM aip_fail('conflict', format('revoked connector version `%s` cannot be reactivated', v.version_id),
                     jsonb_build_object('version_id', v.version_id));
  END IF;
  IF p_status = 'active' AND NOT v.supply_chain_qualified THEN
    PERFORM aip_fail('admission', format('connector version `%s` is not supply-chain qualified', v.version_id),
                     jsonb_build_object('version_id', v.version_id));
  END IF;
  UPDATE aip_connector_versions SET status = p_status, updated_at = now() WHERE version_id = v.version_id;
  RETURN 'updated';
END
$$;

CREATE FUNCTION aip_prep_set_version_status(p jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
  SELECT jsonb_build_object('id', aip_read_text(p, 'id'),
                            'status', aip_read_enum(p, 'status', ARRAY['candidate', 'admitted', 'active', 'revoked']))
$$;

CREATE FUNCTION aip_pub_set_version_status(n jsonb) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  v_id text := n ->> 'id';
  v aip_connector_versions;
BEGIN
  SELECT * INTO v FROM aip_connector_versions WHERE version_id = v_id FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM aip_fail('not-found', format('connector version `%s` was not found', v_id), jsonb_build_object('version_id', v_id));
  END IF;
  RETURN aip_version_transition(v, n ->> 'status');
END
$$;

-- Supply-chain evidence ----------------------------------------------------------------------------
-- A version is admitted only with complete, passing evidence, checked in two steps: its form
-- (invalid when wrong: aip_check_attestation, and the shapes in aip_prep_admit_version) before its
-- verdict (admission when refused: aip_check_evidence), each refusal naming its field. Within each
-- step the checks run in the reference's order (reference-behaviour.md section 4.6).

-- The registry/SDK contract version this registry implements: the AIP connector registry 1.0
-- contracts of the specification. An artifact's `sdk_version_requirement` (a Cargo-style semver
-- requirement, aip_semver_matches) must include it.
CREATE FUNCTION aip_registry_sdk_version() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT '1.0.0'
$$;

-- One text member of the attestation, named attestation.<member> when refused.
CREATE FUNCTION aip_attestation_text(a jsonb, p_member text, p_max_bytes integer) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT aip_read_text(jsonb_build_object('attestation.' || p_member, a -> p_member), 'attestation.' || p_member, true, p_max_bytes)
$$;

-- The form of the evidence: the seven digests well-formed, the four texts present, the AIP
-- versions a list of strings, each check status a known one. Returns the artifact digest.
CREATE FUNCTION aip_check_attestation(a jsonb) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  v_field text;
BEGIN
  IF a IS NULL OR jsonb_typeof(a) <> 'object' THEN
    PERFORM aip_invalid_field('attestation', 'must be an object');
  END IF;
  FOREACH v_field IN ARRAY ARRAY['artifact_digest', 'schema_bundle_digest', 'sbom_digest', 'provenance_digest',
                                 'conformance_report_digest', 'vulnerability_report_digest', 'license_report_digest'] LOOP
    PERFORM aip_check_digest('attestation.' || v_field, aip_attestation_text(a, v_field, 71));
  END LOOP;
  FOREACH v_field IN ARRAY ARRAY['signature_ref', 'signer_identity', 'owner'] LOOP
    PERFORM aip_attestation_text(a, v_field, 512);
  END LOOP;
  PERFORM aip_attestation_text(a, 'sdk_version_requirement', 256);
  IF jsonb_typeof(a -> 'supported_aip_versions') IS DISTINCT FROM 'array'
     OR EXISTS (SELECT 1 FROM jsonb_array_elements(a -> 'supported_aip_versions') e WHERE jsonb_typeof(e) <> 'string') THEN
    PERFORM aip_invalid_field('attestation.supported_aip_versions', 'must be an array of strings');
  END IF;
  FOREACH v_field IN ARRAY ARRAY['conformance_status', 'vulnerability_policy_status', 'license_policy_status', 'revocation_status'] LOOP
    PERFORM aip_read_enum(jsonb_build_object('attestation.' || v_field, a -> v_field), 'attestation.' || v_field,
                          ARRAY['not_evaluated', 'passed', 'failed']);
  END LOOP;
  RETURN a ->> 'artifact_digest';
END
$$;

-- Each capability's canonical {"input": ..., "output": ...} (a missing output is null), in
-- manifest order: the text of its schema_digest, and the body of its schema bundle entry.
CREATE FUNCTION aip_canonical_schemas(p_capabilities jsonb) RETURNS text[]
LANGUAGE sql IMMUTABLE AS $$
  SELECT coalesce(array_agg('{"input":' || aip_canonical_json(e.value -> 'input_schema')
                            || ',"output":' || coalesce(aip_canonical_json(e.value -> 'output_schema'), 'null') || '}'
                            ORDER BY e.ordinality), '{}')
  FROM jsonb_array_elements(p_capabilities) WITH ORDINALITY AS e
$$;

-- A manifest's canonical text with each node walked once: every capability's schemas first (at
-- the depth they have in the manifest, so the nesting bound counts as for the whole document),
-- each capability around its schemas' texts, the manifest around its capabilities' texts. Also
-- returns the capabilities' texts and their aip_canonical_schemas entries, in manifest order.
CREATE FUNCTION aip_canonical_manifest(p_manifest jsonb, OUT manifest text, OUT capabilities text[], OUT schemas text[])
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  -- manifest (1) > its capabilities array (2) > a capability (3) > the capability's schemas (4)
  c_schema_depth constant integer := 4;
  v_inputs text[];
  v_outputs text[];
BEGIN
  -- Two statements on purpose: in one, the planner would substitute each schema's canonical
  -- call into every expression that uses its text, and walk the schema once per use.
  SELECT coalesce(array_agg(aip_canonical_json(e.cap -> 'input_schema', c_schema_depth) ORDER BY e.n), '{}'),
         coalesce(array_agg(aip_canonical_json(e.cap -> 'output_schema', c_schema_depth) ORDER BY e.n), '{}')
  INTO v_inputs, v_outputs
  FROM jsonb_array_elements(p_manifest -> 'capabilities') WITH ORDINALITY AS e(cap, n);
  SELECT coalesce(array_agg(aip_canonical_json(e.cap, 3, jsonb_strip_nulls(jsonb_build_object('input_schema', v_inputs[e.n], 'output_schema', v_outputs[e.n])))
                            ORDER BY e.n), '{}'),
         coalesce(array_agg('{"input":' || v_inputs[e.n] || ',"output":' || coalesce(v_outputs[e.n], 'null') || '}' ORDER BY e.n), '{}')
  INTO capabilities, schemas
  FROM jsonb_array_elements(p_manifest -> 'capabilities') WITH ORDINALITY AS e(cap, n);
  manifest := aip_canonical_json(p_manifest, 1, jsonb_build_object('capabilities', '[' || array_to_string(capabilities, ',') || ']'));
END
$$;

-- The schema bundle digest of a manifest: SHA-256 of the canonical
-- {"schemas": [{"capability_id", "input", "output"}, ...]} in manifest order, as the reference
-- computes it. p_schemas: aip_canonical_schemas of the same capabilities.
CREATE FUNCTION aip_schema_bundle_digest(p_capabilities jsonb, p_schemas text[]) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT aip_sha256('{"schemas":[' || coalesce(string_agg(
           '{"capability_id":' || to_jsonb(e.value ->> 'id')::text || ',' || substr(p_schemas[e.ordinality], 2), ','
           ORDER BY e.ordinality), '') || ']}')
  FROM jsonb_array_elements(p_capabilities) WITH ORDINALITY AS e
$$;

-- Implementation claims (the reference's manifest admission with claims required): every
-- callable capability (any kind but resource) has an entry in implementation_support that claims
-- invocation, and every entry supports what its capability's contract declares: cancellation,
-- streaming and retry (contract.execution.supports_*), transaction (a contract.transaction),
-- reconciliation (a reconcile transaction mode), compensation (mode supported), approval and
-- credentials (required).
CREATE FUNCTION aip_check_implementation_claims(p_capabilities jsonb, p_support jsonb) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  v_cap jsonb;
  v_id text;
  v_claims jsonb;
  v_missing text;
BEGIN
  FOR v_cap IN SELECT e FROM jsonb_array_elements(p_capabilities) e LOOP
    v_id := v_cap ->> 'id';
    v_claims := p_support -> v_id;
    IF v_claims IS NULL THEN
      CONTINUE WHEN v_cap ->> 'kind' IS NOT DISTINCT FROM 'resource';
      PERFORM aip_fail('admission', format('callable capability `%s` has no implementation claim', v_id),
                       jsonb_build_object('field', 'implementation_support.' || v_id, 'capability_id', v_id));
    END IF;
    SELECT c.claim INTO v_missing
    FROM (VALUES
      (1, 'invocation', v_cap ->> 'kind' IS DISTINCT FROM 'resource'),
      (2, 'cancellation', v_cap #> '{contract,execution,supports_cancel}' = 'true'),
      (3, 'streaming', v_cap #> '{contract,execution,supports_streaming}' = 'true'),
      (4, 'retry', v_cap #> '{contract,execution,supports_retry}' = 'true'),
      (5, 'transaction', jsonb_typeof(v_cap #> '{contract,transaction}') = 'object'),
      (6, 'reconciliation', v_cap #> '{contract,transaction,supported_modes}' @> '["reconcile"]'),
      (7, 'compensation', v_cap #>> '{contract,compensation,mode}' = 'supported'),
      (8, 'approval', v_cap #> '{contract,approval,required}' = 'true'),
      (9, 'credentials', v_cap #> '{contract,credentials,required}' = 'true')) AS c(rank, claim, declared)
    WHERE c.declared AND (v_claims -> c.claim) IS DISTINCT FROM 'true'::jsonb
    ORDER BY c.rank
    LIMIT 1;
    IF FOUND THEN
      PERFORM aip_fail('admission', format('capability `%s` declares `%s` but its implementation claim does not support it', v_id, v_missing),
                       jsonb_build_object('field', 'implementation_support.' || v_id || '.' || v_missing, 'capability_id', v_id));
    END IF;
  END LOOP;
END
$$;

-- The verdict on well-formed evidence (admission when refused), in the reference's order:
-- AIP 1.0 declared, the SDK requirement valid and including this registry's version, the four
-- checks passed, the schema bundle digest that of the manifest's schemas, the implementation
-- claims complete. p_schemas: aip_canonical_schemas of the manifest's capabilities.
CREATE FUNCTION aip_check_evidence(p_manifest jsonb, a jsonb, p_support jsonb, p_schemas text[]) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  v_field text;
  v_status text;
  v_matches boolean;
  v_bundle text;
BEGIN
  IF NOT a -> 'supported_aip_versions' @> '["1.0"]'::jsonb THEN
    PERFORM aip_fail('admission', 'artifact does not declare compatibility with AIP 1.0',
                     jsonb_build_object('field', 'attestation.supported_aip_versions'));
  END IF;
  v_matches := aip_semver_matches(a ->> 'sdk_version_requirement', aip_registry_sdk_version());
  IF v_matches IS NULL THEN
    PERFORM aip_fail('admission', format('artifact SDK version requirement `%s` is not a valid semver requirement', a ->> 'sdk_version_requirement'),
                     jsonb_build_object('field', 'attestation.sdk_version_requirement'));
  END IF;
  IF NOT v_matches THEN
    PERFORM aip_fail('admission', format('artifact SDK requirement `%s` does not include registry SDK `%s`',
                                         a ->> 'sdk_version_requirement', aip_registry_sdk_version()),
                     jsonb_build_object('field', 'attestation.sdk_version_requirement', 'registry_sdk_version', aip_registry_sdk_version()));
  END IF;
  FOREACH v_field IN ARRAY ARRAY['conformance_status', 'vulnerability_policy_status', 'license_policy_status', 'revocation_status'] LOOP
    v_status := a ->> v_field;
    IF v_status <> 'passed' THEN
      PERFORM aip_fail('admission', format('%s evidence did not pass admission (%s)', v_field, v_status),
                       jsonb_build_object('field', 'attestation.' || v_field, 'check_status', v_status));
    END IF;
  END LOOP;
  v_bundle := aip_schema_bundle_digest(p_manifest -> 'capabilities', p_schemas);
  IF a ->> 'schema_bundle_digest' <> v_bundle THEN
    PERFORM aip_fail('admission', 'declared schema bundle digest does not match the manifest schemas',
                     jsonb_build_object('field', 'attestation.schema_bundle_digest', 'computed', v_bundle));
  END IF;
  PERFORM aip_check_implementation_claims(p_manifest -> 'capabilities', p_support);
END
$$;

-- Everything about a version that needs no stored state: its form, then its evidence, then each
-- capability's definition with its digests and canonical size, in manifest order. Form first
-- (invalid), verdicts after (admission): a refusal is never for evidence the registry could not
-- even read.
CREATE FUNCTION aip_prep_admit_version(p jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  c_max_capabilities constant integer := 512;
  c_max_manifest_bytes constant integer := 4194304;
  c_max_definition_bytes constant integer := 262144;
  c_claims constant text[] := ARRAY['invocation', 'cancellation', 'streaming', 'retry', 'transaction',
                                    'reconciliation', 'compensation', 'approval', 'credentials'];
  v_id text := aip_read_text(p, 'id');
  v_type_id text := aip_read_text(p, 'connector_type_id');
  v_version text := aip_read_text(p, 'version', true, 128);
  -- Optional: a new version defaults to admitted, a re-put without status keeps the stored one.
  v_status text := nullif(aip_read_enum(p, 'status', ARRAY['candidate', 'admitted', 'active', 'revoked'], ''), '');
  v_manifest jsonb := p -> 'manifest';
  v_manifest_digest text := aip_check_digest('manifest_digest', aip_read_text(p, 'manifest_digest', true, 71));
  v_attestation jsonb := p -> 'attestation';
  v_support jsonb := coalesce(nullif(p -> 'implementation_support', 'null'::jsonb), '{}'::jsonb);
  v_artifact_digest text;
  v_caps jsonb;
  v_profiles jsonb;
  v_canonical text;
  v_schemas text[];
  v_cap jsonb;
  v_cap_id text;
  v_key text;
  v_claims jsonb;
  v_index integer := 0;
  -- Array variables, not jsonb arrays: PL/pgSQL appends to them in place, where appending to
  -- jsonb would copy every definition so far (quadratic in a 512-capability manifest).
  v_defs jsonb[] := '{}';
  v_ids text[] := '{}';
  v_cap_canonical text;
  v_cap_texts text[];
  v_contract_digest text;
  v_schema_digest text;
  v_def_bytes integer;
BEGIN
  -- Form ----------------------------------------------------------------------------------------
  IF v_manifest IS NULL OR jsonb_typeof(v_manifest) <> 'object' THEN
    PERFORM aip_invalid_field('manifest', 'must be an object');
  END IF;
  v_caps := v_manifest -> 'capabilities';
  IF v_caps IS NULL OR jsonb_typeof(v_caps) <> 'array' THEN
    PERFORM aip_invalid_field('manifest.capabilities', 'must be an array');
  END IF;
  v_profiles := coalesce(v_manifest -> 'profiles', '[]'::jsonb);
  IF jsonb_typeof(v_profiles) <> 'array'
     OR EXISTS (SELECT 1 FROM jsonb_array_elements(v_profiles) e
                WHERE jsonb_typeof(e) <> 'string' OR btrim(e #>> '{}') = '' OR octet_length(e #>> '{}') > 256) THEN
    PERFORM aip_invalid_field('manifest.profiles', 'must be an array of non-empty strings of at most 256 bytes');
  END IF;
  FOR v_cap IN SELECT e FROM jsonb_array_elements(v_caps) e LOOP
    IF jsonb_typeof(v_cap) <> 'object' THEN
      PERFORM aip_invalid_field('manifest.capabilities', 'must contain objects');
    END IF;
    v_cap_id := aip_read_text(v_cap, 'id');
    PERFORM aip_read_text(v_cap, 'name', true, 1024);
    IF jsonb_typeof(v_cap -> 'input_schema') IS DISTINCT FROM 'object' THEN
      PERFORM aip_invalid_field('manifest.capabilities[' || v_cap_id || '].input_schema', 'must be an object');
    END IF;
    IF v_cap ? 'output_schema' AND jsonb_typeof(v_cap -> 'output_schema') NOT IN ('object', 'null') THEN
      PERFORM aip_invalid_field('manifest.capabilities[' || v_cap_id || '].output_schema', 'must be an object');
    END IF;
    IF v_cap ? 'description' AND jsonb_typeof(v_cap -> 'description') NOT IN ('string', 'null') THEN
      PERFORM aip_invalid_field('manifest.capabilities[' || v_cap_id || '].description', 'must be a string');
    END IF;
    IF v_cap_id = ANY (v_ids) THEN
      PERFORM aip_invalid_field('manifest.capabilities', format('lists capability `%s` twice', v_cap_id));
    END IF;
    v_ids := v_ids || v_cap_id;
  END LOOP;
  v_artifact_digest := aip_check_attestation(v_attestation);
  IF jsonb_typeof(v_support) <> 'object' THEN
    PERFORM aip_invalid_field('implementation_support', 'must be an object keyed by capability ID');
  END IF;
  FOR v_key, v_claims IN SELECT e.key, e.value FROM jsonb_each(v_support) e LOOP
    IF NOT v_key = ANY (v_ids) THEN
      PERFORM aip_invalid_field('implementation_support.' || v_key, 'names a capability the manifest does not declare');
    END IF;
    IF jsonb_typeof(v_claims) <> 'object'
       OR EXISTS (SELECT 1 FROM jsonb_each(v_claims) c WHERE NOT c.key = ANY (c_claims) OR jsonb_typeof(c.value) <> 'boolean') THEN
      PERFORM aip_invalid_field('implementation_support.' || v_key, 'must map some of ' || array_to_string(c_claims, ', ') || ' to booleans');
    END IF;
  END LOOP;

  -- Verdicts ------------------------------------------------------------------------------------
  IF v_status = 'candidate' THEN
    PERFORM aip_fail('admission', 'candidate versions cannot be installed as admitted records',
                     jsonb_build_object('field', 'status'));
  END IF;
  IF jsonb_array_length(v_caps) > c_max_capabilities THEN
    PERFORM aip_fail('admission', format('manifest contains %s capabilities; limit is %s', jsonb_array_length(v_caps), c_max_capabilities),
                     jsonb_build_object('field', 'manifest.capabilities'));
  END IF;
  SELECT c.manifest, c.capabilities, c.schemas INTO v_canonical, v_cap_texts, v_schemas FROM aip_canonical_manifest(v_manifest) c;
  IF octet_length(v_canonical) > c_max_manifest_bytes THEN
    PERFORM aip_fail('admission', format('canonical manifest is %s bytes; limit is %s', octet_length(v_canonical), c_max_manifest_bytes),
                     jsonb_build_object('field', 'manifest'));
  END IF;
  IF aip_sha256(v_canonical) <> v_manifest_digest THEN
    PERFORM aip_fail('admission', 'declared manifest digest does not match canonical manifest',
                     jsonb_build_object('field', 'manifest_digest', 'computed', aip_sha256(v_canonical)));
  END IF;
  PERFORM aip_check_evidence(v_manifest, v_attestation, v_support, v_schemas);

  -- Definitions ---------------------------------------------------------------------------------
  FOR v_cap IN SELECT e FROM jsonb_array_elements(v_caps) e LOOP
    v_index := v_index + 1;
    v_cap_id := v_cap ->> 'id';
    -- The definition {capability, contract_digest, schema_digest} is the capability's canonical
    -- text with its two digests, members already in canonical order.
    v_cap_canonical := v_cap_texts[v_index];
    v_contract_digest := aip_sha256(v_cap_canonical);
    v_schema_digest := aip_sha256(v_schemas[v_index]);
    v_def_bytes := octet_length('{"capability":' || v_cap_canonical || ',"contract_digest":"' || v_contract_digest
                                || '","schema_digest":"' || v_schema_digest || '"}');
    IF v_def_bytes > c_max_definition_bytes THEN
      PERFORM aip_fail('admission', format('capability `%s` is %s bytes; limit is %s', v_cap_id, v_def_bytes, c_max_definition_bytes),
                       jsonb_build_object('field', 'manifest.capabilities[' || v_cap_id || ']', 'capability_id', v_cap_id));
    END IF;
    v_defs := v_defs || jsonb_build_object(
      'id', v_cap_id, 'capability', v_cap, 'contract_digest', v_contract_digest,
      'schema_digest', v_schema_digest, 'bytes', v_def_bytes);
  END LOOP;

  RETURN jsonb_build_object(
    'id', v_id, 'connector_type_id', v_type_id, 'version', v_version, 'status', v_status,
    'manifest', v_manifest, 'manifest_digest', v_manifest_digest, 'attestation', v_attestation,
    'implementation_support', v_support, 'artifact_digest', v_artifact_digest,
    -- Every check above passed: the evidence qualifies the version (an operator may revoke that
    -- later with set_version_qualification).
    'supply_chain_qualified', true,
    'definitions', to_jsonb(v_defs),
    'profiles', (SELECT coalesce(jsonb_agg(DISTINCT e), '[]'::jsonb) FROM jsonb_array_elements(v_profiles) e));
END
$$;

CREATE FUNCTION aip_pub_admit_version(n jsonb) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  v_id text := n ->> 'id';
  v_type_id text := n ->> 'connector_type_id';
  v_version text := n ->> 'version';
  v_status text := n ->> 'status';
  v_manifest jsonb := n -> 'manifest';
  v_attestation jsonb := n -> 'attestation';
  v_artifact_digest text := n ->> 'artifact_digest';
  v_defs jsonb := n -> 'definitions';
  v_type aip_connector_types;
  v_existing aip_connector_versions;
  v_other text;
BEGIN
  -- An identical re-put is a no-op (or a status move) whatever has happened to its type since,
  -- so the stored version is looked at first.
  SELECT * INTO v_existing FROM aip_connector_versions WHERE version_id = v_id FOR UPDATE;
  IF FOUND THEN
    IF v_existing.type_id <> v_type_id OR v_existing.version <> v_version OR v_existing.manifest <> v_manifest
       OR v_existing.manifest_digest <> n ->> 'manifest_digest' OR v_existing.attestation <> v_attestation
       OR v_existing.implementation_support <> n -> 'implementation_support' THEN
      PERFORM aip_fail('conflict', format('connector version `%s` is immutable', v_id), jsonb_build_object('version_id', v_id));
    END IF;
    -- The same admitted content: the record's status is the only thing a re-put may move.
    RETURN aip_version_transition(v_existing, coalesce(v_status, v_existing.status));
  END IF;

  SELECT * INTO v_type FROM aip_connector_types WHERE type_id = v_type_id;
  IF NOT FOUND THEN
    PERFORM aip_fail('not-found', format('connector type `%s` was not found', v_type_id), jsonb_build_object('connector_type_id', v_type_id));
  END IF;
  IF NOT v_type.enabled THEN
    PERFORM aip_fail('admission', format('connector type `%s` is disabled', v_type_id), jsonb_build_object('connector_type_id', v_type_id));
  END IF;
  IF v_attestation ->> 'owner' <> v_type.owner THEN
    PERFORM aip_fail('admission', format('artifact owner `%s` does not match connector type owner `%s`', v_attestation ->> 'owner', v_type.owner),
                     jsonb_build_object('field', 'attestation.owner'));
  END IF;

  SELECT version_id INTO v_other FROM aip_connector_versions WHERE artifact_digest = v_artifact_digest;
  IF FOUND THEN
    PERFORM aip_fail('conflict', format('artifact digest is already admitted as connector version `%s`', v_other),
                     jsonb_build_object('version_id', v_other));
  END IF;
  SELECT version_id INTO v_other FROM aip_connector_versions WHERE type_id = v_type_id AND version = v_version;
  IF FOUND THEN
    PERFORM aip_fail('conflict', format('connector type `%s` already has version `%s` as `%s`', v_type_id, v_version, v_other),
                     jsonb_build_object('version_id', v_other));
  END IF;
  SELECT d.capability_id INTO v_other
  FROM jsonb_array_elements(v_defs) e
  JOIN aip_capability_definitions d ON d.capability_id = e ->> 'id'
  WHERE d.contract_digest <> e ->> 'contract_digest' OR d.capability <> e -> 'capability'
  LIMIT 1;
  IF FOUND THEN
    PERFORM aip_fail('conflict', format('capability `%s` has another admitted contract digest', v_other),
                     jsonb_build_object('capability_id', v_other));
  END IF;

  INSERT INTO aip_connector_versions (version_id, type_id, version, status, artifact_digest, manifest_digest,
                                      manifest, attestation, implementation_support, supply_chain_qualified)
  VALUES (v_id, v_type_id, v_version, coalesce(v_status, 'admitted'), v_artifact_digest, n ->> 'manifest_digest',
          v_manifest, v_attestation, n -> 'implementation_support', (n ->> 'supply_chain_qualified')::boolean);
  INSERT INTO aip_capability_definitions (capability_id, contract_digest, schema_digest, capability, definition_bytes, search_text)
  SELECT e ->> 'id', e ->> 'contract_digest', e ->> 'schema_digest', e -> 'capability', (e ->> 'bytes')::integer,
         lower(concat_ws(' ', e ->> 'id', e #>> '{capability,name}', e #>> '{capability,description}'))
  FROM jsonb_array_elements(v_defs) e
  ON CONFLICT (capability_id) DO NOTHING;
  INSERT INTO aip_version_capabilities (version_id, capability_id)
  SELECT v_id, e ->> 'id' FROM jsonb_array_elements(v_defs) e;
  INSERT INTO aip_version_profiles (version_id, profile_id)
  SELECT v_id, e #>> '{}' FROM jsonb_array_elements(n -> 'profiles') e;
  RETURN 'created';
END
$$;

-- Supply-chain qualification after admission: an operator revokes it (a vulnerability report
-- changed, a signature was withdrawn) or restores it. A version that is not qualified is in no
-- catalog, takes no new route and serves no retry of a pinned one, whatever its status. Restoring
-- it re-checks the stored evidence against today's rules (those of this registry's SDK version,
-- including for versions admitted before a check existed): it is rare, so canonicalizing the
-- schemas again under the publication lock is acceptable.
CREATE FUNCTION aip_prep_set_version_qualification(p jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
  SELECT jsonb_build_object('id', aip_read_text(p, 'id'),
                            'supply_chain_qualified', aip_read_bool(p, 'supply_chain_qualified'),
                            'reason', aip_read_text(p, 'reason', false, 1024))
$$;

-- The stored evidence of a version passes today's checks, or admission names what fails.
CREATE FUNCTION aip_recheck_evidence(v aip_connector_versions) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_message text;
  v_detail jsonb;
BEGIN
  PERFORM aip_check_attestation(v.attestation);
  PERFORM aip_check_evidence(v.manifest, v.attestation, v.implementation_support, aip_canonical_schemas(v.manifest -> 'capabilities'));
EXCEPTION WHEN SQLSTATE 'AR400' OR SQLSTATE 'AR422' THEN
  GET STACKED DIAGNOSTICS v_message = MESSAGE_TEXT, v_detail = PG_EXCEPTION_DETAIL;
  PERFORM aip_fail('admission', format('connector version `%s` cannot be qualified again: %s', v.version_id, v_message),
                   jsonb_strip_nulls(jsonb_build_object('version_id', v.version_id,
                     'field', coalesce(v_detail ->> 'field', v_detail #>> '{errors,0,field}'))));
END
$$;

CREATE FUNCTION aip_pub_set_version_qualification(n jsonb) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  v_id text := n ->> 'id';
  v_qualified boolean := (n ->> 'supply_chain_qualified')::boolean;
  v aip_connector_versions;
BEGIN
  SELECT * INTO v FROM aip_connector_versions WHERE version_id = v_id FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM aip_fail('not-found', format('connector version `%s` was not found', v_id), jsonb_build_object('version_id', v_id));
  END IF;
  IF v.supply_chain_qualified = v_qualified THEN RETURN 'unchanged'; END IF;
  IF v_qualified THEN PERFORM aip_recheck_evidence(v); END IF;
  UPDATE aip_connector_versions
  SET supply_chain_qualified = v_qualified, qualification_reason = n ->> 'reason', updated_at = now()
  WHERE version_id = v_id;
  RETURN 'updated';
END
$$;

-- Connector instances -----------------------------------------------------------------------------
CREATE FUNCTION aip_prep_put_instance(p jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
  SELECT jsonb_build_object(
    'id', aip_read_text(p, 'id'),
    'connector_type_id', aip_read_text(p, 'connector_type_id'),
    'version_id', aip_read_text(p, 'version_id'),
    'tenant_id', aip_read_text(p, 'tenant_id'),
    'config_revision', aip_read_int(p, 'config_revision', 0, 9007199254740991),
    'secret_provider_ref', aip_read_text(p, 'secret_provider_ref', true, 1024),
    'status', aip_read_enum(p, 'status', ARRAY['enabled', 'disabled'], 'enabled'))
$$;

CREATE FUNCTION aip_pub_put_instance(n jsonb) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  v_id text := n ->> 'id';
  v_type_id text := n ->> 'connector_type_id';
  v_version_id text := n ->> 'version_id';
  v_tenant_id text := n ->> 'tenant_id';
  v_config_revision bigint := (n ->> 'config_revision')::bigint;
  v_secret_ref text := n ->> 'secret_provider_ref';
  v_status text := n ->> 'status';
  v_version aip_connector_versions;
  i aip_connector_instances;
  v_missing text;
BEGIN
  PERFORM 1 FROM aip_connector_types WHERE type_id = v_type_id;
  IF NOT FOUND THEN
    PERFORM aip_fail('not-found', format('connector type `%s` was not found', v_type_id), jsonb_build_object('connector_type_id', v_type_id));
  END IF;
  SELECT * INTO v_version FROM aip_connector_versions WHERE version_id = v_version_id;
  IF NOT FOUND THEN
    PERFORM aip_fail('not-found', format('connector version `%s` was not found', v_version_id), jsonb_build_object('version_id', v_version_id));
  END IF;
  IF v_version.type_id <> v_type_id THEN
    PERFORM aip_invalid_field('version_id', format('belongs to connector type `%s`, not `%s`', v_version.type_id, v_type_id));
  END IF;

  SELECT * INTO i FROM aip_connector_instances WHERE instance_id = v_id FOR UPDATE;
  IF NOT FOUND THEN
    INSERT INTO aip_connector_instances (instance_id, type_id, version_id, tenant_id, config_revision, secret_provider_ref, status)
    VALUES (v_id, v_type_id, v_version_id, v_tenant_id, v_config_revision, v_secret_ref, v_status);
    RETURN 'created';
  END IF;
  IF i.type_id <> v_type_id OR i.tenant_id <> v_tenant_id THEN
    PERFORM aip_fail('conflict', format('connector instance `%s` cannot change type or tenant', v_id), jsonb_build_object('instance_id', v_id));
  END IF;
  IF (i.version_id, i.config_revision, i.secret_provider_ref, i.status)
     = (v_version_id, v_config_revision, v_secret_ref, v_status) THEN
    RETURN 'unchanged';
  END IF;
  IF v_config_revision <= i.config_revision THEN
    PERFORM aip_fail('conflict', format('connector instance `%s` requires a newer config revision than %s', v_id, i.config_revision),
                     jsonb_build_object('instance_id', v_id, 'current_config_revision', i.config_revision));
  END IF;
  IF v_version_id <> i.version_id THEN
    SELECT b.capability_id INTO v_missing
    FROM aip_capability_bindings b
    WHERE b.instance_id = v_id AND b.enabled
      AND NOT EXISTS (SELECT 1 FROM aip_version_capabilities vc WHERE vc.version_id = v_version_id AND vc.capability_id = b.capability_id)
    ORDER BY b.capability_id LIMIT 1;
    IF FOUND THEN
      PERFORM aip_fail('conflict', format('instance rollout version `%s` does not implement bound capability `%s`', v_version_id, v_missing),
                       jsonb_build_object('instance_id', v_id, 'capability_id', v_missing));
    END IF;
  END IF;
  UPDATE aip_connector_instances
  SET version_id = v_version_id, config_revision = v_config_revision, secret_provider_ref = v_secret_ref,
      status = v_status, updated_at = now()
  WHERE instance_id = v_id;
  RETURN 'updated';
END
$$;

-- Capability bindings -----------------------------------------------------------------------------
CREATE FUNCTION aip_prep_put_binding(p jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
  SELECT jsonb_build_object(
    'tenant_id', aip_read_text(p, 'tenant_id'),
    'capability_id', aip_read_text(p, 'capability_id'),
    'instance_id', aip_read_text(p, 'instance_id'),
    'priority', coalesce(aip_read_int(p, 'priority', 0, 2147483647, false), 0),
    'policy_revision', aip_read_int(p, 'policy_revision', 0, 9007199254740991),
    'credential_revision_ref', aip_read_text(p, 'credential_revision_ref', false, 1024),
    'quota_policy_ref', aip_read_text(p, 'quota_policy_ref', false, 256),
    'enabled', aip_read_bool(p, 'enabled', true))
$$;

CREATE FUNCTION aip_pub_put_binding(n jsonb) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  v_tenant_id text := n ->> 'tenant_id';
  v_capability_id text := n ->> 'capability_id';
  v_instance_id text := n ->> 'instance_id';
  v_priority integer := (n ->> 'priority')::integer;
  v_policy_revision bigint := (n ->> 'policy_revision')::bigint;
  v_credential_ref text := n ->> 'credential_revision_ref';
  v_quota_ref text := n ->> 'quota_policy_ref';
  v_enabled boolean := (n ->> 'enabled')::boolean;
  v_instance aip_connector_instances;
  b aip_capability_bindings;
  v_exists boolean;
BEGIN
  SELECT * INTO b FROM aip_capability_bindings
  WHERE tenant_id = v_tenant_id AND capability_id = v_capability_id AND instance_id = v_instance_id FOR UPDATE;
  v_exists := FOUND;
  -- An identical re-put is a no-op even when the instance has since rolled out to a version
  -- without this (necessarily disabled) binding's capability.
  IF v_exists AND (b.priority, b.policy_revision, b.enabled) = (v_priority, v_policy_revision, v_enabled)
     AND b.credential_revision_ref IS NOT DISTINCT FROM v_credential_ref
     AND b.quota_policy_ref IS NOT DISTINCT FROM v_quota_ref THEN
    RETURN 'unchanged';
  END IF;

  PERFORM 1 FROM aip_capability_definitions WHERE capability_id = v_capability_id;
  IF NOT FOUND THEN
    PERFORM aip_fail('not-found', format('capability `%s` was not found', v_capability_id), jsonb_build_object('capability_id', v_capability_id));
  END IF;
  SELECT * INTO v_instance FROM aip_connector_instances WHERE instance_id = v_instance_id;
  IF NOT FOUND THEN
    PERFORM aip_fail('not-found', format('connector instance `%s` was not found', v_instance_id), jsonb_build_object('instance_id', v_instance_id));
  END IF;
  IF v_instance.tenant_id <> v_tenant_id THEN
    PERFORM aip_invalid_field('tenant_id', 'does not own the connector instance');
  END IF;
  PERFORM 1 FROM aip_version_capabilities WHERE version_id = v_instance.version_id AND capability_id = v_capability_id;
  IF NOT FOUND THEN
    PERFORM aip_invalid_field('capability_id', format('is not implemented by the instance''s version `%s`', v_instance.version_id));
  END IF;
  IF v_quota_ref IS NOT NULL THEN
    PERFORM 1 FROM aip_admission_policies WHERE policy_ref = v_quota_ref;
    IF NOT FOUND THEN
      PERFORM aip_fail('not-found', format('admission policy `%s` was not found', v_quota_ref), jsonb_build_object('policy_ref', v_quota_ref));
    END IF;
  END IF;

  IF NOT v_exists THEN
    INSERT INTO aip_capability_bindings (tenant_id, capability_id, instance_id, priority, policy_revision,
                                         credential_revision_ref, quota_policy_ref, enabled)
    VALUES (v_tenant_id, v_capability_id, v_instance_id, v_priority, v_policy_revision, v_credential_ref, v_quota_ref, v_enabled);
    RETURN 'created';
  END IF;
  IF v_policy_revision <= b.policy_revision THEN
    PERFORM aip_fail('conflict', format('binding for `%s` and `%s` requires a newer policy revision than %s', v_tenant_id, v_capability_id, b.policy_revision),
                     jsonb_build_object('tenant_id', v_tenant_id, 'capability_id', v_capability_id, 'instance_id', v_instance_id,
                                        'current_policy_revision', b.policy_revision));
  END IF;
  UPDATE aip_capability_bindings
  SET priority = v_priority, policy_revision = v_policy_revision, credential_revision_ref = v_credential_ref,
      quota_policy_ref = v_quota_ref, enabled = v_enabled, updated_at = now()
  WHERE tenant_id = v_tenant_id AND capability_id = v_capability_id AND instance_id = v_instance_id;
  RETURN 'updated';
END
$$;

-- Admission policies ------------------------------------------------------------------------------
CREATE FUNCTION aip_prep_put_admission_policy(p jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
  SELECT jsonb_build_object(
    'policy_ref', aip_read_text(p, 'policy_ref'),
    'revision', aip_read_int(p, 'revision', 1, 9007199254740991),
    'enabled', aip_read_bool(p, 'enabled', true),
    'max_global_in_flight', aip_read_int(p, 'max_global_in_flight', 1, 2147483647, false),
    'max_tenant_in_flight', aip_read_int(p, 'max_tenant_in_flight', 1, 2147483647, false),
    'max_connector_type_in_flight', aip_read_int(p, 'max_connector_type_in_flight', 1, 2147483647, false),
    'max_instance_in_flight', aip_read_int(p, 'max_instance_in_flight', 1, 2147483647, false),
    'max_binding_in_flight', aip_read_int(p, 'max_binding_in_flight', 1, 2147483647, false),
    'max_tenant_retry_in_flight', aip_read_int(p, 'max_tenant_retry_in_flight', 1, 2147483647, false),
    'circuit_failure_threshold', coalesce(aip_read_int(p, 'circuit_failure_threshold', 1, 2147483647, false), 5),
    'circuit_open_ms', coalesce(aip_read_int(p, 'circuit_open_ms', 100, 3600000, false), 30000))
$$;

CREATE FUNCTION aip_pub_put_admission_policy(n jsonb) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  v_ref text := n ->> 'policy_ref';
  v_revision bigint := (n ->> 'revision')::bigint;
  v_enabled boolean := (n ->> 'enabled')::boolean;
  v_global integer := (n ->> 'max_global_in_flight')::integer;
  v_tenant integer := (n ->> 'max_tenant_in_flight')::integer;
  v_type integer := (n ->> 'max_connector_type_in_flight')::integer;
  v_instance integer := (n ->> 'max_instance_in_flight')::integer;
  v_binding integer := (n ->> 'max_binding_in_flight')::integer;
  v_retry integer := (n ->> 'max_tenant_retry_in_flight')::integer;
  v_threshold integer := (n ->> 'circuit_failure_threshold')::integer;
  v_open_ms integer := (n ->> 'circuit_open_ms')::integer;
  o aip_admission_policies;
BEGIN
  SELECT * INTO o FROM aip_admission_policies WHERE policy_ref = v_ref FOR UPDATE;
  IF NOT FOUND THEN
    INSERT INTO aip_admission_policies (policy_ref, revision, enabled, max_global_in_flight, max_tenant_in_flight,
      max_connector_type_in_flight, max_instance_in_flight, max_binding_in_flight, max_tenant_retry_in_flight,
      circuit_failure_threshold, circuit_open_ms)
    VALUES (v_ref, v_revision, v_enabled, v_global, v_tenant, v_type, v_instance, v_binding, v_retry, v_threshold, v_open_ms);
    RETURN 'created';
  END IF;
  IF o.revision = v_revision AND o.enabled = v_enabled
     AND o.max_global_in_flight IS NOT DISTINCT FROM v_global
     AND o.max_tenant_in_flight IS NOT DISTINCT FROM v_tenant
     AND o.max_connector_type_in_flight IS NOT DISTINCT FROM v_type
     AND o.max_instance_in_flight IS NOT DISTINCT FROM v_instance
     AND o.max_binding_in_flight IS NOT DISTINCT FROM v_binding
     AND o.max_tenant_retry_in_flight IS NOT DISTINCT FROM v_retry
     AND o.circuit_failure_threshold = v_threshold AND o.circuit_open_ms = v_open_ms THEN
    RETURN 'unchanged';
  END IF;
  IF v_revision <= o.revision THEN
    PERFORM aip_fail('conflict', format('admission policy `%s` requires a newer revision than %s', v_ref, o.revision),
                     jsonb_build_object('policy_ref', v_ref, 'current_revision', o.revision));
  END IF;
  UPDATE aip_admission_policies
  SET revision = v_revision, enabled = v_enabled, max_global_in_flight = v_global, max_tenant_in_flight = v_tenant,
      max_connector_type_in_flight = v_type, max_instance_in_flight = v_instance, max_binding_in_flight = v_binding,
      max_tenant_retry_in_flight = v_retry, circuit_failure_threshold = v_threshold, circuit_open_ms = v_open_ms,
      updated_at = now()
  WHERE policy_ref = v_ref;
  RETURN 'updated';
END
$$;

-- Replica provisioning ------------------------------------------------------------------------------
-- Operators provision host identities; hosts then register and heartbeat (replicas.sql). A new
-- replica starts offline. Provisioning never advances the catalog revision.

-- A replica endpoint: an absolute http(s) URL with a host (a DNS name, an IPv4 or a bracketed IPv6
-- address, optionally a port), and no credentials, query or fragment. Hosts may contain `_`, as
-- Docker and Compose service names do. Whitespace, control characters and backslashes are refused
-- too: a URL parser would silently drop or rewrite them, and a route pins the string as given.
-- This is the structural rule the database relies on; the HTTP schema (src/schemas.ts,
-- replicaEndpointProblem) also runs the WHATWG URL parser, as the reference runs the url crate, so
-- that what this accepts and a parser refuses (an IPv4 address out of range, a malformed
-- percent-escape in a host) is refused before it gets here.
CREATE FUNCTION aip_check_endpoint(p_field text, p_value text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  m text[] := regexp_match(p_value, '^[Hh][Tt][Tt][Pp][Ss]?://([^/]*)(/.*)?$');
  v_authority text := m[1];
  v_port text;
BEGIN
  IF m IS NULL THEN
    PERFORM aip_invalid_field(p_field, 'must be an absolute http or https URL');
  END IF;
  IF p_value ~ '[[:space:][:cntrl:]]' OR strpos(p_value, E'\\') > 0 THEN
    PERFORM aip_invalid_field(p_field, 'must not contain whitespace, control characters or backslashes');
  END IF;
  IF strpos(p_value, '?') > 0 OR strpos(p_value, '#') > 0 THEN
    PERFORM aip_invalid_field(p_field, 'must not have a query or fragment');
  END IF;
  IF strpos(v_authority, '@') > 0 THEN
    PERFORM aip_invalid_field(p_field, 'must not carry credentials');
  END IF;
  -- host: a bracketed IPv6 address, or a name without the characters that cannot be in one
  v_port := substring(v_authority FROM '^(?:\[[0-9A-Fa-f:.]+\]|[^][<>^|/@:]+)(?::([0-9]*))?$');
  IF v_authority !~ '^(?:\[[0-9A-Fa-f:.]+\]|[^][<>^|/@:]+)(?::[0-9]*)?$' OR coalesce(nullif(v_port, ''), '0')::numeric > 65535 THEN
    PERFORM aip_invalid_field(p_field, 'must have a host (a name, an IPv4 address or a bracketed IPv6 address) and at most a port up to 65535');
  END IF;
  RETURN p_value;
END
$$;

CREATE FUNCTION aip_prep_put_replica(p jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  v_id text := aip_read_text(p, 'id');
  v_instance_id text := aip_read_text(p, 'instance_id');
  v_version_id text := aip_read_text(p, 'version_id');
  v_endpoint text := aip_read_text(p, 'endpoint', true, 2048);
  v_principal_id text := aip_read_text(p, 'peer_principal_id', true, 512);
  v_principal_kind text := aip_read_text(p, 'peer_principal_kind', true, 128);
  v_peer_did text := aip_read_text(p, 'peer_did', true, 1024);
  v_trust_domain text := aip_read_text(p, 'trust_domain', true, 256);
  v_transport text := aip_read_text(p, 'transport_profile', true, 256);
  v_topology jsonb := coalesce(p -> 'topology', '{}'::jsonb);
  v_capacity integer := aip_read_int(p, 'capacity', 1, 1000000);
BEGIN
  IF jsonb_typeof(v_topology) <> 'object' THEN
    PERFORM aip_invalid_field('topology', 'must be an object');
  END IF;
  PERFORM aip_check_endpoint('endpoint', v_endpoint);
  RETURN jsonb_build_object(
    'id', v_id, 'instance_id', v_instance_id, 'version_id', v_version_id, 'endpoint', v_endpoint,
    'peer_principal_id', v_principal_id, 'peer_principal_kind', v_principal_kind, 'peer_did', v_peer_did,
    'trust_domain', v_trust_domain, 'transport_profile', v_transport,
    'region', aip_check_label('topology.region', coalesce(aip_read_text(v_topology, 'region', false), 'global')),
    'zone', aip_check_label('topology.zone', coalesce(aip_read_text(v_topology, 'zone', false), 'default')),
    'capacity_class', aip_check_label('topology.capacity_class', coalesce(aip_read_text(v_topology, 'capacity_class', false), 'standard')),
    'capacity', v_capacity);
END
$$;

CREATE FUNCTION aip_pub_put_replica(n jsonb) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  v_id text := n ->> 'id';
  v_instance_id text := n ->> 'instance_id';
  v_version_id text := n ->> 'version_id';
  v_endpoint text := n ->> 'endpoint';
  v_principal_id text := n ->> 'peer_principal_id';
  v_principal_kind text := n ->> 'peer_principal_kind';
  v_peer_did text := n ->> 'peer_did';
  v_trust_domain text := n ->> 'trust_domain';
  v_transport text := n ->> 'transport_profile';
  v_region text := n ->> 'region';
  v_zone text := n ->> 'zone';
  v_class text := n ->> 'capacity_class';
  v_capacity integer := (n ->> 'capacity')::integer;
  v_instance aip_connector_instances;
  r aip_connector_replicas;
BEGIN
  SELECT * INTO v_instance FROM aip_connector_instances WHERE instance_id = v_instance_id;
  IF NOT FOUND THEN
    PERFORM aip_fail('not-found', format('connector instance `%s` was not found', v_instance_id), jsonb_build_object('instance_id', v_instance_id));
  END IF;

  SELECT * INTO r FROM aip_connector_replicas WHERE replica_id = v_id FOR UPDATE;
  IF NOT FOUND THEN
    IF v_instance.version_id <> v_version_id THEN
      PERFORM aip_invalid_field('version_id', format('does not match the instance rollout version `%s`', v_instance.version_id));
    END IF;
    INSERT INTO aip_connector_replicas (replica_id, instance_id, version_id, endpoint, peer_principal_id, peer_principal_kind,
      peer_did, trust_domain, transport_profile, region, zone, capacity_class, capacity)
    VALUES (v_id, v_instance_id, v_version_id, v_endpoint, v_principal_id, v_principal_kind, v_peer_did, v_trust_domain,
            v_transport, v_region, v_zone, v_class, v_capacity);
    RETURN 'created';
  END IF;
  IF (r.instance_id, r.version_id, r.endpoint, r.peer_principal_id, r.peer_principal_kind, r.peer_did, r.trust_domain,
      r.transport_profile, r.region, r.zone, r.capacity_class)
     IS DISTINCT FROM (v_instance_id, v_version_id, v_endpoint, v_principal_id, v_principal_kind, v_peer_did, v_trust_domain,
      v_transport, v_region, v_zone, v_class) THEN
    PERFORM aip_fail('conflict', format('connector replica `%s` cannot change immutable identity, endpoint or topology', v_id),
                     jsonb_build_object('replica_id', v_id));
  END IF;
  IF r.capacity = v_capacity THEN RETURN 'unchanged'; END IF;
  IF v_capacity < r.active_assignments THEN
    PERFORM aip_fail('conflict', format('connector replica `%s` has %s active assignments; capacity cannot drop below that', v_id, r.active_assignments),
                     jsonb_build_object('replica_id', v_id, 'active_assignments', r.active_assignments));
  END IF;
  -- A capacity change is a health transition: it moves the sequence hosts fence on, and ends
  -- the host's replay record (its answer named the old sequence).
  UPDATE aip_connector_replicas
  SET capacity = v_capacity, health_revision = health_revision + 1,
      last_request_id = NULL, last_request = NULL, last_response = NULL, updated_at = now()
  WHERE replica_id = v_id;
  RETURN 'updated';
END
$$;

-- The batch ---------------------------------------------------------------------------------------
-- Validates and normalizes one change record (no stored state is read): {op, ...normalized fields}.
CREATE FUNCTION aip_pub_prepare(p jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  v_op text;
BEGIN
  IF p IS NULL OR jsonb_typeof(p) <> 'object' THEN
    PERFORM aip_invalid_field('changes', 'must contain objects');
  END IF;
  v_op := aip_read_enum(p, 'op', ARRAY['put_connector_type', 'set_connector_type_enabled', 'admit_version',
    'set_version_status', 'set_version_qualification', 'put_instance', 'put_binding', 'put_admission_policy', 'put_replica']);
  RETURN jsonb_build_object('op', v_op) || CASE v_op
    WHEN 'put_connector_type' THEN aip_prep_put_connector_type(p)
    WHEN 'set_connector_type_enabled' THEN aip_prep_set_connector_type_enabled(p)
    WHEN 'admit_version' THEN aip_prep_admit_version(p)
    WHEN 'set_version_status' THEN aip_prep_set_version_status(p)
    WHEN 'set_version_qualification' THEN aip_prep_set_version_qualification(p)
    WHEN 'put_instance' THEN aip_prep_put_instance(p)
    WHEN 'put_binding' THEN aip_prep_put_binding(p)
    WHEN 'put_admission_policy' THEN aip_prep_put_admission_policy(p)
    WHEN 'put_replica' THEN aip_prep_put_replica(p)
  END;
END
$$;

-- Applies one prepared change against stored state (under the publication lock) and reports it.
CREATE FUNCTION aip_pub_apply(n jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  v_op text := n ->> 'op';
  v_outcome text;
BEGIN
  v_outcome := CASE v_op
    WHEN 'put_connector_type' THEN aip_pub_put_connector_type(n)
    WHEN 'set_connector_type_enabled' THEN aip_pub_set_connector_type_enabled(n)
    WHEN 'admit_version' THEN aip_pub_admit_version(n)
    WHEN 'set_version_status' THEN aip_pub_set_version_status(n)
    WHEN 'set_version_qualification' THEN aip_pub_set_version_qualification(n)
    WHEN 'put_instance' THEN aip_pub_put_instance(n)
    WHEN 'put_binding' THEN aip_pub_put_binding(n)
    WHEN 'put_admission_policy' THEN aip_pub_put_admission_policy(n)
    WHEN 'put_replica' THEN aip_pub_put_replica(n)
  END;
  RETURN jsonb_strip_nulls(jsonb_build_object(
    'op', v_op, 'outcome', v_outcome,
    'id', CASE WHEN v_op IN ('put_binding', 'put_admission_policy') THEN NULL ELSE n ->> 'id' END,
    'policy_ref', CASE WHEN v_op = 'put_admission_policy' THEN n ->> 'policy_ref' END,
    'tenant_id', CASE WHEN v_op = 'put_binding' THEN n ->> 'tenant_id' END,
    'capability_id', CASE WHEN v_op = 'put_binding' THEN n ->> 'capability_id' END,
    'instance_id', CASE WHEN v_op = 'put_binding' THEN n ->> 'instance_id' END));
END
$$;

-- Entry point (control role). Applies every change or none; a dry run applies them inside a
-- subtransaction and rolls it back, reporting what would have happened.
--
-- Every change is prepared before the exclusive publication lock is taken, so the lock is held
-- only for the checks against stored state and the writes: readers and resolvers queue behind a
-- publication for milliseconds, not for the seconds a 4 MiB manifest takes to canonicalize.
CREATE FUNCTION aip_publish(p_changes jsonb, p_dry_run boolean DEFAULT false) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
SET lock_timeout = '5s' AS $$
DECLARE
  c_max_changes constant integer := 10000;
  v_revision bigint;
  v_prepared jsonb[] := '{}';
  v_results jsonb[] := '{}';
  v_result jsonb;
  v_change jsonb;
  v_index integer := -1;
  v_changed integer := 0;
  v_catalog_changed boolean := false;
  -- What the changes touched, for the live chains (aip_catalog_entries) to re-evaluate.
  v_instances text[] := '{}';
  v_versions text[] := '{}';
  v_types text[] := '{}';
  v_report jsonb;
  v_state text;
  v_message text;
  v_detail text;
BEGIN
  IF p_changes IS NULL OR jsonb_typeof(p_changes) <> 'array' OR jsonb_array_length(p_changes) = 0 THEN
    PERFORM aip_invalid_field('changes', 'must be a non-empty array');
  END IF;
  IF jsonb_array_length(p_changes) > c_max_changes THEN
    PERFORM aip_invalid_field('changes', 'must contain at most ' || c_max_changes || ' changes');
  END IF;
  BEGIN
    FOR v_change IN SELECT e FROM jsonb_array_elements(p_changes) e LOOP
      v_index := v_index + 1;
      v_prepared := v_prepared || aip_pub_prepare(v_change);
    END LOOP;
    v_index := -1;
    v_revision := aip_catalog_revision_exclusive();
    FOREACH v_change IN ARRAY v_prepared LOOP
      v_index := v_index + 1;
      v_result := aip_pub_apply(v_change);
      IF v_result ->> 'outcome' <> 'unchanged' THEN
        v_changed := v_changed + 1;
        v_catalog_changed := v_catalog_changed OR v_result ->> 'op' <> 'put_replica';
        CASE v_change ->> 'op'
          WHEN 'put_binding' THEN v_instances := v_instances || (v_change ->> 'instance_id');
          WHEN 'put_instance' THEN v_instances := v_instances || (v_change ->> 'id');
          WHEN 'admit_version', 'set_version_status', 'set_version_qualification' THEN v_versions := v_versions || (v_change ->> 'id');
          WHEN 'put_connector_type', 'set_connector_type_enabled' THEN v_types := v_types || (v_change ->> 'id');
          ELSE NULL;
        END CASE;
      END IF;
      v_results := v_results || v_result;
    END LOOP;
    IF v_catalog_changed THEN
      PERFORM aip_refresh_catalog_entries(ARRAY(
        SELECT unnest(v_instances)
        UNION
        SELECT i.instance_id FROM aip_connector_instances i WHERE i.version_id = ANY (v_versions) OR i.type_id = ANY (v_types)));
      UPDATE aip_catalog_revision SET revision = revision + 1, published_at = now() WHERE singleton
      RETURNING revision INTO v_revision;
    END IF;
    v_report := jsonb_build_object('catalog_revision', v_revision, 'changed', v_changed, 'dry_run', p_dry_run,
                                   'results', to_jsonb(v_results));
    IF p_dry_run THEN
      RAISE EXCEPTION USING ERRCODE = 'ARDRY', MESSAGE = 'dry run', DETAIL = v_report::text;
    END IF;
  EXCEPTION
    WHEN SQLSTATE 'ARDRY' THEN
      GET STACKED DIAGNOSTICS v_detail = PG_EXCEPTION_DETAIL;
      RETURN v_detail::json;
    WHEN OTHERS THEN
      -- Name the failing change; everything before it is rolled back with the statement.
      GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT, v_detail = PG_EXCEPTION_DETAIL;
      IF v_state LIKE 'AR%' THEN
        v_report := coalesce(nullif(v_detail, '')::jsonb, '{}'::jsonb) || jsonb_build_object('change_index', v_index);
        RAISE EXCEPTION USING ERRCODE = v_state, MESSAGE = format('changes[%s]: %s', v_index, v_message), DETAIL = v_report::text;
      END IF;
      RAISE;
  END;
  RETURN v_report::json;
END
$$;
