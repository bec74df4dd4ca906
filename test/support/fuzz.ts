/**
 * Hostile-input fuzzing of the HTTP API: fast-check arbitraries for the strings, numbers, JSON
 * documents, paths, query strings and headers an attacker can send, the list of routes the app
 * serves (from `app.routes`, so a new route is fuzzed without anyone remembering to add it), and
 * the assertion every answer must pass: a 2xx (or 304), or a problem+json 4xx with a documented
 * code, the request id and nothing internal in it. Never a 500, never `storage` on a healthy
 * database (an unexpected SQLSTATE is classified as storage: that would be a bug hiding behind a
 * 503).
 *
 * Runs are reproducible: every property uses FUZZ_SEED (printed by fast-check on failure; set it
 * in the environment to replay a failure).
 */
import fc from "fast-check";
import { expect } from "vitest";
import { PROBLEM_STATUS, type ProblemCode } from "../../src/registry/errors.js";

// Runs ------------------------------------------------------------------------------------------
export const FUZZ_SEED = process.env.FUZZ_SEED ? Number(process.env.FUZZ_SEED) : Date.now() % 2_147_483_647;

export function fuzzParameters(numRuns: number): fc.Parameters<unknown> {
  return { numRuns, seed: FUZZ_SEED, verbose: 1 };
}

// JSON documents with values JSON.stringify cannot write ---------------------------------------
/** Literal JSON text: numbers like 1e309 or -0, and very large or deeply nested documents. */
export class Raw {
  constructor(readonly text: string) {}
}
/** An object as an entry list: duplicate keys and own `__proto__` members survive. */
class Obj {
  constructor(readonly entries: [string, Json][]) {}
}
export type Json = null | boolean | number | string | Raw | Obj | Json[];

export function fromPlain(value: unknown): Json {
  if (value === null || typeof value === "boolean" || typeof value === "number" || typeof value === "string") return value;
  if (Array.isArray(value)) return value.map(fromPlain);
  if (typeof value === "object") return new Obj(Object.entries(value as Record<string, unknown>).map(([k, v]) => [k, fromPlain(v)]));
  return null;
}

export function jsonText(value: Json): string {
  if (value instanceof Raw) return value.text;
  if (value instanceof Obj) return `{${value.entries.map(([k, v]) => `${JSON.stringify(k)}:${jsonText(v)}`).join(",")}}`;
  if (Array.isArray(value)) return `[${value.map(jsonText).join(",")}]`;
  return JSON.stringify(value);
}

/** Every string of a document (keys and values): what an answer may legitimately echo. */
export function stringsOf(value: Json, out: string[] = []): string[] {
  if (typeof value === "string") out.push(value);
  else if (value instanceof Obj)
    for (const [k, v] of value.entries) {
      out.push(k);
      stringsOf(v, out);
    }
  else if (Array.isArray(value)) for (const v of value) stringsOf(v, out);
  return out;
}

// Hostile values --------------------------------------------------------------------------------
export const SQL_PAYLOADS = [
  "'; DROP TABLE aip_route_assignments; --",
  "' OR '1'='1",
  "' OR 1=1 --",
  '" OR ""="',
  "'); DELETE FROM aip_connector_replicas; --",
  "$$; DROP TABLE aip_capability_bindings; $$",
  "$tag$ SELECT pg_sleep(10) $tag$",
  "\\'; SELECT 1; --",
  "\\\\",
  "/* comment */ OR 1=1",
  "1; UPDATE aip_admission_counters SET active = 0",
  "%",
  "_",
  "%%",
  "a%b_c\\d",
  "\u2019 OR \u20191\u2019=\u20191",
  "\u02bc; DROP TABLE x; --",
  "\uff07 OR \uff071\uff07=\uff071",
  "E'\\x27' || current_user",
  "') UNION SELECT rolpassword FROM pg_authid --",
  // biome-ignore lint/suspicious/noTemplateCurlyInString: a template-injection probe, sent as a literal string
  "${7*7}",
  "{{7*7}}",
];

const SPECIAL_STRINGS = [
  "",
  " ",
  "\t\n",
  "\u0000",
  "a\u0000b",
  ".",
  "..",
  "../../etc/passwd",
  "/",
  "a/b",
  "a b",
  "a:b",
  "cap:a:b:c",
  "%00",
  "%2F",
  "%2e%2e",
  "\ud800",
  "x\udc00y",
  "\ud83d\ude00",
  "\u{10ffff}",
  "\u202e\u202d",
  "\ufeff",
  "\u00e9".repeat(129),
  "x".repeat(257),
  "x".repeat(256),
  "null",
  "true",
  "0",
  "-0",
  "NaN",
  "__proto__",
  "constructor",
  "<script>alert(1)</script>",
  "\r\nX-Injected: 1",
  "\u001f",
  ...SQL_PAYLOADS,
];

