-- Canonical JSON (RFC 8785, JCS) and digests.
--
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

-- Nesting is bounded (aip_json_depth_max(): 128 levels, serde_json's default recursion limit,
-- which the reference registry inherits): deeper input is refused as invalid instead of
-- exhausting the server's stack.
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
  IF p_depth > aip_json_depth_max() THEN
    PERFORM aip_invalid_field('json', 'must not nest objects and arrays more than ' || aip_json_depth_max() || ' levels deep');
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
