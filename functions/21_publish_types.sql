-- Publication of connector types (20_publish.sql runs the batch): id, name and owner are fixed,
-- enabled moves only through set_connector_type_enabled. A re-put is compared on every field it
-- states: exactly as stored it is unchanged; anything else, enabled included, is a conflict naming
-- the field (the reference's rule: a GitOps loop re-applying an old file must not disable a type).

CREATE FUNCTION aip_prep_put_connector_type(p jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
  SELECT jsonb_build_object(
    'type_id', aip_read_text(p, 'id'),
    'name', aip_read_text(p, 'name', true, aip_text_bytes_connector_type_name()),
    'owner', aip_read_text(p, 'owner', true, aip_text_bytes_connector_type_owner()),
    'enabled', aip_read_bool(p, 'enabled', true),
    -- A new type is enabled unless the put says otherwise; a re-put without the flag states
    -- nothing about it.
    'enabled_stated', jsonb_typeof(p -> 'enabled') = 'boolean')
$$;

CREATE FUNCTION aip_pub_put_connector_type(n jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  v aip_connector_types := jsonb_populate_record(NULL::aip_connector_types, n);
  v_names jsonb := jsonb_build_object('id', v.type_id);
  v_touches jsonb := jsonb_build_object('type', v.type_id);
  v_field text;
  t aip_connector_types;
BEGIN
  SELECT * INTO t FROM aip_connector_types WHERE type_id = v.type_id FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    v.created_at := now();
    v.updated_at := now();
    INSERT INTO aip_connector_types VALUES (v.*);
    RETURN aip_pub_result('created', v_names, v_touches);
  END IF;
  v_field := CASE
    WHEN t.name <> v.name THEN 'name'
    WHEN t.owner <> v.owner THEN 'owner'
    WHEN (n ->> 'enabled_stated')::boolean AND t.enabled <> v.enabled THEN 'enabled' END;
  IF v_field = 'enabled' THEN
    PERFORM aip_fail('conflict', format('connector type `%s` is %s: enablement moves only through set_connector_type_enabled',
                                        v.type_id, CASE WHEN t.enabled THEN 'enabled' ELSE 'disabled' END),
                     jsonb_build_object('connector_type_id', v.type_id, 'field', v_field));
  END IF;
  IF v_field IS NOT NULL THEN
    PERFORM aip_fail('conflict', format('connector type `%s` already exists with another %s', v.type_id, v_field),
                     jsonb_build_object('connector_type_id', v.type_id, 'field', v_field));
  END IF;
  RETURN aip_pub_result('unchanged', v_names, v_touches);
END
$$;

CREATE FUNCTION aip_prep_set_connector_type_enabled(p jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
  SELECT jsonb_build_object('type_id', aip_read_text(p, 'id'), 'enabled', aip_read_bool(p, 'enabled'))
$$;

CREATE FUNCTION aip_pub_set_connector_type_enabled(n jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  v aip_connector_types := jsonb_populate_record(NULL::aip_connector_types, n);
  v_names jsonb := jsonb_build_object('id', v.type_id);
  v_touches jsonb := jsonb_build_object('type', v.type_id);
  t aip_connector_types;
BEGIN
  SELECT * INTO t FROM aip_connector_types WHERE type_id = v.type_id FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    PERFORM aip_fail('not-found', format('connector type `%s` was not found', v.type_id), jsonb_build_object('connector_type_id', v.type_id));
  END IF;
  IF t.enabled = v.enabled THEN
    RETURN aip_pub_result('unchanged', v_names, v_touches);
  END IF;
  UPDATE aip_connector_types SET enabled = v.enabled, updated_at = now() WHERE type_id = v.type_id;
  RETURN aip_pub_result('updated', v_names, v_touches);
END
$$;
