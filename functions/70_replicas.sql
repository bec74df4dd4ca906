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
-- A host proves what it runs when it registers, as the reference's host admission does: the
-- artifact digest and manifest digest of the build it runs, the configuration revision of the
-- instance it loaded, and how many capabilities it serves. Each must equal the replica's admitted
-- version and its instance now, or the registration is refused (admission, naming the field): a
-- host running another artifact, or a stale configuration, never receives traffic. The
-- configuration revision stands for the whole instance record the host loaded (its version,
-- secret provider reference and status change only with a newer one; its tenant never).
-- Heartbeat, drain and offline carry none of it. During a migration of the hosts, an explicit
-- setting (ALLOW_REGISTRATION_WITHOUT_EVIDENCE, passed as p_evidence_optional) accepts a register
-- that states none of it; one that states any must state and prove all.
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
-- A transition that waits out lock_timeout (the replica row held by routing, settlement, lease
-- expiry or another lifecycle call; for offline, its routes and their counters) is answered busy
-- with retry guidance: contention, not a storage failure, and nothing changed.
--
-- Who may drive a replica is decided by which entry point the database role may execute: a
-- connector host (the data role) always names its verified principal (the token's
-- peer_principal_id claim), and a replica provisioned for another principal is indistinguishable
-- from one that does not exist; an operator (the control role only) may drive any replica.

-- The registration evidence of a request, normalized ({artifact_digest, manifest_digest,
-- config_revision, capability_count}), or NULL for a register that states none of it when that is
-- allowed (p_optional). Any other operation may not carry it.
CREATE FUNCTION aip_registration_evidence(p_operation text, p_request jsonb, p_optional boolean) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  c_fields constant text[] := ARRAY['artifact_digest', 'manifest_digest', 'config_revision', 'capability_count'];
  v_field text;
BEGIN
  IF p_operation <> 'register' THEN
    FOREACH v_field IN ARRAY c_fields LOOP
      IF p_request ? v_field THEN
        PERFORM aip_invalid_field(v_field, 'is stated by register only');
      END IF;
    END LOOP;
    RETURN NULL;
  END IF;
  IF p_optional AND NOT p_request ?| c_fields THEN
    RETURN NULL;
  END IF;
  RETURN jsonb_build_object(
    'artifact_digest', aip_check_digest('artifact_digest', aip_read_text(p_request, 'artifact_digest', true, aip_text_bytes_digest())),
    'manifest_digest', aip_check_digest('manifest_digest', aip_read_text(p_request, 'manifest_digest', true, aip_text_bytes_digest())),
    'config_revision', aip_read_int(p_request, 'config_revision', 0, aip_json_integer_max()),
    'capability_count', aip_read_int(p_request, 'capability_count', 0, aip_manifest_capabilities_max()));
END
$$;

-- A registering host's evidence against the replica's admitted version and its instance, in the
-- reference's order (artifact and manifest digests, then the instance configuration, then the
-- capability count): admission naming the first field that differs, with the expected value (the
-- host may read all of it from the registry reader anyway).
CREATE FUNCTION aip_check_registration_evidence(r aip_connector_replicas, p_evidence jsonb) RETURNS void
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_expected jsonb;
  v_field text;
BEGIN
  SELECT jsonb_build_object('artifact_digest', v.artifact_digest, 'manifest_digest', v.manifest_digest,
                            'config_revision', i.config_revision,
                            'capability_count', (SELECT count(*) FROM aip_version_capabilities c WHERE c.version_id = v.version_id))
  INTO v_expected
  FROM aip_connector_versions v, aip_connector_instances i
  WHERE v.version_id = r.version_id AND i.instance_id = r.instance_id;
  SELECT f INTO v_field
  FROM unnest(ARRAY['artifact_digest', 'manifest_digest', 'config_revision', 'capability_count']) WITH ORDINALITY AS x(f, n)
  WHERE (p_evidence -> f) IS DISTINCT FROM (v_expected -> f)
  ORDER BY n
  LIMIT 1;
  IF v_field IS NOT NULL THEN
    PERFORM aip_fail('admission',
      format('replica `%s` runs %s %s, not the %s admitted for it',
             r.replica_id, v_field, p_evidence ->> v_field,
             CASE WHEN v_field = 'config_revision' THEN format('configuration revision %s of instance `%s`', v_expected ->> v_field, r.instance_id)
                  ELSE format('%s %s of version `%s`', v_field, v_expected ->> v_field, r.version_id) END),
      jsonb_build_object('field', v_field, 'expected', v_expected -> v_field, 'replica_id', r.replica_id,
                         'version_id', r.version_id, 'instance_id', r.instance_id));
  END IF;
