-- base aip_settle_route sha256:951c01deb4429ea9131f503c208e1dc2643282751b9f382c20c67e12ab61df57
-- Stale (bench/ab.ts refuses it): settlement now locks the replica before the route row (the
-- lock order of lease expiry and every other releaser), and the route row was narrowed since;
-- writing the route row first would have to be re-thought against that order, not re-applied.
-- Candidate (functions/60_settlement.sql, aip_settle_route): update the route row before the
-- replica and the counters. The route row is already locked by this transaction (FOR UPDATE
-- under the action lock), so the lock order is unchanged; the shared rows, the replica and above
-- all the tenant counter every settle and resolve of that tenant queues on, are then held only
-- from their own update to the commit, not also across the route row's non-HOT update (three
-- index entries). Generated from the function as it stood when measured.
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
  SELECT * INTO a FROM aip_route_assignments WHERE action_id = p_action_id FOR UPDATE;
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

  v_now := aip_now();
  v_threshold := coalesce((a.admission ->> 'circuit_failure_threshold')::integer, 0);
  v_open_ms := coalesce((a.admission ->> 'circuit_open_ms')::integer, 0);
  -- The route row is ours already (locked above): write it first, so the shared rows below
  -- (the replica, then the tenant's counters) are held only from their update to the commit.
  UPDATE aip_route_assignments
  SET reserved = false, reservation_scopes = '[]'::jsonb, last_settlement = p_outcome, settled_at = v_now, updated_at = v_now
  WHERE action_id = p_action_id;
  -- Lock order: replica, then counters (see admission.sql). The circuit uses the thresholds
  -- pinned in the route, not the policy's current ones.
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
  PERFORM aip_release_scopes(a.reservation_scopes);
  RETURN json_build_object('action_id', a.action_id, 'released', true, 'last_settlement', p_outcome);
END
$$;
