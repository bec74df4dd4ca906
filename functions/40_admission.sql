-- Admission scopes: building a route's pinned admission snapshot and reserving / releasing the
-- shared in-flight counters it names.
--
-- Lock order. Every transaction that touches routes or counters locks the replica row(s) first,
-- then the route rows of those replicas, then the counters in ascending (scope rank, key) order:
-- resolve, reacquire, settle, lease expiry and the offline transition all follow it, so no two of
-- them can wait on each other in a cycle, and no releaser ever needs to skip a route.
-- Ranks follow the order in which limits are checked, so the first exhausted scope reported is
-- also the first in precedence: global, tenant, connector_type, instance, binding, tenant_retry.

CREATE FUNCTION aip_scope_rank(p_kind text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE p_kind
    WHEN 'global' THEN 1 WHEN 'tenant' THEN 2 WHEN 'connector_type' THEN 3
    WHEN 'instance' THEN 4 WHEN 'binding' THEN 5 WHEN 'tenant_retry' THEN 6 END
$$;

-- The admission policy a new route through a live chain pins (e: its aip_catalog_entries row):
-- the binding's, or for a binding without quota_policy_ref the implicit default, the reference's
-- "fleet" preset (DEFAULT_ADMISSION_POLICY, src/limits.ts: global and connector-type counters
-- stay off because each would serialize every tenant on one row). A missing policy is not-found,
-- a disabled one is refused (admission).
CREATE FUNCTION aip_route_policy(e aip_catalog_entries) RETURNS aip_admission_policies
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_policy aip_admission_policies;
BEGIN
  IF e.quota_policy_ref IS NULL THEN
    v_policy.revision := aip_default_policy_revision();
    v_policy.enabled := true;
    v_policy.max_tenant_in_flight := aip_default_policy_max_tenant_in_flight();
    v_policy.max_instance_in_flight := aip_default_policy_max_instance_in_flight();
    v_policy.max_binding_in_flight := aip_default_policy_max_binding_in_flight();
    v_policy.max_tenant_retry_in_flight := aip_default_policy_max_tenant_retry_in_flight();
    v_policy.circuit_failure_threshold := aip_default_policy_circuit_failure_threshold();
    v_policy.circuit_open_ms := aip_default_policy_circuit_open_ms();
    RETURN v_policy;
  END IF;
  SELECT * INTO v_policy FROM aip_admission_policies WHERE policy_ref = e.quota_policy_ref;
  IF NOT FOUND THEN
    PERFORM aip_fail('not-found', format('admission policy `%s` was not found', e.quota_policy_ref),
                     jsonb_build_object('policy_ref', e.quota_policy_ref));
  END IF;
  IF NOT v_policy.enabled THEN
    PERFORM aip_fail('admission', format('admission policy `%s` is disabled', e.quota_policy_ref),
                     jsonb_build_object('policy_ref', e.quota_policy_ref));
  END IF;
  RETURN v_policy;
END
$$;

-- The admission snapshot a new route through e under policy p pins.
CREATE FUNCTION aip_new_route_admission(e aip_catalog_entries, p aip_admission_policies) RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT aip_admission_json(e.quota_policy_ref, p.revision, p.max_global_in_flight, p.max_tenant_in_flight,
                            p.max_connector_type_in_flight, p.max_instance_in_flight, p.max_binding_in_flight,
                            p.max_tenant_retry_in_flight, p.circuit_failure_threshold, p.circuit_open_ms,
                            e.tenant_id, e.type_id, e.instance_id, e.binding_key)
$$;

-- The first of the scopes (in their rank order) already at its limit in the latest committed
-- state, or NULL. A plain read: no counter row is locked or waited for. Only committed
-- reservations can make it refuse, so a request racing a release is refused as if it had arrived
-- a moment earlier.
--
-- Each scope's counter is one primary-key lookup, written as a subquery per scope. Written as a
-- join, the generic plan (the planner expects 100 scopes from jsonb_array_elements) hashed the
-- scopes and scanned every counter row: 1.0 ms of a 2.4 ms routing cycle with 11,000 counters,
-- growing with the fleet (docs/decisions.md, "Routing CPU").
CREATE FUNCTION aip_exhausted_scope(p_scopes jsonb) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN (SELECT x.e
          FROM jsonb_array_elements(p_scopes) WITH ORDINALITY AS x(e, n)
          WHERE (SELECT c.active FROM aip_admission_counters c
                 WHERE c.scope_kind = x.e ->> 'kind' AND c.scope_key = x.e ->> 'key') >= (x.e ->> 'limit')::integer
          ORDER BY x.n
          LIMIT 1);
END
$$;

-- Reserve one slot in each scope, in the given (rank) order. Returns NULL on success, or the first
-- exhausted scope; the caller then raises, which rolls back every increment made here.
--
-- Callers first refuse a scope already at its limit (aip_exhausted_scope), without queueing on
-- its counter row: a tenant at its limit is exactly when that row is busiest, and each refused
-- request would otherwise wait out every admitted one's commit. Admission itself happens here,
-- under the row lock with `active < limit`, re-checked on the latest version, so nothing is ever
-- over-admitted.
--
-- A counter row busy for longer than lock_timeout (its scope serializing more work than it can
-- admit in that time) is answered like a full one, capacity-exceeded for that scope with retry
-- guidance, never as a storage failure.
CREATE FUNCTION aip_reserve_scopes(p_scopes jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  s jsonb;
  v_limit integer;
BEGIN
  BEGIN
    FOR s IN SELECT e FROM jsonb_array_elements(p_scopes) e LOOP
      v_limit := (s ->> 'limit')::integer;
      -- Counters exist after their first use, so the plain update is the common path.
      UPDATE aip_admission_counters SET active = active + 1
      WHERE scope_kind = s ->> 'kind' AND scope_key = s ->> 'key' AND active < v_limit;
      IF NOT FOUND THEN
        INSERT INTO aip_admission_counters AS c (scope_kind, scope_key, active)
        VALUES (s ->> 'kind', s ->> 'key', 1)
        ON CONFLICT (scope_kind, scope_key) DO UPDATE SET active = c.active + 1 WHERE c.active < v_limit;
        IF NOT FOUND THEN
          RETURN s;
        END IF;
      END IF;
    END LOOP;
  EXCEPTION WHEN lock_not_available THEN
    PERFORM aip_fail('capacity-exceeded',
      format('connector admission scope `%s` is too busy to admit more work now; retry', s ->> 'kind'),
      jsonb_build_object('scope', s ->> 'kind', 'limit', (s ->> 'limit')::integer, 'retry_after_ms', aip_retry_after_soon_ms()));
  END;
  RETURN NULL;
END
$$;

CREATE FUNCTION aip_fail_capacity(p_scope jsonb) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM aip_fail('capacity-exceeded',
    format('connector admission capacity is exhausted for scope `%s`', p_scope ->> 'kind'),
    jsonb_build_object('scope', p_scope ->> 'kind', 'limit', (p_scope ->> 'limit')::integer, 'retry_after_ms', aip_retry_after_soon_ms()));
END
$$;

-- Release the scopes held by any number of routes: one decrement per (kind, key), in lock order.
-- A counter that would go below zero means the bookkeeping was corrupted: refuse (fence-lost)
-- rather than hide it.
CREATE FUNCTION aip_release_scopes(p_scopes jsonb) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  s record;
BEGIN
  FOR s IN
    SELECT e ->> 'kind' AS kind, e ->> 'key' AS key, count(*)::integer AS n
    FROM jsonb_array_elements(p_scopes) e
    GROUP BY 1, 2
    ORDER BY aip_scope_rank(e ->> 'kind'), e ->> 'key'
  LOOP
    UPDATE aip_admission_counters SET active = active - s.n
    WHERE scope_kind = s.kind AND scope_key = s.key AND active >= s.n;
    IF NOT FOUND THEN
      PERFORM aip_fail('fence-lost', format('admission counter `%s` would go below zero', s.kind),
                       jsonb_build_object('scope', s.kind));
    END IF;
  END LOOP;
END
$$;

-- Settle, as lease_expired, every reserved route of the given replicas, which the caller has
-- locked. Routes are not skipped: every transaction that locks a route row (resolve, reacquire,
-- settle) locks its replica first, so none can hold one of these routes now, and a settlement
-- that arrives later finds the route released and answers as an idempotent repeat. Returns how
-- many routes each replica released, so the caller can keep active_assignments exact.
CREATE FUNCTION aip_release_replica_routes(p_replica_ids text[], p_now timestamptz)
RETURNS TABLE (replica_id text, released integer) LANGUAGE plpgsql AS $$
DECLARE
  v_actions text[];
  v_scopes jsonb;
BEGIN
  SELECT coalesce(array_agg(s.action_id), '{}') INTO v_actions
  FROM (SELECT a.action_id FROM aip_route_assignments a
        WHERE a.replica_id = ANY (p_replica_ids) AND a.reserved
        ORDER BY a.action_id
        FOR UPDATE) s;
  IF cardinality(v_actions) = 0 THEN
    RETURN;
  END IF;
  SELECT coalesce(jsonb_agg(e), '[]'::jsonb) INTO v_scopes
  FROM aip_route_assignments a, jsonb_array_elements(aip_held_scopes(a)) e
  WHERE a.action_id = ANY (v_actions);
  PERFORM aip_release_scopes(v_scopes);
  RETURN QUERY
  WITH settled AS (
    UPDATE aip_route_assignments a
    SET reserved = false, retry = false, last_settlement = 'lease_expired',
        settled_at = p_now, updated_at = p_now
    WHERE a.action_id = ANY (v_actions)
    RETURNING a.replica_id)
  SELECT s.replica_id, count(*)::integer FROM settled s GROUP BY s.replica_id;
END
$$;
