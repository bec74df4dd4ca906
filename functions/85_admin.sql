-- Administrative readers (control role) and the schema status probe (both roles).

-- One record by kind and ID; NULL when it does not exist.
CREATE FUNCTION aip_admin_get(p_kind text, p_id text) RETURNS json
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path FROM CURRENT
SET lock_timeout = '2s' AS $$
DECLARE
  v json;
BEGIN
  CASE p_kind
    WHEN 'connector_type' THEN SELECT aip_connector_type_json(t) INTO v FROM aip_connector_types t WHERE t.type_id = p_id;
    WHEN 'version' THEN SELECT aip_version_json(x) INTO v FROM aip_connector_versions x WHERE x.version_id = p_id;
    WHEN 'instance' THEN SELECT aip_instance_json(i) INTO v FROM aip_connector_instances i WHERE i.instance_id = p_id;
    WHEN 'replica' THEN SELECT aip_replica_json(r) INTO v FROM aip_connector_replicas r WHERE r.replica_id = p_id;
    WHEN 'admission_policy' THEN SELECT aip_admission_policy_json(p) INTO v FROM aip_admission_policies p WHERE p.policy_ref = p_id;
    ELSE PERFORM aip_invalid_field('kind', 'must be one of ' || array_to_string(aip_record_kinds(), ', '));
  END CASE;
  RETURN v;
END
$$;

-- A tenant's bindings in (capability, instance) order, keyset-paginated. The cursor is the JSON
-- array [capability_id, instance_id] of the last binding returned.
CREATE FUNCTION aip_admin_bindings(p_tenant_id text, p_cursor text, p_limit integer) RETURNS json
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path FROM CURRENT
SET lock_timeout = '2s' AS $$
DECLARE
  v_limit integer := least(greatest(coalesce(p_limit, aip_bindings_page_default()), 1), aip_bindings_page_max());
  v_after_capability text := '';
  v_after_instance text := '';
  v_cursor jsonb;
  v_items json[] := '{}';
  b aip_capability_bindings;
  v_last aip_capability_bindings;
  v_more boolean := false;
BEGIN
  IF nullif(btrim(p_tenant_id), '') IS NULL THEN
    PERFORM aip_invalid_field('tenant_id', 'is required');
  END IF;
  IF p_cursor IS NOT NULL THEN
    BEGIN
      v_cursor := p_cursor::jsonb;
    EXCEPTION WHEN invalid_text_representation THEN
      v_cursor := NULL;
    END;
    IF jsonb_typeof(v_cursor) IS DISTINCT FROM 'array' OR jsonb_array_length(v_cursor) <> 2
       OR jsonb_typeof(v_cursor -> 0) <> 'string' OR jsonb_typeof(v_cursor -> 1) <> 'string' THEN
      PERFORM aip_invalid_field('cursor', 'is malformed');
    END IF;
    v_after_capability := v_cursor ->> 0;
    v_after_instance := v_cursor ->> 1;
  END IF;
  FOR b IN
    SELECT * FROM aip_capability_bindings x
    WHERE x.tenant_id = p_tenant_id AND (x.capability_id, x.instance_id) > (v_after_capability, v_after_instance)
    ORDER BY x.capability_id, x.instance_id
    LIMIT v_limit + 1
  LOOP
    IF cardinality(v_items) = v_limit THEN
      v_more := true;
      EXIT;
    END IF;
    v_items := v_items || aip_binding_json(b);
    v_last := b;
  END LOOP;
  RETURN json_build_object(
    'tenant_id', p_tenant_id,
    'bindings', array_to_json(v_items),
    'next_cursor', CASE WHEN v_more THEN json_build_array(v_last.capability_id, v_last.instance_id)::text END);
END
$$;

