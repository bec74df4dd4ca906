-- base aip_resolve_route sha256:57802c32db8da0295cd114d8814d7e7f6c997f90229742593dee8b3c2e1c3401
-- Experiment (issue 13.3): when every eligible replica row is locked, refuse at once
-- (replica-unavailable, retry_after_ms 100) instead of waiting for the best one.
-- Measure: npx tsx bench/ab.ts bench/candidates/resolve-without-waiting.sql --workload=hot
CREATE OR REPLACE FUNCTION aip_resolve_route(p_action_id text, p_tenant_id text, p_capability_id text, p_topology jsonb DEFAULT '{}'::jsonb)
RETURNS json
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
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
          SELECT rl.* INTO r FROM aip_connector_replicas rl WHERE rl.replica_id = v_best FOR UPDATE NOWAIT;
          v_waiting := NULL;
          IF NOT coalesce(aip_replica_routable(r, v_now), false) THEN
            RAISE SQLSTATE 'ARSKP'; -- it filled up meanwhile: choose again with a fresh snapshot
          END IF;
        END IF;
        -- The catalog lock, without waiting while a row is held: if a publication holds it or
        -- waits for it, step back (the row goes with the subtransaction) and wait for it freely.
        IF NOT pg_try_advisory_xact_lock_shared(hashtext(current_database()), 1095323715) THEN
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
          jsonb_build_object('instance_id', v_best_instance, 'retry_after_ms', 100));
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
                       jsonb_build_object('instance_id', v_first_instance, 'retry_after_ms', 1000));
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
    -- aip_reacquire_route); what is left is named by v_waiting.
    PERFORM aip_fail('replica-unavailable',
      CASE v_waiting
        WHEN 'action' THEN format('another request for action `%s` is still being decided; retry', p_action_id)
        WHEN 'replica' THEN format('every eligible connector replica for instance `%s` is busy; retry', v_best_instance)
        WHEN 'catalog' THEN 'a catalog publication is in progress; retry'
        ELSE 'the routing decision could not take its locks in time; retry' END,
      jsonb_build_object('retry_after_ms', CASE v_waiting WHEN 'replica' THEN 100 ELSE 1000 END)
      || CASE WHEN v_waiting = 'replica' THEN jsonb_build_object('instance_id', v_best_instance) ELSE '{}'::jsonb END);
  END;
END
$$;
