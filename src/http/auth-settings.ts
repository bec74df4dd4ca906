/**
 * The rules a token-verifier configuration must meet, the same for the Node server (refused at
 * start) and the Worker (every request answered with a configuration problem): one function,
 * applied to the shared ConfigSchema (src/config.ts) by both, and by createAuthenticator.
 */
import { z } from "zod";

/**
 * Every algorithm AUTH_JWKS_URL may accept, and the default: RSA PKCS#1 v1.5, RSA-PSS, ECDSA on
 * P-256, P-384 and P-521, and EdDSA on Ed25519 under both its names (`EdDSA`, RFC 8037, and
 * `Ed25519`, RFC 9864). Never HMAC (a key set's public material must not become a shared secret)
 * and never `none`.
 */
export const JWKS_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA", "Ed25519"] as const;

/** AUTH_ALGORITHMS: a comma-separated subset of JWKS_ALGORITHMS; unset means all of them. */
export const AlgorithmList = z
  .string()
  .optional()
  .transform((value, ctx) => {
    if (value === undefined || value.trim() === "") return undefined;
    const names = value
      .split(",")
      .map((name) => name.trim())
      .filter(Boolean);
    const unknown = names.filter((name) => !(JWKS_ALGORITHMS as readonly string[]).includes(name));
    if (unknown.length > 0 || names.length === 0) {
      ctx.addIssue({ code: "custom", message: `${unknown.join(", ")} not accepted: name some of ${JWKS_ALGORITHMS.join(", ")}` });
      return z.NEVER;
    }
    return [...new Set(names)];
  });

/** The settings the rules read, as the configuration names them. */
export interface VerifierSettings {
  AUTH_HS256_SECRET?: string | undefined;
  AUTH_JWKS_URL?: string | undefined;
  AUTH_ISSUER?: string | undefined;
  AUTH_AUDIENCE?: string | undefined;
  AUTH_ALLOW_ANY_ISSUER?: boolean | undefined;
  AUTH_ALGORITHMS?: readonly string[] | undefined;
}

/** Each refusal names the setting and says what to do. */
export function verifierSettingsProblems(config: VerifierSettings): { setting: keyof VerifierSettings; message: string }[] {
  const problems: { setting: keyof VerifierSettings; message: string }[] = [];
  if (!config.AUTH_JWKS_URL) {
    if (config.AUTH_ALGORITHMS) problems.push({ setting: "AUTH_ALGORITHMS", message: "applies to AUTH_JWKS_URL only: a shared secret accepts HS256 only" });
    return problems;
  }
  const urlProblem = jwksUrlProblem(config.AUTH_JWKS_URL);
  if (urlProblem) problems.push({ setting: "AUTH_JWKS_URL", message: urlProblem });
  if (!config.AUTH_AUDIENCE) {
    problems.push({
      setting: "AUTH_AUDIENCE",
      message: "is required with AUTH_JWKS_URL: without it a token the identity provider issued for any other service would be accepted",
    });
  }
  if (!config.AUTH_ISSUER && !config.AUTH_ALLOW_ANY_ISSUER) {
    problems.push({
      setting: "AUTH_ISSUER",
      message: "is required with AUTH_JWKS_URL (the `iss` every token must carry); AUTH_ALLOW_ANY_ISSUER=true accepts any issuer the key set verifies",
    });
  }
  if (config.AUTH_ISSUER && config.AUTH_ALLOW_ANY_ISSUER) {
    problems.push({ setting: "AUTH_ALLOW_ANY_ISSUER", message: "contradicts AUTH_ISSUER: set one of them" });
  }
  return problems;
}

/** Why the key-set URL cannot be used: plain HTTP only to this machine, where nobody can change the keys in transit. */
function jwksUrlProblem(value: string): string | undefined {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return "is not a URL";
  }
  if (url.protocol === "https:") return undefined;
  if (url.protocol === "http:" && isLoopbackHost(url.hostname)) return undefined;
  if (url.protocol === "http:")
    return "must be https: a key set fetched over plain HTTP can be replaced in transit (http is accepted for a loopback host only)";
  return "must be an https URL";
}

function isLoopbackHost(hostname: string): boolean {
  const host = hostname.toLowerCase();
  return host === "localhost" || host === "[::1]" || /^127(\.\d{1,3}){3}$/.test(host);
}

/** The rules as a zod refinement of any schema holding the settings (src/config.ts, src/entry/worker.ts). */
export function refineVerifierSettings(config: VerifierSettings, ctx: z.RefinementCtx): void {
  for (const { setting, message } of verifierSettingsProblems(config)) ctx.addIssue({ code: "custom", path: [setting], message });
}
