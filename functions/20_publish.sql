-- Catalog publication: one batch of changes applied atomically under the exclusive catalog
-- publication lock, in three passes.
--
-- 1. Prepare (no lock): every change is validated and normalized on its own by its op's
--    aip_prep_<op>: field types and bounds, labels, endpoints, supply-chain evidence, and for a
--    version the canonical manifest, its digest and every capability's digests and size. Nothing
--    here reads stored state, so a large manifest (up to 4 MiB) is canonicalized while resolvers
--    and catalog readers go on unhindered. A prepared change names its fields as its table's
--    columns, so its apply reads it with jsonb_populate_record.
-- 2. Store (no lock): the content-addressed rows the batch's versions bring (manifests, capability
--    definitions) are written in this transaction, before the lock (aip_pub_store_versions,
--    22_publish_versions.sql): immutable under their keys, invisible until the commit, rolled back
--    with a refused batch.
-- 3. Lock (no catalog lock): the stored records the changes will write are locked, in one order
--    for every publication (aip_pub_targets: record kind, then key). A record held by concurrent
--    work (a replica busy with routing, settlement or a host's heartbeat; another publication's
--    record) is waited for here, where no reader or resolver waits for us.
-- 4. Apply (exclusive lock): its op's aip_pub_<op> checks each prepared change against stored
--    state, writes what the revision makes visible, and reports it (aip_pub_result): its outcome
--    ('created' | 'updated' | 'unchanged'), the members that name its record, and what it
--    touched. The revision advances once if anything but replica provisioning changed, and so does
--    the revision of each tenant whose visible catalog changed (aip_refresh_catalog_entries).
--    Under the exclusive lock every catalog read and new route waits for us, so nothing here
--    waits for a row: a lock still held by someone else is given up at once (`busy`).
--
-- Records are locked FOR NO KEY UPDATE (every op updates non-key columns only): the key-share
-- locks of foreign-key checks (a route referencing its instance, version and replica) do not
-- conflict with it, so a resolver holding the shared catalog lock never waits for a publisher
-- that waits for the exclusive one.
--
-- One file per record kind holds its ops (21_publish_types.sql ... 26_publish_replicas.sql), and
-- the "Know what may change" rules of the specification for its kind. What is fixed is compared
-- on a re-put: exactly as stored is 'unchanged', anything else a conflict naming the field. A
-- lifecycle state moves only through its own op, never through a re-put of the record:
--   connector type      id, name, owner fixed                  enabled: set_connector_type_enabled
--   connector version   everything fixed                       status (set_version_status): admitted <-> active, any -> revoked, never back from revoked;
--                                                              supply_chain_qualified: revoked and restored by operators (restoring re-checks the evidence)
--   capability          id, contract and schema digest fixed   a conflicting contract under the same id is refused
--   connector instance  id, type, tenant fixed                 the rest only with a newer config_revision; a rollout may not drop a bound capability
--   capability binding  (tenant, capability, instance) fixed   the rest only with a newer policy_revision
--   admission policy    policy_ref fixed                       the rest only with a newer revision
--   connector replica   identity, endpoint, topology fixed     capacity (operator), status/lease/health (hosts, 70_replicas.sql)

-- What an applied change reports: its outcome and p_names, the members that name its record in
-- the publication result. p_touches, for a change of the catalog, is what the live chains
-- (aip_catalog_entries) must evaluate again: {instance | version | type: its id}, or {} for a
-- record no chain names (an admission policy). NULL: not a catalog change (replica
-- provisioning), which leaves the revision as it is.
CREATE FUNCTION aip_pub_result(p_outcome text, p_names jsonb, p_touches jsonb DEFAULT NULL) RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT jsonb_strip_nulls(jsonb_build_object('outcome', p_outcome, 'touches', p_touches)) || p_names
$$;

