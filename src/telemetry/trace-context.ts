/**
 * W3C Trace Context (https://www.w3.org/TR/trace-context/): reading `traceparent` and
 * `tracestate`, writing `traceparent`, and the random identifiers of a trace this server starts.
 * Runtime-neutral (Web Crypto only) and cheap: a request that brings no context costs two
 * getRandomValues calls.
 *
 * What is read is validated to the letter, because it travels on: the trace id and span id reach
 * the logs and, inside an SQL comment, PostgreSQL (src/observability/sql-comment.ts). Only
 * lowercase hex leaves this module, so nothing a caller sends can end that comment.
 */

export interface TraceParent {
  /** 32 lowercase hex digits, not all zero. */
  traceId: string;
  /** The caller's span: 16 lowercase hex digits, not all zero. */
  spanId: string;
  /** The trace flags byte; bit 0 is `sampled`. */
  flags: number;
}

const HEX = /^[0-9a-f]+$/;
const ZEROS_32 = "0".repeat(32);
const ZEROS_16 = "0".repeat(16);

/**
 * A `traceparent` header, or undefined when it is absent or invalid (the request then starts a
 * trace of its own, as the specification says). Version 00 must be exactly 55 characters; a
 * later version is read for the fields version 00 defines, as long as what follows them starts
 * with `-`; version ff is invalid.
 */
export function parseTraceparent(header: string | null | undefined): TraceParent | undefined {
  if (!header) return undefined;
  const value = header.trim();
  if (value.length < 55) return undefined;
  const version = value.slice(0, 2);
  if (!HEX.test(version) || version === "ff") return undefined;
  if (version === "00" ? value.length !== 55 : value.length > 55 && value[55] !== "-") return undefined;
  if (value[2] !== "-" || value[35] !== "-" || value[52] !== "-") return undefined;
  const traceId = value.slice(3, 35);
  const spanId = value.slice(36, 52);
  const flags = value.slice(53, 55);
  if (!HEX.test(traceId) || traceId === ZEROS_32) return undefined;
  if (!HEX.test(spanId) || spanId === ZEROS_16) return undefined;
  if (!HEX.test(flags)) return undefined;
  return { traceId, spanId, flags: Number.parseInt(flags, 16) };
}

/** A tracestate list member: `key=value`, the key simple or multi-tenant (`tenant@system`). */
const MEMBER =
  /^(?:[a-z][a-z0-9_\-*/]{0,255}|[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13})=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]$/;
const MAX_TRACESTATE_MEMBERS = 32;
const MAX_TRACESTATE_LENGTH = 512;

/**
 * A `tracestate` header to propagate (in exported spans), or undefined when absent or invalid:
 * at most 32 members, 512 characters, each a valid member (the specification lets a vendor drop
 * an invalid tracestate whole). Its values are opaque and never reach SQL or the logs.
 */
export function parseTracestate(header: string | null | undefined): string | undefined {
  if (!header || header.length > MAX_TRACESTATE_LENGTH) return undefined;
  const members = header
    .split(",")
    .map((member) => member.trim())
    .filter((member) => member !== "");
  if (members.length === 0 || members.length > MAX_TRACESTATE_MEMBERS) return undefined;
  return members.every((member) => MEMBER.test(member)) ? members.join(",") : undefined;
}

export function formatTraceparent(traceId: string, spanId: string, flags: number): string {
  return `00-${traceId}-${spanId}-${flags < 16 ? "0" : ""}${flags.toString(16)}`;
}

const BYTE_HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, "0"));

/** Random bytes drawn 4 KiB at a time: a request takes 24 of them (a span id, maybe a trace id). */
const pool = new Uint8Array(4096);
let used = pool.length;

function randomHex(bytes: number): string {
  if (used + bytes > pool.length) {
    crypto.getRandomValues(pool);
    used = 0;
  }
  let hex = "";
  for (let i = used; i < used + bytes; i++) hex += BYTE_HEX[pool[i] as number];
  used += bytes;
  return hex;
}

/** A new trace id (16 random bytes; all zero is invalid and has probability 2^-128: retried anyway). */
export function randomTraceId(): string {
  for (;;) {
    const id = randomHex(16);
    if (id !== ZEROS_32) return id;
  }
}

export function randomSpanId(): string {
  for (;;) {
    const id = randomHex(8);
    if (id !== ZEROS_16) return id;
  }
}
