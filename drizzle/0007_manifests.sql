CREATE TABLE "aip_manifests" (
	"manifest_digest" text PRIMARY KEY NOT NULL,
	"manifest" jsonb NOT NULL,
	"created_at" timestamp(3) with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
REVOKE ALL ON "aip_manifests" FROM aip_registry_control, aip_registry_data;
--> statement-breakpoint
-- Data backfill (hand-written, between drizzle-kit's statements): every stored manifest moves to
-- aip_manifests under its digest before the foreign key is made and the column dropped. One row
-- per digest: equal digests are equal canonical JSON, so any of the versions' copies will do.
INSERT INTO "aip_manifests" ("manifest_digest", "manifest", "created_at")
SELECT DISTINCT ON (v.manifest_digest) v.manifest_digest, v.manifest, v.admitted_at
FROM "aip_connector_versions" v
ORDER BY v.manifest_digest, v.admitted_at;
--> statement-breakpoint
ALTER TABLE "aip_connector_versions" ADD CONSTRAINT "aip_connector_versions_manifest_fk" FOREIGN KEY ("manifest_digest") REFERENCES "public"."aip_manifests"("manifest_digest") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "aip_connector_versions" DROP COLUMN "manifest";
