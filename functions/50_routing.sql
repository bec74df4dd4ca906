-- Route resolution: one durable, pinned RouteAssignment per action.
--
-- aip_resolve_route is the whole decision in one statement: validate, serialize on the action,
-- return or reacquire an existing route, or select a replica, reserve admission scopes and the
-- replica's capacity, mint a fence token and insert the route. Nothing outside the database is
-- contacted; the gateway dispatches only after this commits.
--
-- Locks, always in this order: the action's advisory lock, the shared catalog publication lock
-- (new routes only), one replica row, then admission counters in (scope rank, key) order.
--
-- A new route chooses and locks its replica before it takes the catalog lock, and only then
-- confirms, under the lock, that no publication committed since it chose: a resolver that waits
-- for a busy replica row holds no catalog lock, so a publisher never queues behind it. (When a
-- publication did slip in, the choice is rolled back, row lock and all, and made again.)
--
-- Contention is never answered as a storage failure. A wait that runs out of lock_timeout (every
-- eligible replica busy, a busy admission counter, the pinned replica of a retry, a publication
-- holding the catalog, a duplicate request holding the action) is answered capacity-exceeded for
-- a counter, busy for the action and replica-unavailable otherwise, all with retry guidance.

-- A replica's own state admits new work: ready, lease live, a free slot, circuit closed. Kept
-- apart from the catalog chain because it is the part that changes without the publication lock:
-- the resolver re-applies it to the row it locks, where EvalPlanQual re-checks it against the
-- row's latest committed version.
CREATE FUNCTION aip_replica_routable(r aip_connector_replicas, p_now timestamptz) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT r.status = 'ready' AND r.lease_expires_at > p_now AND r.active_assignments < r.capacity
     AND r.circuit_open_until <= p_now
$$;

-- The tenant's qualified bindings for a capability with their instances' current versions: the
-- catalog's live chains (aip_catalog_entries, maintained by publication), one key lookup. A
-- set-returning SQL function, so the planner inlines it into the routing queries.
CREATE FUNCTION aip_route_bindings(p_tenant_id text, p_capability_id text)
RETURNS TABLE (instance_id text, version_id text, priority integer)
LANGUAGE sql STABLE AS $$
  SELECT e.instance_id, e.version_id, e.priority
  FROM aip_catalog_entries e
  WHERE e.tenant_id = p_tenant_id AND e.capability_id = p_capability_id
$$;

-- Candidate replicas for a new route: a replica of a qualified binding's instance on the
-- instance's current version, in a state to take work, of the requested capacity class and
-- (when cross-region is forbidden) region. With the keys the resolver orders by: priority,
-- preferred region, preferred zone, fewer active assignments, an action-dependent hash of the
-- replica ID (spreads equal candidates per action), and stable ID tie-breakers. Inlined too.
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
  FROM aip_route_bindings(p_tenant_id, p_capability_id) b
  JOIN aip_connector_replicas r ON r.instance_id = b.instance_id AND r.version_id = b.version_id
  WHERE aip_replica_routable(r, p_now)
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
  v_admission jsonb := aip_pinned_admission(a);
  -- A retry also holds the tenant retry budget, when the pinned policy has one.
  v_retry boolean := a.admission_max_tenant_retry_in_flight IS NOT NULL;
  v_scopes jsonb := (v_admission -> 'scopes') || CASE WHEN v_retry THEN jsonb_build_array(v_admission -> 'retry_scope') ELSE '[]'::jsonb END;
  r aip_connector_replicas;
  v_ok boolean;
  v_exhausted jsonb;
