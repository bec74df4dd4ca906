-- Tenant capability catalog: revision-consistent reads and pagination.
--
-- Every read takes the shared publication lock, reads the revision and materializes its result in
-- the same statement, so a page never mixes two publications. A continuation cursor is
-- "<revision>:<last capability id>"; presenting it after the revision moved is `stale-cursor`.
--
-- A capability is visible to tenant T when the whole chain holds: an enabled binding of T, its
-- instance owned by T and enabled, the instance's version active and supply-chain qualified,
-- the version's type enabled, the version implementing the capability (and, when asked, the
-- profile). An internal read may instead ask for every active definition, bound or not.

-- The chain, for one binding row. Kept as one SQL function so the catalog, the resolver's
-- binding check and the tests share a single definition; it is inlined by the planner.
CREATE FUNCTION aip_binding_chain_live(p_tenant_id text, p_capability_id text, p_instance_id text, p_profile text)
RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT EXISTS (
    SELECT 1
    FROM aip_connector_instances i
    JOIN aip_connector_versions v ON v.version_id = i.version_id
    JOIN aip_connector_types t ON t.type_id = v.type_id
    WHERE i.instance_id = p_instance_id AND i.tenant_id = p_tenant_id AND i.status = 'enabled'
      AND v.status = 'active' AND v.supply_chain_qualified AND t.enabled
      AND EXISTS (SELECT 1 FROM aip_version_capabilities vc
                  WHERE vc.version_id = v.version_id AND vc.capability_id = p_capability_id)
      AND (p_profile IS NULL OR EXISTS (SELECT 1 FROM aip_version_profiles vp
                                        WHERE vp.version_id = v.version_id AND vp.profile_id = p_profile)))
$$;

-- Some active, qualified version of an enabled type implements the capability (internal reads).
CREATE FUNCTION aip_capability_active(p_capability_id text, p_profile text)
RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT EXISTS (
    SELECT 1
    FROM aip_version_capabilities vc
    JOIN aip_connector_versions v ON v.version_id = vc.version_id
    JOIN aip_connector_types t ON t.type_id = v.type_id
    WHERE vc.capability_id = p_capability_id
      AND v.status = 'active' AND v.supply_chain_qualified AND t.enabled
      AND (p_profile IS NULL OR EXISTS (SELECT 1 FROM aip_version_profiles vp
                                        WHERE vp.version_id = v.version_id AND vp.profile_id = p_profile)))
$$;

-- Capability IDs visible to a reader, in capability order, after p_after ('' = from the start).
-- p_mode: 'tenant' (needs p_tenant_id), 'unbound' (internal), anything else sees nothing.
CREATE FUNCTION aip_catalog_visible(p_mode text, p_tenant_id text, p_after text, p_exact text, p_text text, p_profile text)
RETURNS TABLE (capability_id text) LANGUAGE sql STABLE AS $$
  SELECT b.capability_id
  FROM aip_capability_bindings b
  WHERE p_mode = 'tenant'
    AND b.tenant_id = p_tenant_id AND b.enabled AND b.capability_id > p_after
    AND (p_exact IS NULL OR b.capability_id = p_exact)
    AND aip_binding_chain_live(b.tenant_id, b.capability_id, b.instance_id, p_profile)
    AND (p_text IS NULL OR EXISTS (SELECT 1 FROM aip_capability_definitions d
                                   WHERE d.capability_id = b.capability_id AND strpos(d.search_text, p_text) > 0))
  GROUP BY b.capability_id
  UNION ALL
  SELECT d.capability_id
  FROM aip_capability_definitions d
  WHERE p_mode = 'unbound'
    AND d.capability_id > p_after
    AND (p_exact IS NULL OR d.capability_id = p_exact)
    AND (p_text IS NULL OR strpos(d.search_text, p_text) > 0)
    AND aip_capability_active(d.capability_id, p_profile)
  ORDER BY 1
$$;

