-- Stale: migration 0004 dropped the instance and version keys (the replica's remains), so this no
-- longer applies as written (its first two constraints do not exist).
-- Candidate: route assignments keep no foreign keys to instances, versions and replicas.
--
-- A route copies its whole destination (it is immutable evidence), and the registry never
-- deletes instances, versions or replicas, so the keys protect nothing the functions do not
-- already guarantee. What they cost, on every new route: three referential-integrity queries that
-- take FOR KEY SHARE row locks on the instance, version and replica rows (concurrent routes to one
-- instance or version share those locks through MultiXacts) and more relation locks beyond the
-- 16 fast-path slots per transaction (LWLock:LockManager contention under concurrency).
ALTER TABLE aip_route_assignments
  DROP CONSTRAINT aip_route_assignments_instance_id_aip_connector_instances_insta,
  DROP CONSTRAINT aip_route_assignments_version_id_aip_connector_versions_version,
  DROP CONSTRAINT aip_route_assignments_replica_id_aip_connector_replicas_replica;
