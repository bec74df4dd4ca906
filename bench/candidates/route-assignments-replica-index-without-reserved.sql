-- Candidate (experiment): index route assignments by replica without the `WHERE reserved`
-- predicate, so that settling (reserved true -> false) and reacquiring touch no indexed column and
-- can be HOT updates. The price: lease expiry and the invariant checker then read every route a
-- replica ever had (routes are never deleted), not only its reserved ones.
DROP INDEX aip_route_assignments_reserved_idx;
CREATE INDEX aip_route_assignments_replica_idx ON aip_route_assignments (replica_id);
