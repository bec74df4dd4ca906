-- Publication of connector replicas: provisioning (20_publish.sql runs the batch). Operators
-- provision host identities; hosts then register and heartbeat (70_replicas.sql). A new replica
-- starts offline. Identity, endpoint and topology are fixed; capacity moves. Provisioning is not
-- a catalog change: it never advances the catalog revision.

-- A replica endpoint: an absolute http(s) URL with a host (a DNS name, an IPv4 or a bracketed IPv6
-- address, optionally a port), and no credentials, query or fragment. Hosts may contain `_`, as
-- Docker and Compose service names do. Whitespace, control characters and backslashes are refused
-- too: a URL parser would silently drop or rewrite them, and a route pins the string as given.
-- This is the structural rule the database relies on; the HTTP schema (src/schemas.ts,
-- replicaEndpointProblem) also runs the WHATWG URL parser, as the reference runs the url crate, so
-- that what this accepts and a parser refuses (an IPv4 address out of range, a malformed
-- percent-escape in a host) is refused before it gets here.
CREATE FUNCTION aip_check_endpoint(p_field text, p_value text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  m text[] := regexp_match(p_value, '^[Hh][Tt][Tt][Pp][Ss]?://([^/]*)(/.*)?$');
  v_authority text := m[1];
  v_port text;
BEGIN
  IF m IS NULL THEN
    PERFORM aip_invalid_field(p_field, 'must be an absolute http or https URL');
  END IF;
  IF p_value ~ '[[:space:][:cntrl:]]' OR strpos(p_value, E'\\') > 0 THEN
    PERFORM aip_invalid_field(p_field, 'must not contain whitespace, control characters or backslashes');
  END IF;
  IF strpos(p_value, '?') > 0 OR strpos(p_value, '#') > 0 THEN
    PERFORM aip_invalid_field(p_field, 'must not have a query or fragment');
  END IF;
  IF strpos(v_authority, '@') > 0 THEN
    PERFORM aip_invalid_field(p_field, 'must not carry credentials');
  END IF;
  -- host: a bracketed IPv6 address, or a name without the characters that cannot be in one
  v_port := substring(v_authority FROM '^(?:\[[0-9A-Fa-f:.]+\]|[^][<>^|/@:]+)(?::([0-9]*))?$');
  IF v_authority !~ '^(?:\[[0-9A-Fa-f:.]+\]|[^][<>^|/@:]+)(?::[0-9]*)?$' OR coalesce(nullif(v_port, ''), '0')::numeric > 65535 THEN
    PERFORM aip_invalid_field(p_field, 'must have a host (a name, an IPv4 address or a bracketed IPv6 address) and at most a port up to 65535');
  END IF;
  RETURN p_value;
END
$$;

CREATE FUNCTION aip_prep_put_replica(p jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  v_id text := aip_read_text(p, 'id');
  v_instance_id text := aip_read_text(p, 'instance_id');
  v_version_id text := aip_read_text(p, 'version_id');
  v_endpoint text := aip_read_text(p, 'endpoint', true, aip_text_bytes_endpoint());
  v_principal_id text := aip_read_text(p, 'peer_principal_id', true, aip_text_bytes_peer_principal_id());
  v_principal_kind text := aip_read_text(p, 'peer_principal_kind', true, aip_text_bytes_peer_principal_kind());
  v_peer_did text := aip_read_text(p, 'peer_did', true, aip_text_bytes_peer_did());
  v_trust_domain text := aip_read_text(p, 'trust_domain');
  v_transport text := aip_read_text(p, 'transport_profile');
  v_topology jsonb := coalesce(p -> 'topology', '{}'::jsonb);
  v_capacity integer := aip_read_int(p, 'capacity', aip_replica_capacity_min(), aip_replica_capacity_max());
BEGIN
  IF jsonb_typeof(v_topology) <> 'object' THEN
    PERFORM aip_invalid_field('topology', 'must be an object');
  END IF;
  PERFORM aip_check_endpoint('endpoint', v_endpoint);
  RETURN jsonb_build_object(
    'replica_id', v_id, 'instance_id', v_instance_id, 'version_id', v_version_id, 'endpoint', v_endpoint,
    'peer_principal_id', v_principal_id, 'peer_principal_kind', v_principal_kind, 'peer_did', v_peer_did,
    'trust_domain', v_trust_domain, 'transport_profile', v_transport,
    'region', aip_check_label('topology.region', coalesce(aip_read_text(v_topology, 'region', false), 'global')),
    'zone', aip_check_label('topology.zone', coalesce(aip_read_text(v_topology, 'zone', false), 'default')),
    'capacity_class', aip_check_label('topology.capacity_class', coalesce(aip_read_text(v_topology, 'capacity_class', false), 'standard')),
    'capacity', v_capacity);
END
$$;

CREATE FUNCTION aip_pub_put_replica(n jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  v aip_connector_replicas := jsonb_populate_record(NULL::aip_connector_replicas, n);
  v_names jsonb := jsonb_build_object('id', v.replica_id);
  v_instance aip_connector_instances;
  r aip_connector_replicas;
BEGIN
  SELECT * INTO v_instance FROM aip_connector_instances WHERE instance_id = v.instance_id;
  IF NOT FOUND THEN
    PERFORM aip_fail('not-found', format('connector instance `%s` was not found', v.instance_id), jsonb_build_object('instance_id', v.instance_id));
  END IF;

  SELECT * INTO r FROM aip_connector_replicas WHERE replica_id = v.replica_id FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    IF v_instance.version_id <> v.version_id THEN
      PERFORM aip_invalid_field('version_id', format('does not match the instance rollout version `%s`', v_instance.version_id));
    END IF;
    -- The rest of a new replica's state is the table's defaults: offline, never leased, idle.
    INSERT INTO aip_connector_replicas (replica_id, instance_id, version_id, endpoint, peer_principal_id, peer_principal_kind,
      peer_did, trust_domain, transport_profile, region, zone, capacity_class, capacity)
    VALUES (v.replica_id, v.instance_id, v.version_id, v.endpoint, v.peer_principal_id, v.peer_principal_kind,
      v.peer_did, v.trust_domain, v.transport_profile, v.region, v.zone, v.capacity_class, v.capacity);
    RETURN aip_pub_result('created', v_names);
  END IF;
  -- Everything but the capacity is the stored row's (as jsonb: a row comparison cannot, the
  -- replay record last_response is json, which has no equality).
  IF NOT to_jsonb(r) @> (n - 'op' - 'capacity') THEN
    PERFORM aip_fail('conflict', format('connector replica `%s` cannot change immutable identity, endpoint or topology', v.replica_id),
                     jsonb_build_object('replica_id', v.replica_id));
  END IF;
  IF r.capacity = v.capacity THEN
    RETURN aip_pub_result('unchanged', v_names);
  END IF;
  IF v.capacity < r.active_assignments THEN
    PERFORM aip_fail('conflict', format('connector replica `%s` has %s active assignments; capacity cannot drop below that', v.replica_id, r.active_assignments),
                     jsonb_build_object('replica_id', v.replica_id, 'active_assignments', r.active_assignments));
  END IF;
  -- A capacity change is a health transition: it moves the sequence hosts fence on, and ends
  -- the host's replay record (its answer named the old sequence).
  UPDATE aip_connector_replicas
  SET capacity = v.capacity, health_revision = health_revision + 1,
      last_request_id = NULL, last_request = NULL, last_response = NULL, updated_at = now()
  WHERE replica_id = v.replica_id;
  RETURN aip_pub_result('updated', v_names);
END
$$;
