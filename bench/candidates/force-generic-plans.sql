-- Candidate (experiment): resolve and settle always run cached generic plans, never re-planning
-- their statements with the call's values (PL/pgSQL's default plans the first five executions of
-- each statement per session, then keeps a generic plan when it is not costlier).
ALTER FUNCTION aip_resolve_route(text, text, text, jsonb) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION aip_settle_route(text, text, jsonb, text) SET plan_cache_mode = force_generic_plan;
