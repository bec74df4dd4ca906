-- base aip_sha256 sha256:af29831004962e70248a5707de81c8b01018367e0429239b6bceccf9d7e6d884
-- base aip_binding_scope_key sha256:acd5ed4aacb0485174a2124bab879ba44a2379b837d5e6f403796016fcc43386
-- base aip_time sha256:1f6176ea8a7f06b6155877117c3dcca561b097a29bb39d969b49f11d0b56948f
-- base aip_admission_json sha256:b5b074ef427f0d5f53a010f116e1e22fb9ad89efe8e8c2296e0feca16cf19a0f
-- base aip_route_admission sha256:c713e73e3b3697049731ab3747f3f8f2accf1b7013952bab2f746edb8b383398
-- base aip_pinned_admission sha256:3f3e333689f5e15a1cda6670b52d5b641377d22eeda8805cf018693537e32951
-- base aip_assignment_json sha256:7c94ac29beb09b85e0c32d50bc8a84e519fdc74dd949ce1d55d82495682f4b47
-- base aip_held_scopes sha256:273991fb5e83ea3805db39352148d256a9f3dc17ade9bdcc5b4798be5ea39a2f
-- base aip_catalog_read_revision sha256:d9e3f2e11cbd80cd039a36b5a410986cc2230bccaceec77bb620c79dd92da6fb
-- base aip_exhausted_scope sha256:5814f867b420dbeeb4d146ea5b4abc47a52c3077a5970b7d0c844b71b1b7607b
-- base aip_get_route sha256:7821c706ef373a9c6705fd027230500ed395456e07d313db2c6151088983deed
-- base aip_settle_route sha256:919b5613cd33c7d84f1f6a9d78da077c566fb192cf7f927d537a1a58ce2700ef
-- base aip_expire_leases sha256:70dc4e10b0a37ee831ef3eced529ecb7a58008f7355ee39e36a941e4723d7cb1
-- Before/after evidence (bench/ab.ts): the hot-path helpers as they were before they were made
-- inlinable or PL/pgSQL (SQL functions the planner could not inline: parsed and planned on every
-- call), and the settlement and route read without force_generic_plan.
CREATE OR REPLACE FUNCTION aip_sha256(p_text text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT 'sha256:' || encode(sha256(convert_to(p_text, 'UTF8')), 'hex')
$$;

CREATE OR REPLACE FUNCTION aip_binding_scope_key(p_tenant_id text, p_capability_id text, p_instance_id text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT aip_sha256(json_build_array(p_tenant_id, p_capability_id, p_instance_id)::text)
$$;

CREATE OR REPLACE FUNCTION aip_time(p timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN p IS NULL OR NOT isfinite(p) THEN NULL
              ELSE to_char(p AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') END
$$;

CREATE OR REPLACE FUNCTION aip_admission_json(
  p_policy_ref text, p_policy_revision bigint, p_global integer, p_tenant integer, p_connector_type integer,
  p_instance integer, p_binding integer, p_tenant_retry integer, p_threshold integer, p_open_ms integer,
  p_tenant_id text, p_type_id text, p_instance_id text, p_binding_key text)
RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
  SELECT jsonb_build_object(
    'policy_ref', p_policy_ref,
    'policy_revision', p_policy_revision,
    'scopes', jsonb_path_query_array(jsonb_build_array(
      jsonb_build_object('kind', 'global', 'key', 'fleet', 'limit', p_global),
      jsonb_build_object('kind', 'tenant', 'key', p_tenant_id, 'limit', p_tenant),
      jsonb_build_object('kind', 'connector_type', 'key', p_type_id, 'limit', p_connector_type),
      jsonb_build_object('kind', 'instance', 'key', p_instance_id, 'limit', p_instance),
      jsonb_build_object('kind', 'binding', 'key', p_binding_key, 'limit', p_binding)),
      '$[*] ? (@.limit != null)'),
    'retry_scope', CASE WHEN p_tenant_retry IS NOT NULL THEN
      jsonb_build_object('kind', 'tenant_retry', 'key', p_tenant_id, 'limit', p_tenant_retry) END,
    'circuit_failure_threshold', p_threshold,
    'circuit_open_ms', p_open_ms)
$$;

CREATE OR REPLACE FUNCTION aip_route_admission(a aip_route_assignments, p_type_id text) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
  SELECT aip_admission_json(a.quota_policy_ref, a.admission_policy_revision, a.admission_max_global_in_flight,
                            a.admission_max_tenant_in_flight, a.admission_max_connector_type_in_flight,
                            a.admission_max_instance_in_flight, a.admission_max_binding_in_flight,
                            a.admission_max_tenant_retry_in_flight, a.admission_circuit_failure_threshold,
                            a.admission_circuit_open_ms, a.tenant_id, p_type_id, a.instance_id,
                            CASE WHEN a.admission_max_binding_in_flight IS NOT NULL
                                 THEN aip_binding_scope_key(a.tenant_id, a.capability_id, a.instance_id) END)
$$;

CREATE OR REPLACE FUNCTION aip_pinned_admission(a aip_route_assignments) RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT aip_route_admission(a, CASE WHEN a.admission_max_connector_type_in_flight IS NOT NULL
                                     THEN (SELECT v.type_id FROM aip_connector_versions v WHERE v.version_id = a.version_id) END)
$$;

CREATE OR REPLACE FUNCTION aip_assignment_json(a aip_route_assignments) RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT json_build_object(
    'action_id', a.action_id, 'capability_id', a.capability_id, 'tenant_id', a.tenant_id,
    'instance_id', a.instance_id, 'version_id', a.version_id, 'manifest_digest', v.manifest_digest,
    'replica_id', a.replica_id, 'endpoint', r.endpoint,
    'peer_principal_id', r.peer_principal_id, 'peer_principal_kind', r.peer_principal_kind,
    'peer_did', r.peer_did, 'trust_domain', r.trust_domain, 'transport_profile', r.transport_profile,
    'topology', json_build_object('region', r.region, 'zone', r.zone, 'capacity_class', r.capacity_class),
    'catalog_revision', a.catalog_revision, 'binding_policy_revision', a.binding_policy_revision,
    'credential_revision_ref', a.credential_revision_ref, 'quota_policy_ref', a.quota_policy_ref,
    'replica_health_revision', a.replica_health_revision, 'fence_token', a.fence_token,
    'admission', aip_route_admission(a, v.type_id), 'assigned_at', aip_time(a.assigned_at))
  FROM aip_connector_replicas r, aip_connector_versions v
  WHERE r.replica_id = a.replica_id AND v.version_id = a.version_id
$$;

CREATE OR REPLACE FUNCTION aip_held_scopes(a aip_route_assignments) RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN NOT a.reserved THEN '[]'::jsonb
              WHEN a.retry THEN (x.admission -> 'scopes') || jsonb_build_array(x.admission -> 'retry_scope')
              ELSE x.admission -> 'scopes' END
  FROM (SELECT aip_pinned_admission(a) AS admission) x
$$;

CREATE OR REPLACE FUNCTION aip_catalog_read_revision() RETURNS bigint
LANGUAGE sql STABLE AS $$
  SELECT r.revision
  FROM (SELECT pg_advisory_xact_lock_shared(hashtext(current_database()), 1095323715)) l, aip_catalog_revision r
  WHERE r.singleton
$$;

CREATE OR REPLACE FUNCTION aip_exhausted_scope(p_scopes jsonb) RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT x.e
  FROM jsonb_array_elements(p_scopes) WITH ORDINALITY AS x(e, n)
  JOIN aip_admission_counters c ON c.scope_kind = x.e ->> 'kind' AND c.scope_key = x.e ->> 'key'
  WHERE c.active >= (x.e ->> 'limit')::integer
  ORDER BY x.n
  LIMIT 1
$$;

CREATE OR REPLACE FUNCTION aip_get_route(p_action_id text, p_tenant_id text) RETURNS json
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
SET lock_timeout = '2s' AS $$
  SELECT json_build_object('assignment', aip_assignment_json(a), 'reserved', a.reserved,
                           'last_settlement', a.last_settlement, 'settled_at', aip_time(a.settled_at))
  FROM aip_route_assignments a
  WHERE a.action_id = p_action_id AND a.tenant_id = p_tenant_id
$$;

CREATE OR REPLACE FUNCTION aip_settle_route(p_action_id text, p_tenant_id text, p_assignment jsonb, p_outcome text)
RETURNS json
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
SET lock_timeout = '2s' AS $$
DECLARE
  a aip_route_assignments;
  v_now timestamptz;
  v_threshold integer;
  v_open_ms integer;
BEGIN
  IF nullif(btrim(p_tenant_id), '') IS NULL THEN
    PERFORM aip_invalid_field('tenant_id', 'must be a verified, non-empty tenant');
  END IF;
  IF p_outcome IS NULL OR p_outcome NOT IN ('completed', 'outcome_unknown', 'cancelled', 'lease_expired') THEN
    PERFORM aip_invalid_field('outcome', 'must be one of completed, outcome_unknown, cancelled, lease_expired');
  END IF;
  IF p_assignment IS NULL OR jsonb_typeof(p_assignment) <> 'object' THEN
    PERFORM aip_invalid_field('assignment', 'must be the RouteAssignment object');
  END IF;
  PERFORM aip_lock_action(p_action_id);
  SELECT * INTO a FROM aip_route_assignments WHERE action_id = p_action_id;
  -- Another tenant's action is indistinguishable from a missing one.
  IF NOT FOUND OR a.tenant_id IS DISTINCT FROM p_tenant_id THEN
    PERFORM aip_fail('not-found', format('route for action `%s` was not found', p_action_id),
                     jsonb_build_object('action_id', p_action_id));
  END IF;
  IF aip_assignment_json(a)::jsonb <> p_assignment THEN
    PERFORM aip_fail('fence-lost', 'route assignment fencing failed: the presented assignment differs from the pinned route',
                     jsonb_build_object('action_id', p_action_id));
  END IF;
  IF NOT a.reserved THEN
    RETURN json_build_object('action_id', a.action_id, 'released', false, 'last_settlement', a.last_settlement);
  END IF;

  -- Lock order: the replica first (see admission.sql). Then the route, released only if no
  -- releaser got to it while this call waited for the replica.
  PERFORM 1 FROM aip_connector_replicas WHERE replica_id = a.replica_id FOR NO KEY UPDATE;
  v_now := aip_now();
  UPDATE aip_route_assignments
  SET reserved = false, retry = false, last_settlement = p_outcome, settled_at = v_now, updated_at = v_now
  WHERE action_id = p_action_id AND reserved;
  IF NOT FOUND THEN
    RETURN json_build_object('action_id', a.action_id, 'released', false,
                             'last_settlement', (SELECT x.last_settlement FROM aip_route_assignments x WHERE x.action_id = p_action_id));
  END IF;

  v_threshold := a.admission_circuit_failure_threshold;
  v_open_ms := a.admission_circuit_open_ms;
  -- The circuit uses the thresholds pinned in the route, not the policy's current ones.
  UPDATE aip_connector_replicas
  SET active_assignments = active_assignments - 1,
      consecutive_failures = CASE
        WHEN p_outcome = 'completed' THEN 0
        WHEN p_outcome = 'outcome_unknown' AND v_threshold > 0 THEN consecutive_failures + 1
        ELSE consecutive_failures END,
      circuit_open_until = CASE
        WHEN p_outcome = 'completed' THEN '-infinity'::timestamptz
        WHEN p_outcome = 'outcome_unknown' AND v_threshold > 0 AND consecutive_failures + 1 >= v_threshold
          THEN greatest(circuit_open_until, v_now + v_open_ms * interval '1 millisecond')
        ELSE circuit_open_until END
  WHERE replica_id = a.replica_id AND active_assignments > 0;
  IF NOT FOUND THEN
    -- A reserved route always holds one of its replica's slots; anything else is corrupted
    -- bookkeeping, refused like a counter underflow rather than hidden by clamping at zero.
    PERFORM aip_fail('fence-lost', format('replica `%s` of the pinned route holds no reservation to release', a.replica_id),
                     jsonb_build_object('action_id', p_action_id));
  END IF;
  -- The scopes read above are still the route's: only resolve (serialized by the action lock)
  -- and the releasers (excluded by the update just made) ever change them.
  PERFORM aip_release_scopes(aip_held_scopes(a));
  RETURN json_build_object('action_id', a.action_id, 'released', true, 'last_settlement', p_outcome);
END
$$;

CREATE OR REPLACE FUNCTION aip_expire_leases(p_limit integer) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
SET lock_timeout = '2s' AS $$
DECLARE
  v_now timestamptz := aip_now();
  v_ids text[];
  v_released integer := 0;
BEGIN
  IF p_limit IS NULL OR p_limit < 1 OR p_limit > 10000 THEN
    PERFORM aip_invalid_field('limit', 'must be an integer in [1, 10000]');
  END IF;
  SELECT coalesce(array_agg(s.replica_id), '{}') INTO v_ids
  FROM (SELECT r.replica_id FROM aip_connector_replicas r
        WHERE r.status <> 'offline' AND r.lease_expires_at <= v_now
        ORDER BY r.lease_expires_at, r.replica_id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED) s;
  IF cardinality(v_ids) > 0 THEN
    -- The host's replay record goes with the state it answered for (see replicas.sql).
    WITH released AS (SELECT * FROM aip_release_replica_routes(v_ids, v_now)),
    expired AS (
      UPDATE aip_connector_replicas r
      SET status = 'offline', lease_expires_at = least(r.lease_expires_at, v_now), health_revision = r.health_revision + 1,
          active_assignments = r.active_assignments - coalesce(x.released, 0),
          last_request_id = NULL, last_request = NULL, last_response = NULL, updated_at = v_now
      FROM unnest(v_ids) AS ids(replica_id)
      LEFT JOIN released x ON x.replica_id = ids.replica_id
      WHERE r.replica_id = ids.replica_id
      RETURNING x.released)
    SELECT coalesce(sum(e.released), 0) INTO v_released FROM expired e;
  END IF;
  RETURN json_build_object(
    'expired', cardinality(v_ids), 'released', v_released,
    'next_deadline', aip_time((SELECT min(r.lease_expires_at) FROM aip_connector_replicas r WHERE r.status <> 'offline')));
END
$$;

