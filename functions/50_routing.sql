-- Route resolution: one durable, pinned RouteAssignment per action.
--
-- aip_resolve_route is the whole decision in one statement: validate, serialize on the action,
-- return or reacquire an existing route, or select a replica, reserve admission scopes and the
-- replica's capacity, mint a fence token and insert the route. Nothing outside the database is
-- contacted; the gateway dispatches only after this commits.

-- Candidate replicas for a new route, best first: the complete eligibility chain as a filter,
-- then priority, preferred region, preferred zone, fewer active assignments, an action-dependent
-- hash of the replica ID (spreads equal candidates per action), and stable ID tie-breakers.
-- Capacity class and (when cross-region is forbidden) region are filters, not preferences.
-- Written once as a view-like SQL function; callers add the locking clause.
CREATE FUNCTION aip_route_candidates(
  p_action_id text, p_tenant_id text, p_capability_id text, p_now timestamptz,
  p_region text, p_zone text, p_capacity_class text, p_allow_cross_region boolean)
RETURNS TABLE (replica_id text, instance_id text, priority integer, region_miss integer, zone_miss integer,
               active_assignments integer, spread bigint)
LANGUAGE sql STABLE AS $$
  SELECT r.replica_id, b.instance_id, b.priority,
         (p_region IS NOT NULL AND r.region <> p_region)::integer,
         (p_zone IS NOT NULL AND r.zone <> p_zone)::integer,
         r.active_assignments,
         hashtextextended(r.replica_id || p_action_id, 0)
  FROM aip_capability_bindings b
  JOIN aip_connector_instances i ON i.instance_id = b.instance_id AND i.tenant_id = b.tenant_id AND i.status = 'enabled'
  JOIN aip_connector_versions v ON v.version_id = i.version_id AND v.status = 'active' AND v.supply_chain_qualified
  JOIN aip_connector_types t ON t.type_id = v.type_id AND t.enabled
  JOIN aip_version_capabilities vc ON vc.version_id = v.version_id AND vc.capability_id = b.capability_id
  JOIN aip_connector_replicas r ON r.instance_id = i.instance_id AND r.version_id = i.version_id
  WHERE b.tenant_id = p_tenant_id AND b.capability_id = p_capability_id AND b.enabled
    AND r.status = 'ready' AND r.lease_expires_at > p_now AND r.active_assignments < r.capacity
    AND r.circuit_open_until <= p_now
    AND (p_capacity_class IS NULL OR r.capacity_class = p_capacity_class)
    AND (p_allow_cross_region OR p_region IS NULL OR r.region = p_region)
$$;

-- Reacquire an existing, released route: never select again. Reserve the pinned scopes plus the
-- tenant retry budget and the same replica, which may be ready or draining while its lease,
-- capacity, circuit, version and type are still valid. Otherwise fail without a replacement.
CREATE FUNCTION aip_reacquire_route(a aip_route_assignments) RETURNS json
LANGUAGE plpgsql AS $$
DECLARE
  v_now timestamptz := aip_now();
  v_scopes jsonb := (a.admission -> 'scopes')
    || CASE WHEN jsonb_typeof(a.admission -> 'retry_scope') = 'object'
            THEN jsonb_build_array(a.admission -> 'retry_scope') ELSE '[]'::jsonb END;
  v_ok boolean;
  v_exhausted jsonb;
BEGIN
  -- Lock order: replica, then counters. This waits for a busy replica row rather than skipping
  -- it: a pinned route has exactly one candidate.
  SELECT r.status IN ('ready', 'draining') AND r.lease_expires_at > v_now
         AND r.active_assignments < r.capacity AND r.circuit_open_until <= v_now
         AND EXISTS (SELECT 1
                     FROM aip_connector_instances i
                     JOIN aip_connector_versions v ON v.version_id = i.version_id
                     JOIN aip_connector_types t ON t.type_id = v.type_id
                     WHERE i.instance_id = a.instance_id AND i.status = 'enabled' AND i.version_id = a.version_id
                       AND v.status = 'active' AND v.supply_chain_qualified AND t.enabled)
  INTO v_ok
  FROM aip_connector_replicas r WHERE r.replica_id = a.replica_id
  FOR UPDATE OF r;
  -- Capacity is checked before the replica so its refusal takes precedence, as in the reference.
  v_exhausted := aip_reserve_scopes(v_scopes);
  IF v_exhausted IS NOT NULL THEN
    PERFORM aip_fail_capacity(v_exhausted);
  END IF;
  IF NOT coalesce(v_ok, false) THEN
    PERFORM aip_fail('replica-unavailable',
      format('pinned connector replica `%s` of instance `%s` is not available for another attempt', a.replica_id, a.instance_id),
      jsonb_build_object('instance_id', a.instance_id, 'replica_id', a.replica_id, 'retry_after_ms', 1000));
  END IF;
  UPDATE aip_connector_replicas SET active_assignments = active_assignments + 1 WHERE replica_id = a.replica_id;
  UPDATE aip_route_assignments SET reserved = true, reservation_scopes = v_scopes, updated_at = v_now
  WHERE action_id = a.action_id;
  RETURN json_build_object('outcome', 'reacquired', 'assignment', aip_assignment_json(a));