-- Digest of every installed aip_ function: signature, body, security, settings, owner and
-- grants (an extra GRANT EXECUTE on a helper is as much a hand edit as a changed body).
CREATE FUNCTION aip_installed_functions_digest() RETURNS text
LANGUAGE sql STABLE
SET search_path FROM CURRENT AS $$
  SELECT encode(sha256(convert_to(coalesce(string_agg(
           p.oid::regprocedure::text || '|' || p.prosecdef::text || '|' || coalesce(array_to_string(p.proconfig, ','), '')
           || '|' || p.proowner::regrole::text || '|' || coalesce(p.proacl::text, '') || '|' || p.prosrc,
           E'\n' ORDER BY p.oid::regprocedure::text), ''), 'UTF8')), 'hex')
  FROM pg_proc p
  WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'aip\_%'
$$;

-- Digest of the registry's tables as installed (every aip_ table but the migrator's own
-- aip_schema_ bookkeeping): each table's kind, storage options, row security, owner and grants,
-- its columns (type, nullability, default, grants), constraints, indexes and triggers. The
-- migrator records it after the migrations that made them (aip_schema_tables): a hand-made index,
-- column or constraint change shows up as tables_intact = false. Migrations cannot repair that (a
-- numbered migration runs once), so it is reported (aip-registry doctor, migrate), not repaired.
CREATE FUNCTION aip_installed_tables_digest() RETURNS text
LANGUAGE sql STABLE
SET search_path FROM CURRENT AS $$
  WITH tables AS (
    SELECT c.oid, c.relname, c.relkind, c.reloptions, c.relrowsecurity, c.relowner, c.relacl
    FROM pg_class c
    WHERE c.relnamespace = 'public'::regnamespace AND c.relname LIKE 'aip\_%' AND c.relname NOT LIKE 'aip\_schema\_%'
      AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')),
  lines AS (
    SELECT t.relname || ' ' || t.relkind::text || ' options ' || coalesce(array_to_string(t.reloptions, ','), '')
           || ' rls ' || t.relrowsecurity::text || ' owner ' || t.relowner::regrole::text || ' acl ' || coalesce(t.relacl::text, '') AS line
    FROM tables t
    UNION ALL
    SELECT t.relname || ' column ' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
           || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '')
           || coalesce(' acl ' || a.attacl::text, '')
    FROM tables t
    JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum > 0 AND NOT a.attisdropped
    LEFT JOIN pg_attrdef d ON d.adrelid = t.oid AND d.adnum = a.attnum
    UNION ALL
    SELECT t.relname || ' constraint ' || c.conname || ' ' || pg_get_constraintdef(c.oid)
    FROM tables t JOIN pg_constraint c ON c.conrelid = t.oid
    UNION ALL
    SELECT t.relname || ' index ' || pg_get_indexdef(i.indexrelid)
    FROM tables t JOIN pg_index i ON i.indrelid = t.oid
    UNION ALL
    SELECT t.relname || ' trigger ' || pg_get_triggerdef(g.oid)
    FROM tables t JOIN pg_trigger g ON g.tgrelid = t.oid AND NOT g.tgisinternal)
  SELECT encode(sha256(convert_to(coalesce(string_agg(l.line, E'\n' ORDER BY l.line COLLATE "C"), ''), 'UTF8')), 'hex')
  FROM lines l
$$;

-- Readiness of this function set (functions are installed per build, each set in a schema of its
-- own: src/db/migrate.ts, docs/upgrades.md). The caller is a server of this set's build; it says
-- which runtime and instance it is, and the call records that it was seen (at most every 30 s per
-- instance), so `migrate --finalize` knows which sets are still in use. The answer: the tables'
-- schema version and floor (what this set needs: schema_version >= required_version and
-- floor <= required_version), whether this set is intact (a hand edit of any of its functions
-- shows up as functions_intact = false) and whether the tables are, the other installed sets and
-- when each was last seen, and who the session is (a runtime role, or the owner or a superuser,
-- which works but should not serve).
CREATE FUNCTION aip_schema_status(p_runtime text, p_instance text, p_release text) RETURNS json
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
SET lock_timeout = '2s' AS $$
DECLARE
  v_set text := current_schema();
  v_new boolean;
