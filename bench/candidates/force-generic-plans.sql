-- base aip_resolve_route sha256:d5d36c4213ca63a174847cf0648c4e03395ef8cc9077df780a70487542017af4
-- base aip_settle_route sha256:951c01deb4429ea9131f503c208e1dc2643282751b9f382c20c67e12ab61df57
-- Stale (bench/ab.ts refuses it): resolve and settle have run force_generic_plan since (see
-- bench/README.md), so against the current functions this would change nothing.
-- Candidate (experiment): resolve and settle always run cached generic plans, never re-planning
-- their statements with the call's values (PL/pgSQL's default plans the first five executions of
-- each statement per session, then keeps a generic plan when it is not costlier).
ALTER FUNCTION aip_resolve_route(text, text, text, jsonb) SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION aip_settle_route(text, text, jsonb, text) SET plan_cache_mode = force_generic_plan;
