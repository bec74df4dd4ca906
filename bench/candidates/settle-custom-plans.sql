-- Experiment: settlement back on PL/pgSQL's default plan choice (custom plans first).
ALTER FUNCTION aip_settle_route(text, text, jsonb, text) RESET plan_cache_mode;
ALTER FUNCTION aip_get_route(text, text) RESET plan_cache_mode;
