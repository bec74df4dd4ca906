-- Narrow the route row: it is written once per action, so every byte of it is WAL on the hot
-- path. Existing routes keep reading back byte for byte (checked below before anything is dropped).
--
-- 1. The scopes a reservation holds are the pinned admission's base scopes, plus its retry scope
--    after a reacquisition: a flag says which, instead of a copy of the scopes.
ALTER TABLE "aip_route_assignments" ADD COLUMN "retry" boolean DEFAULT false NOT NULL;
--> statement-breakpoint
UPDATE "aip_route_assignments" SET "retry" = true
WHERE "reserved" AND "reservation_scopes" @> '[{"kind": "tenant_retry"}]'::jsonb;
--> statement-breakpoint
-- 2. The pinned admission snapshot is kept as the policy's numbers; its scope keys are the
--    route's own tenant, instance and binding and its version's type (aip_route_admission).
ALTER TABLE "aip_route_assignments"
  ADD COLUMN "admission_policy_revision" bigint,
  ADD COLUMN "admission_max_global_in_flight" integer,
  ADD COLUMN "admission_max_tenant_in_flight" integer,
  ADD COLUMN "admission_max_connector_type_in_flight" integer,
  ADD COLUMN "admission_max_instance_in_flight" integer,
  ADD COLUMN "admission_max_binding_in_flight" integer,
  ADD COLUMN "admission_max_tenant_retry_in_flight" integer,
  ADD COLUMN "admission_circuit_failure_threshold" integer,
  ADD COLUMN "admission_circuit_open_ms" integer;
