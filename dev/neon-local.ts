/**
 * Client-side settings that point `@neondatabase/serverless` at the local Neon proxy
 * (dev/neon-proxy.ts). Runtime-neutral on purpose: the Worker imports it (for `wrangler dev`
 * and the workerd tests, via the NEON_LOCAL_PROXY binding), so it must not import Node modules.
 *
 * - `fetchEndpoint = 'http://host:port/sql'`: the driver's default is always https on an `api.`
 *   host derived from the connection string, so a string is the only way to reach plain http.
 * - `wsProxy = 'host:port/v1'`: the driver opens `ws(s)://host:port/v1?address=<pgHost>:<pgPort>`.
 * - `useSecureWebSocket = false`: ws:// instead of wss://.
 * - `pipelineConnect = false`: the default `'password'` sends the password before the server
 *   asks for it (Neon's proxy expects that); a plain PostgreSQL with scram/trust rejects it.
 * - `pipelineTLS = false`, `forceDisablePgSSL = true`: no TLS inside the tunnel (already the
 *   defaults; set so nothing else flips them).
 */
export interface NeonLocalConfig {
  fetchEndpoint: unknown;
  wsProxy: unknown;
  useSecureWebSocket: boolean;
  pipelineConnect: "password" | false;
  pipelineTLS: boolean;
  forceDisablePgSSL: boolean;
}

export function pointNeonAtLocalProxy(neonConfig: NeonLocalConfig, proxy: string | { url: string }): void {
  const base = new URL(typeof proxy === "string" ? proxy : proxy.url);
  neonConfig.fetchEndpoint = `http://${base.host}/sql`;
  neonConfig.wsProxy = `${base.host}/v1`;
  neonConfig.useSecureWebSocket = false;
  neonConfig.pipelineConnect = false;
  neonConfig.pipelineTLS = false;
  neonConfig.forceDisablePgSSL = true;
}
