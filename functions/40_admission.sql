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

-- The admission policy a new route through a live chain pins (e: its aip_catalog_entries row; p:
-- the policy row e.quota_policy_ref names, or NULL when there is none): the binding's, or for a
-- binding without quota_policy_ref the implicit default, the reference's "fleet" preset
-- (DEFAULT_ADMISSION_POLICY, src/limits.ts: global and connector-type counters stay off because
-- each would serialize every tenant on one row). A missing policy is not-found, a disabled one is
-- refused (admission).
CREATE FUNCTION aip_route_policy(e aip_catalog_entries, p aip_admission_policies) RETURNS aip_admission_policies
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
  IF p.policy_ref IS NULL THEN
    PERFORM aip_fail('not-found', format('admission policy `%s` was not found', e.quota_policy_ref),
                     jsonb_build_object('policy_ref', e.quota_policy_ref));
  END IF;
  IF NOT p.enabled THEN
    PERFORM aip_fail('admission', format('admission policy `%s` is disabled', e.quota_policy_ref),
                     jsonb_build_object('policy_ref', e.quota_policy_ref));
  END IF;
  RETURN p;
END
$$;

-- The route a new action gets through chain e, on replica r (one of e's instance, on its
-- version), under policy p, at catalog revision p_revision: every column but the digest of its
-- record, which the caller adds once it has built the record. Not reserved for a retry, never
-- settled. (With r NULL, what the scopes of such a route would be: aip_route_scopes.)
CREATE FUNCTION aip_new_route(p_action_id text, e aip_catalog_entries, r aip_connector_replicas, p aip_admission_policies,
                              p_revision bigint, p_now timestamptz)
RETURNS aip_route_assignments LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  a aip_route_assignments;
BEGIN
  a.action_id := p_action_id;
  a.capability_id := e.capability_id;
  a.tenant_id := e.tenant_id;
  a.instance_id := e.instance_id;
  a.version_id := e.version_id;
  a.replica_id := r.replica_id;
  a.catalog_revision := p_revision;
  a.binding_policy_revision := e.policy_revision;
  a.credential_revision_ref := e.credential_revision_ref;
  a.quota_policy_ref := e.quota_policy_ref;
  a.replica_health_revision := r.health_revision;
  a.fence_token := 'route_' || aip_uuid7_simple();
  a.admission_policy_revision := p.revision;
  a.admission_max_global_in_flight := p.max_global_in_flight;
  a.admission_max_tenant_in_flight := p.max_tenant_in_flight;
  a.admission_max_connector_type_in_flight := p.max_connector_type_in_flight;
  a.admission_max_instance_in_flight := p.max_instance_in_flight;
  a.admission_max_binding_in_flight := p.max_binding_in_flight;
  a.admission_max_tenant_retry_in_flight := p.max_tenant_retry_in_flight;
  a.admission_circuit_failure_threshold := p.circuit_failure_threshold;
  a.admission_circuit_open_ms := p.circuit_open_ms;
  a.assigned_at := p_now;
  a.reserved := true;
  a.retry := false;
  a.updated_at := p_now;
  RETURN a;
END
$$;

-- The admission scopes route a holds while reserved, from the limits it pins and its own keys, in
-- rank order (global, tenant, connector_type, instance, binding, tenant_retry); a null limit keeps
-- no counter and names no scope. The retry scope is held while a.retry. p_type_id: the route's
-- connector type, needed only when it pins a connector_type limit (aip_route_type); p_binding_key:
-- its binding's counter key (aip_binding_scope_key, which a new route has from its chain), needed
-- only when it pins a binding limit. The same scopes as the record's admission
-- (aip_admission_json) and aip_held_scopes, as rows the counter statements join by key
-- (aip_check_invariants compares what routes hold with the counters). Inlined.
CREATE FUNCTION aip_route_scopes(a aip_route_assignments, p_type_id text, p_binding_key text)
RETURNS TABLE (rank integer, kind text, key text, lim integer)
LANGUAGE sql STABLE AS $$
  SELECT s.rank, s.kind, s.key, s.lim
  FROM (VALUES (1, 'global', 'fleet', a.admission_max_global_in_flight),
               (2, 'tenant', a.tenant_id, a.admission_max_tenant_in_flight),
               (3, 'connector_type', p_type_id, a.admission_max_connector_type_in_flight),
               (4, 'instance', a.instance_id, a.admission_max_instance_in_flight),
               (5, 'binding', p_binding_key, a.admission_max_binding_in_flight),
               (6, 'tenant_retry', a.tenant_id, CASE WHEN a.retry THEN a.admission_max_tenant_retry_in_flight END)
       ) s(rank, kind, key, lim)
  WHERE s.lim IS NOT NULL
$$;

-- The connector type of a route's version, when its pinned policy needs it (a connector_type
-- limit); NULL otherwise, without reading the version.
CREATE FUNCTION aip_route_type(a aip_route_assignments) RETURNS text
LANGUAGE plpgsql STABLE AS $$
BEGIN
  IF a.admission_max_connector_type_in_flight IS NULL THEN
    RETURN NULL;
  END IF;
  RETURN (SELECT v.type_id FROM aip_connector_versions v WHERE v.version_id = a.version_id);
