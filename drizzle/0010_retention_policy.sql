CREATE TABLE "aip_removed_actions" (
	"action_id" text PRIMARY KEY NOT NULL,
	"removed_at" timestamp(3) with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "aip_route_retention" ADD COLUMN "retention_days" integer DEFAULT 30 NOT NULL;--> statement-breakpoint
ALTER TABLE "aip_route_retention" ADD COLUMN "require_export" boolean DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE "aip_route_retention" ADD COLUMN "read_through_at" timestamp(3) with time zone;--> statement-breakpoint
ALTER TABLE "aip_route_retention" ADD COLUMN "read_through_action" text;--> statement-breakpoint
ALTER TABLE "aip_route_retention" ADD CONSTRAINT "aip_route_retention_days" CHECK ("aip_route_retention"."retention_days" >= 0);--> statement-breakpoint
REVOKE ALL ON "aip_removed_actions" FROM aip_registry_control, aip_registry_data;
--> statement-breakpoint
-- Everything below is hand-written (issue 31): the retention policy enforced by the tables
-- themselves, whichever function (this release's, the previous release's still installed during a
-- rollout, or a future one) removes routes or records an export.
--
-- The watermark of what export pages handed out starts where the recorded exports ended: an export
-- recorded before this migration counts as read, so the next export continues from it.
UPDATE "aip_route_retention" SET "read_through_at" = "exported_before", "read_through_action" = '';
--> statement-breakpoint
-- The guard functions live in a schema of their own, outside the function set that the migrator
-- reinstalls (functions/): the triggers below depend on them, and they must not change with a
-- build. No runtime role may use the schema.
CREATE SCHEMA "aip_guard";
--> statement-breakpoint
REVOKE ALL ON SCHEMA "aip_guard" FROM PUBLIC;
--> statement-breakpoint
-- The time an action ID says it was minted: `act_` + a UUIDv7 (version 7, RFC 9562 variant), in
-- the simple or the hyphenated form, in any case. NULL for any other ID: the bits of another UUID,
-- or of anything else, are not a time. Resolve reads it too (functions/82_retention.sql), so what
-- the removal trigger trusts an ID to carry is exactly what resolve checks.
CREATE FUNCTION "aip_guard"."action_minted_at"(p_action_id text) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN p_action_id ~* '^act_[0-9a-f]{8}-?[0-9a-f]{4}-?7[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$'
    THEN to_timestamp(('x' || lpad(lower(substr(replace(p_action_id, '-', ''), 5, 12)), 16, '0'))::bit(64)::bigint / 1000.0) END
$$;
--> statement-breakpoint
-- Before a route is deleted: only a released route the stored policy lets go is deleted (settled
-- more than retention_days ago, and with require_export before the export watermark); any other
-- row is silently kept (the DELETE skips it, and RETURNING does not report it). So no caller, and
-- no version of the functions, removes evidence the policy keeps. The owner alone can step
-- around it (ALTER TABLE ... DISABLE TRIGGER).
CREATE FUNCTION "aip_guard"."route_removal"() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
  p aip_route_retention;
BEGIN
  SELECT * INTO p FROM aip_route_retention WHERE singleton;
  IF NOT OLD.reserved AND p.retention_days > 0
     AND OLD.settled_at < date_trunc('milliseconds', clock_timestamp()) - p.retention_days * interval '1 day'
     AND (NOT p.require_export OR OLD.settled_at < p.exported_before) THEN
    RETURN OLD;
  END IF;
  RETURN NULL;
END
$$;
--> statement-breakpoint
-- After routes are deleted: the retry contract's records. removed_before passes the latest
-- settlement removed, so an `act_` + UUIDv7 action minted before its route settled is refused by
-- its time; an action whose ID cannot vouch for that (no time in it, or a time after its
-- settlement: a gateway clock running ahead) is recorded in aip_removed_actions instead.
CREATE FUNCTION "aip_guard"."routes_removed"() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
  v_latest timestamptz;
BEGIN
  INSERT INTO aip_removed_actions (action_id)
  SELECT r.action_id FROM removed_routes r
  WHERE NOT coalesce(aip_guard.action_minted_at(r.action_id) <= r.settled_at, false)
  ON CONFLICT (action_id) DO NOTHING;
  SELECT max(r.settled_at) + interval '1 millisecond' INTO v_latest FROM removed_routes r;
  UPDATE aip_route_retention
  SET removed_before = v_latest, updated_at = date_trunc('milliseconds', clock_timestamp())
  WHERE singleton AND v_latest IS NOT NULL AND (removed_before IS NULL OR removed_before < v_latest);
  RETURN NULL;
END
$$;
--> statement-breakpoint
-- The export watermark never passes what export pages handed out (read_through_at) and never
-- moves back, whichever function writes it.
CREATE FUNCTION "aip_guard"."export_watermark"() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
  IF NEW.exported_before IS DISTINCT FROM OLD.exported_before THEN
    IF NEW.exported_before IS NOT NULL AND (NEW.read_through_at IS NULL OR NEW.exported_before > NEW.read_through_at) THEN
      NEW.exported_before := NEW.read_through_at;
    END IF;
    IF NEW.exported_before IS NULL OR NEW.exported_before < OLD.exported_before THEN
      NEW.exported_before := OLD.exported_before;
    END IF;
  END IF;
  RETURN NEW;
END
$$;
--> statement-breakpoint
REVOKE ALL ON FUNCTION "aip_guard"."action_minted_at"(text), "aip_guard"."route_removal"(), "aip_guard"."routes_removed"(), "aip_guard"."export_watermark"() FROM PUBLIC;
--> statement-breakpoint
CREATE TRIGGER "aip_route_assignments_retention_guard" BEFORE DELETE ON "aip_route_assignments"
FOR EACH ROW EXECUTE FUNCTION "aip_guard"."route_removal"();
--> statement-breakpoint
CREATE TRIGGER "aip_route_assignments_removed" AFTER DELETE ON "aip_route_assignments"
REFERENCING OLD TABLE AS removed_routes
FOR EACH STATEMENT EXECUTE FUNCTION "aip_guard"."routes_removed"();
--> statement-breakpoint
CREATE TRIGGER "aip_route_retention_export_watermark" BEFORE UPDATE ON "aip_route_retention"
FOR EACH ROW EXECUTE FUNCTION "aip_guard"."export_watermark"();
