-- Tenant capability catalog: revision-consistent reads and pagination.
--
-- A capability is visible to tenant T when the whole chain holds: an enabled binding of T, its
-- instance owned by T and enabled, the instance's version active and supply-chain qualified,
-- the version's type enabled, the version implementing the capability (and, when asked, the
-- profile). An internal read may instead ask for every active definition, bound or not.
--
-- The chain changes only when a publication commits, so publication evaluates it (for the
-- instances a change touched) and keeps the result in aip_catalog_entries, in the same
-- transaction. A read is then a range of that table's primary key (tenant_id, capability_id):
-- a page walks it from the cursor and stops at the page end, a total counts the tenant's slice,
-- and neither re-evaluates a single link.
--
-- Every read sees one snapshot. The read functions are STABLE, so each of their statements uses
-- the snapshot of the statement that called them: the revision and every row read belong to one
-- publication (publications commit atomically), on the primary and on a hot standby alike, where
-- WAL replay would otherwise move the catalog between two statements of one read. They also take
-- the shared publication lock, as the specification's readers do; on the primary that makes a
-- read that meets a publication wait for its commit (and then answer at the revision it started
-- at, which is consistent).

-- Maintenance (publication and the owner only) ---------------------------------------------------

-- The links of a chain below its binding, each written once. Set-returning SQL functions, so the
-- planner inlines them into their callers (the catalog entries, a route's reacquisition, internal
-- reads) and keeps each caller's index access.
--
-- Versions that may serve: active, supply-chain qualified, of an enabled type.
CREATE FUNCTION aip_live_versions()
RETURNS TABLE (version_id text, type_id text)
LANGUAGE sql STABLE AS $$
  SELECT v.version_id, v.type_id
  FROM aip_connector_versions v
  JOIN aip_connector_types t ON t.type_id = v.type_id
  WHERE v.status = 'active' AND v.supply_chain_qualified AND t.enabled
$$;

-- Instances that may serve: enabled, on a live version (their current rollout).
CREATE FUNCTION aip_live_instances()
RETURNS TABLE (instance_id text, tenant_id text, version_id text, type_id text)
LANGUAGE sql STABLE AS $$
  SELECT i.instance_id, i.tenant_id, i.version_id, v.type_id
  FROM aip_connector_instances i
  JOIN aip_live_versions() v ON v.version_id = i.version_id
  WHERE i.status = 'enabled'
$$;

-- Every live chain behind a binding, with what a new route through each pins besides its replica.
-- Its instance_id is the instance's own column, so a filter on it (aip_live_chains) reaches the
-- instances' primary key and the bindings follow by their instance index.
CREATE FUNCTION aip_live_chains_all()
RETURNS TABLE (tenant_id text, capability_id text, instance_id text, version_id text, priority integer, type_id text,
               binding_key text, policy_revision bigint, credential_revision_ref text, quota_policy_ref text)
LANGUAGE sql STABLE AS $$
  SELECT b.tenant_id, b.capability_id, i.instance_id, i.version_id, b.priority, i.type_id,
         aip_binding_scope_key(b.tenant_id, b.capability_id, b.instance_id),
         b.policy_revision, b.credential_revision_ref, b.quota_policy_ref
  FROM aip_capability_bindings b
  JOIN aip_live_instances() i ON i.instance_id = b.instance_id AND i.tenant_id = b.tenant_id
  JOIN aip_version_capabilities vc ON vc.version_id = i.version_id AND vc.capability_id = b.capability_id
  WHERE b.enabled
$$;

-- The live chains of the given instances: what publication re-evaluates. A separate function, not
-- "NULL: every instance": publication's refresh runs on a generic plan, where
-- `$1 IS NULL OR instance_id = ANY ($1)` cannot use an index and read all 100,000 bindings of the
-- reference fleet for every type or version change (test/db/catalog-plan.test.ts).
CREATE FUNCTION aip_live_chains(p_instance_ids text[])
RETURNS SETOF aip_catalog_entries
LANGUAGE sql STABLE AS $$
  SELECT c.* FROM aip_live_chains_all() c WHERE c.instance_id = ANY (p_instance_ids)
$$;