--> statement-breakpoint
UPDATE "aip_route_assignments" a SET
  "admission_policy_revision" = (a.admission ->> 'policy_revision')::bigint,
  "admission_max_global_in_flight" = (SELECT (e ->> 'limit')::integer FROM jsonb_array_elements(a.admission -> 'scopes') e WHERE e ->> 'kind' = 'global'),
  "admission_max_tenant_in_flight" = (SELECT (e ->> 'limit')::integer FROM jsonb_array_elements(a.admission -> 'scopes') e WHERE e ->> 'kind' = 'tenant'),
  "admission_max_connector_type_in_flight" = (SELECT (e ->> 'limit')::integer FROM jsonb_array_elements(a.admission -> 'scopes') e WHERE e ->> 'kind' = 'connector_type'),
  "admission_max_instance_in_flight" = (SELECT (e ->> 'limit')::integer FROM jsonb_array_elements(a.admission -> 'scopes') e WHERE e ->> 'kind' = 'instance'),
  "admission_max_binding_in_flight" = (SELECT (e ->> 'limit')::integer FROM jsonb_array_elements(a.admission -> 'scopes') e WHERE e ->> 'kind' = 'binding'),
  "admission_max_tenant_retry_in_flight" = (a.admission #>> '{retry_scope,limit}')::integer,
  "admission_circuit_failure_threshold" = (a.admission ->> 'circuit_failure_threshold')::integer,
  "admission_circuit_open_ms" = (a.admission ->> 'circuit_open_ms')::integer;
--> statement-breakpoint
ALTER TABLE "aip_route_assignments"
  ALTER COLUMN "admission_policy_revision" SET NOT NULL,
  ALTER COLUMN "admission_circuit_failure_threshold" SET NOT NULL,
  ALTER COLUMN "admission_circuit_open_ms" SET NOT NULL;
--> statement-breakpoint
-- 3. What the row only copied from immutable rows (the replica's endpoint, peer identity, trust
--    domain, transport profile and topology; the version's manifest digest) is joined when the
--    record is built. Refuse to drop a copy that ever disagreed with its source, or an admission
--    snapshot the numbers above do not rebuild exactly: the pinned record must read back byte
--    for byte (aip_assignment_json).
DO $$
DECLARE
  v_action text;
BEGIN
  SELECT a.action_id INTO v_action
  FROM aip_route_assignments a
  JOIN aip_connector_replicas r ON r.replica_id = a.replica_id
  JOIN aip_connector_versions v ON v.version_id = a.version_id
  WHERE (a.endpoint, a.peer_principal_id, a.peer_principal_kind, a.peer_did, a.trust_domain, a.transport_profile,
         a.region, a.zone, a.capacity_class, a.manifest_digest)
        IS DISTINCT FROM (r.endpoint, r.peer_principal_id, r.peer_principal_kind, r.peer_did, r.trust_domain, r.transport_profile,
                          r.region, r.zone, r.capacity_class, v.manifest_digest)
     OR (a.reserved AND a.reservation_scopes IS DISTINCT FROM (a.admission -> 'scopes')
                                                || CASE WHEN a.retry THEN jsonb_build_array(a.admission -> 'retry_scope') ELSE '[]'::jsonb END)
     OR a.admission IS DISTINCT FROM jsonb_build_object(
          'policy_ref', a.quota_policy_ref,
          'policy_revision', a.admission_policy_revision,
          'scopes', jsonb_path_query_array(jsonb_build_array(
            jsonb_build_object('kind', 'global', 'key', 'fleet', 'limit', a.admission_max_global_in_flight),
            jsonb_build_object('kind', 'tenant', 'key', a.tenant_id, 'limit', a.admission_max_tenant_in_flight),
            jsonb_build_object('kind', 'connector_type', 'key', v.type_id, 'limit', a.admission_max_connector_type_in_flight),
            jsonb_build_object('kind', 'instance', 'key', a.instance_id, 'limit', a.admission_max_instance_in_flight),
            jsonb_build_object('kind', 'binding',
              'key', 'sha256:' || encode(sha256(convert_to(json_build_array(a.tenant_id, a.capability_id, a.instance_id)::text, 'UTF8')), 'hex'),
              'limit', a.admission_max_binding_in_flight)),
            '$[*] ? (@.limit != null)'),
          'retry_scope', CASE WHEN a.admission_max_tenant_retry_in_flight IS NOT NULL THEN
            jsonb_build_object('kind', 'tenant_retry', 'key', a.tenant_id, 'limit', a.admission_max_tenant_retry_in_flight) END,
          'circuit_failure_threshold', a.admission_circuit_failure_threshold,
          'circuit_open_ms', a.admission_circuit_open_ms)
  LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'route % differs from its replica, version or admission snapshot: refusing to narrow aip_route_assignments (check it with aip_check_invariants)', v_action;
  END IF;
END
$$;
--> statement-breakpoint
-- 4. No unique index on fence_token (unique by construction), and no foreign keys to instances
--    and versions (never deleted; the key checks share-locked their hottest rows for every route).
ALTER TABLE "aip_route_assignments" DROP CONSTRAINT "aip_route_assignments_fence_token_key";--> statement-breakpoint
ALTER TABLE "aip_route_assignments" DROP CONSTRAINT "aip_route_assignments_instance_id_aip_connector_instances_instance_id_fk";
--> statement-breakpoint
ALTER TABLE "aip_route_assignments" DROP CONSTRAINT "aip_route_assignments_version_id_aip_connector_versions_version_id_fk";
--> statement-breakpoint
ALTER TABLE "aip_route_assignments" DROP COLUMN "manifest_digest";--> statement-breakpoint
ALTER TABLE "aip_route_assignments" DROP COLUMN "endpoint";--> statement-breakpoint
ALTER TABLE "aip_route_assignments" DROP COLUMN "peer_principal_id";--> statement-breakpoint
ALTER TABLE "aip_route_assignments" DROP COLUMN "peer_principal_kind";--> statement-breakpoint
ALTER TABLE "aip_route_assignments" DROP COLUMN "peer_did";--> statement-breakpoint
ALTER TABLE "aip_route_assignments" DROP COLUMN "trust_domain";--> statement-breakpoint
ALTER TABLE "aip_route_assignments" DROP COLUMN "transport_profile";--> statement-breakpoint
ALTER TABLE "aip_route_assignments" DROP COLUMN "region";--> statement-breakpoint
ALTER TABLE "aip_route_assignments" DROP COLUMN "zone";--> statement-breakpoint
ALTER TABLE "aip_route_assignments" DROP COLUMN "capacity_class";--> statement-breakpoint
ALTER TABLE "aip_route_assignments" DROP COLUMN "admission";--> statement-breakpoint
ALTER TABLE "aip_route_assignments" DROP COLUMN "reservation_scopes";
