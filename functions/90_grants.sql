-- Who may call what. Runtime roles have no table privileges at all; they reach the tables only
-- through these SECURITY DEFINER entry points, which run as the owner. The roles are this
-- database's own (aip_schema_roles, made by the migrator: src/db/migrate.ts), so a login role
-- made for another registry database on the same server can execute nothing here.
--   control role: publication, administrative reads, operator replica lifecycle, route export,
--                 making the route retention policy stricter
--   data role:    catalog reads, routing, settlement, host replica lifecycle (always with the
--                 host's principal), the registry reader, lease expiry, route retention, making
--                 its policy stricter, fleet status
-- Everything else (the helpers above, and relaxing the route retention policy:
-- aip_set_route_retention_policy) is callable by the owner only. This file runs with the
-- function set's schema first on the search path (src/db/migrate.ts): the names below are the
-- set's own functions, and the grants are on the set's schema.

DO $$
DECLARE
  v_roles aip_schema_roles;
  f regprocedure;
  v_control text[] := ARRAY[
    'aip_publish(jsonb, boolean)',
    'aip_admin_get(text, text)',
    'aip_admin_bindings(text, text, integer)',
    'aip_admin_catalog_page(text, boolean, jsonb)',
    'aip_operator_replica_lifecycle(text, text, jsonb, boolean)',
    'aip_check_invariants()',
    'aip_schema_status(text, text, text)',
    'aip_admin_routes_page(timestamptz, timestamptz, text, integer)',
    'aip_record_route_export(timestamptz, timestamptz)',
    'aip_route_retention_policy(integer, boolean)'];
  v_data text[] := ARRAY[
    'aip_catalog_page(text, jsonb, bigint)',
    'aip_catalog_get(text, text, bigint)',
    'aip_catalog_revisions_now(text[])',
    'aip_catalog_changes(text, jsonb, bigint)',
    'aip_trim_catalog_changes(bigint, bigint, integer)',
    'aip_resolve_route(text, text, text, jsonb)',
    'aip_get_route(text, text)',
    'aip_settle_route(text, text, jsonb, text)',
    'aip_host_replica_lifecycle(text, text, jsonb, text, boolean)',
    'aip_registry_read(text, text, text, text)',
    'aip_expire_leases(integer)',
    'aip_remove_settled_routes(integer, boolean, integer)',
    'aip_route_retention_policy(integer, boolean)',
    'aip_fleet_status()',
    'aip_fleet_regions(integer)',
    'aip_check_invariants()',
    'aip_schema_status(text, text, text)'];
  v_signature text;
BEGIN
  SELECT * INTO STRICT v_roles FROM aip_schema_roles WHERE singleton;
  FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
           WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'aip\_%' LOOP
    EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f);
  END LOOP;
  EXECUTE format('REVOKE ALL ON SCHEMA %I FROM PUBLIC', current_schema());
  EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I, %I', current_schema(), v_roles.control_role, v_roles.data_role);
  FOREACH v_signature IN ARRAY v_control LOOP
    EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', v_signature::regprocedure, v_roles.control_role);
  END LOOP;
  FOREACH v_signature IN ARRAY v_data LOOP
    EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', v_signature::regprocedure, v_roles.data_role);
  END LOOP;
END
$$;