-- Re-evaluates the entries of the given instances after a publication changed them (their
-- bindings, their status or version, their version's status or qualification, their type), and
-- records what that changed for each tenant, at p_revision (the revision the publication commits):
-- the tenant's catalog revision (aip_tenant_catalog_revisions) and one row of its change feed
-- (aip_catalog_changes: the capabilities added, changed and removed).
--
-- What a tenant sees is a function of the set of (capability, version) of its entries: definitions
-- are immutable per capability ID and profiles per version, so a shared record (version status or
-- qualification, type enablement) reaches the tenant exactly through the entries it adds or
-- removes. A (tenant, capability, version) the refresh removed or added counts unless another
-- instance of the tenant, untouched here, still provides it; a capability is then added (visible
-- after, not before), removed, or changed (visible before and after, its versions changed).
-- Everything is computed from the rows the refresh deleted and inserted, by hashing, plus one
-- primary-key probe per (tenant, capability) they name, for the tenant's untouched instances.
CREATE FUNCTION aip_refresh_catalog_entries(p_instance_ids text[], p_revision bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  o_tenants text[];
  o_capabilities text[];
  o_versions text[];
  n_tenants text[];
  n_capabilities text[];
  n_versions text[];
BEGIN
  IF coalesce(cardinality(p_instance_ids), 0) = 0 THEN
    RETURN;
  END IF;
  WITH gone AS (DELETE FROM aip_catalog_entries e WHERE e.instance_id = ANY (p_instance_ids)
                RETURNING e.tenant_id, e.capability_id, e.version_id)
  SELECT array_agg(tenant_id), array_agg(capability_id), array_agg(version_id)
  INTO o_tenants, o_capabilities, o_versions FROM gone;
  WITH added AS (INSERT INTO aip_catalog_entries SELECT * FROM aip_live_chains(p_instance_ids)
                 RETURNING tenant_id, capability_id, version_id)
  SELECT array_agg(tenant_id), array_agg(capability_id), array_agg(version_id)
  INTO n_tenants, n_capabilities, n_versions FROM added;
  IF o_tenants IS NULL AND n_tenants IS NULL THEN
    RETURN;
  END IF;
  WITH rows AS (
    SELECT x.t, x.c, x.v, true AS old FROM unnest(o_tenants, o_capabilities, o_versions) x(t, c, v)
    UNION ALL
    SELECT x.t, x.c, x.v, false FROM unnest(n_tenants, n_capabilities, n_versions) x(t, c, v)),
  -- Per (tenant, capability) the versions the touched instances provided before and after, where
  -- they differ.
  pairs AS (
    SELECT r.t, r.c, coalesce(array_agg(r.v) FILTER (WHERE r.old), '{}') AS o, coalesce(array_agg(r.v) FILTER (WHERE NOT r.old), '{}') AS n
    FROM rows r GROUP BY r.t, r.c),
  -- With what the tenant's other instances provide of it (one key probe): changed when the
  -- tenant's whole version set differs.
  changed AS (
    SELECT p.t, p.c, cardinality(p.o) + cardinality(u.vs) > 0 AS was, cardinality(p.n) + cardinality(u.vs) > 0 AS now
    FROM pairs p
    CROSS JOIN LATERAL (SELECT coalesce(array_agg(e.version_id), '{}') AS vs FROM aip_catalog_entries e
                        WHERE e.tenant_id = p.t AND e.capability_id = p.c AND e.instance_id <> ALL (p_instance_ids)) u
    WHERE NOT (p.o || u.vs) @> p.n OR NOT (p.n || u.vs) @> p.o),
  tenants AS (
    INSERT INTO aip_tenant_catalog_revisions AS r (tenant_id, revision)
    SELECT DISTINCT c.t, p_revision FROM changed c
    ON CONFLICT (tenant_id) DO UPDATE SET revision = excluded.revision)
  INSERT INTO aip_catalog_changes (tenant_id, revision, added, changed, removed)
  SELECT c.t, p_revision,
         coalesce(array_agg(c.c ORDER BY c.c) FILTER (WHERE c.now AND NOT c.was), '{}'),
         coalesce(array_agg(c.c ORDER BY c.c) FILTER (WHERE c.now AND c.was), '{}'),
         coalesce(array_agg(c.c ORDER BY c.c) FILTER (WHERE c.was AND NOT c.now), '{}')
  FROM changed c GROUP BY c.t;
END
$$;

-- Rebuilds every entry (owner only: after loading a fleet with plain SQL, as the benchmark does),
-- as a publication of its own: the revision advances and every tenant that has or had entries is
-- at it, its change feed starting there (a feed from before is 410: re-list).
CREATE FUNCTION aip_rebuild_catalog_entries() RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  v_rows bigint;
  v_revision bigint;
BEGIN
  PERFORM aip_catalog_revision_exclusive();
  DELETE FROM aip_catalog_entries;
  INSERT INTO aip_catalog_entries SELECT * FROM aip_live_chains_all();
  GET DIAGNOSTICS v_rows = ROW_COUNT;
  UPDATE aip_catalog_revision SET revision = revision + 1, published_at = now() WHERE singleton RETURNING revision INTO v_revision;
  INSERT INTO aip_tenant_catalog_revisions AS r (tenant_id, revision)
  SELECT DISTINCT e.tenant_id, v_revision FROM aip_catalog_entries e
  ON CONFLICT (tenant_id) DO UPDATE SET revision = excluded.revision;
  UPDATE aip_tenant_catalog_revisions SET revision = v_revision, changes_floor = v_revision;
  DELETE FROM aip_catalog_changes;
  RETURN v_rows;
END
$$;

-- Reads ------------------------------------------------------------------------------------------

-- Capability IDs visible to a tenant after p_after ('' = from the start), once per live binding:
-- callers add DISTINCT and ORDER BY capability_id, which the entries key delivers without a sort.
-- p_text is already lower-cased and matched literally (strpos, no LIKE wildcards) against the
-- definition's lower-cased "id name description". Inlined into its callers.
CREATE FUNCTION aip_catalog_visible(p_tenant_id text, p_after text, p_exact text, p_text text, p_profile text)
RETURNS TABLE (capability_id text) LANGUAGE sql STABLE AS $$
  SELECT e.capability_id
  FROM aip_catalog_entries e
  WHERE e.tenant_id = p_tenant_id AND e.capability_id > p_after
    AND (p_exact IS NULL OR e.capability_id = p_exact)
    AND (p_text IS NULL OR (SELECT strpos(d.search_text, p_text) > 0
                            FROM aip_capability_definitions d WHERE d.capability_id = e.capability_id))
    AND (p_profile IS NULL OR EXISTS (SELECT 1 FROM aip_version_profiles vp
                                      WHERE vp.version_id = e.version_id AND vp.profile_id = p_profile))
$$;

-- Active, qualified versions of enabled types that implement a capability (and the profile):
-- what makes a definition visible to an internal read.
CREATE FUNCTION aip_capability_implementations(p_capability_id text, p_profile text)
RETURNS TABLE (version_id text) LANGUAGE sql STABLE AS $$
  SELECT vc.version_id
  FROM aip_version_capabilities vc
  JOIN aip_live_versions() v ON v.version_id = vc.version_id
  WHERE vc.capability_id = p_capability_id
    AND (p_profile IS NULL OR EXISTS (SELECT 1 FROM aip_version_profiles vp
                                      WHERE vp.version_id = vc.version_id AND vp.profile_id = p_profile))
$$;

-- Every active definition after p_after, bound or not (internal reads), unordered: callers add
-- ORDER BY capability_id, which the definitions primary key delivers without a sort.
CREATE FUNCTION aip_catalog_unbound(p_after text, p_exact text, p_text text, p_profile text)
RETURNS TABLE (capability_id text) LANGUAGE sql STABLE AS $$
  SELECT d.capability_id
  FROM aip_capability_definitions d
  WHERE d.capability_id > p_after
    AND (p_exact IS NULL OR d.capability_id = p_exact)
    AND (p_text IS NULL OR strpos(d.search_text, p_text) > 0)
    AND (SELECT true FROM aip_capability_implementations(d.capability_id, p_profile) LIMIT 1)
$$;

-- The revision this read answers at, under the shared publication lock, in the caller's snapshot.
-- (Not aip_catalog_revision_shared: a VOLATILE function would read the revision in a newer
-- snapshot than the rows; a STABLE one reads in its caller's.)
CREATE FUNCTION aip_catalog_read_revision() RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
BEGIN
  PERFORM aip_catalog_lock_shared();
  RETURN (SELECT r.revision FROM aip_catalog_revision r WHERE r.singleton);
END
$$;

-- The tenant's catalog revision (aip_tenant_catalog_revisions) in the caller's snapshot: 0 for a
-- tenant that never saw anything, and for a read without a tenant (its catalog is always empty).
-- (PL/pgSQL: a SQL function with a sub-select is not inlined, and would cost a call per read.)
CREATE FUNCTION aip_tenant_catalog_revision(p_tenant_id text) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN coalesce((SELECT r.revision FROM aip_tenant_catalog_revisions r WHERE r.tenant_id = p_tenant_id), 0);
END
$$;

-- Entry point (data role): the committed catalog revisions of the given tenants (0 for one that
-- never saw anything), nothing else. A Node server checks cached answers with it, once for every
-- request that arrived while the previous check ran, whatever their tenants (src/catalog/serve.ts,
-- SharedRevisionCheck). One primary-key lookup per tenant; no lock: a tenant's revision commits
-- with the publication that moves it.
CREATE FUNCTION aip_catalog_revisions_now(p_tenant_ids text[]) RETURNS TABLE (tenant_id text, revision bigint)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path FROM CURRENT
SET lock_timeout = '5s' AS $$
  SELECT t.tenant_id, coalesce(r.revision, 0)
  FROM unnest(p_tenant_ids) t(tenant_id)
  LEFT JOIN aip_tenant_catalog_revisions r ON r.tenant_id = t.tenant_id
$$;

-- A hot standby that has not replayed the revision a request comes from (its cursor, or the
-- validator it revalidates) cannot answer it without going back in time: it says so, and the
-- serving layer asks the primary instead (src/registry/registry.ts). Not a problem code: it never
-- reaches a client.
CREATE FUNCTION aip_catalog_check_replay(p_requested bigint, p_revision bigint) RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
  IF p_requested > p_revision AND pg_is_in_recovery() THEN
    RAISE EXCEPTION USING ERRCODE = aip_replica_behind_sqlstate(),
      MESSAGE = format('this catalog replica is at revision %s, behind the requested %s', p_revision, p_requested);
  END IF;
END
$$;

-- Whether an answer (a cursor's page, a validator's) from revision p_from is still the answer at
-- this read: p_revision is the revision the answer's content last changed at (the tenant's, or the
-- global one for an internal read), p_global the global revision of this read's snapshot. The
-- content at any revision in [p_revision, p_global] is the same, so an answer from there is
-- current. Past p_global it names a publication this snapshot has not seen (a lagging replica,
-- aip_catalog_check_replay, or a forged number): not current.
CREATE FUNCTION aip_catalog_current(p_from bigint, p_revision bigint, p_global bigint) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
  SELECT p_from BETWEEN p_revision AND p_global
$$;

-- "Not modified" (HTTP 304), one rule for both catalog reads. p_if_revision: the revision of an
-- answer the caller already holds for this very request, or any negative revision for "whatever
-- answer is current" (If-None-Match: *); NULL: none. While the content has not changed the answer
-- is the same (every answer is a function of the content), so nothing but the revisions is read
-- (aip_catalog_current). "Any" matches an answer that exists: p_exists, true for a page (one
-- always exists), for a definition whether the tenant sees it.
CREATE FUNCTION aip_catalog_not_modified(p_if_revision bigint, p_revision bigint, p_global bigint, p_exists boolean) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN p_if_revision IS NULL THEN false
              WHEN p_if_revision < 0 THEN coalesce(p_exists, false)
              ELSE aip_catalog_current(p_if_revision, p_revision, p_global) END
$$;

-- One bounded page. p_query: {q?, capability_id?, profile?, cursor?, limit?, max_bytes?}.
--
-- Pages are ordered by capability ID and bounded by item count (aip_catalog_page_default(),
-- clamped to [1, aip_catalog_page_max()]) and by the summed canonical size of their definitions
-- (at most aip_catalog_page_bytes_max(); max_bytes asks for less). A definition is at most
-- aip_definition_bytes_max() (refused at admission otherwise), so a default page always holds at
-- least one; a max_bytes below the next definition is invalid.
--
-- A tenant's page answers at the tenant's catalog revision (aip_tenant_catalog_revisions: the
-- revision its visible catalog last changed at), an internal read of every definition at the
-- global one: publications for other tenants leave a tenant's pages, cursors and validators
-- valid, and its catalog_revision never moves backwards.
--
-- The cursor is "<revision>:<total>:<query fingerprint>:<last capability id>". The revision ties
-- it to one content (changed since: stale-cursor, aip_catalog_current). Because the visible set
-- is a function of the content, the total counted for the first page holds for every later page
-- of the same query: carrying it saves counting again. The fingerprint (mode, tenant, and the whole
-- query but its paging members) binds the cursor to its walk: a cursor that comes back from
-- another tenant, for the other mode or with other filters is refused (invalid), never continued.
-- A forged total only misleads its forger.
--
-- p_if_revision (a validator the caller already holds for this very request) short-circuits
-- (aip_catalog_not_modified): the answer is just {catalog_revision, not_modified: true}, after the
-- cursor was checked, and nothing is built.
CREATE FUNCTION aip_catalog_query(p_mode text, p_tenant_id text, p_query jsonb, p_if_revision bigint) RETURNS json
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_query jsonb := coalesce(p_query, '{}'::jsonb);
  v_cursor text := aip_read_text(v_query, 'cursor', false, aip_text_bytes_catalog_cursor());
  v_global bigint := aip_catalog_read_revision();
  v_revision bigint := CASE WHEN p_mode = 'unbound' THEN v_global ELSE aip_tenant_catalog_revision(p_tenant_id) END;
  v_q jsonb;
  v_text text;
  v_exact text;
  v_profile text;
  v_limit integer;
  v_max_bytes bigint;
  v_fingerprint text;
  v_parts text[];
  v_after text := '';
  v_total bigint;
  v_items json;
  v_included integer;
  v_fetched integer;
  v_bytes bigint;
  v_last text;
  v_next_bytes integer;
  v_ids text[];
BEGIN
  IF v_cursor IS NOT NULL THEN
    -- The revision first: a cursor of other content is stale whatever else it holds.
    v_parts := regexp_match(v_cursor, '^([0-9]{1,18}):');
    IF v_parts IS NULL THEN
      PERFORM aip_invalid_field('cursor', 'is malformed: pass next_cursor from a previous page unchanged');
    END IF;
    IF NOT aip_catalog_current(v_parts[1]::bigint, v_revision, v_global) THEN
      PERFORM aip_catalog_check_replay(v_parts[1]::bigint, v_global);
      PERFORM aip_fail('stale-cursor', 'the catalog changed for this tenant since this cursor was issued: restart from the first page',
                       jsonb_build_object('cursor_revision', v_parts[1]::bigint, 'catalog_revision', v_revision));
    END IF;
  END IF;
  -- A page always exists: "any" answer is current.
  IF aip_catalog_not_modified(p_if_revision, v_revision, v_global, true) THEN
    RETURN json_build_object('catalog_revision', v_revision, 'not_modified', true);
  END IF;
  PERFORM aip_catalog_check_replay(p_if_revision, v_global);

  v_q := v_query -> 'q';
  IF v_q IS NOT NULL AND jsonb_typeof(v_q) <> 'null' THEN
    IF jsonb_typeof(v_q) <> 'string' OR octet_length(v_q #>> '{}') > aip_text_bytes_catalog_q() THEN
      PERFORM aip_invalid_field('q', 'must be a string of at most ' || aip_text_bytes_catalog_q() || ' bytes');
    END IF;
    v_text := nullif(lower(btrim(v_q #>> '{}')), '');
  END IF;
  v_exact := aip_read_text(v_query, 'capability_id', false);
  v_profile := aip_read_text(v_query, 'profile', false);
  v_limit := least(greatest(coalesce(aip_read_int(v_query, 'limit', -aip_json_integer_max(), aip_json_integer_max(), false),
                                     aip_catalog_page_default()), 1), aip_catalog_page_max());
  v_max_bytes := least(coalesce(aip_read_int(v_query, 'max_bytes', 1, aip_json_integer_max(), false), aip_catalog_page_bytes_max()),
                       aip_catalog_page_bytes_max());
  -- Every member of the query but the paging ones (src/schemas.ts, CATALOG_PAGING_MEMBERS), q as
  -- matched: a filter added to CatalogQuery is covered without a word here, and a cursor never
  -- carries its total into another filter's walk (test/db/catalog-query-members.test.ts).
  v_fingerprint := lpad(to_hex(hashtextextended(jsonb_build_array(p_mode, p_tenant_id,
    (CASE WHEN jsonb_typeof(v_query) = 'object' THEN v_query ELSE '{}' END - '{cursor,limit,max_bytes}'::text[])
      || jsonb_build_object('q', v_text))::text, 0)), 16, '0');

  IF v_cursor IS NOT NULL THEN
    v_parts := regexp_match(v_cursor, '^[0-9]{1,18}:([0-9]{1,15}):([0-9a-f]{16}):(.+)$');
    IF v_parts IS NULL THEN
      PERFORM aip_invalid_field('cursor', 'is malformed: pass next_cursor from a previous page unchanged');
    END IF;
    -- 0.1.0's fingerprint (mode, tenant, capability_id, q as matched, profile: its filters) names the
    -- same walk, while its servers may still hand it out (aip_previous_release_cursors).
    IF v_parts[2] <> v_fingerprint
       AND NOT (aip_previous_release_cursors()
                AND v_parts[2] = lpad(to_hex(hashtextextended(jsonb_build_array(p_mode, p_tenant_id, v_exact, v_text, v_profile)::text, 0)), 16, '0')) THEN
      PERFORM aip_invalid_field('cursor', 'was not issued for this walk: pass next_cursor back unchanged, with the same filters and tenant');
    END IF;
    v_total := v_parts[1]::bigint;
    v_after := v_parts[3];
  END IF;

  -- The total, and up to limit + 1 IDs in order from the cursor on. One statement per mode: a
  -- UNION of both, gated by the mode, keeps the planner from using either primary key's order.
  IF p_mode = 'tenant' THEN
    IF v_total IS NULL THEN
      SELECT count(DISTINCT x.capability_id) INTO v_total FROM aip_catalog_visible(p_tenant_id, '', v_exact, v_text, v_profile) x;
    END IF;
    v_ids := ARRAY(SELECT DISTINCT x.capability_id FROM aip_catalog_visible(p_tenant_id, v_after, v_exact, v_text, v_profile) x
                   ORDER BY x.capability_id LIMIT v_limit + 1);
  ELSIF p_mode = 'unbound' THEN
    IF v_total IS NULL THEN
      SELECT count(*) INTO v_total FROM aip_catalog_unbound('', v_exact, v_text, v_profile);
    END IF;
    v_ids := ARRAY(SELECT x.capability_id FROM aip_catalog_unbound(v_after, v_exact, v_text, v_profile) x
                   ORDER BY x.capability_id LIMIT v_limit + 1);
  ELSE
    v_total := 0;
    v_ids := '{}';
  END IF;

  -- A running sum of the sizes marks the IDs that fit (a prefix), and only those are built into
  -- JSON. One more fetched than included: there is a next page.
  SELECT coalesce(json_agg(p.definition ORDER BY p.n) FILTER (WHERE p.definition IS NOT NULL), '[]'::json),
         count(p.definition), count(*),
         coalesce(sum(p.bytes) FILTER (WHERE p.definition IS NOT NULL), 0),
         (array_agg(p.capability_id ORDER BY p.n DESC) FILTER (WHERE p.definition IS NOT NULL))[1],
         (array_agg(p.bytes ORDER BY p.n))[1]
  INTO v_items, v_included, v_fetched, v_bytes, v_last, v_next_bytes
  FROM (SELECT d.capability_id, d.definition_bytes AS bytes, s.n,
               CASE WHEN s.n <= v_limit AND sum(d.definition_bytes) OVER (ORDER BY s.n ROWS UNBOUNDED PRECEDING) <= v_max_bytes
                    THEN aip_definition_json(d) END AS definition
        FROM unnest(v_ids) WITH ORDINALITY s(capability_id, n)
        JOIN aip_capability_definitions d ON d.capability_id = s.capability_id) p;

  IF v_fetched > 0 AND v_included = 0 THEN
    PERFORM aip_invalid_field('max_bytes', format('is smaller than the next capability definition (%s bytes)', v_next_bytes));
  END IF;

  RETURN json_build_object(
    'catalog_revision', v_revision,
    'capabilities', v_items,
    'next_cursor', CASE WHEN v_fetched > v_included THEN concat_ws(':', v_revision, v_total, v_fingerprint, v_last) END,
    'total', v_total,
    'page_bytes', v_bytes);
END
$$;

-- Entry points ------------------------------------------------------------------------------------
-- Both catalog reads answer (catalog_revision, the answer's JSON text, not_modified): the serving
-- layer forwards or caches the text as is; the text is NULL when not_modified (the caller's
-- validator is current, aip_catalog_not_modified) and for a definition the tenant does not see.

-- Data role: a tenant-scoped page. Without a verified tenant the page is empty (the revision is
-- still reported and the cursor still checked).
CREATE FUNCTION aip_catalog_page(p_tenant_id text, p_query jsonb, p_if_revision bigint DEFAULT NULL,
                                 OUT catalog_revision bigint, OUT page text, OUT not_modified boolean)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path FROM CURRENT
SET lock_timeout = '5s' AS $$
DECLARE
  v json := aip_catalog_query(CASE WHEN nullif(btrim(p_tenant_id), '') IS NULL THEN 'none' ELSE 'tenant' END,
                              p_tenant_id, p_query, p_if_revision);
BEGIN
  catalog_revision := (v ->> 'catalog_revision')::bigint;
  not_modified := (v ->> 'not_modified') IS NOT NULL;
  page := CASE WHEN NOT not_modified THEN v::text END;
END
$$;

-- Data role: one definition as the tenant sees it (no profile filter), as the JSON text of
-- {catalog_revision, definition} at the tenant's catalog revision; NULL when it is not visible,
-- and always for a read without a tenant.
CREATE FUNCTION aip_catalog_get(p_tenant_id text, p_capability_id text, p_if_revision bigint DEFAULT NULL,
                                OUT catalog_revision bigint, OUT definition text, OUT not_modified boolean)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path FROM CURRENT
SET lock_timeout = '5s' AS $$
DECLARE
  v_global bigint := aip_catalog_read_revision();
BEGIN
  catalog_revision := aip_tenant_catalog_revision(p_tenant_id);
  -- Visible: the tenant has a live chain to it (one key lookup, made only for "any").
  not_modified := aip_catalog_not_modified(p_if_revision, catalog_revision, v_global,
    EXISTS (SELECT 1 FROM aip_catalog_entries e WHERE e.tenant_id = p_tenant_id AND e.capability_id = p_capability_id));
  IF not_modified THEN
    RETURN;
  END IF;
  PERFORM aip_catalog_check_replay(p_if_revision, v_global);
  IF nullif(btrim(p_tenant_id), '') IS NOT NULL THEN
    SELECT json_build_object('catalog_revision', catalog_revision, 'definition', aip_definition_json(d))::text INTO definition
    FROM aip_capability_definitions d
    WHERE d.capability_id = p_capability_id
      AND EXISTS (SELECT 1 FROM aip_catalog_entries e WHERE e.tenant_id = p_tenant_id AND e.capability_id = p_capability_id);
  END IF;
END
$$;

-- Control role: what a given tenant sees, or (p_unbound, no tenant) every active definition.
-- A tenant, when given, takes precedence over p_unbound.
CREATE FUNCTION aip_admin_catalog_page(p_tenant_id text, p_unbound boolean, p_query jsonb) RETURNS json
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path FROM CURRENT
SET lock_timeout = '5s' AS $$
BEGIN
  RETURN aip_catalog_query(
    CASE WHEN nullif(btrim(p_tenant_id), '') IS NOT NULL THEN 'tenant'
         WHEN p_unbound THEN 'unbound' ELSE 'none' END,
    p_tenant_id, p_query, NULL);
END
$$;
