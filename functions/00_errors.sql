-- Errors: how every function refuses.
--
-- A refusal is one mechanism, aip_fail: SQLSTATE aip_problem_sqlstate(), a human message, and a
-- DETAIL that is the problem's JSON members, its code and its extension members
-- ({"code": "not-found", "instance_id": "..."}). src/registry/errors.ts reads the code from the
-- error itself, so no table maps SQLSTATEs to codes. Raising aborts the statement, so nothing
-- partial can commit.
--
-- Class AR ("AIP registry") holds five more SQLSTATEs, none of them a problem:
--   ARLAG  aip_replica_behind_sqlstate(): a hot standby has not replayed the revision a catalog
--          read names (aip_catalog_check_replay); the serving layer asks the primary instead.
--   ARDRY  aip_publish: a dry run raises its report to roll its changes back, and catches it.
--   ARSKP  aip_resolve_route: the chosen replica is gone; choose again.
--   ARPUB  aip_resolve_route: a publication holds the catalog lock; step back and wait for it.
--   ARREL  aip_settle_route: a releaser settled the route first; undo the replica update, answer
--          the idempotent repeat.
-- The last four are raised and caught inside one function and never leave it
-- (test/db/error-codes.test.ts).
--
-- None of these functions is granted to a runtime role: they run only inside the SECURITY
-- DEFINER entry points, as the owner (functions/90_grants.sql).

-- p_code: one of aip_problem_codes(), the codes TypeScript accepts from the database; any other
-- is a bug, raised as an internal error (and answered as storage).
CREATE FUNCTION aip_fail(p_code text, p_message text, p_detail jsonb DEFAULT '{}'::jsonb) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  IF p_code IS NULL OR NOT p_code = ANY (aip_problem_codes()) THEN
    RAISE EXCEPTION 'aip_fail: % is not a problem code the registry raises', p_code;
  END IF;
  RAISE EXCEPTION USING
    ERRCODE = aip_problem_sqlstate(),
    MESSAGE = p_message,
    DETAIL = (coalesce(p_detail, '{}'::jsonb) || jsonb_build_object('code', p_code))::text;
END
$$;

-- An invalid input field, named: {"code": "invalid", "errors": [{field, message}]}.
CREATE FUNCTION aip_invalid_field(p_field text, p_message text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM aip_fail('invalid', p_field || ' ' || p_message,
    jsonb_build_object('errors', jsonb_build_array(jsonb_build_object('field', p_field, 'message', p_message))));
END
$$;
