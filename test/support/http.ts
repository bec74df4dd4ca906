/**
 * The app over a test database, called in-process with app.request(): real auth (HS256 tokens),
 * real validation, real SQL functions under the runtime roles.
 */
import { createApp, type AppOptions } from "../../src/app.js";
import { MemoryCatalogCache } from "../../src/catalog/cache.js";
import type { CatalogServingOptions } from "../../src/catalog/serve.js";
import { createAuthenticator, type Scope } from "../../src/http/auth.js";
import type { Compressor } from "../../src/http/compression.js";
import { mintToken } from "../../src/http/tokens.js";
import type { Registry } from "../../src/registry/registry.js";
import { hostPrincipal } from "../../fixtures/records.js";

export const TEST_SECRET = "test-secret-test-secret-test-secret-0123456789";

export interface TestApi {
  app: ReturnType<typeof createApp>;
  /** Token for a tenant-scoped gateway (catalog:read routes:write routes:read by default). */
  tenantToken(tenantId: string, scopes?: Scope[]): Promise<string>;
  adminToken(): Promise<string>;
  /** Token of the connector host with this peer principal (it may drive only its own replicas). */
  hostToken(peerPrincipalId: string): Promise<string>;
  /** Token of the host that fixtures/records.ts provisions `replicaId` for. */
  hostTokenFor(replicaId: string): Promise<string>;
  token(claims: { scopes: Scope[]; tenantId?: string; subject?: string; peerPrincipalId?: string }): Promise<string>;
  /** app.request with a bearer token and JSON body. */
  call(method: string, path: string, options?: { token?: string; body?: unknown; headers?: Record<string, string> }): Promise<Response>;
}

/**
 * The app as `npm start` serves it: catalog answers go through a memory cache (confirmed on every
 * request: staleness 0) unless `catalog` says otherwise, so every HTTP test also exercises it;
 * on-demand route retention applies the default window.
 */
export function createTestApi(
  registry: Registry,
  options: {
    bodyLimitBytes?: number;
    adminBodyLimitBytes?: number;
    catalog?: CatalogServingOptions;
    routeRetention?: AppOptions["routeRetention"] | null;
    compressor?: Compressor;
    allowRegistrationWithoutEvidence?: boolean;
  } = {},
): TestApi {
  const { routeRetention, ...rest } = options;
  const app = createApp({
    registry,
    authenticator: createAuthenticator({ hs256Secret: TEST_SECRET }),
    ...rest,
    // The server's default window (ROUTE_RETENTION_DAYS=30); null: retention off.
    ...(routeRetention === null ? {} : { routeRetention: routeRetention ?? { days: 30, requireExport: false } }),
    catalog: options.catalog ?? { cache: new MemoryCatalogCache(16 * 1024 * 1024) },
  });
  const token = (claims: { scopes: Scope[]; tenantId?: string; subject?: string; peerPrincipalId?: string }) =>
    mintToken(TEST_SECRET, {
      subject: claims.subject ?? "test",
      scopes: claims.scopes,
      ...(claims.tenantId ? { tenantId: claims.tenantId } : {}),
      ...(claims.peerPrincipalId ? { peerPrincipalId: claims.peerPrincipalId } : {}),
    });
  return {
    app,
    token,
    tenantToken: (tenantId, scopes = ["catalog:read", "routes:write", "routes:read"]) => token({ scopes, tenantId }),
    adminToken: () => token({ scopes: ["registry:admin", "fleet:read"] }),
    hostToken: (peerPrincipalId) => token({ scopes: ["replicas:write"], peerPrincipalId, subject: peerPrincipalId }),
    hostTokenFor: (replicaId) => token({ scopes: ["replicas:write"], peerPrincipalId: hostPrincipal(replicaId), subject: hostPrincipal(replicaId) }),
    async call(method, path, { token: bearer, body, headers = {} } = {}) {
      return app.request(path, {
        method,
        headers: {
          ...(bearer ? { authorization: `Bearer ${bearer}` } : {}),
          ...(body !== undefined ? { "content-type": "application/json" } : {}),
          ...headers,
        },
        ...(body !== undefined ? { body: typeof body === "string" ? body : JSON.stringify(body) } : {}),
      });
    },
  };
}
