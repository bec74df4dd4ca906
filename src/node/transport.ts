/**
 * What happens below the app, in Node's HTTP server: requests that Node's parser refuses, that
 * @hono/node-server cannot turn into a Request, that HTTP/1.1 forbids or that this server will not
 * read, and connections that end before their request was received.
 *
 * - Node reports parse errors, oversized headers and its request timeouts as `clientError` and by
 *   default answers them with a bare status line. Here the answer is the API's problem+json (the
 *   same codes the README documents), written to the socket as Node would write its own.
 * - A refusal never takes the place of an answer owed to an earlier request on the same
 *   connection. With HTTP/1.1 pipelining, a client may send a valid request and a malformed one in
 *   one write: the first is served (and may commit) while the parser fails on the second. The
 *   refusal then waits until every earlier response on the connection has been written, follows
 *   them, and closes the connection; a client matching answers to requests in order gets the
 *   committed answer for its first request, never the refusal of its second.
 * - A refusal that hits a request the app is already serving (a malformed chunk in the middle of
 *   a body) ends that request's body with an error. The app asks `transportFailure` what it was
 *   and answers with the same code and request id the client was sent, so the access log and the
 *   metrics count a 400, never an `internal` 500. A connection that simply ends before its
 *   request was complete is `client-closed` (logged as 499: nobody is left to answer).
 * - Two messages are refused before the app sees them, as responses in their turn on the
 *   connection: an HTTP/1.1 request without a Host header (RFC 9112, section 3.2; Node would answer
 *   a bare 400), and a GET or HEAD that declares content. Those carry no meaning here, and Node
 *   would read and discard such a body after the answer without any bound, so it is refused (413,
 *   the connection closed) instead of read.
 * - Refusals with no request in flight are logged here, as access-log lines of their own, and
 *   counted for /metrics.
 *
 * docs/security.md lists what Node still answers on its own.
 */
import { randomUUID } from "node:crypto";
import { STATUS_CODES, type IncomingMessage, type RequestListener, type Server, type ServerResponse } from "node:http";
import type { Socket } from "node:net";
import type { HttpBindings } from "@hono/node-server";
import type { Context } from "hono";
import { PROBLEM_CONTENT_TYPE, problemDocument } from "../http/problem.js";
import type { AccessLogSink } from "../observability/access-log.js";
import { log } from "../telemetry/log.js";
import { parseTraceparent, randomSpanId, randomTraceId } from "../telemetry/trace-context.js";
import { RegistryError } from "../registry/errors.js";

/** The problem for an error Node's HTTP server reports, or null when the client is gone. */
function refusalFor(error: NodeJS.ErrnoException & { reason?: string }): RegistryError | null {
  const code = error.code ?? "";
  // The connection ended (HPE_INVALID_EOF_STATE: it ended in the middle of a request).
  if (/^(ECONNRESET|EPIPE|ECONNABORTED|ETIMEDOUT|ERR_STREAM_PREMATURE_CLOSE|HPE_INVALID_EOF_STATE)$/.test(code)) return null;
  if (code === "HPE_HEADER_OVERFLOW") {
    return new RegistryError("header-fields-too-large", "the request's header fields exceed the server's limit (16 KiB in total by default)");
  }
  if (code === "HPE_CHUNK_EXTENSIONS_OVERFLOW") {
    return new RegistryError("payload-too-large", "the request's chunk extensions exceed the server's limit");
  }
  if (code === "ERR_HTTP_REQUEST_TIMEOUT") {
    return new RegistryError("request-timeout", "the request was not received completely in time");
  }
  const reason = error.reason ?? error.message;
  return new RegistryError("malformed-request", `the request is not valid HTTP/1.1${code ? ` (${code}${reason ? `: ${reason}` : ""})` : ""}`);
}

function problemJson(error: RegistryError, requestId: string): string {
  return JSON.stringify(problemDocument(error, requestId));
}

/** A complete HTTP/1.1 response for a socket whose parser has given up: it closes the connection. */
function rawResponse(error: RegistryError, requestId: string): string {
  const body = problemJson(error, requestId);
  return [
    `HTTP/1.1 ${error.status} ${STATUS_CODES[error.status] ?? "Error"}`,
    `Content-Type: ${PROBLEM_CONTENT_TYPE}`,
    `Content-Length: ${Buffer.byteLength(body)}`,
    `X-Request-Id: ${requestId}`,
    "Connection: close",
    "",
    body,
  ].join("\r\n");
}

export interface TransportOptions {
  /** The access log; refusals with no request in flight get a line of their own. */
  log?: AccessLogSink;
}

export interface Transport {
  /** The request listener to hand every request to (tracks requests per connection). */
  dispatch(handler: RequestListener): RequestListener;
  /** @hono/node-server's errorHandler: a request it could not build (bad Host, bad target). */
  requestError(error: unknown): Response;
  /** For the app's onError: the transport's verdict on a request whose body could not be read. */
  transportFailure(c: Context): RegistryError | undefined;
  /** Refusals answered here, by code (for /metrics). */
  refusals(): Record<string, number>;
}

interface Verdict {
  error: RegistryError;
  requestId: string;
}

