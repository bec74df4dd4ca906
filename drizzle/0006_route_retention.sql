-- Route retention (functions/82_retention.sql): released routes are removed once their evidence
-- window has passed, oldest settlement first, in bounded batches, and exported before that in
-- (settled_at, action_id) order.
--
-- The index holds released routes only: a settlement adds one entry, a resolve or reacquisition
-- none. On a large aip_route_assignments, build it beforehand without blocking routing (this
-- migration then finds it and skips it):
--   CREATE INDEX CONCURRENTLY IF NOT EXISTS "aip_route_assignments_settled_idx"
--     ON "aip_route_assignments" USING btree ("settled_at","action_id") WHERE NOT reserved;
CREATE TABLE "aip_route_retention" (
	"singleton" boolean PRIMARY KEY DEFAULT true NOT NULL,
	"removed_before" timestamp(3) with time zone,
	"exported_before" timestamp(3) with time zone,
	"updated_at" timestamp(3) with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "aip_route_retention_singleton" CHECK ("aip_route_retention"."singleton")
);
--> statement-breakpoint
INSERT INTO "aip_route_retention" ("singleton") VALUES (true);
--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "aip_route_assignments_settled_idx" ON "aip_route_assignments" USING btree ("settled_at","action_id") WHERE NOT reserved;
