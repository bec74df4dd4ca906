-- Identifiers and time.

-- UUIDv7 in simple form (32 lowercase hex digits): time-ordered, so fence tokens sort by creation.
-- The 48-bit millisecond time, the version digit 7, then digits 14 to 32 of a random UUIDv4's
-- simple form (its version digit, the 13th, left out; the variant digit, the 17th, kept). One
-- expression, so the planner inlines it instead of calling a PL/pgSQL body for every route.
CREATE FUNCTION aip_uuid7_simple() RETURNS text
LANGUAGE sql VOLATILE AS $$
  SELECT lpad(to_hex(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
    || '7' || substr(replace(gen_random_uuid()::text, '-', ''), 14, 19)
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
