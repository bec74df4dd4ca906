-- A tenant's catalog change feed: what changed in its catalog after a revision, in the style of
-- Kubernetes list+watch (a gateway lists once, then polls changes from the revision it holds).
--
-- Publication appends one row per tenant whose catalog it changed, at the tenant's new revision
-- (aip_refresh_catalog_entries, 30_catalog.sql): the capabilities it added, changed (their
-- implementing versions) and removed. The feed after R folds the rows after R per capability:
-- its first event after R says whether the caller's listing at R had it (a `changed` or `removed`
-- capability was there), its last one whether the tenant sees it now. "Nothing changed since R"
-- is the tenant's revision being <= R: one primary-key lookup.
--
-- Rows are trimmed by maintenance (aip_trim_catalog_changes) once outside the history kept; a trim
-- raises the tenant's changes_floor, and a feed from before it answers changes-expired (410): the
-- gateway lists again.

-- Whether 0.1.0's function set is still installed: its servers may be serving (a rollout that has
-- not been finalized), so cursors go in the form both releases read, and a page walk can move from
-- a server of one release to one of the other at any page (docs/upgrades.md, the rule on wire
-- formats). Once finalized, every cursor handed out is bound to its walk.
CREATE FUNCTION aip_previous_release_serving() RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT EXISTS (SELECT 1 FROM aip_schema_sets WHERE name = 'public' AND legacy)
$$;

-- Whether cursors in 0.1.0's forms are still honoured: while its set is installed, and for an hour
-- after finalize removed it (a walk in flight then continues; no 0.1.0 server hands one out since).
CREATE FUNCTION aip_previous_release_cursors() RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT aip_previous_release_serving()
      OR EXISTS (SELECT 1 FROM aip_schema_retired WHERE name = 'public' AND retired_at > now() - interval '1 hour')
$$;

-- The binding of a change-feed cursor: a digest of the walk it continues (this feed, the tenant,
-- `since`, the revision the walk answers at, the position). A cursor presented by another tenant,
-- with another `since`, as a catalog page cursor, or altered in any part does not match, and is
-- refused. Not a secret: a tenant that forges a cursor for itself reads only its own feed.
CREATE FUNCTION aip_changes_cursor_binding(p_tenant_id text, p_since bigint, p_revision bigint, p_after text) RETURNS text
LANGUAGE sql STABLE AS $$
  SELECT left(encode(sha256(convert_to(jsonb_build_array('catalog-changes', p_tenant_id, p_since, p_revision, p_after)::text, 'UTF8')), 'hex'), 16)
$$;

-- Entry point (data role). p_query: {since, cursor?, limit?, max_bytes?}. Answers the JSON of
-- {catalog_revision, since, changes: [{capability_id, change, revision, definition}], next_cursor}
-- or {catalog_revision, not_modified: true} when there is nothing to build: nothing changed after
-- `since` (the serving layer answers the empty page, src/catalog/serve.ts), or p_if_revision (the
-- revision of an answer the caller already holds for this very request, If-None-Match; negative
-- for `*`) is still current (aip_catalog_not_modified, as for catalog pages). `change` is
-- `added` (visible now, not at `since`), `changed` (visible at both, its versions changed) or
-- `removed` (visible at `since`, not now: a tombstone, definition null); `revision` is the last
-- change's. Pages are ordered by capability ID and bounded like catalog pages (limit, max_bytes).
-- A walk's pages all answer at the revision its first page did (the cursor carries it), so a
-- change published meanwhile comes with the next poll, from that revision. The cursor is
-- "<revision>.<binding>.<last capability ID>" (aip_changes_cursor_binding). Without a tenant the
-- feed is always empty (revision 0).
CREATE FUNCTION aip_catalog_changes(p_tenant_id text, p_query jsonb, p_if_revision bigint DEFAULT NULL) RETURNS json
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path FROM CURRENT
SET lock_timeout = '5s' AS $$
DECLARE
  v_query jsonb := coalesce(p_query, '{}'::jsonb);
  v_global bigint := aip_catalog_read_revision();
  v_since bigint := aip_read_int(v_query, 'since', 0, aip_json_integer_max());
  v_cursor text := aip_read_text(v_query, 'cursor', false, aip_text_bytes_catalog_cursor());
  v_limit integer;
  v_max_bytes bigint;
  v_revision bigint := 0;
  v_floor bigint := 0;
  v_parts text[];
  v_after text := '';
  v_items json;
  v_included integer;
  v_fetched integer;
  v_last text;
  v_next_bytes integer;
