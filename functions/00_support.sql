-- Support functions shared by every area: errors, input readers, canonical JSON and digests,
-- identifiers, time formatting and the catalog publication lock.
--
-- None of these is granted to a runtime role: they run only inside the SECURITY DEFINER entry
-- points of the other files, as the owner.

-- Errors ---------------------------------------------------------------------------------------
-- Every refusal is raised with one SQLSTATE per problem code (class "AR", "AIP registry"), a
-- human message, and a JSON DETAIL carrying the problem's extension members. src/registry/errors.ts
-- maps them to HTTP in one place. Raising aborts the statement, so nothing partial can commit.
CREATE FUNCTION aip_sqlstate(p_code text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE p_code
    WHEN 'invalid' THEN 'AR400'
    WHEN 'forbidden' THEN 'AR403'
    WHEN 'not-found' THEN 'AR404'
    WHEN 'binding-unavailable' THEN 'AR4B4'
    WHEN 'conflict' THEN 'AR409'
    WHEN 'stale-cursor' THEN 'AR4S9'
    WHEN 'fence-lost' THEN 'AR4F9'
    WHEN 'route-expired' THEN 'AR410'
    WHEN 'admission' THEN 'AR422'
    WHEN 'capacity-exceeded' THEN 'AR429'
    WHEN 'replica-unavailable' THEN 'AR503'
    ELSE 'AR500'
  END
$$;

CREATE FUNCTION aip_fail(p_code text, p_message text, p_detail jsonb DEFAULT '{}'::jsonb) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING
    ERRCODE = aip_sqlstate(p_code),
    MESSAGE = p_message,
    DETAIL = coalesce(p_detail, '{}'::jsonb)::text;
END
$$;

-- Input readers ----------------------------------------------------------------------------------
-- The HTTP layer validates shapes with zod first; these repeat the rules the database must be
-- able to rely on whoever calls it, and name the offending field.
CREATE FUNCTION aip_invalid_field(p_field text, p_message text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM aip_fail('invalid', p_field || ' ' || p_message,
    jsonb_build_object('errors', jsonb_build_array(jsonb_build_object('field', p_field, 'message', p_message))));
END
$$;

-- A non-empty (after trim) string of at most p_max_bytes bytes; NULL when absent and optional.
CREATE FUNCTION aip_read_text(p_record jsonb, p_field text, p_required boolean DEFAULT true, p_max_bytes integer DEFAULT 256)
RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  v jsonb := p_record -> p_field;
  s text;
BEGIN
  IF v IS NULL OR jsonb_typeof(v) = 'null' THEN
    IF p_required THEN PERFORM aip_invalid_field(p_field, 'is required'); END IF;
    RETURN NULL;
  END IF;
  IF jsonb_typeof(v) <> 'string' THEN
    PERFORM aip_invalid_field(p_field, 'must be a string');
  END IF;
  s := v #>> '{}';
  IF btrim(s) = '' THEN
    PERFORM aip_invalid_field(p_field, 'must be non-empty');
  END IF;
  IF octet_length(s) > p_max_bytes THEN
    PERFORM aip_invalid_field(p_field, 'must be at most ' || p_max_bytes || ' bytes');
  END IF;
  RETURN s;
END
$$;

CREATE FUNCTION aip_read_int(p_record jsonb, p_field text, p_min bigint, p_max bigint, p_required boolean DEFAULT true)
RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  v jsonb := p_record -> p_field;
  n numeric;
BEGIN
  IF v IS NULL OR jsonb_typeof(v) = 'null' THEN
    IF p_required THEN PERFORM aip_invalid_field(p_field, 'is required'); END IF;
    RETURN NULL;
  END IF;
  IF jsonb_typeof(v) <> 'number' THEN
    PERFORM aip_invalid_field(p_field, 'must be an integer');
  END IF;
  n := (v #>> '{}')::numeric;
  IF n <> trunc(n) OR n < p_min OR n > p_max THEN
    PERFORM aip_invalid_field(p_field, 'must be an integer in [' || p_min || ', ' || p_max || ']');
  END IF;
  RETURN n::bigint;
END
$$;

CREATE FUNCTION aip_read_bool(p_record jsonb, p_field text, p_default boolean DEFAULT NULL)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  v jsonb := p_record -> p_field;
BEGIN
  IF v IS NULL OR jsonb_typeof(v) = 'null' THEN
    IF p_default IS NULL THEN PERFORM aip_invalid_field(p_field, 'is required'); END IF;
    RETURN p_default;
  END IF;
  IF jsonb_typeof(v) <> 'boolean' THEN
    PERFORM aip_invalid_field(p_field, 'must be a boolean');
  END IF;
  RETURN v::text::boolean;
END
$$;

CREATE FUNCTION aip_read_enum(p_record jsonb, p_field text, p_allowed text[], p_default text DEFAULT NULL)
RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  v jsonb := p_record -> p_field;
BEGIN
  IF v IS NULL OR jsonb_typeof(v) = 'null' THEN
    IF p_default IS NULL THEN PERFORM aip_invalid_field(p_field, 'is required'); END IF;
    RETURN p_default;
  END IF;
  IF jsonb_typeof(v) <> 'string' OR NOT (v #>> '{}') = ANY (p_allowed) THEN
    PERFORM aip_invalid_field(p_field, 'must be one of ' || array_to_string(p_allowed, ', '));
  END IF;
  RETURN v #>> '{}';
END
$$;

-- Topology labels: 1 to 128 ASCII letters, digits, dots, dashes or underscores.
CREATE FUNCTION aip_check_label(p_field text, p_value text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF p_value IS NOT NULL AND p_value !~ '^[A-Za-z0-9._-]{1,128}$' THEN
    PERFORM aip_invalid_field(p_field, 'must contain 1 to 128 ASCII letters, digits, dots, dashes or underscores');
  END IF;
  RETURN p_value;
END
$$;

CREATE FUNCTION aip_check_digest(p_field text, p_value text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF p_value IS NOT NULL AND p_value !~ '^sha256:[0-9a-f]{64}$' THEN
    PERFORM aip_invalid_field(p_field, 'must be sha256: followed by 64 lowercase hex digits');
  END IF;
  RETURN p_value;
END
$$;

-- Canonical JSON (RFC 8785, JCS) and digests ----------------------------------------------------
-- Digests are computed here, not by the caller, so that what the registry pins is what it
-- verified. test/unit/canonical-json.test.ts checks this against a JavaScript JCS implementation.

-- ECMAScript Number-to-String of the IEEE double nearest to p (JCS section 3.2.2.3). PostgreSQL's
-- float8 output is already the shortest round-trip digit string (Ryu); only its layout differs.
CREATE FUNCTION aip_jcs_number(p numeric) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT
SET extra_float_digits = 1 AS $$
DECLARE
  d float8;
  s text;
  neg boolean;
  mantissa text;
  exponent integer := 0;
  int_part text;
  frac_part text;
  digits text;
  k integer;
  n integer;
  lead integer;
  body text;
  cand numeric;
  best numeric;
  val numeric;
BEGIN
  BEGIN
    d := p::float8;
  EXCEPTION WHEN numeric_value_out_of_range THEN
    PERFORM aip_invalid_field('json', 'contains a number outside the IEEE 754 double range');
  END;
  IF d = 0 THEN RETURN '0'; END IF;
  s := d::text;
  neg := left(s, 1) = '-';
  IF neg THEN s := substr(s, 2); END IF;
  IF position('e' IN s) > 0 THEN
    mantissa := split_part(s, 'e', 1);
    exponent := split_part(s, 'e', 2)::integer;
  ELSE
    mantissa := s;
  END IF;
  int_part := split_part(mantissa, '.', 1);
  frac_part := split_part(mantissa, '.', 2);
  digits := int_part || frac_part;
  n := length(int_part) + exponent;
  lead := length(digits) - length(ltrim(digits, '0'));
  digits := ltrim(digits, '0');
  n := n - lead;
  digits := rtrim(digits, '0');
  k := length(digits);
  -- Ryu (PostgreSQL's float8 output) never answers with a digit string that lies exactly on a
  -- rounding boundary of d, but ECMAScript does when that string is shorter and reads back as d
  -- (ties to even): 1e23 prints as 1e+23 in JavaScript and as 9.999999999999999e+22 here. A
  -- boundary is a short decimal only where doubles are integers (|d| >= 2^53), so only there look
  -- for the shortest digit string, just below or above Ryu's, that still reads back as d.
  IF abs(d) >= 9007199254740992 AND k > 1 THEN
    <<shorter>>
    FOR kk IN 1 .. k - 1 LOOP
      best := NULL;
      FOREACH cand IN ARRAY ARRAY[left(digits, kk)::numeric, left(digits, kk)::numeric + 1] LOOP
        val := cand * 10::numeric ^ (n - kk);
        CONTINUE WHEN val > 1.7976931348623157e308 OR val::float8 <> abs(d);
        -- Of two candidates of the same length, ECMAScript takes the one closer to d.
        IF best IS NULL OR abs(val - digits::numeric * 10::numeric ^ (n - k))
                           < abs(best * 10::numeric ^ (n - kk) - digits::numeric * 10::numeric ^ (n - k)) THEN
          best := cand;
        END IF;
      END LOOP;
      IF best IS NOT NULL THEN
        n := n - kk + length(best::text);
        digits := rtrim(best::text, '0');
        k := length(digits);
        EXIT shorter;
      END IF;
    END LOOP;
  END IF;
  IF k <= n AND n <= 21 THEN
    body := digits || repeat('0', n - k);
  ELSIF 0 < n AND n <= 21 THEN
    body := left(digits, n) || '.' || substr(digits, n + 1);
  ELSIF -6 < n AND n <= 0 THEN
    body := '0.' || repeat('0', -n) || digits;
  ELSE
    body := left(digits, 1)
      || CASE WHEN k > 1 THEN '.' || substr(digits, 2) ELSE '' END
      || 'e' || CASE WHEN n - 1 >= 0 THEN '+' ELSE '-' END || abs(n - 1)::text;
  END IF;
  RETURN CASE WHEN neg THEN '-' ELSE '' END || body;
END
$$;

-- Sort key for object members in UTF-16 code unit order, as JCS requires. Code point order (the
-- "C" collation) differs from it only for characters at or above U+E000; an object whose keys are
-- all ASCII, by far the common case, is sorted without it.
CREATE FUNCTION aip_jcs_utf16_key(p text) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE
  cp integer;
  out text := '';
  ch text;
BEGIN
  FOREACH ch IN ARRAY regexp_split_to_array(p, '') LOOP
    cp := ascii(ch);
    IF cp < 65536 THEN
      out := out || lpad(to_hex(cp), 4, '0');
    ELSE
      cp := cp - 65536;
      out := out || to_hex(55296 + (cp >> 10)) || to_hex(56320 + (cp & 1023));
    END IF;
  END LOOP;
  RETURN out;
END
$$;

-- Nesting is bounded (128 levels, serde_json's default recursion limit, which the reference
-- registry inherits): deeper input is refused as invalid instead of exhausting the server's stack.
-- A manifest is mostly scalars: they are written inline by aip_canonical_value, and only objects
-- and arrays recurse (one query each). p_known: members of this object whose canonical text the
-- caller already has (key -> text), so that a document whose parts were canonicalized on their
-- own is not walked again (aip_canonical_manifest).
CREATE FUNCTION aip_canonical_json(p jsonb, p_depth integer DEFAULT 1, p_known jsonb DEFAULT '{}'::jsonb) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
BEGIN
  IF jsonb_typeof(p) NOT IN ('object', 'array') THEN
    RETURN aip_canonical_value(p, p_depth);
  END IF;
  IF p_depth > 128 THEN
    PERFORM aip_invalid_field('json', 'must not nest objects and arrays more than 128 levels deep');
  END IF;
  IF jsonb_typeof(p) = 'array' THEN
    RETURN '[' || coalesce((
      SELECT string_agg(aip_canonical_value(e.value, p_depth + 1), ',' ORDER BY e.ordinality)
      FROM jsonb_array_elements(p) WITH ORDINALITY AS e), '') || ']';
  END IF;
  -- Members in UTF-16 code unit order. (A regular expression for "a key with a character at or
  -- above U+E000" would be more precise than "a non-ASCII key", but compiling one whose range
  -- spans the astral planes costs tens of milliseconds in every new session.)
  RETURN '{' || coalesce((
    SELECT string_agg(to_json(e.key)::text || ':' || coalesce(p_known ->> e.key, aip_canonical_value(e.value, p_depth + 1)), ','
                      ORDER BY CASE WHEN h.high THEN aip_jcs_utf16_key(e.key) ELSE e.key END COLLATE "C")
    FROM jsonb_each(p) AS e,
         (SELECT bool_or(octet_length(k) <> length(k)) AS high FROM jsonb_object_keys(p) AS k) AS h), '') || '}';
END
$$;

-- One value (inlined into the queries above). jsonb writes strings with exactly the escapes JCS
-- prescribes (quote, backslash, \b \f \n \r \t, other control characters as lowercase \u00xx)
-- and true, false and null as JCS does; a plain integer of at most 15 digits is already in
-- ECMAScript form, any other number goes through aip_jcs_number.
CREATE FUNCTION aip_canonical_value(v jsonb, p_depth integer) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE jsonb_typeof(v)
    WHEN 'object' THEN aip_canonical_json(v, p_depth)
    WHEN 'array' THEN aip_canonical_json(v, p_depth)
    WHEN 'number' THEN CASE WHEN v::text ~ '^-?(0|[1-9][0-9]{0,14})$' THEN v::text ELSE aip_jcs_number(v::text::numeric) END
    ELSE v::text
  END
$$;

-- STABLE, not IMMUTABLE, like convert_to: a SQL function is inlined into its caller's plan only
-- when its declared volatility is no stricter than its body's. One that is not inlined is parsed
-- and planned again on every call (PostgreSQL < 18), which on the routing path cost more than
-- the statements themselves. test/db/plans.test.ts checks that none is left on the hot paths.
CREATE FUNCTION aip_sha256(p_text text) RETURNS text
LANGUAGE sql STABLE STRICT PARALLEL SAFE AS $$
  SELECT 'sha256:' || encode(sha256(convert_to(p_text, 'UTF8')), 'hex')
$$;

-- Semantic versions ------------------------------------------------------------------------------
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

-- Identifiers and time -------------------------------------------------------------------------
-- UUIDv7 in simple form (32 lowercase hex digits): time-ordered, so fence tokens sort by creation.
CREATE FUNCTION aip_uuid7_simple() RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  r text := replace(gen_random_uuid()::text, '-', '');
BEGIN
  RETURN lpad(to_hex(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
    || '7' || substr(r, 14, 3) || substr(r, 17, 16);
END
$$;

-- The binding counter's key: a digest of the JSON array [tenant, capability, instance]. (The
-- reference joins the three with U+001F, which two different bindings whose IDs contain that
-- character could share; JSON quoting makes the encoding unambiguous for any IDs.)
-- Not STRICT: json_build_array is not, and a STRICT function is inlined only with a strict body.
CREATE FUNCTION aip_binding_scope_key(p_tenant_id text, p_capability_id text, p_instance_id text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT aip_sha256(json_build_array(p_tenant_id, p_capability_id, p_instance_id)::text)
$$;

-- The registry's one clock, truncated to the millisecond precision of every stored time.
CREATE FUNCTION aip_now() RETURNS timestamptz
LANGUAGE sql VOLATILE AS $$
  SELECT date_trunc('milliseconds', clock_timestamp())
$$;

-- RFC 3339 UTC with milliseconds; NULL for the "never" sentinel (-infinity). STABLE like to_char.
CREATE FUNCTION aip_time(p timestamptz) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN p IS NULL OR NOT isfinite(p) THEN NULL
              ELSE to_char(p AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') END
$$;

-- Catalog publication lock -----------------------------------------------------------------------
-- One database-scoped advisory lock: publishers take it exclusively, catalog readers and new
-- route decisions share it while they read the revision, so every read sees one publication.
-- The key (hashtext(current_database()), 'AIPC') is the reference implementation's, so both
-- can share a database.
CREATE FUNCTION aip_catalog_revision_shared() RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v bigint;
BEGIN
  PERFORM pg_advisory_xact_lock_shared(hashtext(current_database()), 1095323715);
  SELECT revision INTO v FROM aip_catalog_revision WHERE singleton;
  RETURN v;
END
$$;

CREATE FUNCTION aip_catalog_revision_exclusive() RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v bigint;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtext(current_database()), 1095323715);
  SELECT revision INTO v FROM aip_catalog_revision WHERE singleton FOR UPDATE;
  RETURN v;
END
$$;

-- Per-action serialization for resolve and settle; the same single-bigint key as the reference.
CREATE FUNCTION aip_lock_action(p_action_id text) RETURNS void
LANGUAGE sql VOLATILE AS $$
  SELECT pg_advisory_xact_lock(hashtextextended(p_action_id, 0))
$$;