const loneSurrogateOrAscii = fc.oneof(
  fc.integer({ min: 0xd800, max: 0xdfff }).map((c) => String.fromCharCode(c)),
  fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)),
);

const hostileString: fc.Arbitrary<string> = fc.oneof(
  { weight: 5, arbitrary: fc.constantFrom(...SPECIAL_STRINGS) },
  { weight: 3, arbitrary: fc.string({ unit: "binary", maxLength: 24 }) },
  { weight: 1, arbitrary: fc.string({ unit: loneSurrogateOrAscii, maxLength: 8 }) },
  { weight: 1, arbitrary: fc.constantFrom(1025, 70_000, 300_000).map((n) => "x".repeat(n)) },
  {
    weight: 2,
    arbitrary: fc
      .tuple(fc.constantFrom("act_", "cap:", "crepl_", "tenant-", "msg_"), fc.constantFrom(...SPECIAL_STRINGS))
      .map(([prefix, rest]) => prefix + rest),
  },
);

/** Numbers at and beyond the 2^31, 2^32 and 2^53 boundaries, as literal JSON text. */
const NUMBER_LITERALS = [
  "0",
  "-0",
  "-0.0",
  "1",
  "-1",
  "1.5",
  "0.1",
  "1E2",
  "1e-7",
  "2147483647",
  "2147483648",
  "-2147483648",
  "-2147483649",
  "4294967295",
  "4294967296",
  "9007199254740991",
  "9007199254740992",
  "9007199254740993",
  "-9007199254740993",
  "18446744073709551616",
  "123456789012345678901234567890",
  "1e308",
  "1.7976931348623157e308",
  "1e309",
  "-1e309",
  "1e-400",
  "5e-324",
];
const hostileNumber: fc.Arbitrary<Json> = fc.oneof(
  fc.constantFrom(...NUMBER_LITERALS).map((n) => new Raw(n)),
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
);

/** Arrays nested `depth` levels deep, around the 128-level limit and far beyond it. */
export const nested = (depth: number, open = "[", close = "]", core = "") => new Raw(open.repeat(depth) + core + close.repeat(depth));
const DEPTHS = [127, 128, 129, 130, 5_000, 100_000];
const deepJson: fc.Arbitrary<Json> = fc.oneof(
  fc.constantFrom(...DEPTHS).map((d) => nested(d)),
  fc.constantFrom(...DEPTHS).map((d) => nested(d, '{"a":', "}", "1")),
);

/** Large but under the data-plane body limit (256 KiB), and over it. */
const hugeJson: fc.Arbitrary<Json> = fc.constantFrom(new Raw(`[${"0,".repeat(100_000)}0]`), new Raw(`[${'"x",'.repeat(60_000)}"x"]`), "y".repeat(300_000));

const HOSTILE_KEYS = [
  "tenant_id",
  "secret",
  "password",
  "credential",
  "api_key",
  "token",
  "__proto__",
  "constructor",
  "prototype",
  "",
  " ",
  "\u0000",
  "\ud800",
  "a.b",
  "$where",
  "x".repeat(10_000),
];

export const hostileJson: fc.Arbitrary<Json> = fc.letrec<{ value: Json }>((tie) => ({
  value: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    { weight: 4, arbitrary: hostileString },
    { weight: 3, arbitrary: hostileNumber },
    { weight: 1, arbitrary: fc.constantFrom<Json>(null, true, false) },
    { weight: 1, arbitrary: deepJson },
    { weight: 1, arbitrary: hugeJson },
    { weight: 1, arbitrary: fc.array(tie("value"), { maxLength: 3 }) },
    {
      weight: 1,
      arbitrary: fc
        .array(fc.tuple(fc.oneof(fc.constantFrom(...HOSTILE_KEYS), hostileString), tie("value")), { maxLength: 3 })
        .map((entries) => new Obj(entries)),
    },
  ),
})).value;

// Mutating a valid-shaped document ---------------------------------------------------------------
type Step = number;
function nodes(value: Json, path: Step[] = [], out: Step[][] = []): Step[][] {
  out.push(path);
  if (value instanceof Obj) for (const [i, [, v]] of value.entries.entries()) nodes(v, [...path, i], out);
  else if (Array.isArray(value)) for (const [i, v] of value.entries()) nodes(v, [...path, i], out);
  return out;
}

