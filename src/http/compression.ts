/**
 * Compressed answers, where the server compresses them itself (the Node server: src/entry/node.ts gives
 * the app a Compressor). A Worker is given none: Cloudflare's edge compresses its answers for the
 * client (and weakens their ETags when it does), so the Worker spends no CPU on it.
 *
 * Three ways an answer is compressed, by how often its body changes:
 * - a catalog answer, compressed once per cached answer and kept beside it (src/catalog/serve.ts):
 *   a hit costs no compression at all;
 * - a body fixed for the life of the process (the OpenAPI document): `FixedBody`, compressed once
 *   per coding on first use;
 * - any other answer that can be large (administrative reads and publications, the registry reader,
 *   fleet regions, /metrics): `compressAnswers`, per answer, from 1 KiB up. The data plane's hot
 *   answers (routes, settlement, replica lifecycle, fleet status) are always small and never go
 *   through it, so they pay nothing for it.
 *
 * Brotli (quality 5) is offered first, then gzip (level 6): on the catalog pages and the OpenAPI
 * document brotli 5 costs what gzip 6 costs and is smaller (figures: docs/decisions.md).
 */
import type { Context, MiddlewareHandler } from "hono";

export type ContentCoding = "br" | "gzip";

export interface Compressor {
  /** The codings offered, most preferred first. */
  readonly codings: readonly ContentCoding[];
  compress(body: string | Uint8Array, coding: ContentCoding): Promise<Uint8Array>;
}

/** Answers below this size are sent as they are: compressing them saves less than it costs. */
const COMPRESSION_MIN_BYTES = 1024;

const ALIASES: Record<string, string> = { "x-gzip": "gzip" };

/**
 * The coding to answer with for an Accept-Encoding header (RFC 9110, section 12.5.3): the offered
 * coding with the highest q-value above 0 (the server's order among equals), unless the client
 * prefers the identity coding; null for identity.
 */
export function negotiateCoding(acceptEncoding: string | undefined, offered: readonly ContentCoding[]): ContentCoding | null {
  if (!acceptEncoding || offered.length === 0) return null;
  const weights = new Map<string, number>();
  for (const member of acceptEncoding.split(",")) {
    const [token = "", ...parameters] = member.split(";").map((part) => part.trim());
    if (!token) continue;
    let q = 1;
    for (const parameter of parameters) {
      const match = /^q\s*=\s*([0-9.]+)$/i.exec(parameter);
      if (match) q = Math.min(1, Math.max(0, Number(match[1]) || 0));
    }
    const name = token.toLowerCase();
    weights.set(ALIASES[name] ?? name, q);
  }
  const star = weights.get("*");
  const weight = (coding: string) => weights.get(coding) ?? star ?? 0;
  let best: ContentCoding | null = null;
  for (const coding of offered) if (weight(coding) > 0 && (best === null || weight(coding) > weight(best))) best = coding;
  if (best === null) return null;
  // A client that weighs identity (by name, or through `*`) above every offered coding gets it.
  const identity = weights.get("identity") ?? star ?? 0;
  return identity > weight(best) ? null : best;
}

/** Adds `accept-encoding` to the response's Vary header (once). */
export function varyOnEncoding(headers: Headers): void {
  const vary = headers.get("vary");
  if (!vary) headers.set("vary", "accept-encoding");
  else if (!/(^|,)\s*(accept-encoding|\*)\s*(,|$)/i.test(vary)) headers.set("vary", `${vary}, accept-encoding`);
}

/** A body that never changes for the life of the process, each coding of it computed once. */
export class FixedBody {
  private readonly coded = new Map<ContentCoding, Promise<Uint8Array>>();

  constructor(
    readonly text: string,
    readonly contentType: string,
  ) {}

  /** The answer for this request: compressed when the client accepts it, with Vary either way. */
  async respond(c: Context, compressor: Compressor | undefined): Promise<Response> {
    const headers = new Headers({ "content-type": this.contentType });
    if (!compressor) return new Response(this.text, { status: 200, headers });
    varyOnEncoding(headers);
    const coding = negotiateCoding(c.req.header("accept-encoding"), compressor.codings);
    if (!coding) return new Response(this.text, { status: 200, headers });
    let body = this.coded.get(coding);
    if (!body) {
      body = compressor.compress(this.text, coding);
      this.coded.set(coding, body);
      // A failure is not kept: the next request tries again.
      body.catch(() => this.coded.delete(coding));
    }
    headers.set("content-encoding", coding);
    return new Response(await body, { status: 200, headers });
  }
}

const COMPRESSIBLE = /^(application\/([a-z0-9.+-]*\+)?json|text\/[a-z0-9.+-]+)\s*(;|$)/i;

/** Compresses a large JSON or text answer for a client that accepts it (see the module comment for where it is used). */
export function compressAnswers(compressor: Compressor, minBytes = COMPRESSION_MIN_BYTES): MiddlewareHandler {
  return async (c, next) => {
    await next();
    const res = c.res;
    if (!res.body || res.headers.has("content-encoding") || !COMPRESSIBLE.test(res.headers.get("content-type") ?? "")) return;
    varyOnEncoding(res.headers);
    const coding = negotiateCoding(c.req.header("accept-encoding"), compressor.codings);
    if (!coding) return;
    const body = new Uint8Array(await res.arrayBuffer());
    const compressed = body.byteLength >= minBytes ? await compressor.compress(body, coding) : undefined;
    // The body was read: the answer is rebuilt either way.
    c.res = new Response(compressed ?? body, res);
    if (!compressed) return;
    c.res.headers.delete("content-length");
    c.res.headers.set("content-encoding", coding);
  };
}
