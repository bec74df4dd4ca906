-- Publication of connector versions (20_publish.sql runs the batch): admission with its
-- supply-chain evidence and manifest checks, status moves and qualification. Everything a version
-- was admitted with is fixed, its initial status included (a re-admission stating another one is
-- a conflict); status moves through set_version_status only: admitted <-> active and any ->
-- revoked, never back from revoked; qualification is revoked and restored by operators.

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

-- What a version change reports (aip_pub_result).
CREATE FUNCTION aip_pub_version_result(p_outcome text, p_version_id text) RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT aip_pub_result(p_outcome, jsonb_build_object('id', p_version_id), jsonb_build_object('version', p_version_id))
$$;

-- The stored version a change names, locked; not-found when there is none.
CREATE FUNCTION aip_pub_lock_version(p_version_id text) RETURNS aip_connector_versions
LANGUAGE plpgsql AS $$
DECLARE
  v aip_connector_versions;
BEGIN
  SELECT * INTO v FROM aip_connector_versions WHERE version_id = p_version_id FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    PERFORM aip_fail('not-found', format('connector version `%s` was not found', p_version_id), jsonb_build_object('version_id', p_version_id));
  END IF;
  RETURN v;
END
$$;

CREATE FUNCTION aip_prep_set_version_status(p jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
  SELECT jsonb_build_object('version_id', aip_read_text(p, 'id'),
                            'status', aip_read_enum(p, 'status', aip_version_statuses()))
$$;

CREATE FUNCTION aip_pub_set_version_status(n jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  v aip_connector_versions := aip_pub_lock_version(n ->> 'version_id');
BEGIN
  RETURN aip_pub_version_result(aip_version_transition(v, n ->> 'status'), v.version_id);
END
$$;

-- Supply-chain evidence ----------------------------------------------------------------------------
-- A version is admitted only with complete, passing evidence, checked in two steps: its form
-- (invalid when wrong: aip_check_attestation, and the shapes in aip_prep_admit_version) before its
-- verdict (admission when refused: aip_check_evidence), each refusal naming its field. Within each
-- step the checks run in the reference's order (reference-behaviour.md section 4.6).

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
    PERFORM aip_check_digest('attestation.' || v_field, aip_attestation_text(a, v_field, aip_text_bytes_digest()));
  END LOOP;
  PERFORM aip_attestation_text(a, 'signature_ref', aip_text_bytes_attestation_signature_ref());
  PERFORM aip_attestation_text(a, 'signer_identity', aip_text_bytes_attestation_signer_identity());
  PERFORM aip_attestation_text(a, 'owner', aip_text_bytes_connector_type_owner());
  PERFORM aip_attestation_text(a, 'sdk_version_requirement', aip_text_bytes_id());
  IF jsonb_typeof(a -> 'supported_aip_versions') IS DISTINCT FROM 'array'
     OR EXISTS (SELECT 1 FROM jsonb_array_elements(a -> 'supported_aip_versions') e WHERE jsonb_typeof(e) <> 'string') THEN
    PERFORM aip_invalid_field('attestation.supported_aip_versions', 'must be an array of strings');
  END IF;
  FOREACH v_field IN ARRAY ARRAY['conformance_status', 'vulnerability_policy_status', 'license_policy_status', 'revocation_status'] LOOP
    PERFORM aip_read_enum(jsonb_build_object('attestation.' || v_field, a -> v_field), 'attestation.' || v_field, aip_check_statuses());
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
  IF NOT a -> 'supported_aip_versions' @> jsonb_build_array(aip_protocol_version()) THEN
    PERFORM aip_fail('admission', 'artifact does not declare compatibility with AIP ' || aip_protocol_version(),
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
  c_max_capabilities constant integer := aip_manifest_capabilities_max();
  c_max_manifest_bytes constant integer := aip_manifest_bytes_max();
  c_max_definition_bytes constant integer := aip_definition_bytes_max();
  c_claims constant text[] := aip_implementation_claims();
  v_id text := aip_read_text(p, 'id');
  v_type_id text := aip_read_text(p, 'connector_type_id');
  v_version text := aip_read_text(p, 'version', true, aip_text_bytes_version());
  -- Optional: a new version defaults to admitted; a re-put without status states nothing about it.
  v_status text := nullif(aip_read_enum(p, 'status', aip_version_statuses(), ''), '');
  v_manifest jsonb := p -> 'manifest';
  v_manifest_digest text := aip_check_digest('manifest_digest', aip_read_text(p, 'manifest_digest', true, aip_text_bytes_digest()));
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
                WHERE jsonb_typeof(e) <> 'string' OR btrim(e #>> '{}') = '' OR octet_length(e #>> '{}') > aip_text_bytes_id()) THEN
    PERFORM aip_invalid_field('manifest.profiles', 'must be an array of non-empty strings of at most ' || aip_text_bytes_id() || ' bytes');
  END IF;
  FOR v_cap IN SELECT e FROM jsonb_array_elements(v_caps) e LOOP
    IF jsonb_typeof(v_cap) <> 'object' THEN
      PERFORM aip_invalid_field('manifest.capabilities', 'must contain objects');
    END IF;
    v_cap_id := aip_read_text(v_cap, 'id');
    PERFORM aip_read_text(v_cap, 'name', true, aip_text_bytes_capability_name());
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
    'version_id', v_id, 'type_id', v_type_id, 'version', v_version, 'status', v_status,
    'manifest', v_manifest, 'manifest_digest', v_manifest_digest, 'attestation', v_attestation,
    'implementation_support', v_support, 'artifact_digest', v_artifact_digest,
    -- Every check above passed: the evidence qualifies the version (an operator may revoke that
    -- later with set_version_qualification).
    'supply_chain_qualified', true,
    'definitions', to_jsonb(v_defs),
    'profiles', (SELECT coalesce(jsonb_agg(DISTINCT e), '[]'::jsonb) FROM jsonb_array_elements(v_profiles) e));
END
$$;

-- The first field, by its name in admit_version, in which a re-put version p differs from the
-- stored one, or NULL when it is the same: its identity, its content (a manifest is its verified
-- digest), then its status when p states one. Attestation and implementation claims are named
-- down to the member that differs.
CREATE FUNCTION aip_version_difference(v aip_connector_versions, p aip_connector_versions) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN v.type_id <> p.type_id THEN 'connector_type_id'
    WHEN v.version <> p.version THEN 'version'
    WHEN v.manifest_digest <> p.manifest_digest THEN 'manifest_digest'
    WHEN v.attestation <> p.attestation THEN
      (SELECT 'attestation.' || k FROM (SELECT jsonb_object_keys(v.attestation) UNION SELECT jsonb_object_keys(p.attestation)) x(k)
       WHERE (v.attestation -> k) IS DISTINCT FROM (p.attestation -> k) ORDER BY k LIMIT 1)
    WHEN v.implementation_support <> p.implementation_support THEN
      (SELECT 'implementation_support.' || k
       FROM (SELECT jsonb_object_keys(v.implementation_support) UNION SELECT jsonb_object_keys(p.implementation_support)) x(k)
       WHERE (v.implementation_support -> k) IS DISTINCT FROM (p.implementation_support -> k) ORDER BY k LIMIT 1)
    WHEN p.status IS NOT NULL AND p.status <> v.status THEN 'status'
  END
$$;

-- Content-addressed rows, before the exclusive publication lock ---------------------------------
-- A version's manifest (aip_manifests, keyed by its digest) and its capability definitions (keyed
-- by capability ID, one contract per ID forever) are immutable: whatever is stored under a key is,
-- or must be, exactly what a change brings, so writing them needs no lock, and aip_publish writes
-- them before it takes the exclusive one. Under the lock only the rows a revision makes visible are
-- written (the version, its capability and profile rows, the live chains): readers and resolvers
-- queue behind those, not behind megabytes of manifest.
--
-- Why this is safe:
-- - Nothing is visible early. The rows are this statement's own until it commits, with the
--   revision; and readers reach a definition or manifest only through a version that references it.
-- - Nothing is left behind. They belong to the publication's transaction: a batch refused after
--   them (under the lock, or a dry run) rolls them back with everything else. No orphan survives.
-- - A conflicting contract is still refused. ON CONFLICT DO NOTHING keeps what is stored; if that
--   is another contract under the same capability ID, the check under the lock sees it (by
--   contract digest: equal digests are equal canonical contracts) and refuses the version.
-- - Two publications bringing the same key at once: the second waits at its insert for the first
--   to commit or roll back (before either holds the publication lock), then finds the committed row
--   or inserts its own. Keys are inserted in one global order (manifests, then definitions, each by
--   key), so two such waits cannot form a cycle; a wait past lock_timeout is `busy`.
--
-- Returns the changes with what the apply step no longer needs (the manifest, each definition's
-- capability document) left out, so that it does not copy megabytes under the lock either.
CREATE FUNCTION aip_pub_store_versions(p_changes jsonb[]) RETURNS jsonb[]
LANGUAGE plpgsql AS $$
DECLARE
  v_out jsonb[] := '{}';
  c jsonb;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM unnest(p_changes) x(c) WHERE x.c ->> 'op' = 'admit_version') THEN
    RETURN p_changes;
  END IF;
  INSERT INTO aip_manifests (manifest_digest, manifest)
  SELECT DISTINCT ON (x.c ->> 'manifest_digest') x.c ->> 'manifest_digest', x.c -> 'manifest'
  FROM unnest(p_changes) WITH ORDINALITY AS x(c, n)
  WHERE x.c ->> 'op' = 'admit_version'
  ORDER BY x.c ->> 'manifest_digest', x.n
  ON CONFLICT (manifest_digest) DO NOTHING;
  -- The first of a batch's changes to bring a capability ID is the one stored, as when the changes
  -- were applied in order; a later one with another contract is refused under the lock.
  INSERT INTO aip_capability_definitions (capability_id, contract_digest, schema_digest, capability, definition_bytes, search_text)
  SELECT DISTINCT ON (e ->> 'id') e ->> 'id', e ->> 'contract_digest', e ->> 'schema_digest', e -> 'capability', (e ->> 'bytes')::integer,
         lower(concat_ws(' ', e ->> 'id', e #>> '{capability,name}', e #>> '{capability,description}'))
  FROM unnest(p_changes) WITH ORDINALITY AS x(c, n), jsonb_array_elements(x.c -> 'definitions') e
  WHERE x.c ->> 'op' = 'admit_version'
  ORDER BY e ->> 'id', x.n
  ON CONFLICT (capability_id) DO NOTHING;
  FOREACH c IN ARRAY p_changes LOOP
    IF c ->> 'op' = 'admit_version' THEN
      c := (c - 'manifest') || jsonb_build_object('definitions',
             (SELECT coalesce(jsonb_agg(jsonb_build_object('id', e ->> 'id', 'contract_digest', e ->> 'contract_digest') ORDER BY e.n), '[]'::jsonb)
              FROM jsonb_array_elements(c -> 'definitions') WITH ORDINALITY AS e(e, n)));
    END IF;
    v_out := v_out || c;
  END LOOP;
  RETURN v_out;
END
$$;

CREATE FUNCTION aip_pub_admit_version(n jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  v aip_connector_versions := jsonb_populate_record(NULL::aip_connector_versions, n);
  v_defs jsonb := n -> 'definitions';
  v_type aip_connector_types;
  v_existing aip_connector_versions;
  v_other text;
BEGIN
  -- A re-put is compared with the stored version whatever has happened to its type since: exactly
  -- as stored it is unchanged, anything else is a conflict naming the first field that differs.
  -- Status included (when the put states one): it moves only through set_version_status, so a
  -- GitOps loop re-applying a version's original admission cannot demote or revive it.
  SELECT * INTO v_existing FROM aip_connector_versions WHERE version_id = v.version_id FOR NO KEY UPDATE;
  IF FOUND THEN
    v_other := aip_version_difference(v_existing, v);
    IF v_other = 'status' THEN
      PERFORM aip_fail('conflict', format('connector version `%s` is %s: its status moves only through set_version_status', v.version_id, v_existing.status),
                       jsonb_build_object('version_id', v.version_id, 'field', v_other));
    END IF;
    IF v_other IS NOT NULL THEN
      PERFORM aip_fail('conflict', format('connector version `%s` is immutable: its %s differs', v.version_id, v_other),
                       jsonb_build_object('version_id', v.version_id, 'field', v_other));
    END IF;
    RETURN aip_pub_version_result('unchanged', v.version_id);
  END IF;

  SELECT * INTO v_type FROM aip_connector_types WHERE type_id = v.type_id;
  IF NOT FOUND THEN
    PERFORM aip_fail('not-found', format('connector type `%s` was not found', v.type_id), jsonb_build_object('connector_type_id', v.type_id));
  END IF;
  IF NOT v_type.enabled THEN
    PERFORM aip_fail('admission', format('connector type `%s` is disabled', v.type_id), jsonb_build_object('connector_type_id', v.type_id));
  END IF;
  IF v.attestation ->> 'owner' <> v_type.owner THEN
    PERFORM aip_fail('admission', format('artifact owner `%s` does not match connector type owner `%s`', v.attestation ->> 'owner', v_type.owner),
                     jsonb_build_object('field', 'attestation.owner'));
  END IF;

  SELECT version_id INTO v_other FROM aip_connector_versions WHERE artifact_digest = v.artifact_digest;
  IF FOUND THEN
    PERFORM aip_fail('conflict', format('artifact digest is already admitted as connector version `%s`', v_other),
                     jsonb_build_object('version_id', v_other));
  END IF;
  SELECT version_id INTO v_other FROM aip_connector_versions WHERE type_id = v.type_id AND version = v.version;
  IF FOUND THEN
    PERFORM aip_fail('conflict', format('connector type `%s` already has version `%s` as `%s`', v.type_id, v.version, v_other),
                     jsonb_build_object('version_id', v_other));
  END IF;
  -- The definitions and the manifest are stored already (aip_pub_store_versions, before the lock):
  -- each stored definition is this version's contract, or another one that was there first.
  SELECT d.capability_id INTO v_other
  FROM jsonb_array_elements(v_defs) e
  JOIN aip_capability_definitions d ON d.capability_id = e ->> 'id'
  WHERE d.contract_digest <> e ->> 'contract_digest'
  LIMIT 1;
  IF FOUND THEN
    PERFORM aip_fail('conflict', format('capability `%s` has another admitted contract digest', v_other),
                     jsonb_build_object('capability_id', v_other));
  END IF;

  v.status := coalesce(v.status, 'admitted');
  v.admitted_at := now();
  v.updated_at := now();
  INSERT INTO aip_connector_versions VALUES (v.*);
  INSERT INTO aip_version_capabilities (version_id, capability_id)
  SELECT v.version_id, e ->> 'id' FROM jsonb_array_elements(v_defs) e;
  INSERT INTO aip_version_profiles (version_id, profile_id)
  SELECT v.version_id, e #>> '{}' FROM jsonb_array_elements(n -> 'profiles') e;
  RETURN aip_pub_version_result('created', v.version_id);
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
  SELECT jsonb_build_object('version_id', aip_read_text(p, 'id'),
                            'supply_chain_qualified', aip_read_bool(p, 'supply_chain_qualified'),
                            'qualification_reason', aip_read_text(p, 'reason', false, aip_text_bytes_qualification_reason()))
$$;

-- The stored evidence of a version passes today's checks, or admission names what fails.
CREATE FUNCTION aip_recheck_evidence(v aip_connector_versions) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_state text;
  v_message text;
  v_detail text;
  v_problem jsonb;
  v_manifest jsonb;
BEGIN
  PERFORM aip_check_attestation(v.attestation);
  SELECT m.manifest INTO v_manifest FROM aip_manifests m WHERE m.manifest_digest = v.manifest_digest;
  PERFORM aip_check_evidence(v_manifest, v.attestation, v.implementation_support, aip_canonical_schemas(v_manifest -> 'capabilities'));
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT, v_detail = PG_EXCEPTION_DETAIL;
  IF v_state <> aip_problem_sqlstate() THEN
    RAISE;
  END IF;
  v_problem := v_detail::jsonb;
  IF v_problem ->> 'code' NOT IN ('invalid', 'admission') THEN
    RAISE;
  END IF;
  PERFORM aip_fail('admission', format('connector version `%s` cannot be qualified again: %s', v.version_id, v_message),
                   jsonb_strip_nulls(jsonb_build_object('version_id', v.version_id,
                     'field', coalesce(v_problem ->> 'field', v_problem #>> '{errors,0,field}'))));
END
$$;

CREATE FUNCTION aip_pub_set_version_qualification(n jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  v aip_connector_versions := aip_pub_lock_version(n ->> 'version_id');
  v_qualified boolean := (n ->> 'supply_chain_qualified')::boolean;
BEGIN
  IF v.supply_chain_qualified = v_qualified THEN
    RETURN aip_pub_version_result('unchanged', v.version_id);
  END IF;
  IF v_qualified THEN PERFORM aip_recheck_evidence(v); END IF;
  UPDATE aip_connector_versions
  SET supply_chain_qualified = v_qualified, qualification_reason = n ->> 'qualification_reason', updated_at = now()
  WHERE version_id = v.version_id;
  RETURN aip_pub_version_result('updated', v.version_id);
END
$$;
