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
-- A new route takes the catalog lock without waiting and then chooses its replica with SKIP
-- LOCKED, so nothing it does under the lock waits. When every eligible replica is busy, it gives
-- the catalog lock back and waits for the best one alone, then takes the catalog lock again and
-- confirms that no publication committed since it chose: a resolver that waits for a busy replica
-- row holds no catalog lock, so a publisher never queues behind it. (When a publication did slip
-- in, the choice is rolled back, row lock and all, and made again.)
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
-- (when cross-region is forbidden) region; with its chain (the catalog entry: what a route
-- through it pins) and the keys the resolver orders by: priority, preferred region, preferred
-- zone, fewer active assignments, an action-dependent hash of the replica ID (spreads equal
-- candidates per action), and stable ID tie-breakers. Inlined too: one range of the entries'
-- primary key, then each instance's replicas by index.
CREATE FUNCTION aip_route_candidates(
  p_action_id text, p_tenant_id text, p_capability_id text, p_now timestamptz,
  p_region text, p_zone text, p_capacity_class text, p_allow_cross_region boolean)
RETURNS TABLE (chain aip_catalog_entries, replica_id text, instance_id text, priority integer, region_miss integer,
               zone_miss integer, active_assignments integer, spread bigint)
LANGUAGE sql STABLE AS $$
  SELECT e, r.replica_id, e.instance_id, e.priority,
         (p_region IS NOT NULL AND r.region <> p_region)::integer,
         (p_zone IS NOT NULL AND r.zone <> p_zone)::integer,
         r.active_assignments,
         hashtextextended(r.replica_id || p_action_id, 0)
  FROM aip_catalog_entries e
  JOIN aip_connector_replicas r ON r.instance_id = e.instance_id AND r.version_id = e.version_id
  WHERE e.tenant_id = p_tenant_id AND e.capability_id = p_capability_id
    AND aip_replica_routable(r, p_now)
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
  v_type text := aip_route_type(a);
  v_binding_key text := aip_route_binding_key(a);
  r aip_connector_replicas;
  v_ok boolean;
  v_full jsonb;
