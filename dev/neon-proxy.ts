/**
 * Local "Neon proxy" for development and tests (Node only).
 *
 * Lets the real `@neondatabase/serverless` driver talk to a plain PostgreSQL
 * server over both of its transports, on one HTTP server:
 *
 *  - `POST /sql`  the HTTP query path used by `neon()` (and by `Pool.query()`
 *    when `neonConfig.poolQueryViaFetch` is on). Mirrors Neon's
 *    `proxy/src/serverless/sql_over_http.rs`: same headers, bodies, result
 *    JSON and error JSON, executed with `pg` against the configured server.
 *  - `GET /v1?address=host:port` (WebSocket upgrade) the path used by `Pool` /
 *    `Client`: a dumb pipe carrying the raw PostgreSQL wire protocol in binary
 *    WebSocket frames, like https://github.com/neondatabase/wsproxy.
 *  - optionally (`tcp: true`) a plain TCP port carrying the PostgreSQL wire
 *    protocol, like a Neon endpoint's own host: what `pg` (the Node server) uses.
 *
 * For tests it counts and logs the statements it forwards (GET /__stats,
 * GET /__stats/log, POST /__stats/reset) and can stand in for a suspended
 * compute (POST /__suspend?wake_ms=N, or `suspend()`): open connections are
 * closed, and the next statement or connection waits `wake_ms` before
 * anything reaches PostgreSQL; everything arriving meanwhile waits for the
 * same wake-up.
 *
 * The connection string's host is never resolved (use a fake one such as
 * `db.localtest.me`): every connection goes to `pgHost:pgPort`. User, password
 * and database are taken from the client, so different database roles work.
 *
 * CLI: `tsx dev/neon-proxy.ts` (env NEON_PROXY_PORT, NEON_PROXY_HOST,
 * PGHOST, PGPORT) starts it and prints the client settings.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { connect as netConnect, createServer as createTcpServer, type Socket } from "node:net";
import type { Duplex } from "node:stream";
import { pathToFileURL } from "node:url";
import pg from "pg";
import { WebSocket, WebSocketServer } from "ws";
import type { neonConfig as NeonConfigClass } from "@neondatabase/serverless";
import { pointNeonAtLocalProxy } from "./neon-local.js";

// ---------------------------------------------------------------------------
// Public types
// ---------------------------------------------------------------------------

export interface NeonProxyOptions {
  /** Port to listen on; 0 (default) picks an ephemeral port. */
  port?: number;
  /** Interface to bind; default 127.0.0.1 (this is an unauthenticated proxy). */
  host?: string;
  /** Where the real PostgreSQL server is; defaults 127.0.0.1:5432. */
  pgHost?: string;
  pgPort?: number;
  /**
   * WebSocket path only: connect to the port given in `?address=host:port`
   * instead of `pgPort` (the host part is always ignored). Default false,
   * because client connection strings normally say 5432 whatever the target.
   */
  useAddressPort?: boolean;
  /** Max pooled pg clients per (user, password, database) for /sql. Default 5. */
  maxClientsPerKey?: number;
  /** Called for unexpected internal errors (default: console.error). */
  onError?: (err: unknown) => void;
  /** Also listen on a plain TCP port (PostgreSQL wire protocol); 0 or true picks an ephemeral port. */
  tcp?: boolean | { port: number };
}

/** One statement the proxy forwarded (at most the last 2 000 are kept, until reset()). */
export interface LoggedStatement {
  /** Epoch milliseconds when the proxy received it. */
  at: number;
  via: "http" | "ws" | "tcp";
  user?: string;
  database?: string;
  /** The statement text (at most its first 200 characters). */
  text: string;
}

/** Counters for one WebSocket connection (client-to-server direction only). */
interface WsConnectionStats {
  id: number;
  /** The `address` query parameter the driver sent, e.g. `db.localtest.me:5432`. */
  address: string;
  /** From the StartupMessage, once seen. */
  user?: string;
  database?: string;
  /** Frontend 'Q' (simple Query) messages: one per `client.query()` without params. */
  queries: number;
  /** Frontend 'P' (Parse) messages: one per unprepared extended-protocol query. */
  parses: number;
  open: boolean;
}

interface NeonProxyStats {
  http: {
    /** POST /sql requests received (each `sql\`\`` call or `transaction()` is one). */
    requests: number;
    /** Statements they carried: 1 per single query, N per batch. */
    statements: number;
    /** Requests answered with an error status. */
    errors: number;
  };
  ws: {
    /** WebSocket connections ever accepted (since the last reset). */
    opened: number;
    /** Totals over all connections of 'Q' and 'P' messages. */
    queries: number;
    parses: number;
    /** Per-connection detail; closed ones are kept (capped) until reset(). */
    connections: WsConnectionStats[];
  };
  /** The plain TCP port's connections and their 'Q' and 'P' messages. */
  tcp: { opened: number; queries: number; parses: number };
  /** Wake-ups from a suspension (each delayed the work waiting for it). */
  wakes: number;
  /** The last statements forwarded, oldest first. */
  log: LoggedStatement[];
  /** http.statements + ws and tcp queries and parses: "SQL statements sent" overall. */
  statements(): number;
  /** Zero all counters and forget closed connections. */
  reset(): void;
}

