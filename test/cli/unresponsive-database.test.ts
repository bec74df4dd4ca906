/**
 * Every CLI command that talks to a database gives up on one that accepts connections but never
 * answers (a half-dead server, a firewall that swallows packets, the wrong port of something else):
 * it exits 3 (unavailable) within its connect timeout and says which database did not answer,
 * instead of hanging for good.
 */
import { createServer, type Server, type Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { CLI_CONNECT_TIMEOUT_MS } from "../../src/limits.js";
import { cleanEnv, freePort, runCli } from "./support.js";

vi.setConfig({ testTimeout: 120_000 });

let blackHole: Server;
const sockets = new Set<Socket>();
let url: string;

beforeAll(async () => {
  // Accepts every connection and never sends a byte.
  blackHole = createServer((socket) => {
    sockets.add(socket);
    socket.on("error", () => {});
  });
  await new Promise<void>((resolve) => blackHole.listen(0, "127.0.0.1", resolve));
  url = `postgres://owner:secret@127.0.0.1:${(blackHole.address() as { port: number }).port}/registry`;
});
afterAll(async () => {
  for (const socket of sockets) socket.destroy();
  await new Promise<void>((resolve) => blackHole.close(() => resolve()));
});

const redacted = () => url.replace("secret", "***");

// Each waits out the same connect timeout: side by side, the file takes one timeout, not three.
describe.concurrent("a database that accepts connections and never answers", () => {
  it("gives up on a database that never answers, in every command that talks SQL, and names it", async () => {
    const commands = [
      ["migrate", "--database-url", url],
      ["doctor", "--database-url", url],
      ["status", "--database-url", url],
      ["expire-leases", "--database-url", url],
      ["apply", "-f", "examples/fleet.yaml", "--database-url", url],
    ];
    const started = Date.now();
    const results = await Promise.all(commands.map((args) => runCli(args, { timeoutMs: 60_000 })));
    const elapsed = Date.now() - started;
    for (const [index, result] of results.entries()) {
      const name = commands[index]?.[0];
      expect(result.code, `${name}: ${result.stderr}`).toBe(3);
      expect(result.stderr, name).toContain(`the database at ${redacted()} did not answer within ${CLI_CONNECT_TIMEOUT_MS / 1000} s`);
      expect(result.stderr, name).not.toContain("secret");
    }
    // Bounded by the connect timeout (with room for a busy machine), not by the test's kill timer.
    expect(elapsed).toBeLessThan(CLI_CONNECT_TIMEOUT_MS + 20_000);
  });

  it("migrate finds the database in DATABASE_URL the same way", async () => {
    const result = await runCli(["migrate"], { env: cleanEnv({ DATABASE_URL: url }), timeoutMs: 60_000 });
    expect(result.code, result.stderr).toBe(3);
    expect(result.stderr).toContain(`the database at ${redacted()} did not answer within ${CLI_CONNECT_TIMEOUT_MS / 1000} s`);
  });

  it("serve refuses to start on it (exit 1), naming it", async () => {
    const port = await freePort();
    const result = await runCli(["serve", "--port", String(port), "--database-url", url], {
      env: cleanEnv({ AUTH_HS256_SECRET: "unresponsive-database-test-secret-0123456789" }),
      timeoutMs: 60_000,
    });
    expect(result.code, result.stderr).toBe(1);
    expect(result.stderr).toContain(`cannot use the database at ${redacted()}`);
  });
});
