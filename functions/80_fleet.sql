-- Fleet maintenance and observation: bounded lease expiry, the fixed-size fleet status, and the
-- invariant checker.

-- Entry point (data role). Marks at most p_limit replicas whose lease expired offline and settles
-- their reserved routes as lease_expired, releasing every counter. Destinations recorded in
-- routes are never rewritten and no endpoint is contacted. Returns {expired, released,
-- next_deadline}: next_deadline is the earliest lease end among replicas not yet offline after
-- this batch (in the past when a backlog remains), or null when no lease is live, so a scheduler
-- can sleep until then and an idle deployment needs no statement at all.
--
-- Nothing here waits on a replica another transaction holds: concurrent runs take disjoint
-- batches (SKIP LOCKED, re-checked against the latest committed row, so a replica a finished run
-- already took is not taken again), and a replica a settlement or lifecycle call holds is left
-- for the next run (it stays in next_deadline). The routes of the replicas taken are all
-- released: whoever locks a route locks its replica first (see admission.sql), so a wait for them
-- is short; one that outlasts lock_timeout (a route or counter busy with settlement or routing)
-- is answered busy with retry guidance and releases nothing. Routing already ignores an expired
-- lease, so running this late never routes to a dead host; it only returns capacity.
CREATE FUNCTION aip_expire_leases(p_limit integer) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
SET lock_timeout = '2s' AS $$
DECLARE
  v_now timestamptz := aip_now();
  v_ids text[];
  v_released integer := 0;
  v_next timestamptz;
BEGIN
  IF p_limit IS NULL OR p_limit < aip_lease_expiry_batch_min() OR p_limit > aip_lease_expiry_batch_max() THEN
    PERFORM aip_invalid_field('limit', 'must be an integer in [' || aip_lease_expiry_batch_min() || ', ' || aip_lease_expiry_batch_max() || ']');
  END IF;
  SELECT coalesce(array_agg(s.replica_id), '{}') INTO v_ids
  FROM (SELECT r.replica_id FROM aip_connector_replicas r
        WHERE r.status <> 'offline' AND r.lease_expires_at <= v_now
        ORDER BY r.lease_expires_at, r.replica_id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED) s;
  IF cardinality(v_ids) > 0 THEN
    BEGIN
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
    EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
      PERFORM aip_fail('busy',
        format('lease expiry waited too long for the reserved routes of %s expired replicas and their admission counters; nothing was released, retry',
               cardinality(v_ids)),
        jsonb_build_object('retry_after_ms', aip_retry_after_soon_ms()));
    END;
  END IF;
  SELECT min(r.lease_expires_at) INTO v_next FROM aip_connector_replicas r WHERE r.status <> 'offline';
  RETURN json_build_object('expired', cardinality(v_ids), 'released', v_released, 'next_deadline', aip_time(v_next));
END
$$;

