-- base aip_settle_route sha256:919b5613cd33c7d84f1f6a9d78da077c566fb192cf7f927d537a1a58ce2700ef
-- base aip_get_route sha256:7821c706ef373a9c6705fd027230500ed395456e07d313db2c6151088983deed
-- Experiment: settlement back on PL/pgSQL's default plan choice (custom plans first).
ALTER FUNCTION aip_settle_route(text, text, jsonb, text) RESET plan_cache_mode;
ALTER FUNCTION aip_get_route(text, text) RESET plan_cache_mode;
