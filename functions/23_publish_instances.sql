-- Publication of connector instances (20_publish.sql runs the batch): id, type and tenant are
-- fixed; the rest moves only with a newer config_revision, and a rollout may not drop a
-- capability an enabled binding uses.

CREATE FUNCTION aip_prep_put_instance(p jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
  SELECT jsonb_build_object(
    'instance_id', aip_read_text(p, 'id'),
    'type_id', aip_read_text(p, 'connector_type_id'),
    'version_id', aip_read_text(p, 'version_id'),
    'tenant_id', aip_read_text(p, 'tenant_id'),
    'config_revision', aip_read_int(p, 'config_revision', 0, aip_json_integer_max()),
    'secret_provider_ref', aip_read_text(p, 'secret_provider_ref', true, aip_text_bytes_secret_provider_ref()),
    'status', aip_read_enum(p, 'status', aip_instance_statuses(), 'enabled'))
$$;

CREATE FUNCTION aip_pub_put_instance(n jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  v aip_connector_instances := jsonb_populate_record(NULL::aip_connector_instances, n);
  v_names jsonb := jsonb_build_object('id', v.instance_id);
  v_touches jsonb := jsonb_build_object('instance', v.instance_id);
  v_version aip_connector_versions;
  i aip_connector_instances;
  v_missing text;
BEGIN
  PERFORM 1 FROM aip_connector_types WHERE type_id = v.type_id;
  IF NOT FOUND THEN
    PERFORM aip_fail('not-found', format('connector type `%s` was not found', v.type_id), jsonb_build_object('connector_type_id', v.type_id));
  END IF;
  SELECT * INTO v_version FROM aip_connector_versions WHERE version_id = v.version_id;
  IF NOT FOUND THEN
    PERFORM aip_fail('not-found', format('connector version `%s` was not found', v.version_id), jsonb_build_object('version_id', v.version_id));
  END IF;
  IF v_version.type_id <> v.type_id THEN
    PERFORM aip_invalid_field('version_id', format('belongs to connector type `%s`, not `%s`', v_version.type_id, v.type_id));
  END IF;

  SELECT * INTO i FROM aip_connector_instances WHERE instance_id = v.instance_id FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    v.created_at := now();
    v.updated_at := now();
    INSERT INTO aip_connector_instances VALUES (v.*);
    RETURN aip_pub_result('created', v_names, v_touches);
  END IF;
  IF i.type_id <> v.type_id OR i.tenant_id <> v.tenant_id THEN
    PERFORM aip_fail('conflict', format('connector instance `%s` cannot change type or tenant', v.instance_id),
                     jsonb_build_object('instance_id', v.instance_id));
  END IF;
  IF jsonb_populate_record(i, n) = i THEN
    RETURN aip_pub_result('unchanged', v_names, v_touches);
  END IF;
  IF v.config_revision <= i.config_revision THEN
    PERFORM aip_fail('conflict', format('connector instance `%s` requires a newer config revision than %s', v.instance_id, i.config_revision),
                     jsonb_build_object('instance_id', v.instance_id, 'current_config_revision', i.config_revision));
  END IF;
  IF v.version_id <> i.version_id THEN
    SELECT b.capability_id INTO v_missing
    FROM aip_capability_bindings b
    WHERE b.instance_id = v.instance_id AND b.enabled
      AND NOT EXISTS (SELECT 1 FROM aip_version_capabilities vc WHERE vc.version_id = v.version_id AND vc.capability_id = b.capability_id)
    ORDER BY b.capability_id LIMIT 1;
    IF FOUND THEN
      PERFORM aip_fail('conflict', format('instance rollout version `%s` does not implement bound capability `%s`', v.version_id, v_missing),
                       jsonb_build_object('instance_id', v.instance_id, 'capability_id', v_missing));
    END IF;
  END IF;
  UPDATE aip_connector_instances
  SET version_id = v.version_id, config_revision = v.config_revision, secret_provider_ref = v.secret_provider_ref,
      status = v.status, updated_at = now()
  WHERE instance_id = v.instance_id;
  RETURN aip_pub_result('updated', v_names, v_touches);
END
$$;