function update(value: Json, path: Step[], fn: (node: Json) => Json | undefined): Json {
  if (path.length === 0) return fn(value) ?? null;
  const [head, ...rest] = path as [Step, ...Step[]];
  if (value instanceof Obj) {
    const entries: [string, Json][] = [];
    for (const [i, [k, v]] of value.entries.entries()) {
      if (i !== head) {
        entries.push([k, v]);
        continue;
      }
      const next = rest.length === 0 ? fn(v) : update(v, rest, fn);
      if (next !== undefined) entries.push([k, next]);
    }
    return new Obj(entries);
  }
  if (Array.isArray(value)) {
    const out: Json[] = [];
    for (const [i, v] of value.entries()) {
      if (i !== head) {
        out.push(v);
        continue;
      }
      const next = rest.length === 0 ? fn(v) : update(v, rest, fn);
      if (next !== undefined) out.push(next);
    }
    return out;
  }
  return value;
}

type Mutation =
  | { op: "replace"; at: number; value: Json }
  | { op: "retype"; at: number; text: string; number: Json }
  | { op: "delete"; at: number }
  | { op: "add"; at: number; key: string; value: Json }
  | { op: "wrap"; at: number }
  | { op: "duplicate"; at: number };

const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  { weight: 3, arbitrary: fc.record({ op: fc.constant("replace" as const), at: fc.nat(), value: hostileJson }) },
  // Same type, hostile value: these pass the schemas more often and reach the database.
  { weight: 4, arbitrary: fc.record({ op: fc.constant("retype" as const), at: fc.nat(), text: hostileString, number: hostileNumber }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant("delete" as const), at: fc.nat() }) },
  {
    weight: 2,
    arbitrary: fc.record({ op: fc.constant("add" as const), at: fc.nat(), key: fc.oneof(fc.constantFrom(...HOSTILE_KEYS), hostileString), value: hostileJson }),
  },
  { weight: 1, arbitrary: fc.record({ op: fc.constant("wrap" as const), at: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant("duplicate" as const), at: fc.nat() }) },
);

function applyMutation(doc: Json, m: Mutation): Json {
  const all = nodes(doc);
  const path = all[m.at % all.length]!;
  switch (m.op) {
    case "replace":
      return update(doc, path, () => m.value);
    case "retype":
      return update(doc, path, (node) => (typeof node === "string" ? m.text : typeof node === "number" ? m.number : typeof node === "boolean" ? !node : node));
    case "delete":
      return path.length === 0 ? new Obj([]) : update(doc, path, () => undefined);
    case "wrap":
      return update(doc, path, (node) => [node]);
    case "add": {
      // Into the nearest object at or above the chosen node.
      let target = path;
      for (;;) {
        const node = target.reduce<Json>((n, i) => (n instanceof Obj ? n.entries[i]![1] : (n as Json[])[i]!), doc);
        if (node instanceof Obj || target.length === 0) break;
        target = target.slice(0, -1);
      }
      return update(doc, target, (node) => (node instanceof Obj ? new Obj([...node.entries, [m.key, m.value]]) : new Obj([[m.key, m.value]])));
    }
    case "duplicate": {
      // The same key twice (JSON.parse keeps the last): the first one carries a hostile value.
      const index = path.at(-1) ?? 0;
      return update(doc, path.slice(0, -1), (node) =>
        node instanceof Obj && node.entries.length > 0 ? new Obj([[node.entries[index % node.entries.length]![0], "dup\u0000"], ...node.entries]) : node,
      );
    }
  }
}

/** A valid-shaped document with one to three hostile mutations. */
export const mutated = (doc: Json): fc.Arbitrary<Json> => fc.array(mutation, { minLength: 1, maxLength: 3 }).map((ms) => ms.reduce(applyMutation, doc));

// Paths, queries, headers, methods ----------------------------------------------------------------
const encodeSegment = (s: string): string => {
  try {
    return encodeURIComponent(s);
  } catch {
    return s.replace(/[\ud800-\udfff]/g, "%ED%A0%80"); // lone surrogates: their (invalid) UTF-8 bytes
  }
};

/** A path segment: an encoded hostile string, or raw text the URL parser has its own ideas about. */
export const hostileSegment: fc.Arbitrary<string> = fc.oneof(
  { weight: 4, arbitrary: hostileString.filter((s) => s.length < 20_000).map(encodeSegment) },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      "..",
      ".",
      "%2e%2e",
      "%2E",
      "%00",
      "a%00b",
      "%ZZ",
      "%E0%A4%A",
      "%ED%A0%80",
      "%C0%AF",
      "%FF%FE",
      "a%2Fb",
      "a%2fb%2f..%2f..",
      "%20",
      "a%3Ab",
      "%25",
      "%u0000",
      "x".repeat(5_000),
      ";x=1",
      "a@b",
      "~",
      "%F0%9F%98%80",
    ),
  },
);