export interface NeonProxy {
  port: number;
  /** Base URL, e.g. `http://127.0.0.1:4444`. */
  url: string;
  /** Value for `neonConfig.fetchEndpoint`, e.g. `http://127.0.0.1:4444/sql`. */
  fetchEndpoint: string;
  /** Value for `neonConfig.wsProxy`, e.g. `127.0.0.1:4444/v1`. */
  wsProxy: string;
  /** The plain TCP port (with `tcp`): connect `pg` to 127.0.0.1:tcpPort with the real credentials. */
  tcpPort?: number;
  stats: NeonProxyStats;
  /** Stand in for a suspended compute: close open connections; the next work waits `wakeMs`. */
  suspend(wakeMs: number): void;
  close(): Promise<void>;
}

// ---------------------------------------------------------------------------
// Client-side configuration
// ---------------------------------------------------------------------------

type NeonConfigLike = Pick<
  typeof NeonConfigClass,
  "fetchEndpoint" | "wsProxy" | "useSecureWebSocket" | "pipelineConnect" | "pipelineTLS" | "forceDisablePgSSL" | "webSocketConstructor"
>;

/**
 * Point the driver's global `neonConfig` at a local proxy: the runtime-neutral settings of
 * `pointNeonAtLocalProxy` (dev/neon-local.ts, which explains each one), plus a WebSocket
 * constructor: Node 20 has no global WebSocket, so it defaults to `ws`; pass `null` to keep
 * the runtime's global one (workerd, browsers).
 *
 * `poolQueryViaFetch` is left alone: when true, `Pool.query()` (with no
 * listeners other than 'error') goes over HTTP to `fetchEndpoint` instead of
 * the WebSocket, which this proxy also serves, but it changes which stats move.
 */
export function configureNeonForLocalProxy(
  neonConfig: NeonConfigLike,
  proxy: string | { url: string },
  options: { webSocketConstructor?: NeonConfigLike["webSocketConstructor"] | null } = {},
): void {
  pointNeonAtLocalProxy(neonConfig, proxy);
  if (options.webSocketConstructor !== null) {
    neonConfig.webSocketConstructor = options.webSocketConstructor ?? (WebSocket as unknown as NeonConfigLike["webSocketConstructor"]);
  }
}

// ---------------------------------------------------------------------------
// Frontend message counter (WebSocket path)
// ---------------------------------------------------------------------------

const MAX_STARTUP_LENGTH = 10_000;
/** Statement text kept per logged statement (bytes read, characters kept). */
const STATEMENT_CAPTURE_BYTES = 1024;
const STATEMENT_TEXT_CHARS = 200;

/**
 * Incremental parser of the client-to-server PostgreSQL stream that only
 * counts message types. A WebSocket frame can hold several messages (the
 * driver coalesces writes) or a fragment of one, so it keeps a tiny header
 * buffer and skips bodies by length without copying them.
 *
 * The stream starts with untyped messages (Int32 length, Int32 code):
 * SSLRequest/GSSENCRequest/CancelRequest (code major 1234) and finally the
 * StartupMessage (major version 3), after which every message is
 * Byte1 type + Int32 length (the length counts itself, not the type byte).
 */
export class FrontendMessageCounter {
  queries = 0;
  parses = 0;
  user?: string;
  database?: string;
  /** Set when the stream stops looking like plaintext protocol (e.g. TLS). */
  broken = false;

  private startupPhase = true;
  private readonly header = Buffer.alloc(8);
  private headerLength = 0;
  private remaining = 0;
  private startupBody?: Buffer[];
  /** The start of a Query or Parse body, while it is being read. */
  private statement?: { parse: boolean; bytes: Buffer[]; length: number };

  /** `onStatement` receives the start of each Query or Parse message's SQL text. */
  constructor(private readonly onStatement?: (text: string) => void) {}

  push(chunk: Uint8Array): void {
    let i = 0;
    while (i < chunk.length && !this.broken) {
      if (this.remaining > 0) {
        const n = Math.min(this.remaining, chunk.length - i);
        this.startupBody?.push(Buffer.from(chunk.subarray(i, i + n)));
        if (this.statement && this.statement.length < STATEMENT_CAPTURE_BYTES) {
          const piece = chunk.subarray(i, i + Math.min(n, STATEMENT_CAPTURE_BYTES - this.statement.length));
          this.statement.bytes.push(Buffer.from(piece));
          this.statement.length += piece.length;
        }
        this.remaining -= n;
        i += n;
        if (this.remaining === 0) {
          this.finishStartupBody();
          this.finishStatement();
        }
        continue;
      }
      const headerSize = this.startupPhase ? 8 : 5;
      const n = Math.min(headerSize - this.headerLength, chunk.length - i);
      this.header.set(chunk.subarray(i, i + n), this.headerLength);
      this.headerLength += n;
      i += n;
      if (this.headerLength < headerSize) return; // header split across frames
      this.headerLength = 0;
      if (this.startupPhase) this.onUntypedHeader();
      else this.onTypedHeader();
    }
  }