BEGIN
  -- A retry also holds the tenant retry budget, when the pinned policy has one.
  a.retry := a.admission_max_tenant_retry_in_flight IS NOT NULL;
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
  PERFORM aip_refuse_full_scopes(a, v_type, v_binding_key);
  v_full := aip_step_scopes(a, v_type, v_binding_key, 1);
  IF v_full IS NOT NULL THEN
    PERFORM aip_fail_capacity(v_full);
  END IF;
  IF NOT coalesce(v_ok, false) THEN
    PERFORM aip_fail('replica-unavailable',
      format('pinned connector replica `%s` of instance `%s` is not available for another attempt', a.replica_id, a.instance_id),
      jsonb_build_object('instance_id', a.instance_id, 'replica_id', a.replica_id, 'retry_after_ms', aip_retry_after_later_ms()));
  END IF;
  UPDATE aip_connector_replicas SET active_assignments = active_assignments + 1 WHERE replica_id = a.replica_id;
  UPDATE aip_route_assignments
  SET reserved = true, retry = a.retry, last_settlement = NULL, settled_at = NULL, updated_at = v_now
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
-- A new route is, when nothing is contended: the action lock, the route lookup, the catalog lock,
-- one statement that chooses the best free replica, locks it, takes its slot and reads what the
-- route pins (its chain, the version's manifest digest, the policy, the revision), one read of
-- the admission counters (a full scope refuses), the route's insert and one statement reserving
-- every scope. The record is built from the values at hand, and the route keeps its digest, so
-- settlement compares instead of rebuilding it (aip_settle_route).
--
-- Planning: the statements are written in a good join order (a tenant's chains by key, then the
-- replicas of each instance by index), so the planner keeps that order (join_collapse_limit = 1)
-- and plans each statement once per session (force_generic_plan) instead of five times first.
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
  -- What the statement that takes a replica returns: the replica, its chain, the version's
  -- manifest digest, the catalog revision and the chain's policy row (see below).
  v_taken record;
  -- The best eligible replica when none is free (busy or not), with its chain.
  v_busy record;
  -- The revision at which v_best, the replica waited for, was chosen.
  v_seen bigint;
  v_waiting text;
  v_first_instance text;
  v_best text;
  v_best_instance text;
  a aip_route_assignments;
  r aip_connector_replicas;
  e aip_catalog_entries;
  p aip_admission_policies;
  v_manifest_digest text;
  v_checked boolean;
  -- A scope aip_step_scopes found without room.
  v_full jsonb;
  v_assignment json;
  v_locked boolean;
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
  v_region := aip_topology_label(v_topology, 'region');
  v_zone := aip_topology_label(v_topology, 'zone');
  v_class := aip_topology_label(v_topology, 'capacity_class');
  v_cross := aip_topology_flag(v_topology, 'allow_cross_region');

  BEGIN
    v_waiting := 'action';
    v_locked := aip_lock_action(p_action_id);
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
      v_waiting := 'retry';
      RETURN aip_reacquire_route(a);
    END IF;

    -- A new action, unless its route may have been removed by route retention (any spelling of a
    -- removed action: functions/82_retention.sql).
    PERFORM aip_check_action_retained(p_action_id);

    -- A new action. Under the shared catalog lock (so the chains read are the revision's), choose
    -- and lock the best eligible replica nobody else is routing to right now, and take its slot.
    -- Replica state moves without the publication lock, so the lock re-checks
    -- aip_replica_routable on the row's latest version (EvalPlanQual); only the ordering keys may
    -- be a snapshot old. When every eligible replica is busy, wait for the best one alone (its
    -- holder commits in moments) without the catalog lock, so that a publisher never queues
    -- behind a resolver waiting for a row: then take the catalog lock and confirm that no
    -- publication committed since the choice. Each attempt runs in a subtransaction, so giving up
    -- a choice also gives up its row and catalog locks at once. A waiting statement locks at most
    -- this one row, so two resolvers can never each hold a replica the other waits for.
    <<decide>>
    FOR v_attempt IN 1 .. c_max_attempts LOOP
      BEGIN
        IF v_best IS NOT NULL THEN
          -- Every eligible replica was busy: wait for the best one alone, holding no catalog lock.
          v_waiting := 'replica';
          PERFORM 1 FROM aip_connector_replicas rl WHERE rl.replica_id = v_best FOR UPDATE;
          v_waiting := NULL;
        END IF;
        -- The catalog lock, without waiting: if a publication holds it or waits for it, step
        -- back (a row waited for goes with the subtransaction) and wait for it freely.
        IF NOT aip_catalog_try_lock_shared() THEN
          RAISE SQLSTATE 'ARPUB';
        END IF;
        v_now := aip_now();
        -- Choose and lock: the best eligible replica nobody else holds (after a wait, the one
        -- waited for, which is ours: SKIP LOCKED skips only other transactions' rows), with
        -- everything the route pins and the chain's admission counters for the pre-check.
        SELECT rl AS replica, k.chain, v.manifest_digest, cr.revision, ap AS policy,
          -- The counters, read as the pre-check below reads them; the global and connector-type
          -- ones only when the chain's policy has them on.
          CASE WHEN (k.chain).quota_policy_ref IS NOT NULL AND ap.max_global_in_flight IS NOT NULL THEN
            (SELECT c.active FROM aip_admission_counters c WHERE c.scope_kind = 'global' AND c.scope_key = 'fleet') END AS global_active,
          (SELECT c.active FROM aip_admission_counters c WHERE c.scope_kind = 'tenant' AND c.scope_key = (k.chain).tenant_id) AS tenant_active,
          CASE WHEN (k.chain).quota_policy_ref IS NOT NULL AND ap.max_connector_type_in_flight IS NOT NULL THEN
            (SELECT c.active FROM aip_admission_counters c WHERE c.scope_kind = 'connector_type' AND c.scope_key = (k.chain).type_id) END AS type_active,
          (SELECT c.active FROM aip_admission_counters c WHERE c.scope_kind = 'instance' AND c.scope_key = (k.chain).instance_id) AS instance_active,
          (SELECT c.active FROM aip_admission_counters c WHERE c.scope_kind = 'binding' AND c.scope_key = (k.chain).binding_key) AS binding_active
        INTO v_taken
        FROM (SELECT c.chain, rl
              FROM aip_route_candidates(p_action_id, p_tenant_id, p_capability_id, v_now, v_region, v_zone, v_class, v_cross) c
              JOIN aip_connector_replicas rl ON rl.replica_id = c.replica_id
              WHERE aip_replica_routable(rl, v_now) AND (v_best IS NULL OR c.replica_id = v_best)
              ORDER BY c.priority, c.region_miss, c.zone_miss, c.active_assignments, c.spread, c.instance_id, c.replica_id
              LIMIT 1
              FOR UPDATE OF rl SKIP LOCKED) k(chain, rl)
        JOIN aip_connector_versions v ON v.version_id = (k.chain).version_id
        CROSS JOIN aip_catalog_revision cr
        LEFT JOIN aip_admission_policies ap ON ap.policy_ref = (k.chain).quota_policy_ref
        WHERE cr.singleton;
        IF NOT FOUND AND v_best IS NOT NULL THEN
          -- The replica waited for filled up or left the candidates meanwhile: choose again.
          v_best := NULL;
          RAISE SQLSTATE 'ARSKP';
        ELSIF NOT FOUND THEN
          -- No eligible replica is free: the best one, busy or not.
          SELECT c.replica_id, c.instance_id, c.chain INTO v_busy
          FROM aip_route_candidates(p_action_id, p_tenant_id, p_capability_id, v_now, v_region, v_zone, v_class, v_cross) c
          ORDER BY c.priority, c.region_miss, c.zone_miss, c.active_assignments, c.spread, c.instance_id, c.replica_id
          LIMIT 1;
          IF v_busy.replica_id IS NULL THEN
            -- Nothing eligible at all: say why, at this revision. No qualified binding at all, or
            -- none of its replicas can take the action. (A candidate implies a qualified
            -- binding, so a successful resolve never asks.)
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
          -- A refusal that does not depend on which replica is given comes first: a tenant at its
          -- limit is answered 429 at once instead of waiting in line on its own busy replicas.
          e := v_busy.chain;
          IF v_busy.instance_id IS DISTINCT FROM v_best_instance THEN
            p := aip_route_policy(e, (SELECT x FROM aip_admission_policies x WHERE x.policy_ref = e.quota_policy_ref));
            v_checked := aip_refuse_full_scopes(aip_new_route(p_action_id, e, NULL, p, NULL, v_now), e.type_id, e.binding_key);
          END IF;
          v_best := v_busy.replica_id;
          v_best_instance := v_busy.instance_id;
          SELECT x.revision INTO v_seen FROM aip_catalog_revision x WHERE x.singleton;
          RAISE SQLSTATE 'ARSKP'; -- give the catalog lock back, then wait for v_best
        ELSIF v_best IS NOT NULL AND v_taken.revision <> v_seen THEN
          -- A publication committed since the choice: choose again.
          v_best := NULL;
          RAISE SQLSTATE 'ARSKP';
        END IF;
        -- What the route pins. A scope already at its limit in the latest committed state (as the
        -- statement above read it) refuses before the route is written, without queueing on its
        -- busy counter row: a tenant at its limit is exactly when that row is busiest, and each
        -- refused request would otherwise wait out every admitted one's commit.
        r := v_taken.replica;
        e := v_taken.chain;
        v_manifest_digest := v_taken.manifest_digest;
        p := aip_route_policy(e, v_taken.policy);
        a := aip_new_route(p_action_id, e, r, p, v_taken.revision, v_now);
        v_full := aip_full_scope(a, e.type_id, e.binding_key, v_taken.global_active, v_taken.tenant_active, v_taken.type_active,
                                 v_taken.instance_active, v_taken.binding_active);
        IF v_full IS NOT NULL THEN
          PERFORM aip_fail_capacity(v_full);
        END IF;
        -- The replica's slot, taken in the subtransaction that holds the row's lock: the update
        -- is then that lock's own, where one by the parent would have to share the row with it
        -- (a multixact, on every route). Only after the pre-check: a refused request writes
        -- nothing (a tenant at its limit can be refused hundreds of times a second).
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
      -- Eligible replicas exist, but each attempt found its choice gone by the time it was ours.
      PERFORM aip_fail('replica-unavailable',
        format('every eligible connector replica for instance `%s` is busy; retry', v_best_instance),
        jsonb_build_object('instance_id', v_best_instance, 'retry_after_ms', aip_retry_after_soon_ms()));
    END IF;

    -- The route, with the digest of its record, then the counters: after the replica in lock
    -- order, and last, so that each shared counter row is held for as little as possible before
    -- the commit.
    v_assignment := aip_assignment_build(a, r, v_manifest_digest, e.type_id);
    a.assignment_digest := aip_assignment_digest(v_assignment::jsonb);
    INSERT INTO aip_route_assignments VALUES (a.*);
    v_waiting := 'counter';
    v_full := aip_step_scopes(a, e.type_id, e.binding_key, 1);
    IF v_full IS NOT NULL THEN
      PERFORM aip_fail_capacity(v_full);
    END IF;
    RETURN json_build_object('outcome', 'created', 'assignment', v_assignment);
  EXCEPTION WHEN lock_not_available THEN
    -- The pinned replica of a retry answers its own wait (aip_reacquire_route). A counter busy
    -- past lock_timeout (a new route's or a retry's) is capacity-exceeded for its scope. A
    -- duplicate request holding the action says nothing about replicas (the action may well have
    -- a route): it is contention, `busy`, as for a settlement of the same action. What is left is
    -- named by v_waiting.
    IF v_waiting = 'action' THEN
      PERFORM aip_fail('busy', format('another request for action `%s` is still being decided; nothing was changed, retry', p_action_id),
                       jsonb_build_object('action_id', p_action_id, 'retry_after_ms', aip_retry_after_later_ms()));
    END IF;
    IF v_waiting = 'counter' THEN
      v_full := aip_busy_scope(a, e.type_id, e.binding_key);
    ELSIF v_waiting = 'retry' THEN
      a.retry := a.admission_max_tenant_retry_in_flight IS NOT NULL;
      v_full := aip_busy_scope(a, aip_route_type(a), aip_route_binding_key(a));
    END IF;
    IF v_full IS NOT NULL THEN
      PERFORM aip_fail_capacity_busy(v_full);
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
