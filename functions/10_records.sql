-- Wire shapes of the registry's records, built in one place so that every reader, the
-- publication results and the settlement fence check agree on them byte for byte.
-- They return json (not jsonb) to keep the members in the documented order.

CREATE FUNCTION aip_connector_type_json(t aip_connector_types) RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT json_build_object(
    'id', t.type_id, 'name', t.name, 'owner', t.owner, 'enabled', t.enabled,
    'created_at', aip_time(t.created_at), 'updated_at', aip_time(t.updated_at))
$$;

-- What a version implements, as both readers of a version show it (administrative and data plane):
-- its capabilities' digests and its profiles, each in ID order.
CREATE FUNCTION aip_version_capabilities_json(p_version_id text) RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT coalesce((
    SELECT json_agg(json_build_object('id', d.capability_id, 'contract_digest', d.contract_digest,
                                      'schema_digest', d.schema_digest) ORDER BY d.capability_id)
    FROM aip_version_capabilities vc JOIN aip_capability_definitions d USING (capability_id)
    WHERE vc.version_id = p_version_id), '[]'::json)
$$;

CREATE FUNCTION aip_version_profiles_json(p_version_id text) RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT coalesce((
    SELECT json_agg(vp.profile_id ORDER BY vp.profile_id)
    FROM aip_version_profiles vp WHERE vp.version_id = p_version_id), '[]'::json)
$$;

CREATE FUNCTION aip_version_json(v aip_connector_versions) RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT json_build_object(
    'id', v.version_id, 'connector_type_id', v.type_id, 'version', v.version, 'status', v.status,
    'manifest_digest', v.manifest_digest,
    'manifest', (SELECT m.manifest FROM aip_manifests m WHERE m.manifest_digest = v.manifest_digest),
    'attestation', v.attestation,
    'implementation_support', v.implementation_support,
    'supply_chain_qualified', v.supply_chain_qualified, 'qualification_reason', v.qualification_reason,
    'capabilities', aip_version_capabilities_json(v.version_id),
    'profiles', aip_version_profiles_json(v.version_id),
    'admitted_at', aip_time(v.admitted_at), 'updated_at', aip_time(v.updated_at))
$$;

CREATE FUNCTION aip_instance_json(i aip_connector_instances) RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT json_build_object(
    'id', i.instance_id, 'connector_type_id', i.type_id, 'version_id', i.version_id,
    'tenant_id', i.tenant_id, 'config_revision', i.config_revision,
    'secret_provider_ref', i.secret_provider_ref, 'status', i.status,
    'created_at', aip_time(i.created_at), 'updated_at', aip_time(i.updated_at))
$$;

CREATE FUNCTION aip_binding_json(b aip_capability_bindings) RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT json_build_object(
    'tenant_id', b.tenant_id, 'capability_id', b.capability_id, 'instance_id', b.instance_id,
    'priority', b.priority, 'policy_revision', b.policy_revision,
    'credential_revision_ref', b.credential_revision_ref, 'quota_policy_ref', b.quota_policy_ref,
    'enabled', b.enabled, 'created_at', aip_time(b.created_at), 'updated_at', aip_time(b.updated_at))
$$;

CREATE FUNCTION aip_admission_policy_json(p aip_admission_policies) RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT json_build_object(
    'policy_ref', p.policy_ref, 'revision', p.revision, 'enabled', p.enabled,
    'max_global_in_flight', p.max_global_in_flight,
    'max_tenant_in_flight', p.max_tenant_in_flight,
    'max_connector_type_in_flight', p.max_connector_type_in_flight,
    'max_instance_in_flight', p.max_instance_in_flight,
    'max_binding_in_flight', p.max_binding_in_flight,
    'max_tenant_retry_in_flight', p.max_tenant_retry_in_flight,
    'circuit_failure_threshold', p.circuit_failure_threshold,
    'circuit_open_ms', p.circuit_open_ms,
    'created_at', aip_time(p.created_at), 'updated_at', aip_time(p.updated_at))
$$;

