-- Route retention: how long a released route is kept as evidence, how it leaves, how it is
-- exported first, and what a resolve answers for an action whose route was removed.
--
-- A route is evidence: the assignment "retains the decision after execution capacity is
-- released" (the specification), for the evidence window after its last settlement
-- (ROUTE_RETENTION_DAYS, which the runtime passes in). Then the maintenance that expires leases
-- removes it, in bounded batches, oldest settlement first. Batched deletes over a partial index
-- of released routes, rather than partitions dropped by time: a partitioned table's key must
-- include the partition key, so resolve would probe every partition instead of one key, and a
-- partition holds reserved and recently settled routes next to old ones (bench/retention.ts,
-- docs/scaling.md).
--
-- A reserved route is never removed. Only released routes are candidates; each is locked before
-- it is removed, skipping one a transaction holds, and re-checked on its latest committed
-- version, so a route that a reacquisition reserved again stays. A reacquisition that read the
-- route before a removal committed finds it gone when it reserves it, and refuses like a resolve
-- of a removed route (aip_reacquire_route).
--
-- The retry contract. Within the window a retry gets its route (never rerouted). After removal a
-- resolve would find no route and route the action afresh, possibly to another instance after a
-- provider already committed the first attempt. The registry refuses that wherever it can know:
-- an action ID of the reference's form, `act_` + UUIDv7, carries the time it was minted, and a
-- gateway mints it before its first resolve, so an action minted before `removed_before` (every
-- removed route was settled before it) may have had a route, and a new route for it is refused
-- with `route-expired`. An allowance (aip_action_clock_allowance_ms(), an hour) covers a
-- gateway clock running ahead of the database's. For other action IDs the registry cannot know: a gateway must not resolve an action
-- again once its route can have been removed (README, "Route retention").

-- The time an `act_` + UUIDv7 action ID was minted (its 48-bit millisecond prefix); NULL for any
-- other ID. Only version 7 with the RFC 9562 variant: the bits of another UUID are not a time.
-- One expression, so the planner inlines it into resolve.
CREATE FUNCTION aip_action_minted_at(p_action_id text) RETURNS timestamptz
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN p_action_id ~ '^act_[0-9a-f]{12}7[0-9a-f]{3}[89ab][0-9a-f]{15}$'
              THEN to_timestamp(('x' || lpad(substr(p_action_id, 5, 12), 16, '0'))::bit(64)::bigint / 1000.0) END
$$;

-- Whether route retention may have removed a route of this action: an `act_` + UUIDv7 ID minted
-- more than a day less twice the allowance ago (22 hours). removed_before is at least a day old
-- (the shortest window), so a younger action cannot be refused. Inlined: resolve asks this of
-- every new action without a statement, and reads the watermark only when it is true.
CREATE FUNCTION aip_action_may_be_expired(p_action_id text) RETURNS boolean
LANGUAGE sql VOLATILE AS $$
  SELECT aip_action_minted_at(p_action_id) <= aip_now() - interval '1 day' + 2 * aip_action_clock_allowance_ms() * interval '1 millisecond'
$$;

