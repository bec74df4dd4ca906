-- Who may call what. Runtime roles have no table privileges at all (migration 0001); they reach
-- the tables only through these SECURITY DEFINER entry points, which run as the owner.
--   aip_registry_control: publication, administrative reads, operator replica lifecycle, route
--                         export
--   aip_registry_data:    catalog reads, routing, settlement, host replica lifecycle (always with
--                         the host's principal), the registry reader, lease expiry, route
--                         retention, fleet status
-- Everything else (the helpers above) is callable by the owner only.

DO $$
DECLARE
  f regprocedure;
BEGIN
  FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
           WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'aip\_%' LOOP
    EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f);
  END LOOP;
END
$$;

GRANT EXECUTE ON FUNCTION
  aip_publish(jsonb, boolean),
  aip_admin_get(text, text),
  aip_admin_bindings(text, text, integer),
  aip_admin_catalog_page(text, boolean, jsonb),
  aip_operator_replica_lifecycle(text, text, jsonb, boolean),
  aip_check_invariants(),
  aip_schema_status(),
  aip_admin_routes_page(timestamptz, timestamptz, text, integer),
  aip_record_route_export(timestamptz, timestamptz)
TO aip_registry_control;

GRANT EXECUTE ON FUNCTION
  aip_catalog_page(text, jsonb, bigint),
  aip_catalog_get(text, text, bigint),
  aip_catalog_revisions_now(text[]),
  aip_catalog_changes(text, jsonb, bigint),
  aip_trim_catalog_changes(bigint, bigint, integer),
  aip_resolve_route(text, text, text, jsonb),
  aip_get_route(text, text),
  aip_settle_route(text, text, jsonb, text),
  aip_host_replica_lifecycle(text, text, jsonb, text, boolean),
  aip_registry_read(text, text, text, text),
  aip_expire_leases(integer),
  aip_remove_settled_routes(integer, boolean, integer),
  aip_fleet_status(),
  aip_fleet_regions(integer),
  aip_check_invariants(),
  aip_schema_status()
TO aip_registry_data;