END
$$;

-- Entry point (data role). p_topology: {region?, zone?, capacity_class?, allow_cross_region?}.
-- Returns {outcome: created | existing | reacquired, assignment}.
CREATE FUNCTION aip_resolve_route(p_action_id text, p_tenant_id text, p_capability_id text, p_topology jsonb DEFAULT '{}'::jsonb)
RETURNS json
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
SET lock_timeout = '2s' AS $$
DECLARE
  c_max_attempts constant integer := 32;
  v_topology jsonb := coalesce(p_topology, '{}'::jsonb);
  v_region text;
  v_zone text;
  v_class text;
  v_cross boolean;
  v_now timestamptz;
  v_revision bigint;
  v_first_instance text;
  v_pick text;
  v_attempt integer;
  a aip_route_assignments;
  b aip_capability_bindings;
  i aip_connector_instances;
  v aip_connector_versions;
  r aip_connector_replicas;
  v_policy aip_admission_policies;
  v_admission jsonb;
  v_exhausted jsonb;
BEGIN
  IF nullif(btrim(p_tenant_id), '') IS NULL THEN
    PERFORM aip_invalid_field('tenant_id', 'must be a verified, non-empty tenant');
  END IF;
  IF nullif(btrim(p_action_id), '') IS NULL OR octet_length(p_action_id) > 256 THEN
    PERFORM aip_invalid_field('action_id', 'must be 1 to 256 bytes');
  END IF;
  IF nullif(btrim(p_capability_id), '') IS NULL OR octet_length(p_capability_id) > 256 THEN
    PERFORM aip_invalid_field('capability_id', 'must be 1 to 256 bytes');
  END IF;
  IF jsonb_typeof(v_topology) <> 'object' THEN
    PERFORM aip_invalid_field('topology', 'must be an object');
  END IF;
  v_region := aip_check_label('topology.region', aip_read_text(v_topology, 'region', false));
  v_zone := aip_check_label('topology.zone', aip_read_text(v_topology, 'zone', false));
  v_class := aip_check_label('topology.capacity_class', aip_read_text(v_topology, 'capacity_class', false));
  v_cross := aip_read_bool(v_topology, 'allow_cross_region', true);

  PERFORM aip_lock_action(p_action_id);
  SELECT * INTO a FROM aip_route_assignments WHERE action_id = p_action_id FOR UPDATE;
  IF FOUND THEN
    IF a.tenant_id <> p_tenant_id OR a.capability_id <> p_capability_id THEN
      PERFORM aip_fail('conflict', format('action `%s` already has a different route contract', p_action_id),
                       jsonb_build_object('action_id', p_action_id));
    END IF;
    IF a.reserved THEN
      RETURN json_build_object('outcome', 'existing', 'assignment', aip_assignment_json(a));
    END IF;
    RETURN aip_reacquire_route(a);
  END IF;

  -- A new action: decide against one catalog revision.
  v_revision := aip_catalog_revision_shared();
  v_now := aip_now();
  SELECT b2.instance_id INTO v_first_instance
  FROM aip_capability_bindings b2
  WHERE b2.tenant_id = p_tenant_id AND b2.capability_id = p_capability_id AND b2.enabled
    AND aip_binding_chain_live(b2.tenant_id, b2.capability_id, b2.instance_id, NULL)
  ORDER BY b2.priority, b2.instance_id
  LIMIT 1;
  IF NOT FOUND THEN
    PERFORM aip_fail('binding-unavailable',
      format('no enabled connector binding for tenant `%s` and capability `%s`', p_tenant_id, p_capability_id),
      jsonb_build_object('tenant_id', p_tenant_id, 'capability_id', p_capability_id));
  END IF;

  -- Take the best eligible replica nobody else is routing to right now. Only when every eligible
  -- replica is locked by a concurrent router do we wait, on the best of them, instead of sleeping
  -- and polling; when nothing is eligible at all we fail at once. The candidate query reads its
  -- statement snapshot, so a row is re-verified under its lock against the latest committed state
  -- (instances, versions, types and bindings cannot move: we hold the shared publication lock).
  FOR v_attempt IN 1 .. c_max_attempts LOOP
    SELECT c.replica_id INTO v_pick
    FROM aip_route_candidates(p_action_id, p_tenant_id, p_capability_id, v_now, v_region, v_zone, v_class, v_cross) c
    JOIN aip_connector_replicas r2 ON r2.replica_id = c.replica_id
    ORDER BY c.priority, c.region_miss, c.zone_miss, c.active_assignments, c.spread, c.instance_id, c.replica_id
    LIMIT 1
    FOR UPDATE OF r2 SKIP LOCKED;
    IF NOT FOUND THEN
      PERFORM 1 FROM aip_route_candidates(p_action_id, p_tenant_id, p_capability_id, v_now, v_region, v_zone, v_class, v_cross)
      LIMIT 1;
      EXIT WHEN NOT FOUND;
      SELECT c.replica_id INTO v_pick
      FROM aip_route_candidates(p_action_id, p_tenant_id, p_capability_id, v_now, v_region, v_zone, v_class, v_cross) c
      JOIN aip_connector_replicas r2 ON r2.replica_id = c.replica_id
      ORDER BY c.priority, c.region_miss, c.zone_miss, c.active_assignments, c.spread, c.instance_id, c.replica_id
      LIMIT 1
      FOR UPDATE OF r2;
      CONTINUE WHEN NOT FOUND;
    END IF;
    SELECT * INTO r FROM aip_connector_replicas WHERE replica_id = v_pick;
    EXIT WHEN r.status = 'ready' AND r.lease_expires_at > v_now AND r.active_assignments < r.capacity
              AND r.circuit_open_until <= v_now;
    v_pick := NULL;
  END LOOP;
  IF v_pick IS NULL THEN
    PERFORM aip_fail('replica-unavailable', format('no ready connector replica for instance `%s`', v_first_instance),
                     jsonb_build_object('instance_id', v_first_instance, 'retry_after_ms', 1000));
  END IF;

  -- The chosen replica's row is locked and verified; read the rest of its chain.
  SELECT * INTO i FROM aip_connector_instances WHERE instance_id = r.instance_id;
  SELECT * INTO v FROM aip_connector_versions WHERE version_id = i.version_id;
  SELECT * INTO b FROM aip_capability_bindings
  WHERE tenant_id = p_tenant_id AND capability_id = p_capability_id AND instance_id = i.instance_id;

  IF b.quota_policy_ref IS NULL THEN
    v_policy := aip_default_admission_policy();
  ELSE
    SELECT * INTO v_policy FROM aip_admission_policies WHERE policy_ref = b.quota_policy_ref;
    IF NOT FOUND THEN
      PERFORM aip_fail('not-found', format('admission policy `%s` was not found', b.quota_policy_ref),
                       jsonb_build_object('policy_ref', b.quota_policy_ref));
    END IF;
    IF NOT v_policy.enabled THEN
      PERFORM aip_fail('admission', format('admission policy `%s` is disabled', b.quota_policy_ref),
                       jsonb_build_object('policy_ref', b.quota_policy_ref));
    END IF;
  END IF;
  v_admission := aip_admission_snapshot(v_policy, b.quota_policy_ref, p_tenant_id, v.type_id, i.instance_id,
                                        aip_binding_scope_key(p_tenant_id, p_capability_id, i.instance_id));

  UPDATE aip_connector_replicas SET active_assignments = active_assignments + 1 WHERE replica_id = r.replica_id;
  INSERT INTO aip_route_assignments (
    action_id, capability_id, tenant_id, instance_id, version_id, manifest_digest, replica_id, endpoint,
    peer_principal_id, peer_principal_kind, peer_did, trust_domain, transport_profile, region, zone, capacity_class,
    catalog_revision, binding_policy_revision, credential_revision_ref, quota_policy_ref, replica_health_revision,
    fence_token, admission, assigned_at, reserved, reservation_scopes, updated_at)
  VALUES (
    p_action_id, p_capability_id, p_tenant_id, i.instance_id, v.version_id, v.manifest_digest, r.replica_id, r.endpoint,
    r.peer_principal_id, r.peer_principal_kind, r.peer_did, r.trust_domain, r.transport_profile, r.region, r.zone,
    r.capacity_class, v_revision, b.policy_revision, b.credential_revision_ref, b.quota_policy_ref, r.health_revision,
    'route_' || aip_uuid7_simple(), v_admission, v_now, true, v_admission -> 'scopes', v_now)
  RETURNING * INTO a;
  -- Counters last: the shared rows (a tenant's counter serializes that tenant) are held for the
  -- shortest possible time before commit.
  v_exhausted := aip_reserve_scopes(v_admission -> 'scopes');
  IF v_exhausted IS NOT NULL THEN
    PERFORM aip_fail_capacity(v_exhausted);
  END IF;
  RETURN json_build_object('outcome', 'created', 'assignment', aip_assignment_json(a));
END
$$;

-- Entry point (data role): the pinned route, for its owning tenant only (NULL otherwise), with its
-- reservation state.
CREATE FUNCTION aip_get_route(p_action_id text, p_tenant_id text) RETURNS json
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
  SELECT json_build_object('assignment', aip_assignment_json(a), 'reserved', a.reserved,
                           'last_settlement', a.last_settlement, 'settled_at', aip_time(a.settled_at))
  FROM aip_route_assignments a
  WHERE a.action_id = p_action_id AND a.tenant_id = p_tenant_id
$$;