-- Raised by resolve before it routes a new action (aip_resolve_route) and by a reacquisition that
-- finds its route gone: a route for this action may have existed and been removed.
CREATE FUNCTION aip_refuse_removed_action(p_action_id text, p_removed_before timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM aip_fail('route-expired',
    format('action `%s` is older than the route evidence the registry keeps: its route may have been removed, and the registry will not route it afresh', p_action_id),
    jsonb_build_object('action_id', p_action_id, 'removed_before', aip_time(p_removed_before)));
END
$$;

-- Called by resolve for an action that has no route and may be expired (aip_action_may_be_expired):
-- refused (route-expired) when it was minted before the watermark, less the allowance.
CREATE FUNCTION aip_check_action_retained(p_action_id text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_removed timestamptz;
BEGIN
  SELECT x.removed_before INTO v_removed FROM aip_route_retention x WHERE x.singleton;
  IF aip_action_minted_at(p_action_id) < v_removed + aip_action_clock_allowance_ms() * interval '1 millisecond' THEN
    PERFORM aip_refuse_removed_action(p_action_id, v_removed);
  END IF;
END
$$;

-- Remove up to p_limit released routes settled before p_cutoff, oldest settlement first, and
-- advance removed_before past the latest one removed. Returns how many. The owner's building
-- block: the entry point below computes the cutoff from the window (the benchmark drives it
-- directly).
CREATE FUNCTION aip_remove_routes_settled_before(p_cutoff timestamptz, p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  v_doomed text[];
  v_removed integer;
  v_latest timestamptz;
BEGIN
  -- FOR UPDATE re-checks both conditions on the latest committed version of each row (a route a
  -- reacquisition reserved again is not taken); SKIP LOCKED leaves one being reserved right now.
  -- The rows stay locked until commit; they are then removed by key.
  SELECT coalesce(array_agg(d.action_id), '{}') INTO v_doomed
  FROM (SELECT a.action_id FROM aip_route_assignments a
        WHERE NOT a.reserved AND a.settled_at < p_cutoff
        ORDER BY a.settled_at
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED) d;
  WITH removed AS (
    DELETE FROM aip_route_assignments a
    WHERE a.action_id = ANY (v_doomed)
    RETURNING a.settled_at)
  SELECT count(*)::integer, max(r.settled_at) INTO v_removed, v_latest FROM removed r;
  IF v_removed > 0 THEN
    UPDATE aip_route_retention
    SET removed_before = greatest(removed_before, v_latest + interval '1 millisecond'), updated_at = aip_now()
    WHERE singleton AND removed_before IS DISTINCT FROM greatest(removed_before, v_latest + interval '1 millisecond');
  END IF;
  RETURN v_removed;
END
$$;

-- Entry point (data role): one retention batch. Removes at most p_limit (aip_route_retention_batch_
-- min() to _max()) released routes settled more than p_retention_days (1 to
-- aip_route_retention_days_max()) ago, and with p_require_export only those
-- settled before the export watermark too. Returns {removed, removed_before, exported_before,
-- next_due}: next_due is when the oldest released route left becomes removable (by the window
-- alone; null: none is released, or with p_require_export none is exported), so a scheduler can
-- leave retention alone until then.
CREATE FUNCTION aip_remove_settled_routes(p_retention_days integer, p_require_export boolean, p_limit integer) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
SET lock_timeout = '2s' AS $$
DECLARE
  v_window interval;
  v_cutoff timestamptz;
  v_removed integer := 0;
  v_oldest timestamptz;
  w aip_route_retention;
BEGIN
  IF p_retention_days IS NULL OR p_retention_days < 1 OR p_retention_days > aip_route_retention_days_max() THEN
    PERFORM aip_invalid_field('retention_days', 'must be an integer in [1, ' || aip_route_retention_days_max() || ']');
  END IF;
  IF p_limit IS NULL OR p_limit < aip_route_retention_batch_min() OR p_limit > aip_route_retention_batch_max() THEN
    PERFORM aip_invalid_field('limit', 'must be an integer in [' || aip_route_retention_batch_min() || ', ' || aip_route_retention_batch_max() || ']');
  END IF;
  v_window := p_retention_days * interval '1 day';
  SELECT * INTO w FROM aip_route_retention WHERE singleton;
  v_cutoff := aip_now() - v_window;
  IF coalesce(p_require_export, false) THEN
    -- Nothing was exported yet: nothing may go.
    v_cutoff := least(v_cutoff, coalesce(w.exported_before, '-infinity'));
  END IF;
  IF isfinite(v_cutoff) THEN
    v_removed := aip_remove_routes_settled_before(v_cutoff, p_limit);
  END IF;
  SELECT a.settled_at INTO v_oldest FROM aip_route_assignments a
  WHERE NOT a.reserved AND a.settled_at IS NOT NULL
    AND (NOT coalesce(p_require_export, false) OR a.settled_at < w.exported_before)
  ORDER BY a.settled_at LIMIT 1;
  SELECT * INTO w FROM aip_route_retention WHERE singleton;
  RETURN json_build_object(
    'removed', v_removed,
    'removed_before', aip_time(w.removed_before),
    'exported_before', aip_time(w.exported_before),
    'next_due', aip_time(v_oldest + v_window));
END
$$;

-- Entry point (control role): one page of the routes an export covers, every tenant's: released
-- routes settled in [p_settled_after, p_settled_before), in (settled_at, action_id) order, each
-- as GET /v1/routes/{action_id} describes it ({assignment, reserved, last_settlement,
-- settled_at}). The cursor is the JSON array [settled_at, action_id] of the last route returned.
-- p_settled_before is clamped to aip_route_export_lag_ms() (an hour) before now, so that every
-- route settled before it has committed before the page is read (a settlement is one short
-- statement): an export then misses nothing, and `settled_before` in the answer is the bound it
-- really applied.
CREATE FUNCTION aip_admin_routes_page(p_settled_before timestamptz, p_settled_after timestamptz, p_cursor text, p_limit integer)
RETURNS json
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
SET lock_timeout = '2s' AS $$
DECLARE
  v_limit integer := least(greatest(coalesce(p_limit, aip_routes_export_page_default()), 1), aip_routes_export_page_max());
  v_before timestamptz;
  v_from timestamptz := coalesce(p_settled_after, '-infinity');
  v_cursor jsonb;
  v_after_at timestamptz;
  -- Keyset: routes after (v_from, v_after_action); '' sorts before every action ID, so without a
  -- cursor the range starts at the lower bound itself, inclusive.
  v_after_action text := '';
  v_items json[] := '{}';
  a aip_route_assignments;
  v_last aip_route_assignments;
  v_more boolean := false;
BEGIN
  IF p_settled_before IS NULL OR NOT isfinite(p_settled_before) THEN
    PERFORM aip_invalid_field('settled_before', 'is required: a time');
  END IF;
  IF p_settled_after IS NOT NULL AND (NOT isfinite(p_settled_after) OR p_settled_after >= p_settled_before) THEN
    PERFORM aip_invalid_field('settled_after', 'must be a time earlier than settled_before');
  END IF;
  v_before := least(p_settled_before, aip_now() - aip_route_export_lag_ms() * interval '1 millisecond');
  IF p_cursor IS NOT NULL THEN
    BEGIN
      v_cursor := p_cursor::jsonb;
      IF jsonb_typeof(v_cursor) = 'array' AND jsonb_array_length(v_cursor) = 2
         AND jsonb_typeof(v_cursor -> 0) = 'string' AND jsonb_typeof(v_cursor -> 1) = 'string' THEN
        v_after_at := (v_cursor ->> 0)::timestamptz;
        v_after_action := v_cursor ->> 1;
      END IF;
    EXCEPTION WHEN invalid_text_representation OR invalid_datetime_format OR datetime_field_overflow THEN
      v_after_at := NULL;
    END;
    IF v_after_at IS NULL OR NOT isfinite(v_after_at) THEN
      PERFORM aip_invalid_field('cursor', 'is malformed');
    END IF;
    IF v_after_at >= v_from THEN
      v_from := v_after_at;
    ELSE
      v_after_action := '';
    END IF;
  END IF;
  -- One range of the settled index: from the cursor (or the lower bound) to the upper bound.
  FOR a IN
    SELECT * FROM aip_route_assignments x
    WHERE NOT x.reserved AND x.settled_at < v_before
      AND (x.settled_at, x.action_id) > (v_from, v_after_action)
    ORDER BY x.settled_at, x.action_id
    LIMIT v_limit + 1
  LOOP
    IF cardinality(v_items) = v_limit THEN
      v_more := true;
      EXIT;
    END IF;
    v_items := v_items || json_build_object('assignment', aip_assignment_json(a), 'reserved', a.reserved,
                                            'last_settlement', a.last_settlement, 'settled_at', aip_time(a.settled_at));
    v_last := a;
  END LOOP;
  RETURN json_build_object(
    'settled_before', aip_time(v_before),
    'settled_after', aip_time(p_settled_after),
    'routes', array_to_json(v_items),
    'next_cursor', CASE WHEN v_more THEN json_build_array(aip_time(v_last.settled_at), v_last.action_id)::text END);
END
$$;

-- Entry point (control role): an export covered every route settled in [p_settled_after,
-- p_settled_before) (the `settled_before` its pages answered). The watermark moves forward only
-- when the export started at or before it (or at the beginning): otherwise routes between the
-- two were never exported, and the call is a conflict that names the watermark. Returns
-- {exported_before, removed_before}.
CREATE FUNCTION aip_record_route_export(p_settled_after timestamptz, p_settled_before timestamptz) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
SET lock_timeout = '2s' AS $$
DECLARE
  w aip_route_retention;
BEGIN
  IF p_settled_before IS NULL OR NOT isfinite(p_settled_before) THEN
    PERFORM aip_invalid_field('settled_before', 'is required: a time');
  END IF;
  IF p_settled_after IS NOT NULL AND p_settled_after >= p_settled_before THEN
    PERFORM aip_invalid_field('settled_after', 'must be earlier than settled_before');
  END IF;
  SELECT * INTO w FROM aip_route_retention WHERE singleton FOR UPDATE;
  IF p_settled_after IS NOT NULL AND (w.exported_before IS NULL OR p_settled_after > w.exported_before) THEN
    PERFORM aip_fail('conflict',
      format('the export starts at %s, after the export watermark %s: the routes settled in between were not exported',
             aip_time(p_settled_after), coalesce(aip_time(w.exported_before), '(none: export from the beginning)')),
      jsonb_build_object('exported_before', aip_time(w.exported_before)));
  END IF;
  UPDATE aip_route_retention
  SET exported_before = greatest(exported_before, least(p_settled_before, aip_now() - aip_route_export_lag_ms() * interval '1 millisecond')),
      updated_at = aip_now()
  WHERE singleton
  RETURNING * INTO w;
  RETURN json_build_object('exported_before', aip_time(w.exported_before), 'removed_before', aip_time(w.removed_before));
END
$$;
