-- Locks.
--
-- The catalog publication lock: one database-scoped advisory lock. Publishers take it
-- exclusively; catalog readers and new route decisions share it while they read the revision, so
-- every read sees one publication. Its key is (hashtext(current_database()), aip_catalog_lock_key()),
-- the reference implementation's, so both can share a database. The lock functions are SQL, so
-- the planner inlines them into their callers.

-- 'AIPC' as a 32-bit integer.
CREATE FUNCTION aip_catalog_lock_key() RETURNS integer
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT 1095323715
$$;

CREATE FUNCTION aip_catalog_lock_exclusive() RETURNS void
LANGUAGE sql VOLATILE AS $$
  SELECT pg_advisory_xact_lock(hashtext(current_database()), aip_catalog_lock_key())
$$;

CREATE FUNCTION aip_catalog_lock_shared() RETURNS void
LANGUAGE sql VOLATILE AS $$
  SELECT pg_advisory_xact_lock_shared(hashtext(current_database()), aip_catalog_lock_key())
$$;

-- The shared lock without waiting: false while a publication holds it or waits for it.
CREATE FUNCTION aip_catalog_try_lock_shared() RETURNS boolean
LANGUAGE sql VOLATILE AS $$
  SELECT pg_try_advisory_xact_lock_shared(hashtext(current_database()), aip_catalog_lock_key())
$$;

CREATE FUNCTION aip_catalog_revision_shared() RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v bigint;
BEGIN
  PERFORM aip_catalog_lock_shared();
  SELECT revision INTO v FROM aip_catalog_revision WHERE singleton;
  RETURN v;
END
$$;

CREATE FUNCTION aip_catalog_revision_exclusive() RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v bigint;
BEGIN
  PERFORM aip_catalog_lock_exclusive();
  SELECT revision INTO v FROM aip_catalog_revision WHERE singleton FOR UPDATE;
  RETURN v;
END
$$;

-- Per-action serialization for resolve and settle; the same single-bigint key as the reference.
-- Returns true once the lock is held: an expression, so that PL/pgSQL evaluates the call as a
-- simple expression (`v := aip_lock_action(...)`), where PERFORM would run it as a whole statement.
CREATE FUNCTION aip_lock_action(p_action_id text) RETURNS boolean
LANGUAGE sql VOLATILE AS $$
  SELECT pg_advisory_xact_lock(hashtextextended(p_action_id, 0)) IS NOT NULL
$$;