-- One bounded page. p_query: {q?, capability_id?, profile?, cursor?, limit?, max_bytes?}.
-- Pages are bounded by item count (default 100, at most 200) and by the summed canonical size of
-- their definitions (at most 4 MiB; a caller may ask for less with max_bytes).
CREATE FUNCTION aip_catalog_query(p_mode text, p_tenant_id text, p_query jsonb) RETURNS json
LANGUAGE plpgsql AS $$
DECLARE
  c_default_limit constant integer := 100;
  c_max_limit constant integer := 200;
  c_max_page_bytes constant integer := 4194304;
  c_min_page_bytes constant integer := 1024;
  v_query jsonb := coalesce(p_query, '{}'::jsonb);
  v_revision bigint;
  v_cursor text := aip_read_text(v_query, 'cursor', false, 1100);
  v_after text := '';
  v_sep integer;
  v_text text := lower(btrim(coalesce(aip_read_text(v_query, 'q', false, 512), '')));
  v_exact text := aip_read_text(v_query, 'capability_id', false);
  v_profile text := aip_read_text(v_query, 'profile', false);
  v_limit integer := least(greatest(coalesce(aip_read_int(v_query, 'limit', -2147483648, 2147483647, false), c_default_limit), 1), c_max_limit);
  v_max_bytes integer := least(greatest(coalesce(aip_read_int(v_query, 'max_bytes', 0, 2147483647, false), c_max_page_bytes), c_min_page_bytes), c_max_page_bytes);
  v_items json[] := '{}';
  v_bytes bigint := 0;
  v_more boolean := false;
  v_last text;
  v_total bigint;
  rec record;
BEGIN
  v_revision := aip_catalog_revision_shared();
  IF v_text = '' THEN v_text := NULL; END IF;
  IF v_cursor IS NOT NULL THEN
    v_sep := position(':' IN v_cursor);
    IF v_sep < 2 OR left(v_cursor, v_sep - 1) !~ '^[0-9]{1,18}$' OR v_sep = length(v_cursor) THEN
      PERFORM aip_invalid_field('cursor', 'is malformed: expected <revision>:<capability id> from a previous page');
    END IF;
    IF left(v_cursor, v_sep - 1)::bigint <> v_revision THEN
      PERFORM aip_fail('stale-cursor', 'the catalog changed since this cursor was issued: restart from the first page',
                       jsonb_build_object('cursor_revision', left(v_cursor, v_sep - 1)::bigint, 'catalog_revision', v_revision));
    END IF;
    v_after := substr(v_cursor, v_sep + 1);
  END IF;

  SELECT count(*) INTO v_total FROM aip_catalog_visible(p_mode, p_tenant_id, '', v_exact, v_text, v_profile);

  IF v_total > 0 THEN
    FOR rec IN
      SELECT d.capability_id, d.definition_bytes, aip_definition_json(d) AS definition
      FROM aip_catalog_visible(p_mode, p_tenant_id, v_after, v_exact, v_text, v_profile) s
      JOIN aip_capability_definitions d ON d.capability_id = s.capability_id
      ORDER BY d.capability_id
      LIMIT v_limit + 1
    LOOP
      IF cardinality(v_items) = v_limit OR v_bytes + rec.definition_bytes > v_max_bytes THEN
        v_more := true;
        EXIT;
      END IF;
      v_items := v_items || rec.definition;
      v_bytes := v_bytes + rec.definition_bytes;
      v_last := rec.capability_id;
    END LOOP;
    IF v_more AND cardinality(v_items) = 0 THEN
      PERFORM aip_invalid_field('max_bytes', 'is smaller than the next capability definition');
    END IF;
  END IF;

  RETURN json_build_object(
    'catalog_revision', v_revision,
    'capabilities', array_to_json(v_items),
    'next_cursor', CASE WHEN v_more THEN v_revision || ':' || v_last END,
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

-- Data role: one definition as the tenant sees it; definition is null when not visible.
CREATE FUNCTION aip_catalog_get(p_tenant_id text, p_capability_id text) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
SET lock_timeout = '5s' AS $$
DECLARE
  v_revision bigint := aip_catalog_revision_shared();
  v_definition json;
BEGIN
  IF nullif(btrim(p_tenant_id), '') IS NOT NULL AND p_capability_id IS NOT NULL THEN
    SELECT aip_definition_json(d) INTO v_definition
    FROM aip_capability_definitions d
    WHERE d.capability_id = p_capability_id
      AND EXISTS (SELECT 1 FROM aip_capability_bindings b
                  WHERE b.tenant_id = p_tenant_id AND b.capability_id = p_capability_id AND b.enabled
                    AND aip_binding_chain_live(b.tenant_id, b.capability_id, b.instance_id, NULL));
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