BEGIN
  IF v_since > v_global THEN
    PERFORM aip_catalog_check_replay(v_since, v_global);
    PERFORM aip_invalid_field('since', format('is ahead of the catalog revision (%s): pass a catalog_revision the registry answered', v_global));
  END IF;
  IF nullif(btrim(p_tenant_id), '') IS NOT NULL THEN
    SELECT r.revision, r.changes_floor INTO v_revision, v_floor FROM aip_tenant_catalog_revisions r WHERE r.tenant_id = p_tenant_id;
    v_revision := coalesce(v_revision, 0);
    v_floor := coalesce(v_floor, 0);
  END IF;
  IF v_cursor IS NOT NULL THEN
    -- "<revision the walk answers at>.<binding>.<last capability ID>"
    v_parts := regexp_match(v_cursor, '^([0-9]{1,18})\.([0-9a-f]{16})\.(.+)$');
    -- 0.1.0's "<revision>:<last capability ID>", unbound, while its servers may still hand it out.
    IF v_parts IS NULL AND aip_previous_release_cursors() THEN
      v_parts := regexp_match(v_cursor, '^([0-9]{1,18}):(.+)$');
      IF v_parts IS NOT NULL THEN
        v_parts := ARRAY[v_parts[1], aip_changes_cursor_binding(p_tenant_id, v_since, v_parts[1]::bigint, v_parts[2]), v_parts[2]];
      END IF;
    END IF;
    IF v_parts IS NULL OR v_parts[2] <> aip_changes_cursor_binding(p_tenant_id, v_since, v_parts[1]::bigint, v_parts[3]) THEN
      PERFORM aip_invalid_field('cursor', 'was not issued for this walk: pass next_cursor from the previous changes page unchanged, with the same since and tenant');
    END IF;
    -- A lagging standby that has not replayed the walk's revision hands the read to the primary.
    PERFORM aip_catalog_check_replay(v_parts[1]::bigint, v_global);
    IF v_parts[1]::bigint <= v_since OR v_parts[1]::bigint > v_revision THEN
      PERFORM aip_invalid_field('cursor', 'is malformed: pass next_cursor from a previous page unchanged, with the same since');
    END IF;
    v_revision := v_parts[1]::bigint;
    v_after := v_parts[3];
  END IF;
  -- Nothing to build: nothing changed after since, or the caller's validator is current.
  IF v_since >= v_revision OR aip_catalog_not_modified(p_if_revision, v_revision, v_global, true) THEN
    RETURN json_build_object('catalog_revision', v_revision, 'not_modified', true);
  END IF;
  PERFORM aip_catalog_check_replay(p_if_revision, v_global);
  IF v_since < v_floor THEN
    PERFORM aip_fail('changes-expired',
      format('the changes after revision %s are no longer kept (the oldest since this tenant''s feed answers is %s): list the catalog again', v_since, v_floor),
      jsonb_build_object('since', v_since, 'oldest_since', v_floor, 'catalog_revision', v_revision));
  END IF;
  v_limit := least(greatest(coalesce(aip_read_int(v_query, 'limit', -aip_json_integer_max(), aip_json_integer_max(), false),
                                     aip_catalog_page_default()), 1), aip_catalog_page_max());
  v_max_bytes := least(coalesce(aip_read_int(v_query, 'max_bytes', 1, aip_json_integer_max(), false), aip_catalog_page_bytes_max()),
                       aip_catalog_page_bytes_max());

  -- Per capability, its first and last event in (since, revision]; up to limit + 1 of them after
  -- the cursor, by ID; a running sum of the definitions' sizes marks the prefix that fits, and only
  -- that is built into JSON.
  SELECT coalesce(json_agg(p.item ORDER BY p.n) FILTER (WHERE p.item IS NOT NULL), '[]'::json),
         count(p.item), count(*),
         (array_agg(p.capability_id ORDER BY p.n DESC) FILTER (WHERE p.item IS NOT NULL))[1],
         (array_agg(p.bytes ORDER BY p.n))[1]
  INTO v_items, v_included, v_fetched, v_last, v_next_bytes
  FROM (SELECT f.capability_id, f.n, coalesce(d.definition_bytes, 0) AS bytes,
               CASE WHEN f.n <= v_limit AND sum(coalesce(d.definition_bytes, 0)) OVER (ORDER BY f.n ROWS UNBOUNDED PRECEDING) <= v_max_bytes
                    THEN json_build_object(
                      'capability_id', f.capability_id,
                      'change', CASE WHEN NOT f.visible THEN 'removed' WHEN f.was_visible THEN 'changed' ELSE 'added' END,
                      'revision', f.revision,
                      'definition', CASE WHEN f.visible THEN aip_definition_json(d) END) END AS item
        FROM (SELECT e.capability_id, row_number() OVER (ORDER BY e.capability_id) AS n,
                     (array_agg(e.kind ORDER BY e.revision))[1] <> 'added' AS was_visible,
                     (array_agg(e.kind ORDER BY e.revision DESC))[1] <> 'removed' AS visible,
                     max(e.revision) AS revision
              FROM (SELECT f.revision, x.capability_id, x.kind
                    FROM aip_catalog_changes f
                    CROSS JOIN LATERAL (SELECT a, 'added' FROM unnest(f.added) a
                                        UNION ALL SELECT c, 'changed' FROM unnest(f.changed) c
                                        UNION ALL SELECT r, 'removed' FROM unnest(f.removed) r) x(capability_id, kind)
                    WHERE f.tenant_id = p_tenant_id AND f.revision > v_since AND f.revision <= v_revision
                      AND x.capability_id > v_after) e
              GROUP BY e.capability_id
              -- Neither at since nor now (added and removed again meanwhile): nothing to tell.
              HAVING (array_agg(e.kind ORDER BY e.revision))[1] <> 'added' OR (array_agg(e.kind ORDER BY e.revision DESC))[1] <> 'removed'
              ORDER BY e.capability_id
              LIMIT v_limit + 1) f
        LEFT JOIN aip_capability_definitions d ON f.visible AND d.capability_id = f.capability_id) p;

  IF v_fetched > 0 AND v_included = 0 THEN
    PERFORM aip_invalid_field('max_bytes', format('is smaller than the next capability definition (%s bytes)', v_next_bytes));
  END IF;

  RETURN json_build_object(
    'catalog_revision', v_revision,
    'since', v_since,
    'changes', v_items,
    -- While 0.1.0's servers may still serve (a rollout), in the form they read too.
    'next_cursor', CASE WHEN v_fetched <= v_included THEN NULL
                        WHEN aip_previous_release_serving() THEN v_revision || ':' || v_last
                        ELSE concat_ws('.', v_revision, aip_changes_cursor_binding(p_tenant_id, v_since, v_revision, v_last), v_last) END);