  private onUntypedHeader(): void {
    const length = this.header.readInt32BE(0);
    const major = this.header.readUInt32BE(4) >>> 16;
    if (length < 8 || length > MAX_STARTUP_LENGTH || (major !== 3 && major !== 1234)) {
      this.broken = true;
      return;
    }
    this.remaining = length - 8;
    if (major === 3) {
      // StartupMessage: capture its small body for user/database.
      this.startupPhase = false;
      this.startupBody = [];
      if (this.remaining === 0) this.finishStartupBody();
    }
  }

  private onTypedHeader(): void {
    const type = this.header[0];
    const length = this.header.readInt32BE(1);
    if (length < 4) {
      this.broken = true;
      return;
    }
    if (type === 0x51 /* 'Q' */) this.queries++;
    else if (type === 0x50 /* 'P' */) this.parses++;
    this.remaining = length - 4;
    if ((type === 0x51 || type === 0x50) && this.onStatement) {
      this.statement = { parse: type === 0x50, bytes: [], length: 0 };
      if (this.remaining === 0) this.finishStatement();
    }
  }

  private finishStatement(): void {
    if (!this.statement) return;
    const body = Buffer.concat(this.statement.bytes);
    // Parse: statement name \0 query \0 ...; Query: query \0.
    const start = this.statement.parse ? body.indexOf(0) + 1 : 0;
    const end = body.indexOf(0, start);
    this.statement = undefined;
    this.onStatement?.(
      body
        .subarray(start, end < 0 ? body.length : end)
        .toString("utf8")
        .slice(0, STATEMENT_TEXT_CHARS),
    );
  }

  private finishStartupBody(): void {
    if (!this.startupBody) return;
    // Body: (key \0 value \0)* \0
    const parts = Buffer.concat(this.startupBody).toString("utf8").split("\0");
    this.startupBody = undefined;
    for (let k = 0; k + 1 < parts.length; k += 2) {
      if (parts[k] === "user") this.user = parts[k + 1];
      else if (parts[k] === "database") this.database = parts[k + 1];
    }
  }
}

// ---------------------------------------------------------------------------
// HTTP /sql path
// ---------------------------------------------------------------------------

/** Same limit as Neon's default max request size. */
const MAX_BODY_BYTES = 10 * 1024 * 1024;

/** Return every value as PostgreSQL's text, exactly like Neon's raw output. */
const rawTextTypes = {
  getTypeParser: () => (value: string) => value,
} as unknown as pg.CustomTypesConfig;

/** Error fields the driver copies onto NeonDbError (`errorFields` in httpQuery.ts). */
const ERROR_FIELDS = [
  "severity",
  "code",
  "detail",
  "hint",
  "position",
  "internalPosition",
  "internalQuery",
  "where",
  "schema",
  "table",
  "column",
  "dataType",
  "constraint",
  "file",
  "line",
  "routine",
] as const;

const ISOLATION_LEVELS: Record<string, string> = {
  Serializable: "SERIALIZABLE",
  ReadUncommitted: "READ UNCOMMITTED",
  ReadCommitted: "READ COMMITTED",
  RepeatableRead: "REPEATABLE READ",
};

interface QueryData {
  query: string;
  params: Array<string | null>;
  arrayMode?: boolean;
}

/** An error answered with a status and Neon's error JSON. */
class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

function isDbError(err: unknown): err is pg.DatabaseError {
  return err instanceof pg.DatabaseError;
}

/** A plain ERROR leaves the session usable; FATAL/PANIC or a non-PostgreSQL error means it is gone. */
function isUsableAfter(err: unknown): boolean {
  return isDbError(err) && err.severity !== "FATAL" && err.severity !== "PANIC";
}

/**
 * Neon's `json_to_pg_text`: strings and null pass through; other JSON values
 * become text. The driver itself only sends strings/null (pg's prepareValue,
 * Buffers as `\x..` bytea hex), but other HTTP clients may not.
 */
function jsonToPgText(value: unknown): string | null {
  if (value === null || value === undefined) return null;
  if (typeof value === "string") return value;
  if (Array.isArray(value)) return jsonArrayToPgArray(value);
  return JSON.stringify(value);
}

function jsonArrayToPgArray(value: unknown): string {
  if (value === null || value === undefined) return "NULL";
  if (Array.isArray(value)) return `{${value.map(jsonArrayToPgArray).join(",")}}`;
  if (typeof value === "object") return JSON.stringify(JSON.stringify(value));
  return JSON.stringify(value); // strings get quoted/escaped, as inside an array literal
}

function parseQueryData(raw: unknown): QueryData {
  if (typeof raw !== "object" || raw === null || typeof (raw as { query?: unknown }).query !== "string") {
    throw new HttpError(400, 'request body must contain a "query" string');
  }
  const { query, params, arrayMode } = raw as { query: string; params?: unknown; arrayMode?: unknown };
  if (params !== undefined && !Array.isArray(params)) throw new HttpError(400, '"params" must be an array');
  return {
    query,
    params: (params ?? []).map(jsonToPgText),
    arrayMode: typeof arrayMode === "boolean" ? arrayMode : undefined,
  };
}

