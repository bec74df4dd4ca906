/**
 * `token`: mints an HS256 development token with the server's signing secret (AUTH_HS256_SECRET
 * or the secret `npm start` generated under the data directory). Production deployments get
 * tokens from their identity provider (AUTH_JWKS_URL) instead.
 */
import { SCOPES } from "../http/auth.js";
import { mintToken } from "../http/tokens.js";
import { EXIT, UsageError, registryUrl, signingSecret, str, type CommandContext } from "./context.js";

const UNITS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86_400 };
const MAX_TTL_SECONDS = 365 * 86_400;

export function parseTtl(text: string): number {
  const match = /^(\d+)\s*([smhd]?)$/.exec(text.trim());
  const seconds = match ? Number(match[1]) * (UNITS[match[2] || "s"] as number) : NaN;
  if (!Number.isSafeInteger(seconds) || seconds < 1 || seconds > MAX_TTL_SECONDS) {
    throw new UsageError(`--ttl must be a duration like 900, 15m, 12h or 30d (at most 365d), not "${text}"`);
  }
  return seconds;
}

export async function token(ctx: CommandContext): Promise<number> {
  const { values } = ctx;
  const requested = ((values.scope as string[] | undefined) ?? []).flatMap((s) => s.split(/[\s,]+/)).filter(Boolean);
  if (requested.length === 0) throw new UsageError(`token needs at least one --scope (${SCOPES.join(", ")})`);
  const unknown = requested.filter((s) => !(SCOPES as readonly string[]).includes(s));
  if (unknown.length) throw new UsageError(`unknown scope ${unknown.join(", ")}: scopes are ${SCOPES.join(", ")}`);
  const scopes = [...new Set(requested)];
  const tenant = str(values, "tenant");
  if (tenant !== undefined && tenant.trim() === "") throw new UsageError("--tenant must not be empty");
  const peer = str(values, "peer-principal");
  if (peer !== undefined && peer.trim() === "") throw new UsageError("--peer-principal must not be empty");
  const ttlSeconds = parseTtl(str(values, "ttl") ?? "1h");
  const subject = str(values, "subject") ?? "aip-registry-cli";

  const secret = await signingSecret(ctx);
  if (!secret) {
    throw new UsageError(
      "no signing secret: set AUTH_HS256_SECRET, or start the development server once (npm start) so that it generates <data-dir>/auth-secret",
    );
  }
  const jwt = await mintToken(secret, {
    subject,
    scopes,
    ttlSeconds,
    ...(tenant ? { tenantId: tenant } : {}),
    ...(peer ? { peerPrincipalId: peer } : {}),
    ...(ctx.env.AUTH_ISSUER ? { issuer: ctx.env.AUTH_ISSUER } : {}),
    ...(ctx.env.AUTH_AUDIENCE ? { audience: ctx.env.AUTH_AUDIENCE } : {}),
  });
  if (values.json === true) {
    const expiresAt = new Date(Date.now() + ttlSeconds * 1000).toISOString();
    ctx.io.out(JSON.stringify({ token: jwt, subject, tenant_id: tenant ?? null, peer_principal_id: peer ?? null, scopes, expires_at: expiresAt }));
  } else if (values.dashboard === true) {
    // The fragment never leaves the browser; the page moves it to sessionStorage and clears it.
    ctx.io.out(`${registryUrl(ctx)}/dashboard#token=${jwt}`);
  } else {
    ctx.io.out(jwt);
  }
  return EXIT.ok;
}