END
$$;

-- Entry point (data role, maintenance): removes up to p_limit of the oldest feed rows outside the
-- history kept (p_keep_revisions or more revisions behind the catalog revision, or older than
-- p_keep_seconds), and raises each affected tenant's changes_floor to the newest revision it
-- removed. Only the p_limit oldest rows are read: history is trimmed oldest first, and both bounds
-- are (nearly) monotonic in revision, so a batch that removes none of them is caught up. Answers
-- {trimmed, backlog}: backlog when the batch came back full.
CREATE FUNCTION aip_trim_catalog_changes(p_keep_revisions bigint, p_keep_seconds bigint, p_limit integer) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
SET lock_timeout = '5s' AS $$
DECLARE
  v_global bigint := (SELECT r.revision FROM aip_catalog_revision r WHERE r.singleton);
  v_trimmed integer;
BEGIN
  IF p_keep_revisions IS NULL OR p_keep_revisions < 1 THEN
    PERFORM aip_invalid_field('keep_revisions', 'must be at least 1');
  END IF;
  IF p_keep_seconds IS NULL OR p_keep_seconds < 1 THEN
    PERFORM aip_invalid_field('keep_seconds', 'must be at least 1');
  END IF;
  IF p_limit IS NULL OR p_limit < aip_catalog_changes_trim_batch_min() OR p_limit > aip_catalog_changes_trim_batch_max() THEN
    PERFORM aip_invalid_field('limit', format('must be in [%s, %s]', aip_catalog_changes_trim_batch_min(), aip_catalog_changes_trim_batch_max()));
  END IF;
  WITH oldest AS (
    SELECT f.tenant_id, f.revision FROM aip_catalog_changes f
    ORDER BY f.revision
    LIMIT p_limit),
  trimmed AS (
    DELETE FROM aip_catalog_changes f USING oldest o
    WHERE f.tenant_id = o.tenant_id AND f.revision = o.revision
      AND (f.revision <= v_global - p_keep_revisions OR f.changed_at < now() - make_interval(secs => p_keep_seconds))
    RETURNING f.tenant_id, f.revision),
  floors AS (
    UPDATE aip_tenant_catalog_revisions r SET changes_floor = greatest(r.changes_floor, t.revision)
    FROM (SELECT tenant_id, max(revision) AS revision FROM trimmed GROUP BY tenant_id) t
    WHERE r.tenant_id = t.tenant_id)
  SELECT count(*) INTO v_trimmed FROM trimmed;
  RETURN json_build_object('trimmed', v_trimmed, 'backlog', v_trimmed >= p_limit);
END
$$;