/** Parse `Neon-Connection-String`; only user, password, database and application_name matter. */
function parseConnectionString(value: string | undefined) {
  if (!value) throw new HttpError(400, "missing Neon-Connection-String header");
  let url: URL;
  try {
    // Swap the scheme for http: so URL parses it as a special (host-based) URL, like the driver does.
    const scheme = new URL(value).protocol;
    if (scheme !== "postgres:" && scheme !== "postgresql:") throw new Error("bad scheme");
    url = new URL(`http:${value.slice(scheme.length)}`);
  } catch {
    throw new HttpError(400, "Neon-Connection-String is not a valid postgres:// URL");
  }
  const user = decodeURIComponent(url.username);
  const database = decodeURIComponent(url.pathname.replace(/^\//, ""));
  if (!user || !database) throw new HttpError(400, "connection string must include user and database");
  return {
    user,
    database,
    password: decodeURIComponent(url.password),
    applicationName: url.searchParams.get("application_name") ?? undefined,
  };
}

// Non-raw output (Neon-Raw-Text-Output not "true"): Neon converts a few types
// to JSON natively (pg_text_to_json in proxy/src/serverless/json.rs). The
// driver always asks for raw text, so this is a best-effort approximation.
const ARRAY_ELEMENT_OIDS: Record<number, number> = {
  1000: 16,
  1005: 21,
  1007: 23,
  1021: 700,
  1022: 701,
  199: 114,
  3807: 3802,
  1009: 25,
  1015: 1043,
  1016: 20,
  1231: 1700,
  1115: 1114,
  1185: 1184,
  1182: 1082,
  2951: 2950,
};
// pg's text[] (oid 1009) parser splits any array literal into nested strings/nulls.
const parseTextArray = (pg.types.getTypeParser as (oid: number, format: "text") => (value: string) => unknown[])(1009, "text");

function textToJson(value: string, oid: number): unknown {
  const element = ARRAY_ELEMENT_OIDS[oid];
  if (element !== undefined) {
    const convert = (v: unknown): unknown => (Array.isArray(v) ? v.map(convert) : v === null ? null : textToJson(String(v), element));
    return convert(parseTextArray(value));
  }
  switch (oid) {
    case 16:
      return value === "t";
    case 21:
    case 23:
      return Number.parseInt(value, 10);
    case 700:
    case 701: {
      const n = Number.parseFloat(value);
      return Number.isFinite(n) ? n : value; // NaN/Infinity stay strings
    }
    case 114:
    case 3802:
      return JSON.parse(value) as unknown;
    default:
      return value;
  }
}

interface QueryOutput {
  rowAsArray: boolean;
  fields: pg.FieldDef[];
  rows: unknown[];
  command: string;
  rowCount: number | null;
}

async function runQuery(client: pg.PoolClient, data: QueryData, rawText: boolean, defaultArrayMode: boolean): Promise<QueryOutput> {
  // queryMode 'extended' = always Parse/Bind/Execute, as Neon's query_raw_txt
  // does: one statement per query even without params (pg would otherwise use
  // the simple protocol, which accepts "a; b").
  const config: pg.QueryArrayConfig & { queryMode: "extended" } = {
    text: data.query,
    values: data.params,
    rowMode: "array",
    queryMode: "extended",
  };
  const result = await client.query(config);
  const arrayMode = data.arrayMode ?? defaultArrayMode;
  const fields = result.fields.map((f) => ({
    name: f.name,
    dataTypeID: f.dataTypeID,
    tableID: f.tableID,
    columnID: f.columnID,
    dataTypeSize: f.dataTypeSize,
    dataTypeModifier: f.dataTypeModifier,
    format: "text",
  }));
  const rows = result.rows.map((row: Array<string | null>) => {
    const values = rawText ? row : row.map((v, i) => (v === null ? null : textToJson(v, fields[i]!.dataTypeID)));
    return arrayMode ? values : Object.fromEntries(fields.map((f, i) => [f.name, values[i]]));
  });
  return {
    rowAsArray: arrayMode,
    fields,
    rows,
    command: result.command ?? "",
    rowCount: result.rowCount ?? null,
  };
}

async function readBody(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw new HttpError(400, `request body exceeds ${MAX_BODY_BYTES} bytes`);
    chunks.push(chunk);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString("utf8")) as unknown;
  } catch {
    throw new HttpError(400, "request body is not valid JSON");
  }
}

function header(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name.toLowerCase()];
  return Array.isArray(value) ? value[0] : value;
}

function sendJson(res: ServerResponse, status: number, body: unknown, extraHeaders: Record<string, string> = {}) {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    "Content-Type": "application/json",
    "Content-Length": Buffer.byteLength(text),
    "Access-Control-Allow-Origin": "*",
    ...extraHeaders,
  });
  res.end(text);
}

/**
 * Error JSON as sql_over_http.rs writes it: `message` plus every error field
 * (null when absent). The driver only reads the fields when the status is 400;
 * any other status becomes `Server error (HTTP status N): <body text>`.
 */
function errorBody(err: unknown): { status: number; body: Record<string, unknown> } {
  const body: Record<string, unknown> = { message: err instanceof Error ? err.message : String(err) };
  for (const field of ERROR_FIELDS) body[field] = null;
  if (isDbError(err)) {
    // Query errors and connect-time errors from PostgreSQL (bad password,
    // unknown database, ...) are user errors: 400 with the SQLSTATE fields.
    for (const field of ERROR_FIELDS) body[field] = err[field] ?? null;
    return { status: 400, body };
  }
  if (err instanceof HttpError) return { status: err.status, body };
  // Connection refused/reset and other infrastructure failures.
  return { status: 500, body };
}