BEGIN
  -- Lock order: replica, then counters. Wait for a busy replica row rather than skip it: a pinned
  -- route has exactly one candidate. Once locked, r is the latest committed version.
  BEGIN
    SELECT * INTO r FROM aip_connector_replicas WHERE replica_id = a.replica_id FOR UPDATE;
  EXCEPTION WHEN lock_not_available THEN
    PERFORM aip_fail('replica-unavailable',
      format('pinned connector replica `%s` of instance `%s` is busy; retry', a.replica_id, a.instance_id),
      jsonb_build_object('instance_id', a.instance_id, 'replica_id', a.replica_id, 'retry_after_ms', aip_retry_after_soon_ms()));
  END;
  v_ok := r.status IN ('ready', 'draining') AND r.lease_expires_at > v_now
          AND r.active_assignments < r.capacity AND r.circuit_open_until <= v_now
          AND EXISTS (SELECT 1 FROM aip_live_instances() i
                      WHERE i.instance_id = a.instance_id AND i.version_id = a.version_id);
  -- Capacity is checked before the replica so its refusal takes precedence, as in the reference.
  v_exhausted := coalesce(aip_exhausted_scope(v_scopes), aip_reserve_scopes(v_scopes));
  IF v_exhausted IS NOT NULL THEN
    PERFORM aip_fail_capacity(v_exhausted);
  END IF;
  IF NOT coalesce(v_ok, false) THEN
    PERFORM aip_fail('replica-unavailable',
      format('pinned connector replica `%s` of instance `%s` is not available for another attempt', a.replica_id, a.instance_id),
      jsonb_build_object('instance_id', a.instance_id, 'replica_id', a.replica_id, 'retry_after_ms', aip_retry_after_later_ms()));
  END IF;
  UPDATE aip_connector_replicas SET active_assignments = active_assignments + 1 WHERE replica_id = a.replica_id;
  UPDATE aip_route_assignments
  SET reserved = true, retry = v_retry, last_settlement = NULL, settled_at = NULL, updated_at = v_now
  WHERE action_id = a.action_id;
  IF NOT FOUND THEN
    -- Route retention removed it after it was read (functions/82_retention.sql): everything
    -- reserved above rolls back with the refusal.
    PERFORM aip_refuse_removed_action(a.action_id, (SELECT x.removed_before FROM aip_route_retention x WHERE x.singleton));
  END IF;
  RETURN json_build_object('outcome', 'reacquired', 'assignment', aip_assignment_json(a));
END
$$;

-- Entry point (data role). p_topology: {region?, zone?, capacity_class?, allow_cross_region?}.
-- Returns {outcome: created | existing | reacquired, assignment}.
--
-- Planning: the candidate query joins seven relations, and the exhaustive join search for that
-- costs tens of milliseconds per plan, more than the whole resolve. The joins are written in a
-- good order (a tenant's bindings by key, then their chain, then the replicas of each instance
-- by index), so the planner keeps that order (join_collapse_limit = 1) and plans each statement
-- once per session (force_generic_plan) instead of five times first.
CREATE FUNCTION aip_resolve_route(p_action_id text, p_tenant_id text, p_capability_id text, p_topology jsonb DEFAULT '{}'::jsonb)
RETURNS json
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
SET lock_timeout = '2s'
SET join_collapse_limit = 1
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  -- Each attempt waits at most once, and only when eligible replicas exist but are all locked.
  c_max_attempts constant integer := 32;
  v_topology jsonb := coalesce(p_topology, '{}'::jsonb);
  v_region text;
  v_zone text;
  v_class text;
  v_cross boolean;
  v_now timestamptz;
  v_revision bigint;
  v_seen bigint;
  v_waiting text;
  v_first_instance text;
  v_best text;
  v_best_instance text;
  v_checked_instance text;
  a aip_route_assignments;
  r aip_connector_replicas;
  e aip_catalog_entries;
  v_policy aip_admission_policies;
  v_admission jsonb;
  v_exhausted jsonb;
