-- Tenant capability catalog: revision-consistent reads and pagination.
--
-- Every read takes the shared publication lock, reads the revision and materializes its result in
-- the same transaction. Each statement of a (volatile) PL/pgSQL function takes a fresh snapshot,
-- but no publisher can commit while the shared lock is held, and every publisher that committed
-- before it was granted is visible: the revision and every row read belong to one publication.
--
-- A capability is visible to tenant T when the whole chain holds: an enabled binding of T, its
-- instance owned by T and enabled, the instance's version active and supply-chain qualified,
-- the version's type enabled, the version implementing the capability (and, when asked, the
-- profile). An internal read may instead ask for every active definition, bound or not.
--
-- Why the chain is checked per binding (a correlated scalar subquery, which PostgreSQL keeps as a
-- subplan) rather than joined: bindings and instances of a tenant are perfectly correlated, but
-- the planner multiplies their tenant selectivities and expects a chain to hold for ~1 binding in
-- 1000. Joined, it then sorts or hashes the tenant's whole binding set for every page; with a
-- fast-start goal it drives the join from aip_version_capabilities (quadratic); and a count joined
-- to the tenant's live instances can scan the tenant's bindings once per instance. Per binding, a
-- page is a walk of the bindings primary key (tenant_id, capability_id, ...) from
-- the cursor, a few primary-key probes per binding and a stop at the page end, and a total is one
-- such walk over the tenant's bindings: linear whatever the estimates say. The total is counted
-- once per walk (the cursor carries it, see aip_catalog_query).

-- The instance links of the chain: the tenant's enabled instances whose version is active and
-- qualified, of an enabled type (and declares the profile). Inlined wherever it is used.
CREATE FUNCTION aip_live_instances(p_tenant_id text, p_profile text)
RETURNS TABLE (instance_id text, version_id text) LANGUAGE sql STABLE AS $$
  SELECT i.instance_id, i.version_id
  FROM aip_connector_instances i
  JOIN aip_connector_versions v ON v.version_id = i.version_id
  JOIN aip_connector_types t ON t.type_id = v.type_id
  WHERE i.tenant_id = p_tenant_id AND i.status = 'enabled'
    AND v.status = 'active' AND v.supply_chain_qualified AND t.enabled
    AND (p_profile IS NULL OR EXISTS (SELECT 1 FROM aip_version_profiles vp
                                      WHERE vp.version_id = i.version_id AND vp.profile_id = p_profile))
$$;

-- The live chain behind one binding: its instance's version when every link beyond the binding
-- row holds (the instance links, and the version implementing the capability), no row otherwise.
-- Inlined wherever it is used; the definition of the chain for pages, single reads and the
-- resolver (aip_catalog_visible_all states the same links per instance, for counting; every
-- broken-link test in test/db/catalog.test.ts checks the count beside the page).
CREATE FUNCTION aip_binding_chain(p_tenant_id text, p_capability_id text, p_instance_id text, p_profile text)
RETURNS TABLE (version_id text) LANGUAGE sql STABLE AS $$
  SELECT li.version_id
  FROM aip_live_instances(p_tenant_id, p_profile) li
  WHERE li.instance_id = p_instance_id
    AND EXISTS (SELECT 1 FROM aip_version_capabilities vc
                WHERE vc.version_id = li.version_id AND vc.capability_id = p_capability_id)
$$;

-- Active, qualified versions of enabled types that implement a capability (and the profile):
-- what makes a definition visible to an internal read.
CREATE FUNCTION aip_capability_implementations(p_capability_id text, p_profile text)
RETURNS TABLE (version_id text) LANGUAGE sql STABLE AS $$
  SELECT vc.version_id
  FROM aip_version_capabilities vc
  JOIN aip_connector_versions v ON v.version_id = vc.version_id
  JOIN aip_connector_types t ON t.type_id = v.type_id
  WHERE vc.capability_id = p_capability_id
    AND v.status = 'active' AND v.supply_chain_qualified AND t.enabled
    AND (p_profile IS NULL OR EXISTS (SELECT 1 FROM aip_version_profiles vp
                                      WHERE vp.version_id = vc.version_id AND vp.profile_id = p_profile))
$$;

-- The tenant's enabled bindings after p_after ('' = from the start) that pass the exact and text
-- filters; the chain is the caller's. p_text is already lower-cased and matched literally
-- (strpos, no LIKE wildcards) against the definition's lower-cased "id name description".
CREATE FUNCTION aip_catalog_bindings(p_tenant_id text, p_after text, p_exact text, p_text text)
RETURNS TABLE (capability_id text, instance_id text) LANGUAGE sql STABLE AS $$
  SELECT b.capability_id, b.instance_id
  FROM aip_capability_bindings b
  WHERE b.tenant_id = p_tenant_id AND b.capability_id > p_after AND b.enabled
    AND (p_exact IS NULL OR b.capability_id = p_exact)
    AND (p_text IS NULL OR (SELECT strpos(d.search_text, p_text) > 0
                            FROM aip_capability_definitions d WHERE d.capability_id = b.capability_id))
