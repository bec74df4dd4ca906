-- Connector-host lifecycle: register, heartbeat, drain, offline.
--
-- Only replicas an operator provisioned may register. Every transition advances the replica's
-- health revision (the "sequence" hosts fence on) and is fenced on the sequence the host last
-- saw. Leases are measured on the database clock from a client-supplied duration. The last
-- request and its answer are kept on the replica row: an exact replay of a request_id returns
-- the same answer, a reuse with another payload is a conflict. None of this touches the catalog
-- revision or its lock, so host churn never invalidates a catalog cursor.
--
--   register   offline or lease expired -> ready (a live replica only with its current sequence),
--              only into a routable chain: instance enabled on this version, version active and
--              qualified, type enabled
--   heartbeat  ready | draining, lease live -> same status, lease extended
--   drain      ready | draining, lease live -> draining, lease extended (pinned retries still served)
--   offline    any -> offline, lease ends now; reserved routes are settled as lease_expired
--
-- The last request is remembered on the row (its exact replay returns the same answer). An older
-- heartbeat, drain or offline comes back with a stale previous_sequence and is refused by the
-- fence. A register carries no fence (a restarted host does not know its sequence), so every
-- register request_id a replica consumed is kept for a day (aip_replica_register_requests): a
-- delayed duplicate of an older register is a conflict, not a second registration that would
-- bring an offline replica back.
-- active_assignments is registry-owned: no transition sets it, offline subtracts exactly the
-- routes it settled (a route another transaction holds is skipped, and counted until it is
-- settled), so a takeover inherits the count of the routes still reserved.
--
-- The last request is a replay record of the host's own transitions only: whatever else moves the
-- replica (lease expiry, a capacity change) clears it, so a replay never answers with a state the
-- replica has since left.
--
-- Who may drive a replica is decided by which entry point the database role may execute: a
-- connector host (the data role) always names its verified principal (the token's
-- peer_principal_id claim), and a replica provisioned for another principal is indistinguishable
-- from one that does not exist; an operator (the control role only) may drive any replica.

-- The transition itself, for either entry point. p_peer_principal_id NULL: operator authority.
CREATE FUNCTION aip_replica_transition(p_replica_id text, p_operation text, p_request jsonb, p_peer_principal_id text) RETURNS json
LANGUAGE plpgsql AS $$
DECLARE
  v_request jsonb := coalesce(p_request, '{}'::jsonb);
  v_request_id text;
  v_previous bigint;
  v_ttl_ms integer;
  v_normalized jsonb;
  v_now timestamptz;
  v_live boolean;
  v_status text;
  v_lease timestamptz;
  v_released integer := 0;
  v_response json;
  v_refusal text;
  r aip_connector_replicas;
