/**
 * The registry's typed HTTP client (published as @aip-registry/client; the server package's
 * `aip-registry/client` is the same module). It imports nothing outside this directory and
 * depends on nothing but `fetch` (test/unit/client-types.test.ts, test/cli/client-package.test.ts).
 */
export {
  createRegistryClient,
  DEFAULT_TIMEOUT_MS,
  RegistryClient,
  type CallOptions,
  type RegistryClientOptions,
  type ResolvedRoute,
  type RouteRead,
} from "./client.js";
export { RegistryProblem, RegistryTimeoutError } from "./errors.js";
export { EtagCache, etagRevision, type Conditional } from "./etags.js";
export type {
  DrainRequest,
  HeartbeatRequest,
  LifecycleRequests,
  OfflineRequest,
  RegisterRequest,
  RegisterWithoutEvidenceRequest,
  RegistrationEvidence,
} from "./lifecycle.js";
export type * from "./wire.js";
