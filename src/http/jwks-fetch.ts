/**
 * One fetch of an identity provider's JSON Web Key Set, bounded in time and size, with every way
 * it can fail named. What went wrong (a status, a network error) is for the logs and metrics only:
 * src/http/jwks.ts never lets it reach a caller.
 */

export type FetchOutcome = "ok" | "http-error" | "timeout" | "network" | "too-large" | "malformed";

export const FETCH_OUTCOMES: readonly FetchOutcome[] = ["ok", "http-error", "timeout", "network", "too-large", "malformed"];

export type FetchResult = { outcome: "ok"; text: string; json: unknown } | { outcome: Exclude<FetchOutcome, "ok">; detail: string };

export interface FetchLimits {
  timeoutMs: number;
  maxBytes: number;
  /** The fetch implementation (tests); the runtime's by default. */
  fetch?: typeof fetch;
}

export async function fetchKeySet(url: string, limits: FetchLimits): Promise<FetchResult> {
  const signal = AbortSignal.timeout(limits.timeoutMs);
  const timedOut = () => ({ outcome: "timeout", detail: `no complete answer within ${limits.timeoutMs} ms` }) as const;
  let response: Response;
  try {
    // Redirects are not followed: the key set comes from the configured URL only.
    response = await (limits.fetch ?? fetch)(url, {
      method: "GET",
      redirect: "manual",
      signal,
      headers: { accept: "application/jwk-set+json, application/json" },
    });
  } catch (error) {
    if (signal.aborted) return timedOut();
    const cause = (error as { cause?: { code?: unknown; message?: unknown } }).cause;
    const code = typeof cause?.code === "string" ? cause.code : undefined;
    return { outcome: "network", detail: code ?? (error as Error).message ?? String(error) };
  }
  if (response.status !== 200) {
    await response.body?.cancel().catch(() => {});
    return { outcome: "http-error", detail: `HTTP ${response.status}` };
  }
  const declared = Number(response.headers.get("content-length"));
  if (Number.isFinite(declared) && declared > limits.maxBytes) {
    await response.body?.cancel().catch(() => {});
    return { outcome: "too-large", detail: `content-length ${declared} exceeds ${limits.maxBytes} bytes` };
  }
  let bytes: Uint8Array;
  try {
    const body = await readAtMost(response, limits.maxBytes);
    if (!body) return { outcome: "too-large", detail: `the body exceeds ${limits.maxBytes} bytes` };
    bytes = body;
  } catch (error) {
    if (signal.aborted) return timedOut();
    return { outcome: "network", detail: (error as Error).message ?? String(error) };
  }
  let text: string;
  let json: unknown;
  try {
    text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(bytes);
    json = JSON.parse(text);
  } catch {
    return { outcome: "malformed", detail: "the body is not UTF-8 JSON" };
  }
  return { outcome: "ok", text, json };
}

/** The body, or undefined as soon as it grows past `maxBytes` (the rest is never read). */
async function readAtMost(response: Response, maxBytes: number): Promise<Uint8Array | undefined> {
  if (!response.body) return new Uint8Array();
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let length = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    length += value.byteLength;
    if (length > maxBytes) {
      await reader.cancel().catch(() => {});
      return undefined;
    }
    chunks.push(value);
  }
  const body = new Uint8Array(length);
  let offset = 0;
  for (const chunk of chunks) {
    body.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return body;
}
