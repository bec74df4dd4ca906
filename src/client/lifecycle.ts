/**
 * A replica lifecycle request per operation, as the server requires it (functions/70_replicas.sql,
 * aip_replica_transition): one schema (LifecycleRequest) reads them all on the server, but what
 * each operation needs differs, and a request that misses it is a 400 at run time. Here it is a
 * type error instead: a heartbeat without `previous_sequence`, a register without its evidence, or
 * evidence on anything but register. test/unit/client-types.test.ts checks that every type here
 * is a request the server's schema accepts.
 */

interface LifecycleBase {
  /** Idempotency key: replaying the replica's last request answers the same; reusing it with another payload is a 409. */
  request_id: string;
}

/**
 * What a registering host runs: each must equal the replica's admitted version and instance, or
 * the registry refuses the register with 422 `admission` naming the field.
 */
export interface RegistrationEvidence {
  /** The digest of the artifact the host runs: the admitted version's `attestation.artifact_digest`. */
  artifact_digest: string;
  /** The digest of the manifest the host loaded: the admitted version's. */
  manifest_digest: string;
  /** The `config_revision` of the instance configuration the host loaded: the instance's current one. */
  config_revision: number;
  /** How many capabilities the host serves: the admitted manifest's count. */
  capability_count: number;
}

/** Registration evidence is stated by register only. */
type NoEvidence = { [K in keyof RegistrationEvidence]?: never };

/** Takes the replica's lease (a first registration, or after it expired or went offline). */
export type RegisterRequest = LifecycleBase &
  RegistrationEvidence & {
    /** Only to re-register a replica whose lease is still live: the sequence of its last answer. */
    previous_sequence?: number;
    /** Lease length in milliseconds, counted from the database clock (server default when absent). */
    lease_ttl_ms?: number;
  };

/**
 * A register without evidence: accepted only by a server run with
 * ALLOW_REGISTRATION_WITHOUT_EVIDENCE, while moving hosts that predate the check onto it. Either
 * all of the evidence or none of it.
 */
export type RegisterWithoutEvidenceRequest = LifecycleBase &
  NoEvidence & {
    previous_sequence?: number;
    lease_ttl_ms?: number;
  };

/** Renews the lease; `previous_sequence` fences it against a transition the host did not see. */
export type HeartbeatRequest = LifecycleBase &
  NoEvidence & {
    /** The sequence of the host's last answer. */
    previous_sequence: number;
    lease_ttl_ms?: number;
  };

/** Stops new routes to the replica while its routes finish; renews the lease like a heartbeat. */
export type DrainRequest = HeartbeatRequest;

/** Leaves: the lease ends and the replica's routes are released. */
export type OfflineRequest = LifecycleBase &
  NoEvidence & {
    /** The sequence of the host's last answer. */
    previous_sequence: number;
    /** Offline ends the lease: a length would be ignored. */
    lease_ttl_ms?: never;
  };

/** The request each lifecycle operation takes. */
export interface LifecycleRequests {
  register: RegisterRequest | RegisterWithoutEvidenceRequest;
  heartbeat: HeartbeatRequest;
  drain: DrainRequest;
  offline: OfflineRequest;
}