const LIMIT_VALUES = ["-1", "0", "1", "200", "201", "1e309", "-1e309", "NaN", "Infinity", "0x10", "1.5", "", " 1", "9007199254740993", "1e15", "٣"];

export const hostileQuery: fc.Arbitrary<string> = fc
  .array(
    fc.oneof(
      fc.tuple(
        fc.constantFrom("limit", "max_bytes", "cursor", "q", "capability_id", "profile", "tenant_id", "unbound", "dry_run"),
        fc.constantFrom(...LIMIT_VALUES),
      ),
      fc.tuple(
        fc.constantFrom("limit", "limit[]", "cursor", "q", "capability_id", "profile", "tenant_id", "unbound", "dry_run", "__proto__", "x", "", "a[b]"),
        hostileString.filter((s) => s.length < 20_000).map(encodeSegment),
      ),
      fc.constantFrom<[string, string]>(["&", ""], ["=", "="], ["%00", "%00"], ["q", "%ED%A0%80"], ["cursor", "1:2:0123456789abcdef:%00"]),
    ),
    { maxLength: 6 },
  )
  .map((pairs) => pairs.map(([k, v]) => (k === "&" ? "&" : `${k}=${v}`)).join("&"));

/** Header values are byte strings: Latin-1 without CR, LF or NUL. */
const headerText = fc.string({ unit: fc.integer({ min: 0x20, max: 0xff }).map((c) => String.fromCharCode(c)), maxLength: 40 });

const CONTENT_TYPES = [
  "application/json",
  "application/json; charset=utf-8",
  "application/json;charset=UTF-16",
  "application/json; charset=iso-8859-1",
  "APPLICATION/JSON",
  "application/problem+json",
  "application/merge-patch+json",
  "application/x-json",
  "application/jsonx",
  "text/json",
  "text/plain",
  "application/x-www-form-urlencoded",
  "multipart/form-data; boundary=x",
  "application/json, text/plain",
  "application/json; foo",
  "",
  "*/*",
];

export const TENANT_HEADERS = ["x-tenant-id", "x-tenant", "tenant-id", "x-aip-tenant-id", "x-forwarded-tenant", "x-org-id"];

export type HeaderMutation = { name: string; value: string; append: boolean };
export const hostileHeaders: fc.Arbitrary<HeaderMutation[]> = fc.array(
  fc.oneof(
    fc.record({ name: fc.constant("content-type"), value: fc.oneof(fc.constantFrom(...CONTENT_TYPES), headerText), append: fc.boolean() }),
    fc.record({ name: fc.constantFrom(...TENANT_HEADERS), value: fc.constantFrom("tenant-other", "*", "' OR '1'='1"), append: fc.constant(false) }),
    fc.record({
      name: fc.constant("x-request-id"),
      value: fc.oneof(fc.constantFrom("fuzz-1", "a b", "x".repeat(300), "../", "ok=="), headerText),
      append: fc.constant(false),
    }),
    fc.record({
      name: fc.constant("if-none-match"),
      value: fc.constantFrom("*", 'W/"1-00000000"', 'W/"99999999999999999-00000000"', '"', ",,,", "W/".repeat(1000)),
      append: fc.constant(false),
    }),
    fc.record({
      name: fc.constantFrom("x-junk", "accept", "origin", "cookie", "x-forwarded-for"),
      value: fc.oneof(headerText, fc.constant("h".repeat(200_000))),
      append: fc.constant(false),
    }),
    fc.record({
      name: fc.constant("authorization"),
      value: fc.constantFrom("DUPLICATE", "Bearer", "Basic Zm9vOmJhcg==", "Bearer a.b.c", `Bearer ${"A".repeat(300_000)}`),
      append: fc.boolean(),
    }),
  ),
  { maxLength: 4 },
);

/** Methods a Fetch Request accepts (CONNECT, TRACE and TRACK it refuses to construct). */
export const METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "PURGE", "FOO", "patch", "M-SEARCH"];

// Requests ------------------------------------------------------------------------------------------
export interface FuzzRequest {
  method: string;
  url: string;
  headers: [string, string][];
  body?: string;
  /** Strings the answer may echo (IDs in a not-found message, a key in a validation error). */
  inputs: string[];
}

const clip = (s: string, n = 240) => (s.length > n ? `${s.slice(0, n)}... (${s.length} chars)` : s);

