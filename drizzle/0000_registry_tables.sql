CREATE TABLE "aip_admission_counters" (
	"scope_kind" text NOT NULL,
	"scope_key" text NOT NULL,
	"active" integer DEFAULT 0 NOT NULL,
	CONSTRAINT "aip_admission_counters_pkey" PRIMARY KEY("scope_kind","scope_key"),
	CONSTRAINT "aip_admission_counters_active" CHECK ("aip_admission_counters"."active" >= 0)
);
--> statement-breakpoint
CREATE TABLE "aip_admission_policies" (
	"policy_ref" text PRIMARY KEY NOT NULL,
	"revision" bigint NOT NULL,
	"enabled" boolean NOT NULL,
	"max_global_in_flight" integer,
	"max_tenant_in_flight" integer,
	"max_connector_type_in_flight" integer,
	"max_instance_in_flight" integer,
	"max_binding_in_flight" integer,
	"max_tenant_retry_in_flight" integer,
	"circuit_failure_threshold" integer NOT NULL,
	"circuit_open_ms" integer NOT NULL,
	"created_at" timestamp(3) with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp(3) with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "aip_admission_policies_revision" CHECK ("aip_admission_policies"."revision" > 0)
);
--> statement-breakpoint
CREATE TABLE "aip_capability_bindings" (
	"tenant_id" text NOT NULL,
	"capability_id" text NOT NULL,
	"instance_id" text NOT NULL,
	"priority" integer NOT NULL,
	"policy_revision" bigint NOT NULL,
	"credential_revision_ref" text,
	"quota_policy_ref" text,
	"enabled" boolean NOT NULL,
	"created_at" timestamp(3) with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp(3) with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "aip_capability_bindings_pkey" PRIMARY KEY("tenant_id","capability_id","instance_id"),
	CONSTRAINT "aip_capability_bindings_priority" CHECK ("aip_capability_bindings"."priority" >= 0),
	CONSTRAINT "aip_capability_bindings_policy_revision" CHECK ("aip_capability_bindings"."policy_revision" >= 0)
);
--> statement-breakpoint
CREATE TABLE "aip_capability_definitions" (
	"capability_id" text PRIMARY KEY NOT NULL,
	"contract_digest" text NOT NULL,
	"schema_digest" text NOT NULL,
	"capability" jsonb NOT NULL,
	"definition_bytes" integer NOT NULL,
	"search_text" text NOT NULL,
	"created_at" timestamp(3) with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "aip_capability_definitions_bytes" CHECK ("aip_capability_definitions"."definition_bytes" > 0)
);
--> statement-breakpoint
CREATE TABLE "aip_catalog_revision" (
	"singleton" boolean PRIMARY KEY DEFAULT true NOT NULL,
	"revision" bigint DEFAULT 0 NOT NULL,
	"published_at" timestamp(3) with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "aip_catalog_revision_singleton" CHECK ("aip_catalog_revision"."singleton"),
	CONSTRAINT "aip_catalog_revision_nonneg" CHECK ("aip_catalog_revision"."revision" >= 0)
);
--> statement-breakpoint
CREATE TABLE "aip_connector_instances" (
	"instance_id" text PRIMARY KEY NOT NULL,
	"type_id" text NOT NULL,
	"version_id" text NOT NULL,
	"tenant_id" text NOT NULL,
	"config_revision" bigint NOT NULL,
	"secret_provider_ref" text NOT NULL,
	"status" text NOT NULL,
	"created_at" timestamp(3) with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp(3) with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "aip_connector_instances_status" CHECK ("aip_connector_instances"."status" IN ('enabled', 'disabled')),
	CONSTRAINT "aip_connector_instances_config_revision" CHECK ("aip_connector_instances"."config_revision" >= 0)
);
--> statement-breakpoint
CREATE TABLE "aip_connector_replicas" (
	"replica_id" text PRIMARY KEY NOT NULL,
	"instance_id" text NOT NULL,
	"version_id" text NOT NULL,
	"endpoint" text NOT NULL,
	"peer_principal_id" text NOT NULL,
	"peer_principal_kind" text NOT NULL,
	"peer_did" text NOT NULL,
	"trust_domain" text NOT NULL,
	"transport_profile" text NOT NULL,
	"region" text NOT NULL,
	"zone" text NOT NULL,
	"capacity_class" text NOT NULL,
	"status" text DEFAULT 'offline' NOT NULL,
	"lease_expires_at" timestamp(3) with time zone DEFAULT '-infinity' NOT NULL,
	"capacity" integer NOT NULL,
	"active_assignments" integer DEFAULT 0 NOT NULL,
	"health_revision" bigint DEFAULT 0 NOT NULL,
	"consecutive_failures" integer DEFAULT 0 NOT NULL,
	"circuit_open_until" timestamp(3) with time zone DEFAULT '-infinity' NOT NULL,
	"last_request_id" text,
	"last_request" jsonb,
	"last_response" json,
	"created_at" timestamp(3) with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp(3) with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "aip_connector_replicas_status" CHECK ("aip_connector_replicas"."status" IN ('ready', 'draining', 'offline')),
	CONSTRAINT "aip_connector_replicas_capacity" CHECK ("aip_connector_replicas"."capacity" > 0),
	CONSTRAINT "aip_connector_replicas_active" CHECK ("aip_connector_replicas"."active_assignments" >= 0 AND "aip_connector_replicas"."active_assignments" <= "aip_connector_replicas"."capacity"),
	CONSTRAINT "aip_connector_replicas_failures" CHECK ("aip_connector_replicas"."consecutive_failures" >= 0)
);
--> statement-breakpoint
CREATE TABLE "aip_connector_types" (
	"type_id" text PRIMARY KEY NOT NULL,
	"name" text NOT NULL,
	"owner" text NOT NULL,
	"enabled" boolean NOT NULL,
	"created_at" timestamp(3) with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp(3) with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "aip_connector_versions" (
	"version_id" text PRIMARY KEY NOT NULL,
	"type_id" text NOT NULL,
	"version" text NOT NULL,
	"status" text NOT NULL,
	"artifact_digest" text NOT NULL,
	"manifest_digest" text NOT NULL,
	"manifest" jsonb NOT NULL,
	"attestation" jsonb NOT NULL,
	"supply_chain_qualified" boolean NOT NULL,
	"admitted_at" timestamp(3) with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp(3) with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "aip_connector_versions_artifact_digest_key" UNIQUE("artifact_digest"),
	CONSTRAINT "aip_connector_versions_type_version_key" UNIQUE("type_id","version"),
	CONSTRAINT "aip_connector_versions_status" CHECK ("aip_connector_versions"."status" IN ('admitted', 'active', 'revoked'))
);
--> statement-breakpoint
CREATE TABLE "aip_route_assignments" (
	"action_id" text PRIMARY KEY NOT NULL,
	"capability_id" text NOT NULL,
	"tenant_id" text NOT NULL,
	"instance_id" text NOT NULL,
	"version_id" text NOT NULL,
	"manifest_digest" text NOT NULL,
	"replica_id" text NOT NULL,
	"endpoint" text NOT NULL,
	"peer_principal_id" text NOT NULL,
	"peer_principal_kind" text NOT NULL,
	"peer_did" text NOT NULL,
	"trust_domain" text NOT NULL,
	"transport_profile" text NOT NULL,
	"region" text NOT NULL,
	"zone" text NOT NULL,
	"capacity_class" text NOT NULL,
	"catalog_revision" bigint NOT NULL,
	"binding_policy_revision" bigint NOT NULL,
	"credential_revision_ref" text,
	"quota_policy_ref" text,
	"replica_health_revision" bigint NOT NULL,
	"fence_token" text NOT NULL,
	"admission" jsonb NOT NULL,
	"assigned_at" timestamp(3) with time zone NOT NULL,
	"reserved" boolean NOT NULL,
	"reservation_scopes" jsonb DEFAULT '[]'::jsonb NOT NULL,
	"last_settlement" text,
	"settled_at" timestamp(3) with time zone,
	"updated_at" timestamp(3) with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "aip_route_assignments_fence_token_key" UNIQUE("fence_token"),
	CONSTRAINT "aip_route_assignments_last_settlement" CHECK ("aip_route_assignments"."last_settlement" IS NULL OR "aip_route_assignments"."last_settlement" IN ('completed', 'outcome_unknown', 'cancelled', 'lease_expired'))
);
--> statement-breakpoint
CREATE TABLE "aip_version_capabilities" (
	"version_id" text NOT NULL,
	"capability_id" text NOT NULL,
	CONSTRAINT "aip_version_capabilities_pkey" PRIMARY KEY("version_id","capability_id")
);
--> statement-breakpoint
CREATE TABLE "aip_version_profiles" (
	"version_id" text NOT NULL,
	"profile_id" text NOT NULL,
	CONSTRAINT "aip_version_profiles_pkey" PRIMARY KEY("version_id","profile_id")
);
--> statement-breakpoint
ALTER TABLE "aip_capability_bindings" ADD CONSTRAINT "aip_capability_bindings_capability_id_aip_capability_definitions_capability_id_fk" FOREIGN KEY ("capability_id") REFERENCES "public"."aip_capability_definitions"("capability_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "aip_capability_bindings" ADD CONSTRAINT "aip_capability_bindings_instance_id_aip_connector_instances_instance_id_fk" FOREIGN KEY ("instance_id") REFERENCES "public"."aip_connector_instances"("instance_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "aip_capability_bindings" ADD CONSTRAINT "aip_capability_bindings_quota_policy_ref_aip_admission_policies_policy_ref_fk" FOREIGN KEY ("quota_policy_ref") REFERENCES "public"."aip_admission_policies"("policy_ref") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "aip_connector_instances" ADD CONSTRAINT "aip_connector_instances_type_id_aip_connector_types_type_id_fk" FOREIGN KEY ("type_id") REFERENCES "public"."aip_connector_types"("type_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "aip_connector_instances" ADD CONSTRAINT "aip_connector_instances_version_id_aip_connector_versions_version_id_fk" FOREIGN KEY ("version_id") REFERENCES "public"."aip_connector_versions"("version_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "aip_connector_replicas" ADD CONSTRAINT "aip_connector_replicas_instance_fk" FOREIGN KEY ("instance_id") REFERENCES "public"."aip_connector_instances"("instance_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "aip_connector_replicas" ADD CONSTRAINT "aip_connector_replicas_version_fk" FOREIGN KEY ("version_id") REFERENCES "public"."aip_connector_versions"("version_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "aip_connector_versions" ADD CONSTRAINT "aip_connector_versions_type_id_aip_connector_types_type_id_fk" FOREIGN KEY ("type_id") REFERENCES "public"."aip_connector_types"("type_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "aip_route_assignments" ADD CONSTRAINT "aip_route_assignments_instance_id_aip_connector_instances_instance_id_fk" FOREIGN KEY ("instance_id") REFERENCES "public"."aip_connector_instances"("instance_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "aip_route_assignments" ADD CONSTRAINT "aip_route_assignments_version_id_aip_connector_versions_version_id_fk" FOREIGN KEY ("version_id") REFERENCES "public"."aip_connector_versions"("version_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "aip_route_assignments" ADD CONSTRAINT "aip_route_assignments_replica_id_aip_connector_replicas_replica_id_fk" FOREIGN KEY ("replica_id") REFERENCES "public"."aip_connector_replicas"("replica_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "aip_version_capabilities" ADD CONSTRAINT "aip_version_capabilities_version_id_aip_connector_versions_version_id_fk" FOREIGN KEY ("version_id") REFERENCES "public"."aip_connector_versions"("version_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "aip_version_capabilities" ADD CONSTRAINT "aip_version_capabilities_capability_id_aip_capability_definitions_capability_id_fk" FOREIGN KEY ("capability_id") REFERENCES "public"."aip_capability_definitions"("capability_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "aip_version_profiles" ADD CONSTRAINT "aip_version_profiles_version_id_aip_connector_versions_version_id_fk" FOREIGN KEY ("version_id") REFERENCES "public"."aip_connector_versions"("version_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "aip_capability_bindings_instance_idx" ON "aip_capability_bindings" USING btree ("instance_id");--> statement-breakpoint
CREATE INDEX "aip_capability_bindings_capability_idx" ON "aip_capability_bindings" USING btree ("capability_id");--> statement-breakpoint
CREATE INDEX "aip_connector_instances_tenant_idx" ON "aip_connector_instances" USING btree ("tenant_id","instance_id");--> statement-breakpoint
CREATE INDEX "aip_connector_instances_version_idx" ON "aip_connector_instances" USING btree ("version_id");--> statement-breakpoint
CREATE INDEX "aip_connector_instances_type_idx" ON "aip_connector_instances" USING btree ("type_id");--> statement-breakpoint
CREATE INDEX "aip_connector_replicas_routing_idx" ON "aip_connector_replicas" USING btree ("instance_id","version_id");--> statement-breakpoint
CREATE INDEX "aip_connector_replicas_version_idx" ON "aip_connector_replicas" USING btree ("version_id");--> statement-breakpoint
CREATE INDEX "aip_connector_replicas_lease_idx" ON "aip_connector_replicas" USING btree ("lease_expires_at","replica_id") WHERE status <> 'offline';--> statement-breakpoint
CREATE INDEX "aip_route_assignments_reserved_idx" ON "aip_route_assignments" USING btree ("replica_id") WHERE reserved;--> statement-breakpoint
CREATE INDEX "aip_version_capabilities_capability_idx" ON "aip_version_capabilities" USING btree ("capability_id","version_id");--> statement-breakpoint
CREATE INDEX "aip_version_profiles_profile_idx" ON "aip_version_profiles" USING btree ("profile_id","version_id");