-- Each op, once: its prepare (p_apply false) and its apply (p_apply true).
CREATE FUNCTION aip_pub_op(p_op text, p_apply boolean, c jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  v jsonb;
BEGIN
  v := CASE p_op
    WHEN 'put_connector_type' THEN
      CASE WHEN p_apply THEN aip_pub_put_connector_type(c) ELSE aip_prep_put_connector_type(c) END
    WHEN 'set_connector_type_enabled' THEN
      CASE WHEN p_apply THEN aip_pub_set_connector_type_enabled(c) ELSE aip_prep_set_connector_type_enabled(c) END
    WHEN 'admit_version' THEN
      CASE WHEN p_apply THEN aip_pub_admit_version(c) ELSE aip_prep_admit_version(c) END
    WHEN 'set_version_status' THEN
      CASE WHEN p_apply THEN aip_pub_set_version_status(c) ELSE aip_prep_set_version_status(c) END
    WHEN 'set_version_qualification' THEN
      CASE WHEN p_apply THEN aip_pub_set_version_qualification(c) ELSE aip_prep_set_version_qualification(c) END
    WHEN 'put_instance' THEN
      CASE WHEN p_apply THEN aip_pub_put_instance(c) ELSE aip_prep_put_instance(c) END
    WHEN 'put_binding' THEN
      CASE WHEN p_apply THEN aip_pub_put_binding(c) ELSE aip_prep_put_binding(c) END
    WHEN 'put_admission_policy' THEN
      CASE WHEN p_apply THEN aip_pub_put_admission_policy(c) ELSE aip_prep_put_admission_policy(c) END
    WHEN 'put_replica' THEN
      CASE WHEN p_apply THEN aip_pub_put_replica(c) ELSE aip_prep_put_replica(c) END
  END;
  IF v IS NULL THEN
    RAISE EXCEPTION 'aip_pub_op: publication op % has no functions', p_op;
  END IF;
  RETURN v;
END
$$;

-- The stored records the prepared changes write, each once, in the order every publication locks
-- them: kind (types, versions, instances, bindings, policies, replicas), then key. With the first
-- change that names it, for a refusal. A record that does not exist yet is not locked (its
-- insert cannot wait for a concurrent publication's: that one commits before we hold the lock).
CREATE FUNCTION aip_pub_targets(p_prepared jsonb[]) RETURNS TABLE (kind integer, key text[], change_index integer)
LANGUAGE sql IMMUTABLE AS $$
  SELECT DISTINCT ON (t.kind, t.key) t.kind, t.key, t.change_index
  FROM (SELECT CASE c.n ->> 'op'
                 WHEN 'put_connector_type' THEN 1 WHEN 'set_connector_type_enabled' THEN 1
                 WHEN 'admit_version' THEN 2 WHEN 'set_version_status' THEN 2 WHEN 'set_version_qualification' THEN 2
                 WHEN 'put_instance' THEN 3 WHEN 'put_binding' THEN 4 WHEN 'put_admission_policy' THEN 5
                 WHEN 'put_replica' THEN 6 END AS kind,
               CASE c.n ->> 'op'
                 WHEN 'put_connector_type' THEN ARRAY[c.n ->> 'type_id'] WHEN 'set_connector_type_enabled' THEN ARRAY[c.n ->> 'type_id']
                 WHEN 'put_instance' THEN ARRAY[c.n ->> 'instance_id']
                 WHEN 'put_binding' THEN ARRAY[c.n ->> 'tenant_id', c.n ->> 'capability_id', c.n ->> 'instance_id']
                 WHEN 'put_admission_policy' THEN ARRAY[c.n ->> 'policy_ref']
                 WHEN 'put_replica' THEN ARRAY[c.n ->> 'replica_id']
                 ELSE ARRAY[c.n ->> 'version_id'] END AS key,
               (c.i - 1)::integer AS change_index
        FROM unnest(p_prepared) WITH ORDINALITY c(n, i)) t
  ORDER BY t.kind, t.key, t.change_index
$$;

-- Locks one target of aip_pub_targets, waiting (up to the publication's lock_timeout) while
-- another transaction holds it.
CREATE FUNCTION aip_pub_lock_target(p_kind integer, p_key text[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  CASE p_kind
    WHEN 1 THEN PERFORM 1 FROM aip_connector_types WHERE type_id = p_key[1] FOR NO KEY UPDATE;
    WHEN 2 THEN PERFORM 1 FROM aip_connector_versions WHERE version_id = p_key[1] FOR NO KEY UPDATE;
    WHEN 3 THEN PERFORM 1 FROM aip_connector_instances WHERE instance_id = p_key[1] FOR NO KEY UPDATE;
    WHEN 4 THEN PERFORM 1 FROM aip_capability_bindings
                WHERE tenant_id = p_key[1] AND capability_id = p_key[2] AND instance_id = p_key[3] FOR NO KEY UPDATE;
    WHEN 5 THEN PERFORM 1 FROM aip_admission_policies WHERE policy_ref = p_key[1] FOR NO KEY UPDATE;
    WHEN 6 THEN PERFORM 1 FROM aip_connector_replicas WHERE replica_id = p_key[1] FOR NO KEY UPDATE;
  END CASE;
END
$$;

-- Validates and normalizes one change record (no stored state is read): {op, ...normalized fields}.
CREATE FUNCTION aip_pub_prepare(p jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  v_op text;
BEGIN
  IF p IS NULL OR jsonb_typeof(p) <> 'object' THEN
    PERFORM aip_invalid_field('changes', 'must contain objects');
  END IF;
  v_op := aip_read_enum(p, 'op', aip_publication_ops());
  RETURN jsonb_build_object('op', v_op) || aip_pub_op(v_op, false, p);
END
$$;

-- Applies one prepared change against stored state (under the publication lock) and reports it:
-- {op, outcome, ...names, touches?}.
CREATE FUNCTION aip_pub_apply(n jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
BEGIN
  RETURN jsonb_build_object('op', n ->> 'op') || aip_pub_op(n ->> 'op', true, n);
END
$$;

-- Entry point (control role). Applies every change or none; a dry run applies them inside a
-- subtransaction and rolls it back, reporting what would have happened.
--
-- Every change is prepared, its content-addressed rows stored and the records it writes locked,
-- before the exclusive publication lock is taken, so the lock is held only for the checks against
-- stored state and the writes the revision makes visible, and never while waiting for a row:
-- readers and resolvers queue behind a publication for milliseconds, not for the seconds a 4 MiB
-- manifest takes to canonicalize and store, nor for a replica row another session holds.
CREATE FUNCTION aip_publish(p_changes jsonb, p_dry_run boolean DEFAULT false) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER
SET search_path FROM CURRENT
SET lock_timeout = '5s' AS $$
DECLARE
  v_revision bigint;
  v_prepared jsonb[] := '{}';
  v_results jsonb[] := '{}';
  v_result jsonb;
  v_touches jsonb;
  v_change jsonb;
  v_index integer := -1;
  v_changed integer := 0;
  v_catalog_changed boolean := false;
  -- What the changes touched, for the live chains (aip_catalog_entries) to re-evaluate.
  v_instances text[] := '{}';
  v_versions text[] := '{}';
  v_types text[] := '{}';
  v_report jsonb;
  v_target record;
  -- What a lock wait that runs out was waiting for: a content row another publication is storing,
  -- a record the changes write, the catalog lock, or a row under it.
  v_waiting text;
  v_deadline timestamptz;
  v_attempt integer := 0;
  v_state text;
  v_message text;
  v_detail text;
BEGIN
  IF p_changes IS NULL OR jsonb_typeof(p_changes) <> 'array' OR jsonb_array_length(p_changes) = 0 THEN
    PERFORM aip_invalid_field('changes', 'must be a non-empty array');
  END IF;
  IF jsonb_array_length(p_changes) > aip_publication_changes_max() THEN
    PERFORM aip_invalid_field('changes', 'must contain at most ' || aip_publication_changes_max() || ' changes');
  END IF;
  BEGIN
    FOR v_change IN SELECT e FROM jsonb_array_elements(p_changes) e LOOP
      v_index := v_index + 1;
      v_prepared := v_prepared || aip_pub_prepare(v_change);
    END LOOP;
    v_index := -1;
    -- Content-addressed rows (manifests, capability definitions) are written before the exclusive
    -- lock, in this transaction (22_publish_versions.sql): only what the revision makes visible is
    -- written under it.
    v_waiting := 'content';
    v_prepared := aip_pub_store_versions(v_prepared);
    -- The records, then the catalog lock. Holding the records, the catalog lock is only tried
    -- for a moment: whoever holds it may be waiting for one of them (a publication of the
    -- previous release, which takes the catalog lock before its rows, or a resolver of it that
    -- locks a replica under the shared lock: builds serve side by side, docs/upgrades.md). Then
    -- the records are let go (the subtransaction's row locks go with it), that work finishes, and
    -- the pair is taken again; within the publication's lock_timeout in all.
    v_deadline := clock_timestamp() + current_setting('lock_timeout')::interval;
    LOOP
      BEGIN
        v_waiting := 'record';
        FOR v_target IN SELECT * FROM aip_pub_targets(v_prepared) LOOP
          v_index := v_target.change_index;
          PERFORM aip_pub_lock_target(v_target.kind, v_target.key);
        END LOOP;
        v_index := -1;
        v_waiting := 'catalog';
        PERFORM set_config('lock_timeout', '200ms', true);
        v_revision := aip_catalog_revision_exclusive();
        EXIT;
      EXCEPTION WHEN lock_not_available THEN
        IF v_waiting = 'record' OR clock_timestamp() > v_deadline THEN
          RAISE;
        END IF;
        -- Let that work take the records and finish before they are locked again.
        v_attempt := v_attempt + 1;
        PERFORM pg_sleep(least(0.025 * v_attempt, 0.2));
      END;
    END LOOP;
    -- From here every catalog read and new route waits for us: a row someone else still holds
    -- (none should be: the records are ours) is given up at once rather than waited for.
    PERFORM set_config('lock_timeout', '50ms', true);
    v_waiting := 'locked';
    FOREACH v_change IN ARRAY v_prepared LOOP
      v_index := v_index + 1;
      v_result := aip_pub_apply(v_change);
      v_touches := v_result -> 'touches';
      IF v_result ->> 'outcome' <> 'unchanged' THEN
        v_changed := v_changed + 1;
        IF v_touches IS NOT NULL THEN
          v_catalog_changed := true;
          IF v_touches ? 'instance' THEN v_instances := v_instances || (v_touches ->> 'instance'); END IF;
          IF v_touches ? 'version' THEN v_versions := v_versions || (v_touches ->> 'version'); END IF;
          IF v_touches ? 'type' THEN v_types := v_types || (v_touches ->> 'type'); END IF;
        END IF;
      END IF;
      v_results := v_results || (v_result - 'touches');
    END LOOP;
    v_waiting := 'refresh';
    IF v_catalog_changed THEN
      UPDATE aip_catalog_revision SET revision = revision + 1, published_at = now() WHERE singleton
      RETURNING revision INTO v_revision;
      -- The live chains, and the revision of every tenant whose visible catalog they change.
      PERFORM aip_refresh_catalog_entries(ARRAY(
        SELECT unnest(v_instances)
        UNION
        SELECT i.instance_id FROM aip_connector_instances i WHERE i.version_id = ANY (v_versions) OR i.type_id = ANY (v_types)),
        v_revision);
    END IF;
    v_report := jsonb_build_object('catalog_revision', v_revision, 'changed', v_changed, 'dry_run', p_dry_run,
                                   'results', to_jsonb(v_results));
    IF p_dry_run THEN
      RAISE EXCEPTION USING ERRCODE = 'ARDRY', MESSAGE = 'dry run', DETAIL = v_report::text;
    END IF;
  EXCEPTION
    WHEN SQLSTATE 'ARDRY' THEN
      GET STACKED DIAGNOSTICS v_detail = PG_EXCEPTION_DETAIL;
      RETURN v_detail::json;
    WHEN lock_not_available OR deadlock_detected THEN
      -- Contention, not failure: the publication lock held past lock_timeout by catalog reads and
      -- new routes (or another publication), or a row concurrent work holds.
      PERFORM aip_fail('busy',
        CASE v_waiting
          WHEN 'catalog' THEN 'the catalog publication lock stayed busy (catalog reads, new routes or another publication); nothing was published, retry'
          WHEN 'content' THEN 'a concurrent publication is storing the same manifest or capability definition; nothing was published, retry'
          WHEN 'record' THEN format('changes[%s] waited too long for a record held by concurrent work (a replica busy with routing, or another publication); nothing was published, retry', v_index)
          ELSE 'a row the publication writes under the catalog lock was held by concurrent work, and the publication does not wait for rows while readers and resolvers wait for it; nothing was published, retry' END,
        jsonb_build_object('retry_after_ms', aip_retry_after_later_ms())
        || CASE WHEN v_waiting IN ('record', 'locked') THEN jsonb_build_object('change_index', v_index) ELSE '{}'::jsonb END);
    WHEN OTHERS THEN
      -- Name the failing change; everything before it is rolled back with the statement.
      GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT, v_detail = PG_EXCEPTION_DETAIL;
      IF v_state = aip_problem_sqlstate() THEN
        v_report := v_detail::jsonb || jsonb_build_object('change_index', v_index);
        RAISE EXCEPTION USING ERRCODE = v_state, MESSAGE = format('changes[%s]: %s', v_index, v_message), DETAIL = v_report::text;
      END IF;
      RAISE;
  END;
  RETURN v_report::json;
END
$$;