// ---------------------------------------------------------------------------
// Server
// ---------------------------------------------------------------------------

const MAX_CLOSED_CONNECTION_STATS = 1000;
const MAX_LOGGED_STATEMENTS = 2000;
/** Pause the TCP side while this much is queued towards the WebSocket. */
const WS_HIGH_WATER = 1024 * 1024;

function createStats(): NeonProxyStats & { track(c: WsConnectionStats): void; record(s: LoggedStatement): void } {
  const stats = {
    http: { requests: 0, statements: 0, errors: 0 },
    ws: { opened: 0, queries: 0, parses: 0, connections: [] as WsConnectionStats[] },
    tcp: { opened: 0, queries: 0, parses: 0 },
    wakes: 0,
    log: [] as LoggedStatement[],
    statements() {
      return stats.http.statements + stats.ws.queries + stats.ws.parses + stats.tcp.queries + stats.tcp.parses;
    },
    record(statement: LoggedStatement) {
      stats.log.push(statement);
      if (stats.log.length > MAX_LOGGED_STATEMENTS) stats.log.splice(0, stats.log.length - MAX_LOGGED_STATEMENTS);
    },
    reset() {
      stats.http.requests = stats.http.statements = stats.http.errors = 0;
      stats.ws.opened = stats.ws.queries = stats.ws.parses = 0;
      stats.tcp.opened = stats.tcp.queries = stats.tcp.parses = 0;
      stats.wakes = 0;
      stats.log = [];
      // Open connections keep their object but restart from zero.
      stats.ws.connections = stats.ws.connections.filter((c) => c.open);
      for (const c of stats.ws.connections) c.queries = c.parses = 0;
    },
    track(c: WsConnectionStats) {
      stats.ws.opened++;
      stats.ws.connections.push(c);
      const closed = stats.ws.connections.filter((x) => !x.open);
      if (closed.length > MAX_CLOSED_CONNECTION_STATS) {
        const drop = new Set(closed.slice(0, closed.length - MAX_CLOSED_CONNECTION_STATS));
        stats.ws.connections = stats.ws.connections.filter((x) => !drop.has(x));
      }
    },
  };
  return stats;
}

/** JSON form of the counters served at GET /__stats (per-connection detail left out). */
export interface NeonProxyStatsSnapshot {
  http: { requests: number; statements: number; errors: number };
  ws: { opened: number; open: number; queries: number; parses: number };
  tcp: { opened: number; queries: number; parses: number };
  wakes: number;
  statements: number;
}

function statsSnapshot(stats: NeonProxyStats): NeonProxyStatsSnapshot {
  return {
    http: { ...stats.http },
    ws: {
      opened: stats.ws.opened,
      open: stats.ws.connections.filter((c) => c.open).length,
      queries: stats.ws.queries,
      parses: stats.ws.parses,
    },
    tcp: { ...stats.tcp },
    wakes: stats.wakes,
    statements: stats.statements(),
  };
}

