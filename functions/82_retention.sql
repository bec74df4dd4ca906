-- Route retention: how long a released route is kept as evidence, how it leaves, how it is
-- exported first, and what a resolve answers for an action whose route was removed.
--
-- A route is evidence: the assignment "retains the decision after execution capacity is
-- released" (the specification), for the evidence window after its last settlement. Then the
-- maintenance that expires leases removes it, in bounded batches, oldest settlement first.
-- Batched deletes over a partial index of released routes, rather than partitions dropped by
-- time: a partitioned table's key must include the partition key, so resolve would probe every
-- partition instead of one key, and a partition holds reserved and recently settled routes next
-- to old ones (bench/retention.ts, docs/scaling.md).
--
-- The policy is the database's (aip_route_retention: retention_days, require_export), never a
-- caller's. Runtime roles may only make it stricter: a server states its configuration
-- (ROUTE_RETENTION_DAYS, ROUTE_RETENTION_REQUIRE_EXPORT) at start-up and with every batch, and the
-- stored policy becomes the stricter of the two (a longer window, export required, 0 days keeping
-- every route). Only the owner relaxes it (aip_set_route_retention_policy). The table enforces
-- it too: the guard trigger of migration 0010 keeps any route the policy keeps, whatever deletes
-- it, so the previous release's functions (installed during a rollout) cannot remove more.
--
-- A reserved route is never removed. Only released routes are candidates; each is locked before
-- it is removed, skipping one a transaction holds, and re-checked on its latest committed
-- version, so a route that a reacquisition reserved again stays. A reacquisition that read the
-- route before a removal committed finds it gone when it reserves it, and refuses like a resolve
-- of a removed route (aip_reacquire_route).
--
-- The export watermark (exported_before) says every route settled before it was exported; with
-- require_export nothing settled after it is removed. It moves only over routes that export pages
-- (aip_admin_routes_page) really handed out: each page extends read_through_at when it continues
-- from it, and the watermark never passes it (aip_record_route_export refuses, and the trigger of
-- migration 0010 clamps any other writer).
--
-- The retry contract. Within the window a retry gets its route (never rerouted). After removal a
-- resolve would find no route and route the action afresh, possibly to another instance after a
-- provider already committed the first attempt. The registry refuses that for every action ID:
-- - an `act_` + UUIDv7 ID (simple or hyphenated, any case: aip_guard.action_minted_at) carries the
--   time it was minted, and a gateway mints it before its first resolve, so an action minted
--   before `removed_before` (every removed route was settled before it) may have had a route, and
--   a new route for it is refused with `route-expired`. An allowance
--   (aip_action_clock_allowance_ms(), an hour) covers a gateway clock running ahead of the
--   database's;
-- - any other removed action (no time in its ID, or a time after its route's settlement) was
--   recorded when its route was removed (aip_removed_actions, by the removal trigger), and is
--   refused the same way.

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

-- Called by resolve for an action that has no route. Cheap on the hot path: a regular expression
-- on the ID and one primary-key probe of aip_removed_actions; only for an action minted more than
-- a day less twice the allowance ago (22 hours) a read of the watermark: removed_before is at
-- least a day old (the shortest window), so a younger action cannot be refused by its time.
CREATE FUNCTION aip_check_action_retained(p_action_id text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_minted timestamptz := aip_guard.action_minted_at(p_action_id);
  v_removed timestamptz;
BEGIN
  IF v_minted <= aip_now() - interval '1 day' + 2 * aip_action_clock_allowance_ms() * interval '1 millisecond' THEN
    SELECT x.removed_before INTO v_removed FROM aip_route_retention x WHERE x.singleton;
    IF v_minted < v_removed + aip_action_clock_allowance_ms() * interval '1 millisecond' THEN
      PERFORM aip_refuse_removed_action(p_action_id, v_removed);
    END IF;
  END IF;
  PERFORM 1 FROM aip_removed_actions x WHERE x.action_id = p_action_id;
  IF FOUND THEN
    PERFORM aip_refuse_removed_action(p_action_id, (SELECT x.removed_before FROM aip_route_retention x WHERE x.singleton));
  END IF;
END
$$;

-- The stored policy made at least as strict as p_retention_days (0: keep every route; NULL: as
-- it is) and p_require_export (NULL or false: as it is): the only move a runtime role may make.
-- Writes only when it tightens, and computes the new policy from the row it updates (the latest
-- committed one), so two servers tightening at once never undo each other. Returns the policy row.
CREATE FUNCTION aip_tighten_route_retention(p_retention_days integer, p_require_export boolean) RETURNS aip_route_retention
LANGUAGE plpgsql AS $$
DECLARE
  w aip_route_retention;
BEGIN
  IF p_retention_days IS NOT NULL AND (p_retention_days < 0 OR p_retention_days > aip_route_retention_days_max()) THEN
    PERFORM aip_invalid_field('retention_days', 'must be an integer in [0, ' || aip_route_retention_days_max() || ']');
  END IF;
  UPDATE aip_route_retention
  SET retention_days = CASE WHEN p_retention_days IS NULL THEN retention_days
                            WHEN retention_days = 0 OR p_retention_days = 0 THEN 0
                            ELSE greatest(retention_days, p_retention_days) END,
      require_export = require_export OR coalesce(p_require_export, false),
      updated_at = aip_now()
  WHERE singleton
    AND ((retention_days <> 0 AND (p_retention_days = 0 OR p_retention_days > retention_days))
         OR (coalesce(p_require_export, false) AND NOT require_export))
  RETURNING * INTO w;
  IF NOT FOUND THEN
    SELECT * INTO w FROM aip_route_retention WHERE singleton;
  END IF;
  RETURN w;
END
$$;

-- The policy and the watermarks as an answer.
CREATE FUNCTION aip_route_retention_json(w aip_route_retention) RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT jsonb_build_object(
    'retention_days', w.retention_days,
    'require_export', w.require_export,
    'removed_before', aip_time(w.removed_before),
    'exported_before', aip_time(w.exported_before),
    'export_read_before', aip_time(w.read_through_at))
$$;

-- Entry point (data and control roles): a server's configuration reaches the policy here, at
-- start-up. The stored policy becomes the stricter of itself and these (NULL: leave that part as
-- it is); a looser statement changes nothing. Returns {retention_days, require_export,
-- removed_before, exported_before, export_read_before}.
CREATE FUNCTION aip_route_retention_policy(p_retention_days integer, p_require_export boolean) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
SET lock_timeout = '2s' AS $$
BEGIN
  RETURN aip_route_retention_json(aip_tighten_route_retention(p_retention_days, p_require_export))::json;
END
$$;

-- The owner's (granted to no runtime role): the policy set as given, stricter or looser (NULL:
-- leave that part as it is). `aip-registry routes policy` over the owner's connection.
CREATE FUNCTION aip_set_route_retention_policy(p_retention_days integer, p_require_export boolean) RETURNS json
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET lock_timeout = '2s' AS $$
DECLARE
  w aip_route_retention;
BEGIN
  IF p_retention_days IS NOT NULL AND (p_retention_days < 0 OR p_retention_days > aip_route_retention_days_max()) THEN
    PERFORM aip_invalid_field('retention_days', 'must be an integer in [0, ' || aip_route_retention_days_max() || ']');
  END IF;
  UPDATE aip_route_retention
  SET retention_days = coalesce(p_retention_days, retention_days), require_export = coalesce(p_require_export, require_export),
      updated_at = aip_now()
  WHERE singleton
  RETURNING * INTO w;
  RETURN aip_route_retention_json(w)::json;
END
$$;

-- Remove up to p_limit released routes settled before p_cutoff, oldest settlement first. Returns
-- how many. The removal trigger (migration 0010) keeps any route the stored policy keeps, records
-- what the retry contract needs and advances removed_before. The owner's building block: the
-- entry point below computes the cutoff from the policy (the benchmark drives it directly).
CREATE FUNCTION aip_remove_routes_settled_before(p_cutoff timestamptz, p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  v_doomed text[];
  v_removed integer;
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
  DELETE FROM aip_route_assignments a WHERE a.action_id = ANY (v_doomed);
  GET DIAGNOSTICS v_removed = ROW_COUNT;
  RETURN v_removed;
END
$$;

-- Entry point (data role): one retention batch under the stored policy, first made at least as
-- strict as the caller's p_retention_days (1 to aip_route_retention_days_max()) and
-- p_require_export (aip_tighten_route_retention): arguments can only keep more. Removes at most
-- p_limit (aip_route_retention_batch_min() to _max()) released routes settled more than the
-- policy's days ago, and with require_export only those settled before the export watermark too.
-- Returns {removed, removed_before, exported_before, next_due, retention_days, require_export,
-- export_read_before}: next_due is when the oldest released route left becomes removable (by the
-- window alone; null: none is released, retention is off, or with require_export none is
-- exported), so a scheduler can leave retention alone until then.
CREATE FUNCTION aip_remove_settled_routes(p_retention_days integer, p_require_export boolean, p_limit integer) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
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
  w := aip_tighten_route_retention(p_retention_days, p_require_export);
  IF w.retention_days > 0 THEN
    v_window := w.retention_days * interval '1 day';
    v_cutoff := aip_now() - v_window;
    IF w.require_export THEN
      -- Nothing was exported yet: nothing may go.
      v_cutoff := least(v_cutoff, coalesce(w.exported_before, '-infinity'));
    END IF;
    IF isfinite(v_cutoff) THEN
      v_removed := aip_remove_routes_settled_before(v_cutoff, p_limit);
    END IF;
    SELECT a.settled_at INTO v_oldest FROM aip_route_assignments a
    WHERE NOT a.reserved AND a.settled_at IS NOT NULL
      AND (NOT w.require_export OR a.settled_at < w.exported_before)
    ORDER BY a.settled_at LIMIT 1;
    SELECT * INTO w FROM aip_route_retention WHERE singleton;
  END IF;
  RETURN (aip_route_retention_json(w) || jsonb_build_object('removed', v_removed, 'next_due', aip_time(v_oldest + v_window)))::json;
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
--
-- A page that starts at or before read_through (where the pages read so far reach, contiguously
-- from the beginning) moves read_through to where it ends: its last route, or for the last page of
-- the range the bound applied. That is the record of what export pages handed out, which the
-- export watermark may not pass (aip_record_route_export).
CREATE FUNCTION aip_admin_routes_page(p_settled_before timestamptz, p_settled_after timestamptz, p_cursor text, p_limit integer)
RETURNS json
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
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
  -- The page covered the keys after (v_from, v_after_action) up to its end.
  UPDATE aip_route_retention x
  SET read_through_at = CASE WHEN v_more THEN v_last.settled_at ELSE v_before END,
      read_through_action = CASE WHEN v_more THEN v_last.action_id ELSE '' END
  WHERE x.singleton
    AND (v_from, v_after_action) <= (coalesce(x.read_through_at, '-infinity'), coalesce(x.read_through_action, ''))
    AND (CASE WHEN v_more THEN v_last.settled_at ELSE v_before END, CASE WHEN v_more THEN v_last.action_id ELSE '' END)
        > (coalesce(x.read_through_at, '-infinity'), coalesce(x.read_through_action, ''));
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
-- two were never exported, and the call is a conflict that names the watermark. Nor does it pass
-- what export pages handed out (read_through_at): it moves at most to there, and a record when no
-- page was read past the watermark at all is a conflict. Returns {exported_before, removed_before}.
CREATE FUNCTION aip_record_route_export(p_settled_after timestamptz, p_settled_before timestamptz) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
SET lock_timeout = '2s' AS $$
DECLARE
  w aip_route_retention;
  v_bound timestamptz;
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
  v_bound := least(p_settled_before, aip_now() - aip_route_export_lag_ms() * interval '1 millisecond');
  IF v_bound > coalesce(w.exported_before, '-infinity') AND coalesce(w.read_through_at, '-infinity') <= coalesce(w.exported_before, '-infinity') THEN
    PERFORM aip_fail('conflict',
      format('no export pages were read past the export watermark %s: read them (GET /v1/admin/routes, aip-registry routes export) before recording the export',
             coalesce(aip_time(w.exported_before), '(none yet)')),
      jsonb_build_object('exported_before', aip_time(w.exported_before), 'export_read_before', aip_time(w.read_through_at)));
  END IF;
  -- No further than the pages reached (the bound they applied, when the export asks for more).
  UPDATE aip_route_retention
  SET exported_before = greatest(exported_before, least(v_bound, read_through_at)),
      updated_at = aip_now()
  WHERE singleton
  RETURNING * INTO w;
  RETURN json_build_object('exported_before', aip_time(w.exported_before), 'removed_before', aip_time(w.removed_before));
END
$$;
