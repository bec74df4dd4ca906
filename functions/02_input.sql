-- Input readers: the rules the database relies on whoever calls it, each naming the offending
-- field. The HTTP layer checks the same rules with zod first (src/schemas.ts), from the same
-- bounds and lists (functions/01_constants.sql); test/db/input-rules.test.ts holds both to the
-- same verdicts.

-- A non-empty (after trim) string of at most p_max_bytes bytes (NULL: an identifier's,
-- aip_text_bytes_id()); NULL when absent and optional.
CREATE FUNCTION aip_read_text(p_record jsonb, p_field text, p_required boolean DEFAULT true, p_max_bytes integer DEFAULT NULL)
RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  v jsonb := p_record -> p_field;
  v_max integer := coalesce(p_max_bytes, aip_text_bytes_id());
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
  IF octet_length(s) > v_max THEN
    PERFORM aip_invalid_field(p_field, 'must be at most ' || v_max || ' bytes');
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

-- Topology labels (region, zone, capacity class): aip_label_pattern().
CREATE FUNCTION aip_check_label(p_field text, p_value text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF p_value IS NOT NULL AND p_value !~ aip_label_pattern() THEN
    PERFORM aip_invalid_field(p_field, aip_label_message());
  END IF;
  RETURN p_value;
END
$$;

CREATE FUNCTION aip_check_digest(p_field text, p_value text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF p_value IS NOT NULL AND p_value !~ aip_digest_pattern() THEN
    PERFORM aip_invalid_field(p_field, aip_digest_message());
  END IF;
  RETURN p_value;
END
$$;

-- A topology preference's label (resolve's p_topology member p_field): NULL when absent or null,
-- the string when it is a label. Anything else is refused by the general readers, with their
-- messages (aip_read_text, aip_check_label). One expression, so the planner inlines it: the
-- readers are PL/pgSQL calls, six of them for three labels that are almost always valid.
CREATE FUNCTION aip_topology_label(p_topology jsonb, p_field text) RETURNS text
LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN coalesce(jsonb_typeof(p_topology -> p_field), 'null') = 'null' THEN NULL
              WHEN jsonb_typeof(p_topology -> p_field) = 'string' AND (p_topology ->> p_field) ~ aip_label_pattern()
                THEN p_topology ->> p_field
              ELSE aip_check_label('topology.' || p_field, aip_read_text(p_topology, p_field, false)) END
$$;

-- allow_cross_region of a topology preference: true when absent or null, the boolean when it is
-- one; anything else is refused by aip_read_bool. Inlined, like aip_topology_label.
CREATE FUNCTION aip_topology_flag(p_topology jsonb, p_field text) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN coalesce(jsonb_typeof(p_topology -> p_field), 'null') = 'null' THEN true
              WHEN jsonb_typeof(p_topology -> p_field) = 'boolean' THEN (p_topology -> p_field)::boolean
              ELSE aip_read_bool(p_topology, p_field, true) END
$$;