END
$$;

-- The transition itself, for either entry point. p_peer_principal_id NULL: operator authority.
-- p_evidence_optional: accept a register without registration evidence (the transition setting).
CREATE FUNCTION aip_replica_transition(p_replica_id text, p_operation text, p_request jsonb, p_peer_principal_id text,
                                       p_evidence_optional boolean) RETURNS json
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
  v_evidence jsonb;
  -- What a lock wait that runs out was waiting for (see the exception handler).
  v_waiting text;
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
  v_evidence := aip_registration_evidence(p_operation, v_request, coalesce(p_evidence_optional, false));
  v_normalized := jsonb_build_object('operation', p_operation, 'previous_sequence', v_previous,
                                     'lease_ttl_ms', CASE WHEN p_operation = 'offline' THEN NULL ELSE v_ttl_ms END)
                  || coalesce(v_evidence, '{}'::jsonb);

  BEGIN
    v_waiting := 'replica';
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
        IF v_evidence IS NOT NULL THEN
          PERFORM aip_check_registration_evidence(r, v_evidence);
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
        v_waiting := 'routes';
        SELECT coalesce(sum(x.released), 0) INTO v_released FROM aip_release_replica_routes(ARRAY[p_replica_id], v_now) x;
        v_waiting := NULL;
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
  EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
    -- Contention, not failure: the replica row busy with routing, settlement, lease expiry or
    -- another lifecycle call, or (offline) its routes and their counters busy. Nothing changed,
    -- and a retry with the same request_id is safe.
    PERFORM aip_fail('busy',
      format('replica `%s` %s: waited too long for %s; nothing changed, retry', p_replica_id, p_operation,
             CASE v_waiting WHEN 'replica' THEN 'the replica, busy with routing or another lifecycle call'
                            WHEN 'routes' THEN 'its reserved routes and their admission counters'
                            ELSE 'a row held by concurrent work' END),
      jsonb_build_object('replica_id', p_replica_id, 'retry_after_ms', aip_retry_after_soon_ms()));
  END;
END
$$;

-- Entry point (data role): a connector host drives one of its own replicas.
-- p_evidence_optional is the server's ALLOW_REGISTRATION_WITHOUT_EVIDENCE (false unless an
-- operator set it for a migration of the hosts).
CREATE FUNCTION aip_host_replica_lifecycle(p_replica_id text, p_operation text, p_request jsonb, p_peer_principal_id text,
                                           p_evidence_optional boolean DEFAULT false) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
SET lock_timeout = '2s' AS $$
BEGIN
  IF nullif(btrim(p_peer_principal_id), '') IS NULL THEN
    PERFORM aip_fail('forbidden', 'a connector host must name its verified peer principal: it may drive only its own replicas');
  END IF;
  RETURN aip_replica_transition(p_replica_id, p_operation, p_request, p_peer_principal_id, p_evidence_optional);
END
$$;

-- Entry point (control role): an operator drives any replica, e.g. takes a misbehaving one offline.
-- An operator's register states the evidence of what the replica's host runs, as a host's does.
CREATE FUNCTION aip_operator_replica_lifecycle(p_replica_id text, p_operation text, p_request jsonb,
                                               p_evidence_optional boolean DEFAULT false) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
SET lock_timeout = '2s' AS $$
BEGIN
  RETURN aip_replica_transition(p_replica_id, p_operation, p_request, NULL, p_evidence_optional);
END
$$;