CREATE FUNCTION aip_replica_json(r aip_connector_replicas) RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT json_build_object(
    'id', r.replica_id, 'instance_id', r.instance_id, 'version_id', r.version_id,
    'endpoint', r.endpoint, 'peer_principal_id', r.peer_principal_id,
    'peer_principal_kind', r.peer_principal_kind, 'peer_did', r.peer_did,
    'trust_domain', r.trust_domain, 'transport_profile', r.transport_profile,
    'topology', json_build_object('region', r.region, 'zone', r.zone, 'capacity_class', r.capacity_class),
    'capacity', r.capacity, 'status', r.status, 'lease_expires_at', aip_time(r.lease_expires_at),
    'active_assignments', r.active_assignments, 'health_revision', r.health_revision,
    'circuit', json_build_object('consecutive_failures', r.consecutive_failures,
                                 'open_until', aip_time(r.circuit_open_until)),
    'created_at', aip_time(r.created_at), 'updated_at', aip_time(r.updated_at))
$$;

-- A catalog entry: {capability, contract_digest, schema_digest}.
CREATE FUNCTION aip_definition_json(d aip_capability_definitions) RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT json_build_object('capability', d.capability, 'contract_digest', d.contract_digest,
                           'schema_digest', d.schema_digest)
$$;

-- An admission snapshot: {policy_ref, policy_revision, scopes: [{kind, key, limit}], retry_scope,
-- circuit_failure_threshold, circuit_open_ms}. Scopes are listed in rank order (global, tenant,
-- connector_type, instance, binding); a null limit keeps no counter and lists no scope. One
-- expression, STABLE like jsonb_build_object, so the planner inlines it. The one builder, for a new route (from its policy) and
-- for the pinned record (from the numbers the route keeps).
CREATE FUNCTION aip_admission_json(
  p_policy_ref text, p_policy_revision bigint, p_global integer, p_tenant integer, p_connector_type integer,
  p_instance integer, p_binding integer, p_tenant_retry integer, p_threshold integer, p_open_ms integer,
  p_tenant_id text, p_type_id text, p_instance_id text, p_binding_key text)
RETURNS jsonb LANGUAGE sql STABLE AS $$
  SELECT jsonb_build_object(
    'policy_ref', p_policy_ref,
    'policy_revision', p_policy_revision,
    -- Concatenated rather than filtered with a JSON path: half the cost (5.1 vs 9.3 us), and it
    -- is built three times per routing cycle.
    'scopes',
      CASE WHEN p_global IS NULL THEN '[]'::jsonb
           ELSE jsonb_build_array(jsonb_build_object('kind', 'global', 'key', 'fleet', 'limit', p_global)) END
      || CASE WHEN p_tenant IS NULL THEN '[]'::jsonb
              ELSE jsonb_build_array(jsonb_build_object('kind', 'tenant', 'key', p_tenant_id, 'limit', p_tenant)) END
      || CASE WHEN p_connector_type IS NULL THEN '[]'::jsonb
              ELSE jsonb_build_array(jsonb_build_object('kind', 'connector_type', 'key', p_type_id, 'limit', p_connector_type)) END
      || CASE WHEN p_instance IS NULL THEN '[]'::jsonb
              ELSE jsonb_build_array(jsonb_build_object('kind', 'instance', 'key', p_instance_id, 'limit', p_instance)) END
      || CASE WHEN p_binding IS NULL THEN '[]'::jsonb
              ELSE jsonb_build_array(jsonb_build_object('kind', 'binding', 'key', p_binding_key, 'limit', p_binding)) END,
    'retry_scope', CASE WHEN p_tenant_retry IS NOT NULL THEN
      jsonb_build_object('kind', 'tenant_retry', 'key', p_tenant_id, 'limit', p_tenant_retry) END,
    'circuit_failure_threshold', p_threshold,
    'circuit_open_ms', p_open_ms)
$$;

