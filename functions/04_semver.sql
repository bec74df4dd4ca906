-- Semantic versions.
--
-- Does a Cargo-style semver requirement (what the reference's artifacts declare as
-- sdk_version_requirement) include a release version? NULL when the requirement does not parse.
-- A requirement is 1 to 32 comma-separated comparators: an operator (= > >= < <= ~ ^, none means
-- ^) and a version of 1 to 3 components, the last one or more of which may be a wildcard (* x X,
-- only without an operator or with =), the full form optionally with a pre-release tag. Partial
-- versions follow Cargo: ^1.2 is >=1.2.0, <2.0.0; ~1.2 is >=1.2.0, <1.3.0; >1.2 is >=1.3.0;
-- <=1.2 is <1.3.0; 1.* is >=1.0.0, <2.0.0; ^0.2.3 is <0.3.0 and ^0.0.3 is =0.0.3. Build metadata
-- and npm's || and hyphen ranges are not Cargo syntax and do not parse.
--
-- Versions compare as [major, minor, patch, release], release 1 for a release and 0 for any
-- pre-release: only release versions are ever matched (the registry's own), and a release never
-- ties with a pre-release bound, so pre-release tags need no ordering among themselves.
CREATE FUNCTION aip_semver_matches(p_requirement text, p_version text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  c_component constant text := '(0|[1-9][0-9]{0,17}|\*|x|X)';
  v text[] := regexp_match(p_version, '^(0|[1-9][0-9]{0,17})\.(0|[1-9][0-9]{0,17})\.(0|[1-9][0-9]{0,17})$');
  v_key numeric[];
  v_comparator text;
  m text[];
  v_op text;
  n numeric[];
  v_wild boolean;
  v_pre boolean;
  k integer;
  b numeric[];
  v_next numeric[];
  lo numeric[];
  hi numeric[];
  lo_open boolean;
  hi_closed boolean;
  v_count integer := 0;
  v_matches boolean := true;
BEGIN
  IF v IS NULL THEN
    RAISE EXCEPTION 'aip_semver_matches: % is not a release version', p_version;
  END IF;
  v_key := ARRAY[v[1]::numeric, v[2]::numeric, v[3]::numeric, 1];
  IF btrim(p_requirement) = '' THEN RETURN NULL; END IF;
  FOREACH v_comparator IN ARRAY string_to_array(p_requirement, ',') LOOP
    v_count := v_count + 1;
    IF v_count > 32 THEN RETURN NULL; END IF;
    m := regexp_match(v_comparator, '^\s*(=|>=|<=|>|<|~|\^)?\s*' || c_component
                      || '(?:\.' || c_component || '(?:\.' || c_component || '(-[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?)?)?\s*$');
    IF m IS NULL THEN RETURN NULL; END IF;
    n := '{}';
    v_wild := false;
    FOR i IN 2 .. 4 LOOP
      EXIT WHEN m[i] IS NULL;
      IF m[i] IN ('*', 'x', 'X') THEN
        v_wild := true;
      ELSIF v_wild THEN
        RETURN NULL; -- a number after a wildcard
      ELSE
        n := n || m[i]::numeric;
      END IF;
    END LOOP;
    v_pre := m[5] IS NOT NULL;
    IF v_wild AND (coalesce(m[1], '=') <> '=' OR v_pre) THEN RETURN NULL; END IF;
    v_op := CASE WHEN v_wild THEN '=' ELSE coalesce(m[1], '^') END;
    k := cardinality(n);
    CONTINUE WHEN k = 0; -- *: any version
    b := CASE k WHEN 3 THEN ARRAY[n[1], n[2], n[3], CASE WHEN v_pre THEN 0 ELSE 1 END]
                WHEN 2 THEN ARRAY[n[1], n[2], 0, 0]
                ELSE ARRAY[n[1], 0, 0, 0] END;
    -- The first version after everything a partial version names.
    v_next := CASE k WHEN 2 THEN ARRAY[n[1], n[2] + 1, 0, 0] WHEN 1 THEN ARRAY[n[1] + 1, 0, 0, 0] END;
    lo := NULL; hi := NULL; lo_open := false; hi_closed := false;
    CASE v_op
      WHEN '=' THEN
        lo := b;
        IF k = 3 THEN hi := b; hi_closed := true; ELSE hi := v_next; END IF;
      WHEN '>' THEN
        IF k = 3 THEN lo := b; lo_open := true; ELSE lo := v_next; END IF;
      WHEN '>=' THEN
        lo := b;
      WHEN '<' THEN
        hi := b;
      WHEN '<=' THEN
        IF k = 3 THEN hi := b; hi_closed := true; ELSE hi := v_next; END IF;
      WHEN '~' THEN
        lo := b;
        hi := CASE WHEN k = 1 THEN v_next ELSE ARRAY[n[1], n[2] + 1, 0, 0] END;
      ELSE -- ^: the leftmost non-zero component (or the last one given) may not change
        lo := b;
        hi := CASE WHEN n[1] > 0 OR k = 1 THEN ARRAY[n[1] + 1, 0, 0, 0]
                   WHEN n[2] > 0 OR k = 2 THEN ARRAY[0, n[2] + 1, 0, 0]
                   ELSE ARRAY[0, 0, n[3] + 1, 0] END;
    END CASE;
    IF lo IS NOT NULL AND (v_key < lo OR (v_key = lo AND lo_open)) THEN v_matches := false; END IF;
    IF hi IS NOT NULL AND (v_key > hi OR (v_key = hi AND NOT hi_closed)) THEN v_matches := false; END IF;
  END LOOP;
  RETURN v_matches;
END
$$;