export async function startNeonProxy(options: NeonProxyOptions = {}): Promise<NeonProxy> {
  const {
    port = 0,
    host = "127.0.0.1",
    pgHost = "127.0.0.1",
    pgPort = 5432,
    useAddressPort = false,
    maxClientsPerKey = 5,
    onError = (err: unknown) => console.error("[neon-proxy]", err),
  } = options;

  const stats = createStats();
  const pools = new Map<string, pg.Pool>();
  const tunnels = new Set<{ ws: WebSocket; socket?: Socket }>();
  const tcpTunnels = new Set<{ client: Socket; upstream?: Socket }>();
  let closing = false;

  // A stand-in for a suspended compute: the first work after suspend() starts a wake-up of
  // `suspendedFor` ms, and everything arriving meanwhile waits for the same one.
  let suspendedFor: number | undefined;
  let waking: Promise<void> | undefined;
  function awake(): Promise<void> {
    if (waking) return waking;
    if (suspendedFor === undefined) return Promise.resolve();
    const ms = suspendedFor;
    waking = new Promise<void>((resolve) => setTimeout(resolve, ms)).then(() => {
      suspendedFor = undefined;
      waking = undefined;
      stats.wakes++;
    });
    return waking;
  }
  function suspend(wakeMs: number): void {
    if (!Number.isFinite(wakeMs) || wakeMs < 0) throw new RangeError("wakeMs must be a non-negative number");
    suspendedFor = wakeMs;
    // A suspending compute closes its connections.
    for (const { ws, socket } of tunnels) {
      socket?.destroy();
      ws.terminate();
    }
    tunnels.clear();
    for (const { client, upstream } of tcpTunnels) {
      upstream?.destroy();
      client.destroy();
    }
    tcpTunnels.clear();
    for (const pool of pools.values()) void pool.end().catch(() => {});
    pools.clear();
  }

  /** One small pg pool per credential set, so each role keeps its own sessions. */
  function poolFor(conn: ReturnType<typeof parseConnectionString>): pg.Pool {
    const key = JSON.stringify([conn.user, conn.password, conn.database, conn.applicationName]);
    let pool = pools.get(key);
    if (!pool) {
      pool = new pg.Pool({
        host: pgHost,
        port: pgPort,
        user: conn.user,
        password: conn.password,
        database: conn.database,
        application_name: conn.applicationName,
        max: maxClientsPerKey,
        idleTimeoutMillis: 10_000,
        allowExitOnIdle: true,
        types: rawTextTypes,
      });
      // A client dying (server restart, pg_terminate_backend) must not crash the process:
      // pg.Pool reports idle-client errors on the pool, and a checked-out client
      // emits 'error' itself when nothing is listening. Either way it is discarded:
      // pg-pool never re-pools a client whose connection has ended.
      pool.on("error", () => {});
      pool.on("connect", (client) => client.on("error", () => {}));
      pools.set(key, pool);
    }
    return pool;
  }

  async function handleSql(req: IncomingMessage, res: ServerResponse): Promise<void> {
    stats.http.requests++;
    const conn = parseConnectionString(header(req, "Neon-Connection-String"));
    // Like Neon: anything but exactly "true" is false.
    const rawText = header(req, "Neon-Raw-Text-Output") === "true";
    const arrayMode = header(req, "Neon-Array-Mode") === "true";
    const isolationHeader = header(req, "Neon-Batch-Isolation-Level");
    const readOnly = header(req, "Neon-Batch-Read-Only") === "true";
    const deferrable = header(req, "Neon-Batch-Deferrable") === "true";
    // `Authorization: Bearer <jwt>` (neon(url, { authToken })) is accepted but
    // not verified: there is no pg_session_jwt / JWKS locally.
    const isolation = isolationHeader === undefined ? undefined : ISOLATION_LEVELS[isolationHeader];
    if (isolationHeader !== undefined && isolation === undefined) {
      throw new HttpError(400, "invalid isolation level");
    }

    const body = await readBody(req);
    const batch =
      typeof body === "object" && body !== null && Array.isArray((body as { queries?: unknown }).queries)
        ? (body as { queries: unknown[] }).queries.map(parseQueryData)
        : undefined;
    const single = batch ? undefined : parseQueryData(body);
    stats.http.statements += batch ? batch.length : 1;
    for (const q of batch ?? [single!]) {
      stats.record({ at: Date.now(), via: "http", user: conn.user, database: conn.database, text: q.query.slice(0, STATEMENT_TEXT_CHARS) });
    }

    await awake();
    const client = await poolFor(conn).connect();
    // Anything other than a clean, idle client is destroyed instead of reused.
    let releaseError: Error | undefined;
    try {
      if (single) {
        try {
          const output = await runQuery(client, single, rawText, arrayMode);
          // e.g. a lone "BEGIN" or "SET ROLE" must not leak into the next request.
          if (client.getTransactionStatus() !== "I") releaseError = new Error("session not idle");
          sendJson(res, 200, output);
        } catch (err) {
          if (!isUsableAfter(err)) releaseError = err instanceof Error ? err : new Error(String(err));
          throw err;
        }
        return;
      }

      const modes = [isolation && `ISOLATION LEVEL ${isolation}`, readOnly && "READ ONLY", deferrable && "DEFERRABLE"].filter(Boolean).join(", ");
      try {
        await client.query(`BEGIN ${modes}`);
        const results: QueryOutput[] = [];
        for (const q of batch!) results.push(await runQuery(client, q, rawText, arrayMode));
        await client.query("COMMIT");
        // Echo the transaction settings like Neon does.
        const echo: Record<string, string> = {};
        if (isolationHeader) echo["Neon-Batch-Isolation-Level"] = isolationHeader;
        if (readOnly) echo["Neon-Batch-Read-Only"] = "true";
        if (deferrable) echo["Neon-Batch-Deferrable"] = "true";
        sendJson(res, 200, { results }, echo);
      } catch (err) {
        if (isUsableAfter(err)) {
          // Leave the client reusable; if even ROLLBACK fails, drop it.
          await client.query("ROLLBACK").catch((rollbackErr: Error) => (releaseError = rollbackErr));
        } else {
          releaseError = err instanceof Error ? err : new Error(String(err));
        }
        throw err;
      }
    } finally {
      // release(err) destroys the connection instead of pooling it.
      client.release(releaseError);
    }
  }

  const server = createServer((req, res) => {
    const { pathname } = new URL(req.url ?? "/", "http://localhost");
    if (pathname === "/sql" && req.method === "OPTIONS") {
      // CORS preflight, for the driver running in a browser page.
      res.writeHead(204, {
        "Access-Control-Allow-Origin": "*",
        "Access-Control-Allow-Methods": "POST, OPTIONS",
        "Access-Control-Allow-Headers":
          "Authorization, Content-Type, Neon-Connection-String, Neon-Raw-Text-Output, Neon-Array-Mode, " +
          "Neon-Pool-Opt-In, Neon-Batch-Isolation-Level, Neon-Batch-Read-Only, Neon-Batch-Deferrable",
        "Access-Control-Max-Age": "86400",
      });
      res.end();
      return;
    }
    // Counters for clients that cannot reach this process's memory (the workerd test suite
    // counts statements per API call here). Development/test only, like the whole proxy.
    if (pathname === "/__stats" && req.method === "GET") {
      sendJson(res, 200, statsSnapshot(stats));
      return;
    }
    if (pathname === "/__stats/reset" && req.method === "POST") {
      stats.reset();
      sendJson(res, 200, statsSnapshot(stats));
      return;
    }
    if (pathname === "/__stats/log" && req.method === "GET") {
      sendJson(res, 200, { statements: stats.log });
      return;
    }
    if (pathname === "/__suspend" && req.method === "POST") {
      const wakeMs = Number(new URL(req.url ?? "/", "http://localhost").searchParams.get("wake_ms") ?? "0");
      if (!Number.isInteger(wakeMs) || wakeMs < 0 || wakeMs > 600_000) {
        sendJson(res, 400, { message: "wake_ms must be an integer from 0 to 600000" });
        return;
      }
      suspend(wakeMs);
      sendJson(res, 200, { suspended: true, wake_ms: wakeMs });
      return;
    }
    if (pathname !== "/sql" || req.method !== "POST") {
      sendJson(res, 404, { message: `not found: ${req.method} ${pathname} (use POST /sql or WebSocket /v1)` });
      return;
    }
    handleSql(req, res).catch((err: unknown) => {
      stats.http.errors++;
      const { status, body } = errorBody(err);
      if (status >= 500) onError(err);
      if (res.headersSent) res.destroy();
      else sendJson(res, status, body);
    });
  });

  // WebSocket path: a byte pipe, plus the counter on the client->server side.
  const wss = new WebSocketServer({ noServer: true, perMessageDeflate: false });
  let nextConnectionId = 1;

  server.on("upgrade", (req: IncomingMessage, rawSocket: Duplex, head: Buffer) => {
    const url = new URL(req.url ?? "/", "http://localhost");
    // /v1?address=host:port is what a string wsProxy produces; /v2 is the
    // driver's default path against Neon itself (no address parameter).
    if (closing || (url.pathname !== "/v1" && url.pathname !== "/v2")) {
      rawSocket.end("HTTP/1.1 404 Not Found\r\nConnection: close\r\n\r\n");
      return;
    }
    const address = url.searchParams.get("address") ?? "";
    const addressPort = Number.parseInt(address.slice(address.lastIndexOf(":") + 1), 10);
    const targetPort = useAddressPort && Number.isInteger(addressPort) ? addressPort : pgPort;
    wss.handleUpgrade(req, rawSocket, head, (ws) => pipe(ws, address, targetPort));
  });

  function pipe(ws: WebSocket, address: string, targetPort: number): void {
    const counter: FrontendMessageCounter = new FrontendMessageCounter((text) =>
      stats.record({ at: Date.now(), via: "ws", user: counter.user, database: counter.database, text }),
    );
    const connStats: WsConnectionStats = { id: nextConnectionId++, address, queries: 0, parses: 0, open: true };
    stats.track(connStats);
    const tunnel: { ws: WebSocket; socket?: Socket } = { ws };
    tunnels.add(tunnel);
    // Frames that arrive before PostgreSQL is connected (while a suspended compute wakes up).
    const pending: Buffer[] = [];

    let closed = false;
    const closeBoth = (code: number, reason: string) => {
      if (closed) return;
      closed = true;
      connStats.open = false;
      tunnels.delete(tunnel);
      tunnel.socket?.destroy();
      if (ws.readyState === WebSocket.OPEN) ws.close(code, reason);
      else ws.terminate();
    };

    const forward = (chunk: Buffer) => {
      const socket = tunnel.socket;
      if (!socket) {
        pending.push(chunk);
      } else if (!socket.write(chunk)) {
        ws.pause(); // backpressure: stop reading frames until PostgreSQL catches up
        socket.once("drain", () => ws.resume());
      }
    };
    ws.on("message", (data: Buffer | ArrayBuffer | Buffer[]) => {
      // binaryType is the default 'nodebuffer', so this is normally a Buffer already.
      const chunk = Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data);
      counter.push(chunk);
      stats.ws.queries += counter.queries - connStats.queries;
      stats.ws.parses += counter.parses - connStats.parses;
      connStats.queries = counter.queries;
      connStats.parses = counter.parses;
      connStats.user ??= counter.user;
      connStats.database ??= counter.database;
      forward(chunk);
    });
    ws.on("close", () => closeBoth(1000, ""));
    ws.on("error", () => closeBoth(1011, "websocket error"));

    void awake().then(() => {
      if (closed) return;
      // Node buffers writes made while the TCP connect is still in progress, so
      // the driver's early StartupMessage is not lost.
      const socket = netConnect({ host: pgHost, port: targetPort });
      socket.setNoDelay(true);
      tunnel.socket = socket;
      for (const chunk of pending.splice(0)) forward(chunk);
      socket.on("data", (chunk: Buffer) => {
        ws.send(chunk, { binary: true }, () => {
          if (socket.isPaused() && ws.bufferedAmount < WS_HIGH_WATER / 2) socket.resume();
        });
        if (ws.bufferedAmount > WS_HIGH_WATER) socket.pause();
      });
      socket.on("close", () => closeBoth(1000, "database connection closed"));
      socket.on("error", (err) => closeBoth(1011, `database connection error: ${err.message}`.slice(0, 120)));
    });
  }

  /** The plain TCP path: the same pipe and counter, without the WebSocket framing. */
  function tcpPipe(client: Socket): void {
    stats.tcp.opened++;
    let seen = { queries: 0, parses: 0 };
    const counter: FrontendMessageCounter = new FrontendMessageCounter((text) =>
      stats.record({ at: Date.now(), via: "tcp", user: counter.user, database: counter.database, text }),
    );
    const tunnel: { client: Socket; upstream?: Socket } = { client };
    tcpTunnels.add(tunnel);
    const pending: Buffer[] = [];
    let closed = false;
    const closeBoth = () => {
      if (closed) return;
      closed = true;
      tcpTunnels.delete(tunnel);
      tunnel.upstream?.destroy();
      client.destroy();
    };
    const forward = (chunk: Buffer) => {
      const upstream = tunnel.upstream;
      if (!upstream) {
        pending.push(chunk);
      } else if (!upstream.write(chunk)) {
        client.pause();
        upstream.once("drain", () => client.resume());
      }
    };
    client.setNoDelay(true);
    client.on("data", (chunk: Buffer) => {
      counter.push(chunk);
      stats.tcp.queries += counter.queries - seen.queries;
      stats.tcp.parses += counter.parses - seen.parses;
      seen = { queries: counter.queries, parses: counter.parses };
      forward(chunk);
    });
    client.on("close", closeBoth);
    client.on("error", closeBoth);
    void awake().then(() => {
      if (closed) return;
      const upstream = netConnect({ host: pgHost, port: pgPort });
      upstream.setNoDelay(true);
      tunnel.upstream = upstream;
      for (const chunk of pending.splice(0)) forward(chunk);
      upstream.pipe(client);
      upstream.on("close", closeBoth);
      upstream.on("error", closeBoth);
    });
  }

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("unexpected server address");
  const hostForUrl = host.includes(":") ? `[${host}]` : host === "0.0.0.0" ? "127.0.0.1" : host;
  const url = `http://${hostForUrl}:${address.port}`;

  const tcpServer = options.tcp ? createTcpServer((socket) => tcpPipe(socket)) : undefined;
  let tcpPort: number | undefined;
  if (tcpServer) {
    const wanted = typeof options.tcp === "object" ? options.tcp.port : 0;
    await new Promise<void>((resolve, reject) => {
      tcpServer.once("error", reject);
      tcpServer.listen(wanted, host, () => {
        tcpServer.off("error", reject);
        resolve();
      });
    });
    tcpPort = (tcpServer.address() as { port: number }).port;
  }

  return {
    port: address.port,
    url,
    fetchEndpoint: `${url}/sql`,
    wsProxy: `${hostForUrl}:${address.port}/v1`,
    ...(tcpPort !== undefined ? { tcpPort } : {}),
    stats,
    suspend,
    async close() {
      if (closing) return;
      closing = true;
      for (const { ws, socket } of tunnels) {
        socket?.destroy();
        ws.terminate();
      }
      tunnels.clear();
      for (const { client, upstream } of tcpTunnels) {
        upstream?.destroy();
        client.destroy();
      }
      tcpTunnels.clear();
      const tcpClosed = tcpServer ? new Promise<void>((resolve) => tcpServer.close(() => resolve())) : Promise.resolve();
      const serverClosed = new Promise<void>((resolve) => server.close(() => resolve()));
      // Keep-alive HTTP connections (undici's fetch pool) would hold close() open.
      server.closeAllConnections();
      await Promise.all([serverClosed, tcpClosed, ...[...pools.values()].map((p) => p.end())]);
      pools.clear();
    },
  };
}

