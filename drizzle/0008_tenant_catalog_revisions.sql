CREATE TABLE "aip_tenant_catalog_revisions" (
	"tenant_id" text PRIMARY KEY NOT NULL,
	"revision" bigint NOT NULL,
	CONSTRAINT "aip_tenant_catalog_revisions_nonneg" CHECK ("aip_tenant_catalog_revisions"."revision" >= 0)
);
--> statement-breakpoint
REVOKE ALL ON "aip_tenant_catalog_revisions" FROM aip_registry_control, aip_registry_data;
--> statement-breakpoint
-- Backfill (hand-written): every tenant that owns an instance may have seen something, so it
-- starts at the current catalog revision; cursors and validators issued before the upgrade carry
-- a global revision, which stays valid exactly while the tenant's own revision has not passed it.
INSERT INTO "aip_tenant_catalog_revisions" ("tenant_id", "revision")
SELECT DISTINCT i.tenant_id, (SELECT r.revision FROM "aip_catalog_revision" r WHERE r.singleton)
FROM "aip_connector_instances" i;
