-- Publication of admission policies (20_publish.sql runs the batch): policy_ref is fixed; the rest
-- moves only with a newer revision. A policy is in no live chain, so a change touches none (the
-- routes pin the policy they were admitted under), but it is the catalog's: the revision moves.

CREATE FUNCTION aip_prep_put_admission_policy(p jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
  SELECT jsonb_build_object(
    'policy_ref', aip_read_text(p, 'policy_ref'),
    'revision', aip_read_int(p, 'revision', 1, aip_json_integer_max()),
    'enabled', aip_read_bool(p, 'enabled', true),
    'max_global_in_flight', aip_read_int(p, 'max_global_in_flight', 1, aip_sql_integer_max(), false),
    'max_tenant_in_flight', aip_read_int(p, 'max_tenant_in_flight', 1, aip_sql_integer_max(), false),
    'max_connector_type_in_flight', aip_read_int(p, 'max_connector_type_in_flight', 1, aip_sql_integer_max(), false),
    'max_instance_in_flight', aip_read_int(p, 'max_instance_in_flight', 1, aip_sql_integer_max(), false),
    'max_binding_in_flight', aip_read_int(p, 'max_binding_in_flight', 1, aip_sql_integer_max(), false),
    'max_tenant_retry_in_flight', aip_read_int(p, 'max_tenant_retry_in_flight', 1, aip_sql_integer_max(), false),
    'circuit_failure_threshold', coalesce(aip_read_int(p, 'circuit_failure_threshold', aip_circuit_failure_threshold_min(),
                                                       aip_circuit_failure_threshold_max(), false), aip_circuit_failure_threshold_default()),
    'circuit_open_ms', coalesce(aip_read_int(p, 'circuit_open_ms', aip_circuit_open_ms_min(), aip_circuit_open_ms_max(), false),
                                aip_circuit_open_ms_default()))
$$;

CREATE FUNCTION aip_pub_put_admission_policy(n jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  v aip_admission_policies := jsonb_populate_record(NULL::aip_admission_policies, n);
  v_names jsonb := jsonb_build_object('policy_ref', v.policy_ref);
  o aip_admission_policies;
BEGIN
  SELECT * INTO o FROM aip_admission_policies WHERE policy_ref = v.policy_ref FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    v.created_at := now();
    v.updated_at := now();
    INSERT INTO aip_admission_policies VALUES (v.*);
    RETURN aip_pub_result('created', v_names, '{}');
  END IF;
  IF jsonb_populate_record(o, n) = o THEN
    RETURN aip_pub_result('unchanged', v_names, '{}');
  END IF;
  IF v.revision <= o.revision THEN
    PERFORM aip_fail('conflict', format('admission policy `%s` requires a newer revision than %s', v.policy_ref, o.revision),
                     jsonb_build_object('policy_ref', v.policy_ref, 'current_revision', o.revision));
  END IF;
  UPDATE aip_admission_policies
  SET revision = v.revision, enabled = v.enabled, max_global_in_flight = v.max_global_in_flight,
      max_tenant_in_flight = v.max_tenant_in_flight, max_connector_type_in_flight = v.max_connector_type_in_flight,
      max_instance_in_flight = v.max_instance_in_flight, max_binding_in_flight = v.max_binding_in_flight,
      max_tenant_retry_in_flight = v.max_tenant_retry_in_flight, circuit_failure_threshold = v.circuit_failure_threshold,
      circuit_open_ms = v.circuit_open_ms, updated_at = now()
  WHERE policy_ref = v.policy_ref;
  RETURN aip_pub_result('updated', v_names, '{}');
END
$$;
