/**
 * The shape of the benchmark fleet, as pure functions of a scale: the seed writes exactly these
 * rows, and the workloads pick (tenant, capability) pairs from the same formulas without reading
 * the database.
 *
 * The reference's scale qualification: 1,000 connector types, 1,000 capabilities (each version
 * implements 100), 10,000 instances with one replica each, 100 tenants, 100,000 bindings. Here:
 * - type t has one active version implementing capability block (t mod 10): 100 capabilities;
 * - every tenant owns k instances (k = 100 for the reference layout), instance j of type
 *   (tenant*k + j) mod types, so it serves block (j mod 10); each instance binds 10 capabilities
 *   of its block, in group ((j div 10) mod G) with G = min(5, k/10) groups per block, so the
 *   instances j and j+10G bind the same 10. With k = 100: every visible (tenant, capability) has
 *   two candidate replicas in different regions, and a tenant sees 500 capabilities (10 catalog
 *   pages of 50). With k = 10 (the scale curve): one candidate, 100 capabilities per tenant.
 * - A bigger fleet has more tenants (replicas / k): the work per request stays the same and only
 *   table sizes and the working set grow, which is what a scale curve must isolate.
 */
export const REGIONS = ["eu-west", "us-east", "ap-south"] as const;
export const BINDINGS_PER_INSTANCE = 10;
export const CAPABILITIES = 1000;
export const CAPABILITIES_PER_VERSION = 100;
const BLOCKS = CAPABILITIES / CAPABILITIES_PER_VERSION;

export interface Scale {
  /** Instances, each with one replica; a multiple of instancesPerTenant. */
  replicas: number;
  /** Connector types (one active version each); a multiple of 10, at most 1,000. */
  types: number;
  /** 10 or 100 (the default, the reference's 100 tenants at 10,000 replicas). */
  instancesPerTenant?: number;
}

export interface Layout extends Required<Scale> {
  tenants: number;
  bindings: number;
  /** Binding groups per capability block and tenant (G above). */
  groups: number;
  /** Capabilities one tenant sees (and can route). */
  visiblePerTenant: number;
}

export function layout(scale: Scale): Layout {
  const k = scale.instancesPerTenant ?? 100;
  if (k !== 10 && k !== 100) throw new Error("instancesPerTenant must be 10 or 100");
  if (scale.replicas % k !== 0 || scale.replicas <= 0) throw new Error(`replicas must be a positive multiple of ${k}`);
  if (scale.types % BLOCKS !== 0 || scale.types <= 0 || scale.types > 1000) throw new Error("types must be a multiple of 10 in [10, 1000]");
  const groups = Math.min(5, k / 10);
  return {
    ...scale,
    instancesPerTenant: k,
    tenants: scale.replicas / k,
    bindings: scale.replicas * BINDINGS_PER_INSTANCE,
    groups,
    visiblePerTenant: BLOCKS * groups * BINDINGS_PER_INSTANCE,
  };
}

const pad = (n: number, width: number) => String(n).padStart(width, "0");
export const tenantId = (n: number) => `tenant-${pad(n, 5)}`;
export const capabilityId = (c: number) => `cap:bench.c${pad(c, 4)}`;
export const homeRegion = (tenant: number) => REGIONS[tenant % REGIONS.length] as string;

/** The k-th capability tenant n can route: block b, group s, member m (see above). */
export function visibleCapability(l: Layout, tenant: number, k: number): number {
  const perBlock = l.groups * BINDINGS_PER_INSTANCE;
  const block = Math.floor(k / perBlock);
  const group = Math.floor((k % perBlock) / BINDINGS_PER_INSTANCE);
  const member = k % BINDINGS_PER_INSTANCE;
  return block * CAPABILITIES_PER_VERSION + ((group + tenant) % 10) * 10 + member;
}

/** A uniformly random routable (tenant, capability) pair and the tenant's preferred region. */
export function randomRoute(l: Layout, random = Math.random): { tenant: string; capability: string; region: string } {
  const n = Math.floor(random() * l.tenants);
  const k = Math.floor(random() * l.visiblePerTenant);
  return { tenant: tenantId(n), capability: capabilityId(visibleCapability(l, n, k)), region: homeRegion(n) };
}
