-- Storage, seed rows and database roles: what drizzle-kit cannot express in schema.ts.

-- Hot rows are updated by every resolve and settle. A lower fillfactor leaves room on each page
-- so those updates stay HOT (no index writes); the hot columns are in no index (see schema.ts).
ALTER TABLE "aip_connector_replicas" SET (fillfactor = 50);
--> statement-breakpoint
ALTER TABLE "aip_admission_counters" SET (fillfactor = 50);
--> statement-breakpoint
ALTER TABLE "aip_route_assignments" SET (fillfactor = 80);
--> statement-breakpoint
ALTER TABLE "aip_catalog_revision" SET (fillfactor = 50);
--> statement-breakpoint
INSERT INTO "aip_catalog_revision" ("singleton", "revision") VALUES (true, 0) ON CONFLICT DO NOTHING;
--> statement-breakpoint
-- Runtime roles hold no table privileges: they may only execute the functions granted to them
-- when functions/ is installed. Roles are cluster-wide while migrations run per database, so
-- two databases migrating at once may race to create them: the loser's error is ignored.
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'aip_registry_control') THEN
    BEGIN
      CREATE ROLE aip_registry_control NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOREPLICATION;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
    END;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'aip_registry_data') THEN
    BEGIN
      CREATE ROLE aip_registry_data NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOREPLICATION;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
    END;
  END IF;
END
$$;
--> statement-breakpoint
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM aip_registry_control, aip_registry_data;