BEGIN
  IF p_operation IS NULL OR NOT p_operation = ANY (aip_lifecycle_operations()) THEN
    PERFORM aip_invalid_field('operation', 'must be one of ' || array_to_string(aip_lifecycle_operations(), ', '));
  END IF;
  IF jsonb_typeof(v_request) <> 'object' THEN
    PERFORM aip_invalid_field('request', 'must be an object');
  END IF;
  v_request_id := aip_read_text(v_request, 'request_id');
  v_previous := aip_read_int(v_request, 'previous_sequence', 0, aip_json_integer_max(), false);
  v_ttl_ms := coalesce(aip_read_int(v_request, 'lease_ttl_ms', aip_lease_ttl_ms_min(), aip_lease_ttl_ms_max(), false), aip_lease_ttl_ms_default());
  IF p_operation <> 'register' AND v_previous IS NULL THEN
    PERFORM aip_invalid_field('previous_sequence', 'is required for ' || p_operation);
  END IF;
  v_normalized := jsonb_build_object('operation', p_operation, 'previous_sequence', v_previous,
                                     'lease_ttl_ms', CASE WHEN p_operation = 'offline' THEN NULL ELSE v_ttl_ms END);

  SELECT * INTO r FROM aip_connector_replicas
  WHERE replica_id = p_replica_id AND (p_peer_principal_id IS NULL OR peer_principal_id = p_peer_principal_id)
  FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM aip_fail('not-found', format('connector replica `%s` is not provisioned', p_replica_id),
                     jsonb_build_object('replica_id', p_replica_id));
  END IF;
  IF r.last_request_id = v_request_id THEN
    IF r.last_request = v_normalized THEN
      RETURN r.last_response;
    END IF;
    -- No request_id member: in a problem body that names the HTTP request.
    PERFORM aip_fail('conflict', format('lifecycle request `%s` was already used with another payload', v_request_id),
                     jsonb_build_object('replica_id', p_replica_id));
  END IF;

  v_now := aip_now();
  IF p_operation = 'register' THEN
    INSERT INTO aip_replica_register_requests (replica_id, request_id, consumed_at)
    VALUES (p_replica_id, v_request_id, v_now)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
      PERFORM aip_fail('conflict', format('register request `%s` was already consumed by replica `%s`: a new registration needs a new request_id', v_request_id, p_replica_id),
                       jsonb_build_object('replica_id', p_replica_id, 'sequence', r.health_revision));
    END IF;
    -- Bounded expiry of this replica's claims older than a day (the row lock serializes it).
    DELETE FROM aip_replica_register_requests
    WHERE replica_id = p_replica_id
      AND consumed_at IN (SELECT x.consumed_at FROM aip_replica_register_requests x
                          WHERE x.replica_id = p_replica_id AND x.consumed_at < v_now - interval '1 day'
                          ORDER BY x.consumed_at LIMIT 256);
  END IF;
  v_live := r.status <> 'offline' AND r.lease_expires_at > v_now;
  IF v_previous IS NOT NULL AND v_previous <> r.health_revision THEN
    PERFORM aip_fail('conflict', format('replica `%s` transition lost its sequence fence: %s is not the current sequence', p_replica_id, v_previous),
                     jsonb_build_object('replica_id', p_replica_id, 'sequence', r.health_revision));
  END IF;

  CASE p_operation
    WHEN 'register' THEN
      IF v_live AND v_previous IS NULL THEN
        PERFORM aip_fail('conflict', format('replica `%s` is live: it can be taken over only after its lease expires or it goes offline', p_replica_id),
                         jsonb_build_object('replica_id', p_replica_id, 'lease_expires_at', aip_time(r.lease_expires_at)));
      END IF;
      -- A replica registers only into a chain resolve could route to: its instance enabled, on
      -- this replica's version as its rollout, that version active and qualified, its type
      -- enabled (the reference's host admission checks the same). Replica identities are
      -- immutable, so after a rollout the old version's replicas can never serve again. Refused
      -- as admission: no retry with other host state can succeed.
      SELECT CASE
               WHEN i.status <> 'enabled' THEN format('the instance `%s` of replica `%s` is disabled', i.instance_id, p_replica_id)
               WHEN i.version_id <> r.version_id OR v.status <> 'active' OR NOT v.supply_chain_qualified
                 THEN format('replica `%s` serves a version that is not the active rollout of its instance', p_replica_id)
               WHEN NOT t.enabled THEN format('the connector type `%s` of replica `%s` is disabled', t.type_id, p_replica_id)
             END
      INTO v_refusal
      FROM aip_connector_instances i
      JOIN aip_connector_versions v ON v.version_id = r.version_id
      JOIN aip_connector_types t ON t.type_id = i.type_id
      WHERE i.instance_id = r.instance_id;
      IF v_refusal IS NOT NULL THEN
        PERFORM aip_fail('admission', v_refusal, jsonb_build_object('replica_id', p_replica_id, 'version_id', r.version_id));
      END IF;
      v_status := 'ready';
      v_lease := v_now + v_ttl_ms * interval '1 millisecond';
    WHEN 'heartbeat', 'drain' THEN
      IF NOT v_live THEN
        -- An expired lease is never revived: maintenance may be releasing its routes right now.
        PERFORM aip_fail('conflict', format('replica `%s` has no live lease: register again', p_replica_id),
                         jsonb_build_object('replica_id', p_replica_id, 'replica_status', r.status, 'sequence', r.health_revision));
      END IF;
      v_status := CASE WHEN p_operation = 'drain' THEN 'draining' ELSE r.status END;
      v_lease := v_now + v_ttl_ms * interval '1 millisecond';
    ELSE -- offline
      v_status := 'offline';
      v_lease := least(r.lease_expires_at, v_now);
      SELECT coalesce(sum(x.released), 0) INTO v_released FROM aip_release_replica_routes(ARRAY[p_replica_id], v_now) x;
  END CASE;

  v_response := json_build_object('replica_id', p_replica_id, 'status', v_status, 'sequence', r.health_revision + 1,
                                  'lease_expires_at', aip_time(v_lease));
  UPDATE aip_connector_replicas
  SET status = v_status, lease_expires_at = v_lease, health_revision = health_revision + 1,
      active_assignments = active_assignments - v_released,
      last_request_id = v_request_id, last_request = v_normalized, last_response = v_response,
      updated_at = v_now
  WHERE replica_id = p_replica_id;
  RETURN v_response;
END
$$;

-- Entry point (data role): a connector host drives one of its own replicas.
CREATE FUNCTION aip_host_replica_lifecycle(p_replica_id text, p_operation text, p_request jsonb, p_peer_principal_id text) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
SET lock_timeout = '2s' AS $$
BEGIN
  IF nullif(btrim(p_peer_principal_id), '') IS NULL THEN
    PERFORM aip_fail('forbidden', 'a connector host must name its verified peer principal: it may drive only its own replicas');
  END IF;
  RETURN aip_replica_transition(p_replica_id, p_operation, p_request, p_peer_principal_id);
END
$$;

-- Entry point (control role): an operator drives any replica, e.g. takes a misbehaving one offline.
CREATE FUNCTION aip_operator_replica_lifecycle(p_replica_id text, p_operation text, p_request jsonb) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
SET lock_timeout = '2s' AS $$
BEGIN
  RETURN aip_replica_transition(p_replica_id, p_operation, p_request, NULL);
END
$$;