BEGIN
  IF p_runtime IS NOT NULL AND p_instance IS NOT NULL THEN
    -- Bounded input: these come from our own servers, but the data role may call this with anything.
    IF length(p_runtime) > 32 OR length(p_instance) > 128 OR length(coalesce(p_release, '')) > 64 THEN
      PERFORM aip_fail('invalid', 'runtime, instance or release too long');
    END IF;
    INSERT INTO aip_schema_sightings AS s (set_name, instance_id, runtime, release, first_seen, last_seen)
    VALUES (v_set, p_instance, p_runtime, coalesce(p_release, ''), now(), now())
    ON CONFLICT (set_name, instance_id) DO UPDATE SET last_seen = now()
      WHERE s.last_seen < now() - interval '30 seconds'
    RETURNING (xmax = 0) INTO v_new;
    -- Every Worker isolate is an instance of its own: a new one clears a few that are long gone
    -- (a week: finalize's window is minutes to hours), so the table stays small.
    IF v_new THEN
      DELETE FROM aip_schema_sightings
      WHERE ctid = ANY (ARRAY(SELECT ctid FROM aip_schema_sightings WHERE last_seen < now() - interval '7 days' LIMIT 100));
    END IF;
  END IF;
  RETURN (
    SELECT json_build_object(
      'function_set', v_set,
      'schema_version', (SELECT max(version) FROM aip_schema_applied WHERE kind = 'expand'),
      'required_version', s.schema_version,
      'floor', (SELECT coalesce(max(supports_from), 0) FROM aip_schema_applied WHERE kind = 'contract'),
      'functions_checksum', s.checksum,
      'functions_intact', s.installed_digest = aip_installed_functions_digest(),
      'tables_intact', s.tables_digest = aip_installed_tables_digest(),
      'catalog_revision', (SELECT revision FROM aip_catalog_revision WHERE singleton),
      'function_sets', (
        SELECT coalesce(json_agg(json_build_object(
                 'name', o.name, 'release', o.release, 'installed_at', aip_time(o.installed_at),
                 'last_seen', (SELECT aip_time(max(g.last_seen)) FROM aip_schema_sightings g WHERE g.set_name = o.name),
                 'this', o.name = v_set) ORDER BY o.installed_at, o.name), '[]'::json)
        FROM aip_schema_sets o),
      'session', json_build_object(
        'role', session_user,
        'superuser', (SELECT r.rolsuper FROM pg_roles r WHERE r.rolname = session_user),
        'owner', pg_has_role(session_user, (SELECT c.relowner FROM pg_class c WHERE c.oid = 'aip_catalog_revision'::regclass), 'MEMBER'),
        'runtime_role', (SELECT pg_has_role(session_user, r.data_role, 'MEMBER') OR pg_has_role(session_user, r.control_role, 'MEMBER')
                         FROM aip_schema_roles r WHERE r.singleton),
        -- Group roles of other registry databases (or 0.1.0's shared ones) this login also holds:
        -- it could use those registries too.
        'other_registry_roles', (
          SELECT coalesce(json_agg(g.rolname ORDER BY g.rolname), '[]'::json)
          FROM pg_roles g
          WHERE (g.rolname LIKE '%\_aip\_data' OR g.rolname LIKE '%\_aip\_control' OR g.rolname IN ('aip_registry_data', 'aip_registry_control'))
            AND g.rolname NOT IN (SELECT r.data_role FROM aip_schema_roles r UNION ALL SELECT r.control_role FROM aip_schema_roles r)
            AND pg_has_role(session_user, g.oid, 'MEMBER'))),
      -- Whether any role may connect to this database (the migrator revokes it from PUBLIC).
      'connect_public', has_database_privilege('public', current_database(), 'CONNECT'),
      -- The caller's session setting: a runtime login role without one has unbounded statements.
      'statement_timeout', current_setting('statement_timeout'))
    FROM aip_schema_sets s WHERE s.name = v_set);
END
$$;
