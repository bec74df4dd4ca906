/**
 * The shape of the benchmark fleet, as pure functions of a scale: the seed writes exactly these
 * rows, and the workloads pick (tenant, capability) pairs from the same formulas without reading
 * the database.
 *
 * The reference's scale qualification: 1,000 connector types, 1,000 capabilities (each version
 * implements 100), 10,000 instances with one replica each, 100 tenants, 100,000 bindings. Here:
 * - type t has one active version implementing capability block (t mod 10): 100 capabilities;
 * - every tenant owns 100 instances (j = 0..99), instance j of type (tenant*100 + j) mod types,
 *   so it serves block (j mod 10); each instance binds 10 capabilities of its block, and the
 *   instances j and j+50 bind the same 10: every visible (tenant, capability) has two candidate
 *   replicas in different regions, and a tenant sees 500 capabilities (10 catalog pages of 50);
 * - scaling the fleet scales the tenants (replicas / 100): the work per request stays the same,
 *   only table sizes grow, which is what a scale curve must isolate.
 */
export const REGIONS = ["eu-west", "us-east", "ap-south"] as const;
export const INSTANCES_PER_TENANT = 100;
export const BINDINGS_PER_INSTANCE = 10;
export const CAPABILITIES = 1000;
export const CAPABILITIES_PER_VERSION = 100;
const BLOCKS = CAPABILITIES / CAPABILITIES_PER_VERSION;
const GROUPS_PER_TENANT_BLOCK = 5;

export interface Scale {
  /** Instances, each with one replica; a multiple of 100. */
  replicas: number;
  /** Connector types (one active version each); a multiple of 10, at most 1,000. */
  types: number;
}

export interface Layout extends Scale {
  tenants: number;
  bindings: number;
  /** Capabilities one tenant sees (and can route). */
  visiblePerTenant: number;
}

export function layout(scale: Scale): Layout {
  if (scale.replicas % INSTANCES_PER_TENANT !== 0 || scale.replicas <= 0) throw new Error("replicas must be a positive multiple of 100");
  if (scale.types % BLOCKS !== 0 || scale.types <= 0 || scale.types > 1000) throw new Error("types must be a multiple of 10 in [10, 1000]");
  return {
    ...scale,
    tenants: scale.replicas / INSTANCES_PER_TENANT,
    bindings: scale.replicas * BINDINGS_PER_INSTANCE,
    visiblePerTenant: BLOCKS * GROUPS_PER_TENANT_BLOCK * BINDINGS_PER_INSTANCE,
  };
}

const pad = (n: number, width: number) => String(n).padStart(width, "0");
export const tenantId = (n: number) => `tenant-${pad(n, 4)}`;
export const capabilityId = (c: number) => `cap:bench.c${pad(c, 4)}`;
export const homeRegion = (tenant: number) => REGIONS[tenant % REGIONS.length] as string;

/** The k-th (0..499) capability tenant n can route: block b, group s, member m. */
export function visibleCapability(tenant: number, k: number): number {
  const block = Math.floor(k / 50);
  const group = Math.floor((k % 50) / 10);
  const member = k % 10;
  return block * CAPABILITIES_PER_VERSION + ((group + tenant) % 10) * 10 + member;
}

/** A uniformly random routable (tenant, capability) pair and the tenant's preferred region. */
export function randomRoute(l: Layout, random = Math.random): { tenant: string; capability: string; region: string } {
  const n = Math.floor(random() * l.tenants);
  const k = Math.floor(random() * l.visiblePerTenant);
  return { tenant: tenantId(n), capability: capabilityId(visibleCapability(n, k)), region: homeRegion(n) };
}