// ---------------------------------------------------------------------------
// CLI
// ---------------------------------------------------------------------------

async function main(): Promise<void> {
  const proxy = await startNeonProxy({
    port: Number.parseInt(process.env.NEON_PROXY_PORT ?? "4444", 10),
    host: process.env.NEON_PROXY_HOST ?? "127.0.0.1",
    pgHost: process.env.PGHOST ?? "127.0.0.1",
    pgPort: Number.parseInt(process.env.PGPORT ?? "5432", 10),
  });
  const pgTarget = `${process.env.PGHOST ?? "127.0.0.1"}:${process.env.PGPORT ?? "5432"}`;
  console.log(`Neon proxy listening on ${proxy.url} -> PostgreSQL at ${pgTarget}

Connection string (host is ignored, every connection goes to ${pgTarget};
user, password and database are used as given):
  postgres://<user>:<password>@db.localtest.me:5432/<database>

Driver settings (or call configureNeonForLocalProxy(neonConfig, '${proxy.url}')):
  neonConfig.fetchEndpoint = '${proxy.fetchEndpoint}'
  neonConfig.wsProxy = '${proxy.wsProxy}'
  neonConfig.useSecureWebSocket = false
  neonConfig.pipelineConnect = false
  neonConfig.pipelineTLS = false
  neonConfig.webSocketConstructor = ws   // Node only; workerd has a global WebSocket
`);
  const stop = () => {
    proxy.close().then(
      () => process.exit(0),
      (err: unknown) => {
        console.error(err);
        process.exit(1);
      },
    );
  };
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
