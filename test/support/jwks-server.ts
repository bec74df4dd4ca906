/**
 * A local identity provider's JWKS endpoint whose key sets and failures the tests change at
 * runtime. Each named key set is served at `/<name>/jwks.json`, so tests (and workerd test files,
 * through the control endpoints) do not share state:
 *
 * - `GET  /<name>/jwks.json`: the set, or the failure its mode asks for;
 * - `POST /__control/<name>` with `{keys?, mode?}`: replaces them; answers `{fetches}`;
 * - `GET  /__control/<name>`: `{fetches}`, the fetches of the set so far.
 *
 * Mode `hold` keeps every fetch waiting (a hanging provider) until the mode changes; the waiting
 * fetches are then answered by the new mode (so a test can hold a fetch in flight, then decide).
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { JWK } from "jose";
import type { JwksMode } from "./jwks-mode.js";

class KeySetEndpoint {
  keys: JWK[] = [];
  mode: JwksMode = { kind: "ok" };
  fetches = 0;
  private held: ServerResponse[] = [];

  set(change: { keys?: JWK[]; mode?: JwksMode }): void {
    if (change.keys) this.keys = change.keys;
    if (change.mode) {
      this.mode = change.mode;
      const held = this.held;
      this.held = [];
      for (const res of held) this.answer(res);
    }
  }

  serve(res: ServerResponse): void {
    this.fetches++;
    this.answer(res);
  }

  private answer(res: ServerResponse): void {
    const mode = this.mode;
    switch (mode.kind) {
      case "ok":
        res.writeHead(200, { "content-type": "application/jwk-set+json" });
        res.end(JSON.stringify({ keys: this.keys }));
        return;
      case "status":
        res.writeHead(mode.status, { "content-type": "text/plain" });
        res.end("the identity provider is having a bad day");
        return;
      case "hold":
        this.held.push(res);
        return;
      case "body":
        res.writeHead(200, { "content-type": mode.contentType ?? "application/json" });
        res.end(mode.body);
        return;
      case "reset":
        res.socket?.destroy();
        return;
      case "oversized": {
        res.writeHead(200, { "content-type": "application/json", ...(mode.declared ? { "content-length": String(mode.bytes) } : {}) });
        const chunk = Buffer.alloc(64 * 1024, 0x20);
        let sent = 0;
        const pump = () => {
          while (sent < mode.bytes) {
            const part = chunk.subarray(0, Math.min(chunk.length, mode.bytes - sent));
            sent += part.length;
            if (!res.write(part)) return void res.once("drain", pump);
          }
          res.end();
        };
        res.once("close", () => {
          sent = mode.bytes;
        });
        pump();
        return;
      }
    }
  }

  release(): void {
    for (const res of this.held) res.socket?.destroy();
    this.held = [];
  }
}

export interface JwksServer {
  /** http://127.0.0.1:<port> */
  origin: string;
  url(name: string): string;
  endpoint(name: string): KeySetEndpoint;
  close(): Promise<void>;
}

export async function startJwksServer(): Promise<JwksServer> {
  const endpoints = new Map<string, KeySetEndpoint>();
  const endpoint = (name: string) => {
    let found = endpoints.get(name);
    if (!found) {
      found = new KeySetEndpoint();
      endpoints.set(name, found);
    }
    return found;
  };
  const server = createServer((req, res) => {
    void handle(req, res).catch((error: unknown) => {
      res.writeHead(400, { "content-type": "text/plain" });
      res.end(String(error));
    });
  });
  async function handle(req: IncomingMessage, res: ServerResponse) {
    const path = new URL(req.url ?? "/", "http://x").pathname;
    const control = /^\/__control\/([\w-]+)$/.exec(path);
    if (control?.[1]) {
      const target = endpoint(control[1]);
      if (req.method === "POST") {
        const chunks: Buffer[] = [];
        for await (const chunk of req) chunks.push(chunk as Buffer);
        target.set(JSON.parse(Buffer.concat(chunks).toString("utf8")) as { keys?: JWK[]; mode?: JwksMode });
      }
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ fetches: target.fetches }));
      return;
    }
    const served = /^\/([\w-]+)\/jwks\.json$/.exec(path);
    if (served?.[1] && req.method === "GET") return endpoint(served[1]).serve(res);
    res.writeHead(404).end();
  }
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    origin,
    url: (name) => `${origin}/${name}/jwks.json`,
    endpoint,
    close: async () => {
      for (const e of endpoints.values()) e.release();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
