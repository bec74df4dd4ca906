-- The registry reader (data role): the specification's Registry reader contract, whose consumers
-- are host admission and callback and event ingress. It reads the identity and state of one
-- version, instance or replica; never a credential or configuration reference (an instance's
-- secret_provider_ref), never a manifest (capability definitions are the catalog's), never a
-- replica's lifecycle replay record.
--
-- What a caller may see follows its token:
--   tenant-scoped (tenant_id claim)        its own instances, their replicas, and the versions
--                                          those instances and replicas run
--   host-scoped (peer_principal_id claim)  its own replicas, their instances, and the versions
--                                          those replicas and instances run
--   neither                                every record (a fleet-wide ingress)
-- Both claims restrict together. A record the caller may not see is answered exactly like one
-- that does not exist (NULL, 404 over HTTP).

CREATE FUNCTION aip_reader_version_json(v aip_connector_versions) RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT json_build_object(
    'id', v.version_id, 'connector_type_id', v.type_id, 'version', v.version, 'status', v.status,
    'supply_chain_qualified', v.supply_chain_qualified,
    'artifact_digest', v.artifact_digest, 'manifest_digest', v.manifest_digest,
    'attestation', v.attestation, 'implementation_support', v.implementation_support,
    'capabilities', aip_version_capabilities_json(v.version_id),
    'profiles', aip_version_profiles_json(v.version_id),
    'admitted_at', aip_time(v.admitted_at), 'updated_at', aip_time(v.updated_at))
$$;

CREATE FUNCTION aip_reader_instance_json(i aip_connector_instances) RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT json_build_object(
    'id', i.instance_id, 'connector_type_id', i.type_id, 'version_id', i.version_id,
    'tenant_id', i.tenant_id, 'config_revision', i.config_revision, 'status', i.status,
    'updated_at', aip_time(i.updated_at))
$$;

CREATE FUNCTION aip_reader_replica_json(r aip_connector_replicas) RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT json_build_object(
    'id', r.replica_id, 'instance_id', r.instance_id, 'version_id', r.version_id,
    'endpoint', r.endpoint, 'peer_principal_id', r.peer_principal_id,
    'peer_principal_kind', r.peer_principal_kind, 'peer_did', r.peer_did,
    'trust_domain', r.trust_domain, 'transport_profile', r.transport_profile,
    'topology', json_build_object('region', r.region, 'zone', r.zone, 'capacity_class', r.capacity_class),
    'status', r.status, 'lease_expires_at', aip_time(r.lease_expires_at), 'capacity', r.capacity,
    'active_assignments', r.active_assignments, 'health_revision', r.health_revision,
    'updated_at', aip_time(r.updated_at))
$$;

-- Entry point (data role). p_kind: version | instance | replica. p_tenant_id and
-- p_peer_principal_id are the verified token's claims (NULL when absent). NULL when the record
-- does not exist or is not the caller's to see.
CREATE FUNCTION aip_registry_read(p_kind text, p_id text, p_tenant_id text, p_peer_principal_id text) RETURNS json
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path FROM CURRENT
SET lock_timeout = '2s' AS $$
DECLARE
  v json;
BEGIN
  CASE p_kind
    WHEN 'version' THEN
      SELECT aip_reader_version_json(x) INTO v FROM aip_connector_versions x
      WHERE x.version_id = p_id
        AND (p_tenant_id IS NULL
             OR EXISTS (SELECT 1 FROM aip_connector_instances i WHERE i.tenant_id = p_tenant_id AND i.version_id = x.version_id)
             OR EXISTS (SELECT 1 FROM aip_connector_replicas r JOIN aip_connector_instances i USING (instance_id)
                        WHERE i.tenant_id = p_tenant_id AND r.version_id = x.version_id))
        AND (p_peer_principal_id IS NULL
             OR EXISTS (SELECT 1 FROM aip_connector_replicas r JOIN aip_connector_instances i USING (instance_id)
                        WHERE r.peer_principal_id = p_peer_principal_id AND x.version_id IN (r.version_id, i.version_id)));
    WHEN 'instance' THEN
      SELECT aip_reader_instance_json(i) INTO v FROM aip_connector_instances i
      WHERE i.instance_id = p_id
        AND (p_tenant_id IS NULL OR i.tenant_id = p_tenant_id)
        AND (p_peer_principal_id IS NULL
             OR EXISTS (SELECT 1 FROM aip_connector_replicas r WHERE r.instance_id = i.instance_id AND r.peer_principal_id = p_peer_principal_id));
    WHEN 'replica' THEN
      SELECT aip_reader_replica_json(r) INTO v FROM aip_connector_replicas r
      WHERE r.replica_id = p_id
        AND (p_tenant_id IS NULL
             OR EXISTS (SELECT 1 FROM aip_connector_instances i WHERE i.instance_id = r.instance_id AND i.tenant_id = p_tenant_id))
        AND (p_peer_principal_id IS NULL OR r.peer_principal_id = p_peer_principal_id);
    ELSE
      PERFORM aip_invalid_field('kind', 'must be one of ' || array_to_string(aip_reader_kinds(), ', '));
  END CASE;
  RETURN v;
END
$$;
