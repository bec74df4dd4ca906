-- Publication of capability bindings (20_publish.sql runs the batch): the key (tenant,
-- capability, instance) is fixed; the rest moves only with a newer policy_revision.

CREATE FUNCTION aip_prep_put_binding(p jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
  SELECT jsonb_build_object(
    'tenant_id', aip_read_text(p, 'tenant_id'),
    'capability_id', aip_read_text(p, 'capability_id'),
    'instance_id', aip_read_text(p, 'instance_id'),
    'priority', coalesce(aip_read_int(p, 'priority', 0, aip_sql_integer_max(), false), 0),
    'policy_revision', aip_read_int(p, 'policy_revision', 0, aip_json_integer_max()),
    'credential_revision_ref', aip_read_text(p, 'credential_revision_ref', false, aip_text_bytes_credential_revision_ref()),
    'quota_policy_ref', aip_read_text(p, 'quota_policy_ref', false),
    'enabled', aip_read_bool(p, 'enabled', true))
$$;

CREATE FUNCTION aip_pub_put_binding(n jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  v aip_capability_bindings := jsonb_populate_record(NULL::aip_capability_bindings, n);
  v_names jsonb := jsonb_build_object('tenant_id', v.tenant_id, 'capability_id', v.capability_id, 'instance_id', v.instance_id);
  v_touches jsonb := jsonb_build_object('instance', v.instance_id);
  v_instance aip_connector_instances;
  b aip_capability_bindings;
  v_exists boolean;
BEGIN
  SELECT * INTO b FROM aip_capability_bindings
  WHERE tenant_id = v.tenant_id AND capability_id = v.capability_id AND instance_id = v.instance_id FOR NO KEY UPDATE;
  v_exists := FOUND;
  -- An identical re-put is a no-op even when the instance has since rolled out to a version
  -- without this (necessarily disabled) binding's capability.
  IF v_exists AND jsonb_populate_record(b, n) = b THEN
    RETURN aip_pub_result('unchanged', v_names, v_touches);
  END IF;

  PERFORM 1 FROM aip_capability_definitions WHERE capability_id = v.capability_id;
  IF NOT FOUND THEN
    PERFORM aip_fail('not-found', format('capability `%s` was not found', v.capability_id), jsonb_build_object('capability_id', v.capability_id));
  END IF;
  SELECT * INTO v_instance FROM aip_connector_instances WHERE instance_id = v.instance_id;
  IF NOT FOUND THEN
    PERFORM aip_fail('not-found', format('connector instance `%s` was not found', v.instance_id), jsonb_build_object('instance_id', v.instance_id));
  END IF;
  IF v_instance.tenant_id <> v.tenant_id THEN
    PERFORM aip_invalid_field('tenant_id', 'does not own the connector instance');
  END IF;
  PERFORM 1 FROM aip_version_capabilities WHERE version_id = v_instance.version_id AND capability_id = v.capability_id;
  IF NOT FOUND THEN
    PERFORM aip_invalid_field('capability_id', format('is not implemented by the instance''s version `%s`', v_instance.version_id));
  END IF;
  IF v.quota_policy_ref IS NOT NULL THEN
    PERFORM 1 FROM aip_admission_policies WHERE policy_ref = v.quota_policy_ref;
    IF NOT FOUND THEN
      PERFORM aip_fail('not-found', format('admission policy `%s` was not found', v.quota_policy_ref), jsonb_build_object('policy_ref', v.quota_policy_ref));
    END IF;
  END IF;

  IF NOT v_exists THEN
    v.created_at := now();
    v.updated_at := now();
    INSERT INTO aip_capability_bindings VALUES (v.*);
    RETURN aip_pub_result('created', v_names, v_touches);
  END IF;
  IF v.policy_revision <= b.policy_revision THEN
    PERFORM aip_fail('conflict', format('binding for `%s` and `%s` requires a newer policy revision than %s', v.tenant_id, v.capability_id, b.policy_revision),
                     v_names || jsonb_build_object('current_policy_revision', b.policy_revision));
  END IF;
  UPDATE aip_capability_bindings
  SET priority = v.priority, policy_revision = v.policy_revision, credential_revision_ref = v.credential_revision_ref,
      quota_policy_ref = v.quota_policy_ref, enabled = v.enabled, updated_at = now()
  WHERE tenant_id = v.tenant_id AND capability_id = v.capability_id AND instance_id = v.instance_id;
  RETURN aip_pub_result('updated', v_names, v_touches);
END
$$;
