-- Fleet maintenance and observation: bounded lease expiry, the fixed-size fleet status, and the
-- invariant checker.

-- Entry point (data role). Marks at most p_limit replicas whose lease expired offline and settles
-- their reserved routes as lease_expired, releasing every counter. Destinations recorded in
-- routes are never rewritten and no endpoint is contacted. Concurrent runs take disjoint batches
-- (SKIP LOCKED), so nothing is released twice. Returns {expired, released}.
CREATE FUNCTION aip_expire_leases(p_limit integer) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
SET lock_timeout = '2s' AS $$
DECLARE
  v_now timestamptz := aip_now();
  v_ids text[];
  v_released integer;
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
  IF cardinality(v_ids) = 0 THEN
    RETURN json_build_object('expired', 0, 'released', 0);
  END IF;
  WITH released AS (SELECT * FROM aip_release_replica_routes(v_ids, v_now)),
  expired AS (
    UPDATE aip_connector_replicas r
    SET status = 'offline', lease_expires_at = least(r.lease_expires_at, v_now), health_revision = r.health_revision + 1,
        active_assignments = r.active_assignments - coalesce(x.released, 0), updated_at = v_now
    FROM unnest(v_ids) AS ids(replica_id)
    LEFT JOIN released x ON x.replica_id = ids.replica_id
    WHERE r.replica_id = ids.replica_id
    RETURNING x.released)
  SELECT coalesce(sum(e.released), 0) INTO v_released FROM expired e;
  RETURN json_build_object('expired', cardinality(v_ids), 'released', v_released);
END
$$;

-- Entry point (data role). Aggregates only: no identifiers.
CREATE FUNCTION aip_fleet_status() RETURNS json
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
  WITH now AS (SELECT aip_now() AS at),
  replicas AS (
    SELECT count(*) AS replicas,
           count(*) FILTER (WHERE r.status = 'ready' AND r.lease_expires_at > now.at) AS ready,
           count(*) FILTER (WHERE r.status = 'draining' AND r.lease_expires_at > now.at) AS draining,
           count(*) FILTER (WHERE r.status = 'offline') AS offline,
           count(*) FILTER (WHERE r.status <> 'offline' AND r.lease_expires_at <= now.at) AS expired,
           count(*) FILTER (WHERE r.circuit_open_until > now.at) AS open_circuits,
           coalesce(sum(r.capacity) FILTER (WHERE r.status = 'ready' AND r.lease_expires_at > now.at), 0) AS ready_capacity,
           coalesce(sum(r.active_assignments), 0) AS active_assignments
    FROM aip_connector_replicas r, now)
  SELECT json_build_object(
    'catalog_revision', (SELECT revision FROM aip_catalog_revision WHERE singleton),
    'connector_types', (SELECT count(*) FROM aip_connector_types),
    'active_versions', (SELECT count(*) FROM aip_connector_versions WHERE status = 'active' AND supply_chain_qualified),
    'enabled_instances', (SELECT count(*) FROM aip_connector_instances WHERE status = 'enabled'),
    'replicas', replicas.replicas,
    'ready_replicas', replicas.ready,
    'draining_replicas', replicas.draining,
    'offline_replicas', replicas.offline,
    'expired_leases', replicas.expired,
    'open_circuits', replicas.open_circuits,
    'ready_capacity', replicas.ready_capacity,
    'active_assignments', replicas.active_assignments,
    'observed_at', aip_time(now.at))
  FROM replicas, now
$$;

-- Entry point (control and data roles; read-only). Every violation of the registry's bookkeeping
-- invariants; an empty list means healthy.
CREATE FUNCTION aip_check_invariants() RETURNS json
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
  WITH reserved AS (
    SELECT a.action_id, a.replica_id, a.catalog_revision, e AS scope
    FROM aip_route_assignments a
    LEFT JOIN LATERAL jsonb_array_elements(a.reservation_scopes) e ON true
    WHERE a.reserved),
  per_replica AS (SELECT replica_id, count(DISTINCT action_id) AS n FROM reserved GROUP BY replica_id),
  per_counter AS (
    SELECT scope ->> 'kind' AS kind, scope ->> 'key' AS key, count(*) AS n, max((scope ->> 'limit')::bigint) AS max_limit
    FROM reserved WHERE scope IS NOT NULL GROUP BY 1, 2),
  violations AS (
    SELECT 'replica_active_mismatch' AS kind,
           jsonb_build_object('replica_id', r.replica_id, 'active_assignments', r.active_assignments, 'reserved_routes', coalesce(p.n, 0)) AS detail
    FROM aip_connector_replicas r LEFT JOIN per_replica p USING (replica_id)
    WHERE r.active_assignments <> coalesce(p.n, 0)
    UNION ALL
    SELECT 'replica_over_capacity', jsonb_build_object('replica_id', r.replica_id, 'active_assignments', r.active_assignments, 'capacity', r.capacity)
    FROM aip_connector_replicas r WHERE r.active_assignments > r.capacity
    UNION ALL
    SELECT 'reserved_route_without_replica', jsonb_build_object('action_id', x.action_id, 'replica_id', x.replica_id)
    FROM (SELECT DISTINCT action_id, replica_id FROM reserved) x
    WHERE NOT EXISTS (SELECT 1 FROM aip_connector_replicas r WHERE r.replica_id = x.replica_id)
    UNION ALL
    SELECT 'counter_mismatch', jsonb_build_object('scope', k.kind, 'key', k.key, 'active', k.active, 'reserved_scopes', k.n)
    FROM (SELECT coalesce(c.scope_kind, p.kind) AS kind, coalesce(c.scope_key, p.key) AS key,
                 coalesce(c.active, 0) AS active, coalesce(p.n, 0) AS n
          FROM aip_admission_counters c FULL JOIN per_counter p ON p.kind = c.scope_kind AND p.key = c.scope_key) k
    WHERE k.active <> k.n
    UNION ALL
    SELECT 'counter_negative', jsonb_build_object('scope', c.scope_kind, 'key', c.scope_key, 'active', c.active)
    FROM aip_admission_counters c WHERE c.active < 0
    UNION ALL
    SELECT 'counter_above_pinned_limit', jsonb_build_object('scope', c.scope_kind, 'key', c.scope_key, 'active', c.active, 'limit', p.max_limit)
    FROM aip_admission_counters c JOIN per_counter p ON p.kind = c.scope_kind AND p.key = c.scope_key
    WHERE c.active > p.max_limit
    UNION ALL
    SELECT 'revision_behind_route', jsonb_build_object('catalog_revision', rev.revision, 'route_catalog_revision', m.max_rev)
    FROM (SELECT revision FROM aip_catalog_revision WHERE singleton) rev,
         (SELECT max(catalog_revision) AS max_rev FROM aip_route_assignments) m
    WHERE m.max_rev > rev.revision)
  SELECT json_build_object(
    'checked_at', aip_time(aip_now()),
    'healthy', NOT EXISTS (SELECT 1 FROM violations),
    'violations', coalesce((SELECT json_agg(json_build_object('kind', v.kind, 'detail', v.detail) ORDER BY v.kind, v.detail::text)
                            FROM violations v), '[]'::json))
$$;