/** Why a message that Node parsed is refused before the app sees it, if it is. */
function messageRefusal(req: IncomingMessage): RegistryError | null {
  if (req.httpVersion === "1.1" && req.headers.host === undefined) {
    return new RegistryError("malformed-request", "an HTTP/1.1 request must carry a Host header (RFC 9112, section 3.2)");
  }
  if ((req.method === "GET" || req.method === "HEAD") && (req.headers["transfer-encoding"] !== undefined || Number(req.headers["content-length"] ?? 0) > 0)) {
    return new RegistryError("payload-too-large", `${req.method} requests take no content: this one declares a body, which is not read`);
  }
  return null;
}

/** Options of the HTTP server that this module expects: Host is checked here, with a problem body. */
export const TRANSPORT_SERVER_OPTIONS = { requireHostHeader: false } as const;

interface Exchange {
  req: IncomingMessage;
  res: ServerResponse;
}

export function installTransport(server: Server, options: TransportOptions = {}): Transport {
  /** Per connection, the requests whose responses have not been written yet, in arrival order. */
  const unanswered = new WeakMap<Socket, Exchange[]>();
  /** Connections whose parser gave up; they take no further request and close after the refusal. */
  const refused = new WeakSet<Socket>();
  const verdicts = new WeakMap<IncomingMessage, Verdict>();
  const counts: Record<string, number> = {};

  /** A refusal's access-log line: in the caller's trace when its headers were read and name one, else in one of its own. */
  const record = (error: RegistryError, requestId: string, req?: IncomingMessage) => {
    counts[error.code] = (counts[error.code] ?? 0) + 1;
    try {
      const header = req?.headers.traceparent;
      const trace_id = parseTraceparent(typeof header === "string" ? header : undefined)?.traceId ?? randomTraceId();
      options.log?.({
        request_id: requestId,
        trace_id,
        span_id: randomSpanId(),
        method: req?.method ?? "-",
        route: "unmatched",
        status: error.status,
        latency_ms: 0,
        code: error.code,
      });
    } catch {
      // A failing log sink must not break the refusal.
    }
  };

  /** Runs `then` once every response in `exchanges` has been written (or its connection died). */
  const afterAll = (exchanges: Exchange[], then: () => void) => {
    let left = exchanges.length;
    if (left === 0) return then();
    for (const { res } of exchanges) {
      const done = () => {
        if (--left === 0) then();
      };
      if (res.closed) done();
      else res.once("close", done);
    }
  };

  server.on("clientError", (error: NodeJS.ErrnoException, socket: Socket) => {
    const refusal = refusalFor(error);
    if (!refusal) {
      socket.destroy(error);
      return;
    }
    // The parser reports again on every later chunk; the connection is answered once.
    if (refused.has(socket)) return;
    refused.add(socket);
    const pending = unanswered.get(socket) ?? [];
    const last = pending.at(-1);
    // The refusal is about the request whose body was being received, or about a new message.
    const current = last && !last.req.complete ? last : undefined;
    const requestId = randomUUID();
    // The app logs a request it is serving, with this verdict; anything else is logged here.
    if (current) verdicts.set(current.req, { error: refusal, requestId });
    else record(refusal, requestId);
    afterAll(
      pending.filter((exchange) => exchange !== current),
      () => {
        // As Node does: answer unless this request's response has already begun.
        if (socket.writable && !current?.res.headersSent) socket.write(rawResponse(refusal, requestId));
        // Once written: ends the request being received (the app then answers nobody) and the connection.
        socket.destroySoon();
      },
    );
  });

  return {
    dispatch: (handler) => (req, res) => {
      const socket = req.socket;
      const exchange = { req, res };
      const list = unanswered.get(socket);
      if (list) list.push(exchange);
      else unanswered.set(socket, [exchange]);
      res.once("close", () => {
        const remaining = unanswered.get(socket);
        const index = remaining?.indexOf(exchange) ?? -1;
        if (remaining && index >= 0) remaining.splice(index, 1);
      });
      const refusal = messageRefusal(req);
      if (!refusal) return handler(req, res);
      // A response in its turn (Node queues it behind earlier ones), and the connection closes after it.
      const requestId = randomUUID();
      record(refusal, requestId, req);
      const body = problemJson(refusal, requestId);
      res.writeHead(refusal.status, {
        "content-type": PROBLEM_CONTENT_TYPE,
        "content-length": Buffer.byteLength(body),
        "x-request-id": requestId,
        connection: "close",
      });
      res.end(body);
    },
    requestError(error) {
      const requestId = randomUUID();
      const refusal =
        error instanceof Error && error.name === "RequestError"
          ? new RegistryError("malformed-request", `the request cannot be served: ${error.message}`)
          : new RegistryError("internal", "internal error");
      if (refusal.code === "internal") log.error("unhandled error", { request_id: requestId, error: String((error as Error)?.stack ?? error) });
      record(refusal, requestId);
      return new Response(problemJson(refusal, requestId), {
        status: refusal.status,
        headers: { "content-type": PROBLEM_CONTENT_TYPE, "x-request-id": requestId },
      });
    },
    transportFailure(c) {
      const incoming = (c.env as Partial<HttpBindings> | undefined)?.incoming;
      if (!incoming) return undefined;
      const verdict = verdicts.get(incoming);
      if (verdict) {
        // The request id the client was sent, so that the access log line matches its answer.
        c.set("requestId", verdict.requestId);
        return verdict.error;
      }
      if (incoming.destroyed && !incoming.complete) {
        return new RegistryError("client-closed", "the client closed the connection before its request was complete");
      }
      return undefined;
    },
    refusals: () => ({ ...counts }),
  };
}
