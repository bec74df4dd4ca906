CREATE TABLE "aip_catalog_changes" (
	"tenant_id" text NOT NULL,
	"revision" bigint NOT NULL,
	"added" text[] NOT NULL,
	"changed" text[] NOT NULL,
	"removed" text[] NOT NULL,
	"changed_at" timestamp(3) with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "aip_catalog_changes_pkey" PRIMARY KEY("tenant_id","revision")
);
--> statement-breakpoint
ALTER TABLE "aip_tenant_catalog_revisions" ADD COLUMN "changes_floor" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
CREATE INDEX "aip_catalog_changes_revision_idx" ON "aip_catalog_changes" USING btree ("revision");--> statement-breakpoint
REVOKE ALL ON "aip_catalog_changes" FROM aip_registry_control, aip_registry_data;
--> statement-breakpoint
-- The feed starts with this migration (hand-written): a tenant's changes are complete after its
-- current revision, so a feed from an older one is 410 (re-list once).
UPDATE "aip_tenant_catalog_revisions" SET "changes_floor" = "revision";