export async function send(
  app: { request: (url: string, init: RequestInit) => Response | Promise<Response> },
  r: FuzzRequest,
): Promise<{ response: Response; text: string }> {
  const headers = new Headers();
  for (const [name, value] of r.headers) headers.append(name, value);
  const bodyAllowed = r.method.toUpperCase() !== "GET" && r.method.toUpperCase() !== "HEAD";
  const response = await app.request(r.url, { method: r.method, headers, ...(r.body !== undefined && bodyAllowed ? { body: r.body } : {}) });
  return { response, text: await response.text() };
}

// The verdict on an answer -----------------------------------------------------------------------
const DOCUMENTED_CODES = (Object.keys(PROBLEM_STATUS) as ProblemCode[]).filter((code) => code !== "internal" && code !== "storage");

/** What must never reach a client: stack frames, source locations, SQL and PL/pgSQL internals. */
const LEAKS: RegExp[] = [
  /\bat [\w$.<>]+ \(/,
  /\bat .+:\d+:\d+/,
  /node_modules/,
  /\.(?:ts|js|mjs):\d+/,
  /plpgsql/i,
  /\bSELECT\b/,
  /\bINSERT INTO\b/,
  /\bUPDATE \w+ SET\b/,
  /\bDELETE FROM\b/,
  /\bFROM aip_/,
  /\$\d+::/,
  /SQLSTATE/,
  /\bCONTEXT:/,
  /\b(?:Type|Reference|Syntax|Range)Error\b/,
  /\bError: /,
];

function strings(value: unknown, out: string[] = []): string[] {
  if (typeof value === "string") out.push(value);
  else if (Array.isArray(value)) for (const v of value) strings(v, out);
  else if (value && typeof value === "object")
    for (const [k, v] of Object.entries(value)) {
      out.push(k);
      strings(v, out);
    }
  return out;
}

/** The text with every echo of the caller's own input removed (the input may say SELECT). */
function withoutEchoes(text: string, inputs: string[]): string {
  const echoes = inputs
    .flatMap((s) => [s, JSON.stringify(s).slice(1, -1)])
    .filter((s) => s.length >= 3)
    .sort((a, b) => b.length - a.length);
  let out = text;
  for (const echo of echoes) out = out.split(echo).join("\u2026");
  return out;
}

export interface Verdict {
  status: number;
  body: Record<string, unknown> | null;
}

/**
 * The rules for every answer. `label` names the request in failure messages. Returns the status
 * and, for problems, the parsed body.
 */
export function expectSaneAnswer(label: string, method: string, response: Response, text: string, inputs: string[]): Verdict {
  const { status } = response;
  const where = `${label}\n-> ${status} ${clip(text, 600)}`;
  expect(status, where).not.toBe(500);
  const allowed = (status >= 200 && status < 300) || status === 304 || (status >= 400 && status < 500) || status === 503;
  expect(allowed, where).toBe(true);
  if (status < 400) return { status, body: null };
  expect(response.headers.get("content-type"), where).toBe("application/problem+json");
  if (method.toUpperCase() === "HEAD") return { status, body: null };
  const body = JSON.parse(text) as Record<string, unknown>;
  const code = body.code as ProblemCode;
  expect(DOCUMENTED_CODES, where).toContain(code);
  expect(status, where).toBe(PROBLEM_STATUS[code]);
  // The two 503s a healthy database gives: no replica, or a token that cannot be verified now.
  if (status === 503) expect(["replica-unavailable", "auth-unavailable"], where).toContain(code);
  expect(body, where).toMatchObject({ type: `https://aip.dev/problems/${code}`, status, title: expect.any(String), detail: expect.any(String) });
  expect(body.request_id, where).toEqual(expect.any(String));
  expect(body.request_id, where).toBe(response.headers.get("x-request-id"));
  const visible = withoutEchoes(strings(body).join("\n"), inputs);
  for (const leak of LEAKS) expect(visible, `${where}\nleaks ${leak}`).not.toMatch(leak);
  return { status, body };
}

/**
 * Whether a refusal was decided before any database call (authentication, scopes, routing, body
 * parsing and schema validation): those cannot have changed the database. Anything else is
 * checked against a snapshot.
 */
export function refusedBeforeDatabase(verdict: Verdict): boolean {
  const { status, body } = verdict;
  if (status === 401 || status === 403 || status === 405 || status === 413 || status === 415) return true;
  const detail = typeof body?.detail === "string" ? body.detail : "";
  if (status === 404 && detail.startsWith("no route for ")) return true;
  if (status === 400 && (detail.startsWith("request validation failed") || detail.startsWith("Malformed JSON"))) return true;
  return false;
}
