CREATE TABLE "aip_replica_register_requests" (
	"replica_id" text NOT NULL,
	"request_id" text NOT NULL,
	"consumed_at" timestamp(3) with time zone NOT NULL,
	CONSTRAINT "aip_replica_register_requests_pkey" PRIMARY KEY("replica_id","request_id")
);
--> statement-breakpoint
ALTER TABLE "aip_replica_register_requests" ADD CONSTRAINT "aip_replica_register_requests_replica_fk" FOREIGN KEY ("replica_id") REFERENCES "public"."aip_connector_replicas"("replica_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "aip_replica_register_requests_age_idx" ON "aip_replica_register_requests" USING btree ("replica_id","consumed_at");