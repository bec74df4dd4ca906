/**
 * Graceful stop of the Node server's HTTP listener: stop accepting connections, let the requests
 * already in flight finish for up to a bounded drain time, then cut what is left.
 *
 * Every request is counted from its arrival until its response is finished or its connection
 * closes. While draining, answers carry `Connection: close`, so a keep-alive client takes its next
 * request to another instance instead of this one; idle keep-alive connections are closed at once.
 */
import type { IncomingMessage, Server, ServerResponse } from "node:http";

export interface DrainReport {
  /** Requests still unanswered at the deadline, whose connections were closed. */
  cut: number;
  /** How long the drain took. */
  ms: number;
}

export interface Drainable {
  /** Call for every request as it arrives. */
  track(req: IncomingMessage, res: ServerResponse): void;
  /** Requests in flight now. */
  readonly inFlight: number;
  /** Stops accepting, waits up to `drainMs` for the requests in flight, closes every connection. */
  drain(drainMs: number): Promise<DrainReport>;
}

export function drainable(server: Server): Drainable {
  const open = new Set<ServerResponse>();
  let draining = false;
  let quiet: (() => void) | undefined;
  const closeAfter = (res: ServerResponse) => {
    if (!res.headersSent) res.setHeader("Connection", "close");
  };
  return {
    track(_req, res) {
      open.add(res);
      if (draining) closeAfter(res);
      res.once("close", () => {
        open.delete(res);
        if (open.size === 0) quiet?.();
      });
    },
    get inFlight() {
      return open.size;
    },
    async drain(drainMs) {
      const started = Date.now();
      draining = true;
      for (const res of open) closeAfter(res);
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      if (open.size > 0) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, drainMs);
          quiet = () => {
            clearTimeout(timer);
            resolve();
          };
        });
      }
      const cut = open.size;
      server.closeAllConnections();
      await closed;
      return { cut, ms: Date.now() - started };
    },
  };
}
