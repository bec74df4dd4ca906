CREATE TABLE "aip_catalog_entries" (
	"tenant_id" text NOT NULL,
	"capability_id" text NOT NULL,
	"instance_id" text NOT NULL,
	"version_id" text NOT NULL,
	"priority" integer NOT NULL,
	CONSTRAINT "aip_catalog_entries_pkey" PRIMARY KEY("tenant_id","capability_id","instance_id")
);
--> statement-breakpoint
CREATE INDEX "aip_catalog_entries_instance_idx" ON "aip_catalog_entries" USING btree ("instance_id");--> statement-breakpoint
REVOKE ALL ON "aip_catalog_entries" FROM aip_registry_control, aip_registry_data;
--> statement-breakpoint
-- Backfill: every live chain of the catalog as it stands (the same chain publication maintains
-- from now on; functions/20_publish.sql, aip_refresh_catalog_entries).
INSERT INTO "aip_catalog_entries" ("tenant_id", "capability_id", "instance_id", "version_id", "priority")
SELECT b.tenant_id, b.capability_id, b.instance_id, i.version_id, b.priority
FROM aip_capability_bindings b
JOIN aip_connector_instances i ON i.instance_id = b.instance_id AND i.tenant_id = b.tenant_id
JOIN aip_connector_versions v ON v.version_id = i.version_id
JOIN aip_connector_types t ON t.type_id = v.type_id
JOIN aip_version_capabilities vc ON vc.version_id = i.version_id AND vc.capability_id = b.capability_id
WHERE b.enabled AND i.status = 'enabled' AND v.status = 'active' AND v.supply_chain_qualified AND t.enabled;
