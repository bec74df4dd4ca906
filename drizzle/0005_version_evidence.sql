ALTER TABLE "aip_connector_versions" ADD COLUMN "implementation_support" jsonb DEFAULT '{}'::jsonb NOT NULL;--> statement-breakpoint
ALTER TABLE "aip_connector_versions" ADD COLUMN "qualification_reason" text;--> statement-breakpoint
CREATE INDEX "aip_connector_replicas_peer_idx" ON "aip_connector_replicas" USING btree ("peer_principal_id");