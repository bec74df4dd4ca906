CREATE TABLE "aip_catalog_entries" (
	"tenant_id" text NOT NULL,
	"capability_id" text NOT NULL,
	"instance_id" text NOT NULL,
	"version_id" text NOT NULL,
	"priority" integer NOT NULL,
	"type_id" text NOT NULL,
	"binding_key" text NOT NULL,
	"policy_revision" bigint NOT NULL,
	"credential_revision_ref" text,
	"quota_policy_ref" text,
	CONSTRAINT "aip_catalog_entries_pkey" PRIMARY KEY("tenant_id","capability_id","instance_id")
);
--> statement-breakpoint
CREATE INDEX "aip_catalog_entries_instance_idx" ON "aip_catalog_entries" USING btree ("instance_id");--> statement-breakpoint
REVOKE ALL ON "aip_catalog_entries" FROM aip_registry_control, aip_registry_data;
--> statement-breakpoint
-- Backfill: every live chain of the catalog as it stands, as publication maintains it from now on
-- (functions/30_catalog.sql, aip_live_chains; the binding key is aip_binding_scope_key's digest).
INSERT INTO "aip_catalog_entries" ("tenant_id", "capability_id", "instance_id", "version_id", "priority", "type_id",
                                   "binding_key", "policy_revision", "credential_revision_ref", "quota_policy_ref")
SELECT b.tenant_id, b.capability_id, b.instance_id, i.version_id, b.priority, v.type_id,
       'sha256:' || encode(sha256(convert_to(json_build_array(b.tenant_id, b.capability_id, b.instance_id)::text, 'UTF8')), 'hex'),
       b.policy_revision, b.credential_revision_ref, b.quota_policy_ref
FROM aip_capability_bindings b
JOIN aip_connector_instances i ON i.instance_id = b.instance_id AND i.tenant_id = b.tenant_id
JOIN aip_connector_versions v ON v.version_id = i.version_id
JOIN aip_connector_types t ON t.type_id = v.type_id
JOIN aip_version_capabilities vc ON vc.version_id = i.version_id AND vc.capability_id = b.capability_id
WHERE b.enabled AND i.status = 'enabled' AND v.status = 'active' AND v.supply_chain_qualified AND t.enabled;
