-- Settlement: release a route's reservation without deleting its evidence.
--
-- The caller presents the exact RouteAssignment it holds; any difference from the stored one
-- (fence token, timestamps, admission snapshot, anything) is `fence-lost`. A reserved route is
-- released once: every counter, the replica's active count, and the circuit update happen in
-- this one statement. Settling an already released route is an idempotent no-op.
--
-- The comparison. A route created by this release keeps the digest of its record
-- (aip_assignment_digest): the presented copy is compared by its digest, without rebuilding the
-- record. When the digests differ, or the route has none (routes written by an earlier release's
-- functions, which may still be serving during an upgrade), the record is rebuilt and compared
-- as jsonb, as before: the digest only ever saves work, it never decides a refusal alone.
--
-- Refusals take no row lock. The route is read without one (the action lock already serializes
-- every resolve and settle of the action, and its columns other than the reservation never
-- change), and refused (not-found, fence-lost) before anything is locked. Only a settlement that
-- will release locks anything, in the global order (replica, then route, then counters): the
-- replica's releasers (offline, lease expiry) take the same replica lock first and then wait for
-- its routes, never skip them, so no interleaving of a settlement with them can leave a route
-- reserved on an offline replica. The replica is locked by its own update (the slot given back
-- and the circuit), in the statement that then releases the route only if it is still reserved: a
-- releaser that got there first while this call waited for the replica already settled it as
-- lease_expired, and this call is then the idempotent repeat, its replica update rolled back with
-- its subtransaction.
--
-- Contention is not a failure: a wait that runs out of lock_timeout (the action held by a
-- concurrent resolve or settle of it, the replica row by routing or a lifecycle call, a counter by
-- its scope's other work) is answered busy with retry guidance, and nothing was released; the
-- settlement is safe to repeat.

-- Entry point (data role). Returns {action_id, released, last_settlement}. Every statement it
-- runs, its helpers' included, is a key lookup whose plan does not depend on the values:
-- planned once per session (force_generic_plan), not again on every call, as the plan cache
-- would otherwise keep doing for those it estimates cheaper with the values known.
CREATE FUNCTION aip_settle_route(p_action_id text, p_tenant_id text, p_assignment jsonb, p_outcome text)
RETURNS json
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
SET lock_timeout = '2s'
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  a aip_route_assignments;
  v_now timestamptz;
  -- Whether the route was still reserved when this call could not release it.
  v_reserved boolean;
  -- The route's last settlement when a releaser got there first (see the ARREL handler).
  v_last text;
  -- What a lock wait that runs out was waiting for (see the exception handler).
  v_waiting text;
  v_locked boolean;
  -- A scope whose counter had no slot to give back.
  v_empty jsonb;
BEGIN
  IF nullif(btrim(p_tenant_id), '') IS NULL THEN
    PERFORM aip_invalid_field('tenant_id', 'must be a verified, non-empty tenant');
  END IF;
  IF p_outcome IS NULL OR NOT p_outcome = ANY (aip_settlement_outcomes()) THEN
    PERFORM aip_invalid_field('outcome', 'must be one of ' || array_to_string(aip_settlement_outcomes(), ', '));
  END IF;
  IF p_assignment IS NULL OR jsonb_typeof(p_assignment) <> 'object' THEN
    PERFORM aip_invalid_field('assignment', 'must be the RouteAssignment object');
  END IF;
  BEGIN
    v_waiting := 'action';
    v_locked := aip_lock_action(p_action_id);
    v_waiting := NULL;
    SELECT * INTO a FROM aip_route_assignments WHERE action_id = p_action_id;
    -- Another tenant's action is indistinguishable from a missing one.
    IF NOT FOUND OR a.tenant_id IS DISTINCT FROM p_tenant_id THEN
      PERFORM aip_fail('not-found', format('route for action `%s` was not found', p_action_id),
                       jsonb_build_object('action_id', p_action_id));
    END IF;
    IF a.assignment_digest IS DISTINCT FROM aip_assignment_digest(p_assignment) THEN
      IF aip_assignment_json(a)::jsonb <> p_assignment THEN
        PERFORM aip_fail('fence-lost', 'route assignment fencing failed: the presented assignment differs from the pinned route',
                         jsonb_build_object('action_id', p_action_id));
      END IF;
    END IF;
    IF NOT a.reserved THEN
      RETURN json_build_object('action_id', a.action_id, 'released', false, 'last_settlement', a.last_settlement);
    END IF;

    -- One statement releases the replica's slot (with the circuit) and then the route: the
    -- replica's update runs first (the route's is gated on it), so the replica row is locked first,
    -- in the global lock order (see admission.sql). The route is released only if it is still
    -- reserved on its latest version: a releaser may have settled it while this call waited for the
    -- replica. The circuit uses the thresholds pinned in the route, not the policy's current ones.
    v_now := aip_now();
    v_waiting := 'replica';
    WITH slot AS (
      UPDATE aip_connector_replicas
      SET active_assignments = active_assignments - 1,
          consecutive_failures = CASE
            WHEN p_outcome = 'completed' THEN 0
            WHEN p_outcome = 'outcome_unknown' AND a.admission_circuit_failure_threshold > 0 THEN consecutive_failures + 1
            ELSE consecutive_failures END,
          circuit_open_until = CASE
            WHEN p_outcome = 'completed' THEN '-infinity'::timestamptz
            WHEN p_outcome = 'outcome_unknown' AND a.admission_circuit_failure_threshold > 0
                 AND consecutive_failures + 1 >= a.admission_circuit_failure_threshold
              THEN greatest(circuit_open_until, v_now + a.admission_circuit_open_ms * interval '1 millisecond')
            ELSE circuit_open_until END
      WHERE replica_id = a.replica_id AND active_assignments > 0
      RETURNING 1)
    -- (The replica's ID too: a generic plan may reach the route through the index of reserved
    -- routes, which is then one replica's few instead of every reserved route of the fleet.)
    UPDATE aip_route_assignments
    SET reserved = false, retry = false, last_settlement = p_outcome, settled_at = v_now, updated_at = v_now
    WHERE action_id = p_action_id AND replica_id = a.replica_id AND reserved AND EXISTS (SELECT 1 FROM slot);
    IF NOT FOUND THEN
      -- Not released here. Either a releaser settled it first (the replica's update, if it was
      -- made, is undone with this block, and this call is the idempotent repeat), or the replica
      -- holds no slot for a route that is still reserved: corrupted bookkeeping, refused like a
      -- counter underflow rather than hidden by clamping at zero.
      SELECT x.reserved, x.last_settlement INTO v_reserved, v_last FROM aip_route_assignments x WHERE x.action_id = p_action_id;
      IF NOT v_reserved THEN
        RAISE SQLSTATE 'ARREL';
      END IF;
      PERFORM aip_fail('fence-lost', format('replica `%s` of the pinned route holds no reservation to release', a.replica_id),
                       jsonb_build_object('action_id', p_action_id));
    END IF;
    v_waiting := NULL;
    -- The scopes the route holds (its pinned base scopes, the retry scope while a retry holds it):
    -- only resolve (serialized by the action lock) and the releasers (excluded by the update just
    -- made) ever change them.
    v_waiting := 'counter';
    v_empty := aip_step_scopes(a, aip_route_type(a), aip_route_binding_key(a), -1);
    IF v_empty IS NOT NULL THEN
      PERFORM aip_fail('fence-lost', format('admission counter `%s` would go below zero', v_empty ->> 'kind'),
                       jsonb_build_object('scope', v_empty ->> 'kind'));
    END IF;
    RETURN json_build_object('action_id', a.action_id, 'released', true, 'last_settlement', p_outcome);
  EXCEPTION
    WHEN SQLSTATE 'ARREL' THEN
      RETURN json_build_object('action_id', p_action_id, 'released', false, 'last_settlement', v_last);
    WHEN lock_not_available OR deadlock_detected THEN
      PERFORM aip_fail('busy',
        format('settlement of action `%s` waited too long for %s; nothing was released, retry', p_action_id,
               CASE v_waiting
                 WHEN 'action' THEN 'another request for the same action'
                 WHEN 'replica' THEN format('its replica `%s`, busy with other routes', a.replica_id)
                 WHEN 'counter' THEN 'an admission counter busy with other routes'
                 ELSE 'a row held by concurrent work' END),
        jsonb_build_object('action_id', p_action_id, 'retry_after_ms', aip_retry_after_soon_ms()));
  END;
END
$$;