$$;

-- Capability IDs visible to a tenant after p_after, unordered, once per live binding: callers
-- add DISTINCT and ORDER BY capability_id, which the bindings primary key delivers without a sort.
CREATE FUNCTION aip_catalog_visible(p_tenant_id text, p_after text, p_exact text, p_text text, p_profile text)
RETURNS TABLE (capability_id text) LANGUAGE sql STABLE AS $$
  SELECT b.capability_id
  FROM aip_catalog_bindings(p_tenant_id, p_after, p_exact, p_text) b
  WHERE (SELECT true FROM aip_binding_chain(p_tenant_id, b.capability_id, b.instance_id, p_profile) LIMIT 1)
$$;

-- Every capability ID visible to a tenant, unordered, once per live binding: the same set as
-- aip_catalog_visible from the start, found the other way round, for counting it. The tenant's
-- live instances are resolved once each (materialized: a few hundred rows at most per tenant)
-- and their bindings joined to them, instead of resolving the instance, version and type again
-- for every binding. A tenant of the reference fleet (100 instances, 1,000 bindings): 3.7 ms
-- instead of 7.5 ms per count, and a first page costs mostly its count. Pages keep the
-- per-binding form, which walks the bindings key in order and stops at the page end.
CREATE FUNCTION aip_catalog_visible_all(p_tenant_id text, p_exact text, p_text text, p_profile text)
RETURNS TABLE (capability_id text) LANGUAGE sql STABLE AS $$
  WITH live AS MATERIALIZED (SELECT li.instance_id, li.version_id FROM aip_live_instances(p_tenant_id, p_profile) li)
  SELECT b.capability_id
  FROM live
  JOIN aip_catalog_bindings(p_tenant_id, '', p_exact, p_text) b ON b.instance_id = live.instance_id
  WHERE EXISTS (SELECT 1 FROM aip_version_capabilities vc
                WHERE vc.version_id = live.version_id AND vc.capability_id = b.capability_id)
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