-- A route's pinned admission snapshot, rebuilt from the numbers it keeps and its own keys
-- (p_type_id: its version's connector type).
CREATE FUNCTION aip_route_admission(a aip_route_assignments, p_type_id text) RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT aip_admission_json(a.quota_policy_ref, a.admission_policy_revision, a.admission_max_global_in_flight,
                            a.admission_max_tenant_in_flight, a.admission_max_connector_type_in_flight,
                            a.admission_max_instance_in_flight, a.admission_max_binding_in_flight,
                            a.admission_max_tenant_retry_in_flight, a.admission_circuit_failure_threshold,
                            a.admission_circuit_open_ms, a.tenant_id, p_type_id, a.instance_id,
                            CASE WHEN a.admission_max_binding_in_flight IS NOT NULL
                                 THEN aip_binding_scope_key(a.tenant_id, a.capability_id, a.instance_id) END)
$$;

-- A route's pinned admission snapshot when its version's row is not at hand (the connector type
-- is looked up only when the pinned policy has a connector_type limit). PL/pgSQL, like every
-- helper that reads a table: its plan is cached for the session, where a SQL function's would be
-- made again on every call.
CREATE FUNCTION aip_pinned_admission(a aip_route_assignments) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN aip_route_admission(a, CASE WHEN a.admission_max_connector_type_in_flight IS NOT NULL
                                     THEN (SELECT v.type_id FROM aip_connector_versions v WHERE v.version_id = a.version_id) END);
END
$$;

-- The RouteAssignment record from its parts: the route's own columns (a), what it joins from the
-- replica's row (r: identity, endpoint, topology) and the version's (its manifest digest and
-- connector type). One expression, so the planner inlines it: resolve builds a new route's record
-- from the row it has just locked, without reading anything again.
CREATE FUNCTION aip_assignment_build(a aip_route_assignments, r aip_connector_replicas, p_manifest_digest text, p_type_id text)
RETURNS json LANGUAGE sql STABLE AS $$
  SELECT json_build_object(
    'action_id', a.action_id, 'capability_id', a.capability_id, 'tenant_id', a.tenant_id,
    'instance_id', a.instance_id, 'version_id', a.version_id, 'manifest_digest', p_manifest_digest,
    'replica_id', a.replica_id, 'endpoint', r.endpoint,
    'peer_principal_id', r.peer_principal_id, 'peer_principal_kind', r.peer_principal_kind,
    'peer_did', r.peer_did, 'trust_domain', r.trust_domain, 'transport_profile', r.transport_profile,
    'topology', json_build_object('region', r.region, 'zone', r.zone, 'capacity_class', r.capacity_class),
    'catalog_revision', a.catalog_revision, 'binding_policy_revision', a.binding_policy_revision,
    'credential_revision_ref', a.credential_revision_ref, 'quota_policy_ref', a.quota_policy_ref,
    'replica_health_revision', a.replica_health_revision, 'fence_token', a.fence_token,
    'admission', aip_route_admission(a, p_type_id), 'assigned_at', aip_time(a.assigned_at))
$$;

-- The pinned RouteAssignment. Settlement compares the caller's copy with this, so it must be a
-- pure function of immutable state: the route's own columns, and the replica's identity,
-- endpoint and topology and the version's manifest digest, which never change in their rows (a
-- route stores what only its decision knows, and joins the rest).
CREATE FUNCTION aip_assignment_json(a aip_route_assignments) RETURNS json
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN (SELECT aip_assignment_build(a, r, v.manifest_digest, v.type_id)
  FROM aip_connector_replicas r, aip_connector_versions v
  WHERE r.replica_id = a.replica_id AND v.version_id = a.version_id);
END
$$;

-- The digest a route keeps of its RouteAssignment (aip_route_assignments.assignment_digest):
-- SHA-256 of the record's jsonb text, which is the same for every JSON text of an equal jsonb
-- value but for numbers written another way (1.0 for 1), so settlement compares a presented copy by
-- its digest first and, only when that differs, as jsonb with the record rebuilt.
-- STABLE like convert_to, so that it is inlined (aip_sha256).
CREATE FUNCTION aip_assignment_digest(p_assignment jsonb) RETURNS bytea
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT sha256(convert_to(p_assignment::text, 'UTF8'))
$$;

-- The admission scopes a reserved route holds: its pinned base scopes, plus the pinned retry
-- scope while a reacquisition holds it.
CREATE FUNCTION aip_held_scopes(a aip_route_assignments) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_admission jsonb;
BEGIN
  IF NOT a.reserved THEN
    RETURN '[]'::jsonb;
  END IF;
  v_admission := aip_pinned_admission(a);
  IF a.retry THEN
    RETURN (v_admission -> 'scopes') || jsonb_build_array(v_admission -> 'retry_scope');
  END IF;
  RETURN v_admission -> 'scopes';
END
$$;
