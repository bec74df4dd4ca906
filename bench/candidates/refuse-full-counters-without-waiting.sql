-- base aip_reserve_scopes sha256:e914583e96dfda3d5b43559695391f2ebb2e50c98d0d8acb72efd2b2b82e0ac4
-- Stale (bench/ab.ts refuses it): the idea was adopted in another form (aip_exhausted_scope reads
-- every scope without locking before aip_reserve_scopes queues), and aip_reserve_scopes has changed
-- since (lock timeouts answer capacity-exceeded).
-- Candidate (functions/40_admission.sql, aip_reserve_scopes): a counter already at its limit in
-- the latest committed state refuses at once, instead of queueing on the counter row behind every
-- other transaction of the same scope and re-checking after each of their commits.
--
-- A tenant at its limit is exactly when its counter row is busiest: every request of that tenant
-- (admitted or not) otherwise takes the row lock in turn, each waiting out the previous holder's
-- commit (WAL flush included), so refusals cost as much as admissions and the tenant's latency
-- grows with its own overload. The check reads without locking; an admission still increments
-- under the row lock with `active < limit`, so nothing is ever over-admitted. A request racing a
-- release may be refused a moment early, as if it had arrived a moment earlier.
CREATE OR REPLACE FUNCTION aip_reserve_scopes(p_scopes jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
  s jsonb;
  v_limit integer;
BEGIN
  FOR s IN SELECT e FROM jsonb_array_elements(p_scopes) e LOOP
    v_limit := (s ->> 'limit')::integer;
    IF EXISTS (SELECT 1 FROM aip_admission_counters
               WHERE scope_kind = s ->> 'kind' AND scope_key = s ->> 'key' AND active >= v_limit) THEN
      RETURN s;
    END IF;
    -- Counters exist after their first use, so the plain update is the common path.
    UPDATE aip_admission_counters SET active = active + 1
    WHERE scope_kind = s ->> 'kind' AND scope_key = s ->> 'key' AND active < v_limit;
    IF NOT FOUND THEN
      INSERT INTO aip_admission_counters AS c (scope_kind, scope_key, active)
      VALUES (s ->> 'kind', s ->> 'key', 1)
      ON CONFLICT (scope_kind, scope_key) DO UPDATE SET active = c.active + 1 WHERE c.active < v_limit;
      IF NOT FOUND THEN
        RETURN s;
      END IF;
    END IF;
  END LOOP;
  RETURN NULL;
END
$$;