END
$$;

-- The binding counter's key of a route, when its pinned policy has a binding limit; NULL
-- otherwise, without computing it.
CREATE FUNCTION aip_route_binding_key(a aip_route_assignments) RETURNS text
LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN a.admission_max_binding_in_flight IS NOT NULL THEN aip_binding_scope_key(a.tenant_id, a.capability_id, a.instance_id) END
$$;

-- Refuse (capacity-exceeded) when one of route a's scopes is already at its limit in the latest
-- committed state, naming the first in rank order. A plain read: no counter row is locked or
-- waited for. Only committed reservations can make it refuse, so a request racing a release is
-- refused as if it had arrived a moment earlier. Returns true (an expression for the caller to
-- evaluate, where PERFORM would cost a statement).
--
-- Each scope's counter is one primary-key lookup, driven by the scopes (a handful of rows): a
-- join the planner hashed against every counter row once took most of a routing cycle
-- (docs/scaling.md); test/db/plans.test.ts keeps it from coming back.
CREATE FUNCTION aip_refuse_full_scopes(a aip_route_assignments, p_type_id text, p_binding_key text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_full integer;
BEGIN
  SELECT min(s.rank) INTO v_full
  FROM aip_route_scopes(a, p_type_id, p_binding_key) s
  JOIN aip_admission_counters c ON c.scope_kind = s.kind AND c.scope_key = s.key
  WHERE c.active >= s.lim;
  IF v_full IS NOT NULL THEN
    PERFORM aip_fail_capacity((SELECT jsonb_build_object('kind', s.kind, 'key', s.key, 'limit', s.lim)
                               FROM aip_route_scopes(a, p_type_id, p_binding_key) s WHERE s.rank = v_full));
  END IF;
  RETURN true;
END
$$;

-- The first of route a's scopes (in rank order) whose counter stood at its limit or above when
-- read (p_*_active: the counters' active counts, NULL for a counter that does not exist yet or was
-- not read), or NULL. For a new route, whose take statement reads its counters as it chooses the
-- replica (aip_resolve_route): the pre-check of aip_refuse_full_scopes without a statement of its
-- own. One expression, inlined.
CREATE FUNCTION aip_full_scope(a aip_route_assignments, p_type_id text, p_binding_key text, p_global_active integer,
                               p_tenant_active integer, p_type_active integer, p_instance_active integer, p_binding_active integer)
RETURNS jsonb LANGUAGE sql STABLE AS $$
  SELECT CASE
    WHEN p_global_active >= a.admission_max_global_in_flight
      THEN jsonb_build_object('kind', 'global', 'key', 'fleet', 'limit', a.admission_max_global_in_flight)
    WHEN p_tenant_active >= a.admission_max_tenant_in_flight
      THEN jsonb_build_object('kind', 'tenant', 'key', a.tenant_id, 'limit', a.admission_max_tenant_in_flight)
    WHEN p_type_active >= a.admission_max_connector_type_in_flight
      THEN jsonb_build_object('kind', 'connector_type', 'key', p_type_id, 'limit', a.admission_max_connector_type_in_flight)
    WHEN p_instance_active >= a.admission_max_instance_in_flight
      THEN jsonb_build_object('kind', 'instance', 'key', a.instance_id, 'limit', a.admission_max_instance_in_flight)
    WHEN p_binding_active >= a.admission_max_binding_in_flight
      THEN jsonb_build_object('kind', 'binding', 'key', p_binding_key, 'limit', a.admission_max_binding_in_flight)
  END
$$;

-- Move one slot of one counter: p_delta = 1 reserves one (a counter at p_limit has none left),
-- -1 releases one (a counter at zero has none to give). Returns whether it moved. Reserving under
-- the row lock with `active < limit`, re-checked on the latest version, never over-admits. (A
-- counter may stand above a route's pinned limit: routes admitted under a higher one hold it
-- there, and release regardless.) A counter that does not exist yet is created by its first
-- reservation.
CREATE FUNCTION aip_step_counter(p_kind text, p_key text, p_limit integer, p_delta integer) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  UPDATE aip_admission_counters SET active = active + p_delta
  WHERE scope_kind = p_kind AND scope_key = p_key AND active + p_delta >= 0 AND (p_delta < 0 OR active < p_limit);
  IF FOUND OR p_delta < 0 THEN
    RETURN FOUND;
  END IF;
  INSERT INTO aip_admission_counters AS c (scope_kind, scope_key, active)
  VALUES (p_kind, p_key, 1)
  ON CONFLICT (scope_kind, scope_key) DO UPDATE SET active = c.active + 1 WHERE c.active < p_limit;
  RETURN FOUND;
END
$$;

-- Reserve (p_delta = 1) or release (-1) one slot in each scope route a holds while reserved (see
-- aip_route_scopes), one counter at a time in rank order, the lock order of every counter
-- transaction (see the top of this file). Returns NULL when every scope moved, or the first that
-- could not: the caller then raises (capacity-exceeded for a reservation, fence-lost for a
-- release, whose counter would go below zero), which rolls back every step made here.
--
-- One statement per scope: a single UPDATE of them all would lock the rows in whatever order its
-- plan visits them (a hash join over a small counter table visits them in heap order), and two
-- transactions sharing two counters could then deadlock. The default policy's three scopes
-- (tenant, instance, binding) are written out, so that the common case is three statements and
-- no further call; any other scope, and a counter's first reservation, go through
-- aip_step_counter.
CREATE FUNCTION aip_step_scopes(a aip_route_assignments, p_type_id text, p_binding_key text, p_delta integer) RETURNS jsonb
LANGUAGE plpgsql AS $$
BEGIN
  IF a.admission_max_global_in_flight IS NOT NULL
     AND NOT aip_step_counter('global', 'fleet', a.admission_max_global_in_flight, p_delta) THEN
    RETURN jsonb_build_object('kind', 'global', 'key', 'fleet', 'limit', a.admission_max_global_in_flight);
  END IF;
  IF a.admission_max_tenant_in_flight IS NOT NULL THEN
    UPDATE aip_admission_counters SET active = active + p_delta
    WHERE scope_kind = 'tenant' AND scope_key = a.tenant_id
      AND active + p_delta >= 0 AND (p_delta < 0 OR active < a.admission_max_tenant_in_flight);
    IF NOT FOUND AND NOT (p_delta > 0 AND aip_step_counter('tenant', a.tenant_id, a.admission_max_tenant_in_flight, p_delta)) THEN
      RETURN jsonb_build_object('kind', 'tenant', 'key', a.tenant_id, 'limit', a.admission_max_tenant_in_flight);
    END IF;
  END IF;
  IF a.admission_max_connector_type_in_flight IS NOT NULL
     AND NOT aip_step_counter('connector_type', p_type_id, a.admission_max_connector_type_in_flight, p_delta) THEN
    RETURN jsonb_build_object('kind', 'connector_type', 'key', p_type_id, 'limit', a.admission_max_connector_type_in_flight);
  END IF;
  IF a.admission_max_instance_in_flight IS NOT NULL THEN
    UPDATE aip_admission_counters SET active = active + p_delta
    WHERE scope_kind = 'instance' AND scope_key = a.instance_id
      AND active + p_delta >= 0 AND (p_delta < 0 OR active < a.admission_max_instance_in_flight);
    IF NOT FOUND AND NOT (p_delta > 0 AND aip_step_counter('instance', a.instance_id, a.admission_max_instance_in_flight, p_delta)) THEN
      RETURN jsonb_build_object('kind', 'instance', 'key', a.instance_id, 'limit', a.admission_max_instance_in_flight);
    END IF;
  END IF;
  IF a.admission_max_binding_in_flight IS NOT NULL THEN
    UPDATE aip_admission_counters SET active = active + p_delta
    WHERE scope_kind = 'binding' AND scope_key = p_binding_key
      AND active + p_delta >= 0 AND (p_delta < 0 OR active < a.admission_max_binding_in_flight);
    IF NOT FOUND AND NOT (p_delta > 0 AND aip_step_counter('binding', p_binding_key, a.admission_max_binding_in_flight, p_delta)) THEN
      RETURN jsonb_build_object('kind', 'binding', 'key', p_binding_key, 'limit', a.admission_max_binding_in_flight);
    END IF;
  END IF;
  IF a.retry AND a.admission_max_tenant_retry_in_flight IS NOT NULL
     AND NOT aip_step_counter('tenant_retry', a.tenant_id, a.admission_max_tenant_retry_in_flight, p_delta) THEN
    RETURN jsonb_build_object('kind', 'tenant_retry', 'key', a.tenant_id, 'limit', a.admission_max_tenant_retry_in_flight);
  END IF;
  RETURN NULL;
END
$$;

-- Which of route a's scopes a counter wait that ran out of lock_timeout was for: the first, in
-- rank order, whose counter row another transaction holds now; NULL when none does any more. For
-- the answer only, after the wait was given up and rolled back: the counter statements wait
-- without a subtransaction of their own to say which one they were on.
CREATE FUNCTION aip_busy_scope(a aip_route_assignments, p_type_id text, p_binding_key text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  s record;
BEGIN
  FOR s IN SELECT * FROM aip_route_scopes(a, p_type_id, p_binding_key) x ORDER BY x.rank LOOP
    BEGIN
      PERFORM 1 FROM aip_admission_counters c WHERE c.scope_kind = s.kind AND c.scope_key = s.key FOR NO KEY UPDATE NOWAIT;
    EXCEPTION WHEN lock_not_available THEN
      RETURN jsonb_build_object('kind', s.kind, 'key', s.key, 'limit', s.lim);
    END;
  END LOOP;
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

-- A scope whose counter row stayed busy past lock_timeout: capacity-exceeded too, with retry guidance.
CREATE FUNCTION aip_fail_capacity_busy(p_scope jsonb) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM aip_fail('capacity-exceeded',
    format('connector admission scope `%s` is too busy to admit more work now; retry', p_scope ->> 'kind'),
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