BEGIN
  IF nullif(btrim(p_tenant_id), '') IS NULL THEN
    PERFORM aip_invalid_field('tenant_id', 'must be a verified, non-empty tenant');
  END IF;
  IF nullif(btrim(p_action_id), '') IS NULL OR octet_length(p_action_id) > aip_text_bytes_id() THEN
    PERFORM aip_invalid_field('action_id', 'must be 1 to ' || aip_text_bytes_id() || ' bytes');
  END IF;
  IF nullif(btrim(p_capability_id), '') IS NULL OR octet_length(p_capability_id) > aip_text_bytes_id() THEN
    PERFORM aip_invalid_field('capability_id', 'must be 1 to ' || aip_text_bytes_id() || ' bytes');
  END IF;
  IF jsonb_typeof(v_topology) <> 'object' THEN
    PERFORM aip_invalid_field('topology', 'must be an object');
  END IF;
  v_region := aip_check_label('topology.region', aip_read_text(v_topology, 'region', false));
  v_zone := aip_check_label('topology.zone', aip_read_text(v_topology, 'zone', false));
  v_class := aip_check_label('topology.capacity_class', aip_read_text(v_topology, 'capacity_class', false));
  v_cross := aip_read_bool(v_topology, 'allow_cross_region', true);

  BEGIN
    v_waiting := 'action';
    PERFORM aip_lock_action(p_action_id);
    v_waiting := NULL;
    -- No row lock needed: the action lock serializes every resolve and settle of this action, and
    -- lease expiry only ever turns reserved routes into released ones. An existing route is
    -- therefore answered read-only, and a released one cannot change before we reacquire it.
    SELECT * INTO a FROM aip_route_assignments WHERE action_id = p_action_id;
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

    -- A new action, unless its route may have been removed by route retention.
    PERFORM aip_check_action_retained(p_action_id);

    -- A new action. Choose and lock the best eligible replica nobody else is routing to right
    -- now; when every eligible one is busy, wait for the best one alone (its holder commits in
    -- moments). Replica state moves without the publication lock, so the lock re-checks
    -- aip_replica_routable on the row's latest version (EvalPlanQual); only the ordering keys may
    -- be a snapshot old. Each attempt runs in a subtransaction, so giving up a choice (the row
    -- filled up while we waited, or a publication committed since we chose) also gives up its row
    -- lock at once. A waiting statement locks at most this one row, so two resolvers can never
    -- each hold a replica the other waits for.
    <<decide>>
    FOR v_attempt IN 1 .. c_max_attempts LOOP
      BEGIN
        -- The revision the choice is made under (read before it, so a publication that commits
        -- in between is caught below as a changed revision).
        SELECT x.revision INTO v_seen FROM aip_catalog_revision x WHERE x.singleton;
        v_now := aip_now();
        SELECT rl.* INTO r
        FROM aip_route_candidates(p_action_id, p_tenant_id, p_capability_id, v_now, v_region, v_zone, v_class, v_cross) c
        JOIN aip_connector_replicas rl ON rl.replica_id = c.replica_id
        WHERE aip_replica_routable(rl, v_now)
        ORDER BY c.priority, c.region_miss, c.zone_miss, c.active_assignments, c.spread, c.instance_id, c.replica_id
        LIMIT 1
        FOR UPDATE OF rl SKIP LOCKED;
        IF NOT FOUND THEN
          SELECT c.replica_id, c.instance_id INTO v_best, v_best_instance
          FROM aip_route_candidates(p_action_id, p_tenant_id, p_capability_id, v_now, v_region, v_zone, v_class, v_cross) c
          ORDER BY c.priority, c.region_miss, c.zone_miss, c.active_assignments, c.spread, c.instance_id, c.replica_id
          LIMIT 1;
          -- Nothing eligible at all: no retry, no wait; say why below, under the catalog lock.
          EXIT decide WHEN NOT FOUND;
          -- A refusal that does not depend on which replica is given comes first: a tenant at its
          -- limit is answered 429 at once instead of waiting in line on its own busy replicas.
          IF v_best_instance IS DISTINCT FROM v_checked_instance THEN
            SELECT * INTO e FROM aip_catalog_entries x
            WHERE x.tenant_id = p_tenant_id AND x.capability_id = p_capability_id AND x.instance_id = v_best_instance;
            v_exhausted := aip_exhausted_scope(aip_new_route_admission(e, aip_route_policy(e)) -> 'scopes');
            IF v_exhausted IS NOT NULL THEN
              PERFORM aip_fail_capacity(v_exhausted);
            END IF;
            v_checked_instance := v_best_instance;
          END IF;
          v_waiting := 'replica';
          SELECT rl.* INTO r FROM aip_connector_replicas rl WHERE rl.replica_id = v_best FOR UPDATE;
          v_waiting := NULL;
          IF NOT coalesce(aip_replica_routable(r, v_now), false) THEN
            RAISE SQLSTATE 'ARSKP'; -- it filled up meanwhile: choose again with a fresh snapshot
          END IF;
        END IF;
        -- The catalog lock, without waiting while a row is held: if a publication holds it or
        -- waits for it, step back (the row goes with the subtransaction) and wait for it freely.
        IF NOT aip_catalog_try_lock_shared() THEN
          RAISE SQLSTATE 'ARPUB';
        END IF;
        SELECT x.revision INTO v_revision FROM aip_catalog_revision x WHERE x.singleton;
        IF v_revision <> v_seen THEN
          RAISE SQLSTATE 'ARSKP'; -- a publication committed since the choice: choose again
        END IF;
        -- The chosen chain, stable from here (the publication lock is held), and what it pins. A
        -- scope already at its limit refuses before anything is written.
        SELECT * INTO e FROM aip_catalog_entries x
        WHERE x.tenant_id = p_tenant_id AND x.capability_id = p_capability_id AND x.instance_id = r.instance_id;
        v_policy := aip_route_policy(e);
        v_admission := aip_new_route_admission(e, v_policy);
        v_exhausted := aip_exhausted_scope(v_admission -> 'scopes');
        IF v_exhausted IS NOT NULL THEN
          PERFORM aip_fail_capacity(v_exhausted);
        END IF;
        -- The replica's slot is taken in the subtransaction that holds the row's lock: the update
        -- is then that lock's own, where one by the parent would have to share the row with it
        -- (a multixact, on every route).
        UPDATE aip_connector_replicas SET active_assignments = active_assignments + 1 WHERE replica_id = r.replica_id;
        EXIT decide;
      EXCEPTION
        WHEN SQLSTATE 'ARSKP' THEN
          r := NULL;
        WHEN SQLSTATE 'ARPUB' THEN
          r := NULL;
          v_waiting := 'catalog';
          PERFORM aip_catalog_revision_shared();
          v_waiting := NULL;
      END;
    END LOOP;
    IF r.replica_id IS NULL THEN
      IF v_best_instance IS NOT NULL THEN
        -- Eligible replicas exist, but each attempt found its choice gone by the time it was ours.
        PERFORM aip_fail('replica-unavailable',
          format('every eligible connector replica for instance `%s` is busy; retry', v_best_instance),
          jsonb_build_object('instance_id', v_best_instance, 'retry_after_ms', aip_retry_after_soon_ms()));
      END IF;
      -- Say why, at one revision: no qualified binding at all, or none of its replicas can take
      -- the action. (A candidate implies a qualified binding, so a successful resolve never asks.)
      v_waiting := 'catalog';
      PERFORM aip_catalog_revision_shared();
      SELECT b.instance_id INTO v_first_instance
      FROM aip_route_bindings(p_tenant_id, p_capability_id) b
      ORDER BY b.priority, b.instance_id
      LIMIT 1;
      IF NOT FOUND THEN
        PERFORM aip_fail('binding-unavailable',
          format('no enabled connector binding for tenant `%s` and capability `%s`', p_tenant_id, p_capability_id),
          jsonb_build_object('tenant_id', p_tenant_id, 'capability_id', p_capability_id));
      END IF;
      PERFORM aip_fail('replica-unavailable', format('no ready connector replica for instance `%s`', v_first_instance),
                       jsonb_build_object('instance_id', v_first_instance, 'retry_after_ms', aip_retry_after_later_ms()));
    END IF;

    -- Counters (after the replica, in lock order), then the route.
    v_exhausted := aip_reserve_scopes(v_admission -> 'scopes');
    IF v_exhausted IS NOT NULL THEN
      PERFORM aip_fail_capacity(v_exhausted);
    END IF;
    INSERT INTO aip_route_assignments (
      action_id, capability_id, tenant_id, instance_id, version_id, replica_id, catalog_revision, binding_policy_revision,
      credential_revision_ref, quota_policy_ref, replica_health_revision, fence_token,
      admission_policy_revision, admission_max_global_in_flight, admission_max_tenant_in_flight,
      admission_max_connector_type_in_flight, admission_max_instance_in_flight, admission_max_binding_in_flight,
      admission_max_tenant_retry_in_flight, admission_circuit_failure_threshold, admission_circuit_open_ms,
      assigned_at, reserved, updated_at)
    VALUES (
      p_action_id, p_capability_id, p_tenant_id, r.instance_id, r.version_id, r.replica_id, v_revision, e.policy_revision,
      e.credential_revision_ref, e.quota_policy_ref, r.health_revision, 'route_' || aip_uuid7_simple(),
      v_policy.revision, v_policy.max_global_in_flight, v_policy.max_tenant_in_flight,
      v_policy.max_connector_type_in_flight, v_policy.max_instance_in_flight, v_policy.max_binding_in_flight,
      v_policy.max_tenant_retry_in_flight, v_policy.circuit_failure_threshold, v_policy.circuit_open_ms,
      v_now, true, v_now)
    RETURNING * INTO a;
    RETURN json_build_object('outcome', 'created', 'assignment', aip_assignment_json(a));
  EXCEPTION WHEN lock_not_available THEN
    -- Counters and the pinned replica answer their own waits (aip_reserve_scopes,
    -- aip_reacquire_route); what is left is named by v_waiting. A duplicate request holding the
    -- action says nothing about replicas (the action may well have a route): it is contention,
    -- `busy`, as for a settlement of the same action.
    IF v_waiting = 'action' THEN
      PERFORM aip_fail('busy', format('another request for action `%s` is still being decided; nothing was changed, retry', p_action_id),
                       jsonb_build_object('action_id', p_action_id, 'retry_after_ms', aip_retry_after_later_ms()));
    END IF;
    PERFORM aip_fail('replica-unavailable',
      CASE v_waiting
        WHEN 'replica' THEN format('every eligible connector replica for instance `%s` is busy; retry', v_best_instance)
        WHEN 'catalog' THEN 'a catalog publication is in progress; retry'
        ELSE 'the routing decision could not take its locks in time; retry' END,
      jsonb_build_object('retry_after_ms', CASE v_waiting WHEN 'replica' THEN aip_retry_after_soon_ms() ELSE aip_retry_after_later_ms() END)
      || CASE WHEN v_waiting = 'replica' THEN jsonb_build_object('instance_id', v_best_instance) ELSE '{}'::jsonb END);
  END;
END
$$;

-- Entry point (data role): the pinned route, for its owning tenant only (NULL otherwise), with its
-- reservation state. A plain read; like every entry point it gives up (storage, retryable) rather
-- than wait behind a lock for longer than lock_timeout.
CREATE FUNCTION aip_get_route(p_action_id text, p_tenant_id text) RETURNS json
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path FROM CURRENT
SET lock_timeout = '2s'
SET plan_cache_mode = force_generic_plan AS $$
BEGIN
  RETURN (SELECT json_build_object('assignment', aip_assignment_json(a), 'reserved', a.reserved,
                                   'last_settlement', a.last_settlement, 'settled_at', aip_time(a.settled_at))
          FROM aip_route_assignments a
          WHERE a.action_id = p_action_id AND a.tenant_id = p_tenant_id);
END
$$;
