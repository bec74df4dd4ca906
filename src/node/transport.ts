/**
 * What happens below the app, in Node's HTTP server: requests that Node's parser refuses, that
 * @hono/node-server cannot turn into a Request, and connections that end before their request
 * was received.
 *
 * - Node reports parse errors, oversized headers and its request timeouts as `clientError` and by
 *   default answers them with a bare status line. Here the answer is the API's problem+json (the
 *   same codes the README documents), written to the socket as Node would write its own.
 * - A refusal that hits a request the app is already serving (a malformed chunk in the middle of
 *   a body) ends that request's body with an error. The app asks `transportFailure` what it was
 *   and answers with the same code and request id the client was sent, so the access log and the
 *   metrics count a 400, never an `internal` 500. A connection that simply ends before its
 *   request was complete is `client-closed` (logged as 499: nobody is left to answer).
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
import { PROBLEM_CONTENT_TYPE } from "../http/problem.js";
import type { AccessLogSink } from "../observability/access-log.js";
import { PROBLEM_TITLES, RegistryError } from "../registry/errors.js";

/** The problem for an error Node's HTTP server reports, or null when the client is gone. */
export function refusalFor(error: NodeJS.ErrnoException & { reason?: string }): RegistryError | null {
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
  return JSON.stringify({
    type: `https://aip.dev/problems/${error.code}`,
    title: PROBLEM_TITLES[error.code],
    status: error.status,
    detail: error.message,
    code: error.code,
    request_id: requestId,
  });
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

export function installTransport(server: Server, options: TransportOptions = {}): Transport {
  const inFlight = new WeakMap<Socket, { req: IncomingMessage; res: ServerResponse }>();
  const verdicts = new WeakMap<IncomingMessage, Verdict>();
  const counts: Record<string, number> = {};

  const record = (error: RegistryError, requestId: string, method = "-") => {
    counts[error.code] = (counts[error.code] ?? 0) + 1;
    try {
      options.log?.({ request_id: requestId, method, route: "unmatched", status: error.status, latency_ms: 0, code: error.code });
    } catch {
      // A failing log sink must not break the refusal.
    }
  };

  server.on("clientError", (error: NodeJS.ErrnoException, socket: Socket) => {
    const current = inFlight.get(socket);
    const refusal = refusalFor(error);
    if (refusal) {
      const requestId = randomUUID();
      const serving = current !== undefined && !current.req.complete;
      // The app logs a request it is serving, with this verdict; anything else is logged here.
      if (serving) verdicts.set(current.req, { error: refusal, requestId });
      else record(refusal, requestId);
      // As Node does: answer unless a response has already begun on this connection.
      if (socket.writable && !current?.res.headersSent) socket.write(rawResponse(refusal, requestId));
    }
    socket.destroy(error);
  });

  return {
    dispatch: (handler) => (req, res) => {
      const socket = req.socket;
      inFlight.set(socket, { req, res });
      res.once("close", () => {
        if (inFlight.get(socket)?.req === req) inFlight.delete(socket);
      });
      handler(req, res);
    },
    requestError(error) {
      const requestId = randomUUID();
      const refusal =
        error instanceof Error && error.name === "RequestError"
          ? new RegistryError("malformed-request", `the request cannot be served: ${error.message}`)
          : new RegistryError("internal", "internal error");
      if (refusal.code === "internal")
        console.error(JSON.stringify({ level: "error", msg: "unhandled error", request_id: requestId, error: String((error as Error)?.stack ?? error) }));
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