-- One bounded page. p_query: {q?, capability_id?, profile?, cursor?, limit?, max_bytes?,
-- if_revision?}.
--
-- Pages are ordered by capability ID and bounded by item count (default 100, clamped to [1, 200])
-- and by the summed canonical size of their definitions (at most 4 MiB; max_bytes asks for less).
-- A definition is at most 256 KiB (refused at admission otherwise), so a default page always
-- holds at least one; a max_bytes below the next definition is invalid.
--
-- The cursor is "<revision>:<total>:<query fingerprint>:<last capability id>". The revision ties
-- it to one publication (another revision: stale-cursor). Because the visible set is a function
-- of the revision, the total counted for the first page holds for every later page of the same
-- query: carrying it saves re-counting the tenant's whole binding set per page. The fingerprint
-- (mode, tenant, filters) decides whether the carried total applies; when it does not (filters
-- changed, another tenant's cursor) the total is counted again. A forged total only misleads its
-- forger.
--
-- if_revision (an HTTP If-None-Match) short-circuits: at that revision the answer is just
-- {catalog_revision, not_modified: true}, after the cursor was checked.
--
-- VOLATILE (the default) on purpose: a STABLE function would read everything with the snapshot
-- of the calling statement, taken before the shared lock was granted, and could pair a newer
-- revision with older rows (test/concurrency/catalog.test.ts catches exactly that).
CREATE FUNCTION aip_catalog_query(p_mode text, p_tenant_id text, p_query jsonb) RETURNS json
LANGUAGE plpgsql AS $$
DECLARE
  c_default_limit constant integer := 100;
  c_max_limit constant integer := 200;
  c_max_page_bytes constant bigint := 4194304;
  v_query jsonb := coalesce(p_query, '{}'::jsonb);
  v_q jsonb := v_query -> 'q';
  v_text text;
  v_exact text := aip_read_text(v_query, 'capability_id', false);
  v_profile text := aip_read_text(v_query, 'profile', false);
  v_cursor text := aip_read_text(v_query, 'cursor', false, 1100);
  v_limit integer := least(greatest(coalesce(aip_read_int(v_query, 'limit', -9007199254740991, 9007199254740991, false), c_default_limit), 1), c_max_limit);
  v_max_bytes bigint := least(coalesce(aip_read_int(v_query, 'max_bytes', 1, 9007199254740991, false), c_max_page_bytes), c_max_page_bytes);
  v_if_revision bigint := aip_read_int(v_query, 'if_revision', 0, 9007199254740991, false);
  v_revision bigint;
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
  IF v_q IS NOT NULL AND jsonb_typeof(v_q) <> 'null' THEN
    IF jsonb_typeof(v_q) <> 'string' OR octet_length(v_q #>> '{}') > 512 THEN
      PERFORM aip_invalid_field('q', 'must be a string of at most 512 bytes');
    END IF;
    v_text := nullif(lower(btrim(v_q #>> '{}')), '');
  END IF;
  v_fingerprint := lpad(to_hex(hashtextextended(jsonb_build_array(p_mode, p_tenant_id, v_exact, v_text, v_profile)::text, 0)), 16, '0');

  v_revision := aip_catalog_revision_shared();

  IF v_cursor IS NOT NULL THEN
    -- The revision first: a cursor of another publication is stale whatever else it holds.
    v_parts := regexp_match(v_cursor, '^([0-9]{1,18}):');
    IF v_parts IS NULL THEN
      PERFORM aip_invalid_field('cursor', 'is malformed: pass next_cursor from a previous page unchanged');
    END IF;
    IF v_parts[1]::bigint <> v_revision THEN
      PERFORM aip_fail('stale-cursor', 'the catalog changed since this cursor was issued: restart from the first page',
                       jsonb_build_object('cursor_revision', v_parts[1]::bigint, 'catalog_revision', v_revision));
    END IF;
    v_parts := regexp_match(v_cursor, '^[0-9]{1,18}:([0-9]{1,15}):([0-9a-f]{16}):(.+)$');
    IF v_parts IS NULL THEN
      PERFORM aip_invalid_field('cursor', 'is malformed: pass next_cursor from a previous page unchanged');
    END IF;
    IF v_parts[2] = v_fingerprint THEN
      v_total := v_parts[1]::bigint;
    END IF;
    v_after := v_parts[3];
  END IF;

  IF v_if_revision = v_revision THEN
    RETURN json_build_object('catalog_revision', v_revision, 'not_modified', true);
  END IF;

  -- The total, and up to limit + 1 IDs in order from the cursor on. One statement per mode: a
  -- UNION of both, gated by the mode, keeps the planner from using either primary key's order.
  IF p_mode = 'tenant' THEN
    IF v_total IS NULL THEN
      SELECT count(DISTINCT x.capability_id) INTO v_total FROM aip_catalog_visible_all(p_tenant_id, v_exact, v_text, v_profile) x;
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
-- Data role: a tenant-scoped page. Without a verified tenant the page is empty (the revision is
-- still reported and the cursor still checked).
CREATE FUNCTION aip_catalog_page(p_tenant_id text, p_query jsonb) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
SET lock_timeout = '5s' AS $$
BEGIN
  RETURN aip_catalog_query(CASE WHEN nullif(btrim(p_tenant_id), '') IS NULL THEN 'none' ELSE 'tenant' END, p_tenant_id, p_query);
END
$$;

-- Data role: one definition as the tenant sees it (no profile filter); definition is null when it
-- is not visible, and always for a read without a tenant.
CREATE FUNCTION aip_catalog_get(p_tenant_id text, p_capability_id text) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
SET lock_timeout = '5s' AS $$
DECLARE
  v_revision bigint := aip_catalog_revision_shared();
  v_definition json;
BEGIN
  IF nullif(btrim(p_tenant_id), '') IS NOT NULL THEN
    SELECT aip_definition_json(d) INTO v_definition
    FROM aip_capability_definitions d
    WHERE d.capability_id = p_capability_id
      AND EXISTS (SELECT 1 FROM aip_catalog_visible(p_tenant_id, '', p_capability_id, NULL, NULL));
  END IF;
  RETURN json_build_object('catalog_revision', v_revision, 'definition', v_definition);
END
$$;

-- Control role: what a given tenant sees, or (p_unbound, no tenant) every active definition.
-- A tenant, when given, takes precedence over p_unbound.
CREATE FUNCTION aip_admin_catalog_page(p_tenant_id text, p_unbound boolean, p_query jsonb) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
SET lock_timeout = '5s' AS $$
BEGIN
  RETURN aip_catalog_query(
    CASE WHEN nullif(btrim(p_tenant_id), '') IS NOT NULL THEN 'tenant'
         WHEN p_unbound THEN 'unbound' ELSE 'none' END,
    p_tenant_id, p_query);
END
$$;