-- The replica counts of fleet status, per topology region, at p_now: written once for both
-- aip_fleet_status() (their sums) and aip_fleet_regions(). ready and draining count live leases
-- only; expired counts replicas not yet marked offline whose lease ended (the backlog of lease
-- maintenance: every offline replica's lease has ended too, it is not counted again). Inlined.
CREATE FUNCTION aip_fleet_replica_counts(p_now timestamptz)
RETURNS TABLE (region text, replicas bigint, ready bigint, draining bigint, offline bigint, expired bigint,
               open_circuits bigint, ready_capacity bigint, active_assignments bigint)
LANGUAGE sql STABLE AS $$
  SELECT r.region,
         count(*),
         count(*) FILTER (WHERE r.status = 'ready' AND r.lease_expires_at > p_now),
         count(*) FILTER (WHERE r.status = 'draining' AND r.lease_expires_at > p_now),
         count(*) FILTER (WHERE r.status = 'offline'),
         count(*) FILTER (WHERE r.status <> 'offline' AND r.lease_expires_at <= p_now),
         count(*) FILTER (WHERE r.circuit_open_until > p_now),
         coalesce(sum(r.capacity) FILTER (WHERE r.status = 'ready' AND r.lease_expires_at > p_now), 0),
         coalesce(sum(r.active_assignments), 0)
  FROM aip_connector_replicas r
  GROUP BY r.region
$$;

-- Entry point (data role). Aggregates only: no identifiers (see aip_fleet_replica_counts). The
-- reference counts offline replicas as expired as well: its figure is expired_leases +
-- offline_replicas.
CREATE FUNCTION aip_fleet_status() RETURNS json
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path FROM CURRENT
SET lock_timeout = '2s' AS $$
  WITH now AS (SELECT aip_now() AS at),
  -- Sums of bigints are numeric, which JSON renders exactly as the bigint itself; coalesce for
  -- a fleet without replicas (no region at all).
  replicas AS (
    SELECT coalesce(sum(c.replicas), 0) AS replicas,
           coalesce(sum(c.ready), 0) AS ready,
           coalesce(sum(c.draining), 0) AS draining,
           coalesce(sum(c.offline), 0) AS offline,
           coalesce(sum(c.expired), 0) AS expired,
           coalesce(sum(c.open_circuits), 0) AS open_circuits,
           coalesce(sum(c.ready_capacity), 0) AS ready_capacity,
           coalesce(sum(c.active_assignments), 0) AS active_assignments
    FROM now, aip_fleet_replica_counts(now.at) c)
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

-- Entry point (data role). The fleet status per topology region: the same counts as
-- aip_fleet_status(), grouped by region label, in label order, at most p_limit regions (clamped to
-- [1, aip_regions_page_max()]).
-- Aggregates only: region labels are topology, not record identifiers.
CREATE FUNCTION aip_fleet_regions(p_limit integer) RETURNS json
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path FROM CURRENT
SET lock_timeout = '2s' AS $$
  WITH now AS (SELECT aip_now() AS at),
  per AS (
    SELECT c.*
    FROM now, aip_fleet_replica_counts(now.at) c
    ORDER BY c.region
    LIMIT least(greatest(coalesce(p_limit, aip_regions_page_default()), 1), aip_regions_page_max()))
  SELECT json_build_object(
    'regions', coalesce((SELECT json_agg(to_json(per) ORDER BY per.region) FROM per), '[]'::json),
    'observed_at', aip_time(now.at))
  FROM now
$$;

-- Entry point (control and data roles; read-only). Every violation of the registry's bookkeeping
-- invariants that no constraint enforces; an empty list means healthy. (Negative counters,
-- active_assignments above capacity and routes without a replica are CHECK and FK violations and
-- cannot be stored at all.) Meant for quiescent checks and diagnosis: it scans the reserved routes
-- and, for the revision rules, every route.
--
--   replica_active_mismatch      a replica's active_assignments is not its number of reserved routes
--   counter_mismatch             a counter is not the number of reserved routes holding its scope
--   counter_above_pinned_limit   the routes holding a scope cannot all have been admitted under their
--                                pinned limits: sorted by limit, the i-th route's limit is below i
--   revision_behind_route        a route pinned a catalog revision newer than the current one
--   health_behind_route          a route pinned a replica health revision newer than the replica's
--   reserved_on_offline_replica  a route still reserved on an offline replica: nothing would ever
--                                release it (offline and expiry release every route they find)
--   reservation_outlived_lease   a route still reserved on a replica whose lease ended more than a
--                                minute ago: lease maintenance (which runs at the deadline) has not
--                                returned its capacity
--   released_without_settlement  a released route without its settlement time or outcome: route
--                                retention and export find released routes by their settlement
--                                (functions/82_retention.sql), so it would be kept and never exported
--   assignment_digest_mismatch   a reserved route whose stored assignment digest is not the digest of
--                                its record: its settlement would have to compare the record the slow
--                                way (a route without a digest, written by an earlier release, is not
--                                a violation)
-- (A route retention removed while it was reserved would show as replica_active_mismatch and
-- counter_mismatch: its slot and counters would outlive it.)
CREATE FUNCTION aip_check_invariants() RETURNS json
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path FROM CURRENT
SET lock_timeout = '2s' AS $$
  WITH held AS (
    SELECT a.action_id, e ->> 'kind' AS kind, e ->> 'key' AS key, (e ->> 'limit')::bigint AS lim
    FROM aip_route_assignments a, jsonb_array_elements(aip_held_scopes(a)) e
    WHERE a.reserved),
  per_replica AS (
    SELECT a.replica_id, count(*) AS n FROM aip_route_assignments a WHERE a.reserved GROUP BY a.replica_id),
  per_counter AS (SELECT kind, key, count(*) AS n FROM held GROUP BY kind, key),
  -- Limits are pinned per route and counters are shared, so routes admitted under a higher limit
  -- may legitimately push a counter past a lower one. What can never happen is a set of holders
  -- that no admission order explains: admitting the lowest limits first, the i-th holder saw i.
  overbooked AS (
    SELECT DISTINCT ON (kind, key) kind, key, n, lim, pos
    FROM (SELECT kind, key, lim, row_number() OVER w AS pos, count(*) OVER (PARTITION BY kind, key) AS n
          FROM held WINDOW w AS (PARTITION BY kind, key ORDER BY lim)) x
    WHERE pos > lim
    ORDER BY kind, key, pos),
  violations AS (
    SELECT 'replica_active_mismatch' AS kind,
           jsonb_build_object('replica_id', r.replica_id, 'active_assignments', r.active_assignments, 'reserved_routes', coalesce(p.n, 0)) AS detail
    FROM aip_connector_replicas r LEFT JOIN per_replica p USING (replica_id)
    WHERE r.active_assignments <> coalesce(p.n, 0)
    UNION ALL
    SELECT 'counter_mismatch', jsonb_build_object('scope', k.kind, 'key', k.key, 'active', k.active, 'reserved_routes', k.n)
    FROM (SELECT coalesce(c.scope_kind, p.kind) AS kind, coalesce(c.scope_key, p.key) AS key,
                 coalesce(c.active, 0) AS active, coalesce(p.n, 0) AS n
          FROM aip_admission_counters c FULL JOIN per_counter p ON p.kind = c.scope_kind AND p.key = c.scope_key) k
    WHERE k.active <> k.n
    UNION ALL
    SELECT 'counter_above_pinned_limit', jsonb_build_object('scope', o.kind, 'key', o.key, 'reserved_routes', o.n, 'limit', o.lim, 'position', o.pos)
    FROM overbooked o
    UNION ALL
    SELECT 'revision_behind_route', jsonb_build_object('catalog_revision', rev.revision, 'route_catalog_revision', m.max_rev)
    FROM (SELECT revision FROM aip_catalog_revision WHERE singleton) rev,
         (SELECT max(catalog_revision) AS max_rev FROM aip_route_assignments) m
    WHERE m.max_rev > rev.revision
    UNION ALL
    SELECT 'health_behind_route', jsonb_build_object('replica_id', r.replica_id, 'health_revision', r.health_revision,
                                                     'route_health_revision', m.max_health)
    FROM (SELECT a.replica_id, max(a.replica_health_revision) AS max_health FROM aip_route_assignments a GROUP BY a.replica_id) m
    JOIN aip_connector_replicas r USING (replica_id)
    WHERE m.max_health > r.health_revision
    UNION ALL
    SELECT CASE WHEN r.status = 'offline' THEN 'reserved_on_offline_replica' ELSE 'reservation_outlived_lease' END,
           jsonb_build_object('replica_id', r.replica_id, 'replica_status', r.status,
                              'lease_expires_at', aip_time(r.lease_expires_at), 'reserved_routes', p.n)
    FROM per_replica p JOIN aip_connector_replicas r USING (replica_id)
    WHERE r.status = 'offline' OR r.lease_expires_at < aip_now() - interval '1 minute'
    UNION ALL
    SELECT 'released_without_settlement', jsonb_build_object('action_id', a.action_id, 'last_settlement', a.last_settlement,
                                                             'settled_at', aip_time(a.settled_at))
    FROM aip_route_assignments a
    WHERE NOT a.reserved AND (a.settled_at IS NULL OR a.last_settlement IS NULL)
    UNION ALL
    SELECT 'assignment_digest_mismatch', jsonb_build_object('action_id', a.action_id)
    FROM aip_route_assignments a
    WHERE a.reserved AND a.assignment_digest <> aip_assignment_digest(aip_assignment_json(a)::jsonb))
  SELECT json_build_object(
    'checked_at', aip_time(aip_now()),
    'healthy', NOT EXISTS (SELECT 1 FROM violations),
    'violations', coalesce((SELECT json_agg(json_build_object('kind', v.kind, 'detail', v.detail) ORDER BY v.kind, v.detail::text)
                            FROM violations v), '[]'::json))
$$;
