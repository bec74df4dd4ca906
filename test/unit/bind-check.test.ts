/**
 * The Node server's bind check (src/http/bind-check.ts): loopback addresses always, anything else
 * only with ALLOW_NETWORK_BIND=true.
 */
import { describe, expect, it } from "vitest";
import { bindRefusal, isLoopbackHost } from "../../src/http/bind-check.js";

const LOOPBACK = ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "0:0:0:0:0:0:0:1", "::ffff:127.0.0.1", "localhost", "LOCALHOST", "api.localhost"];
const NETWORK = [
  "0.0.0.0",
  "::",
  "[::]",
  "",
  "10.0.0.7",
  "192.168.1.10",
  "::ffff:10.0.0.1",
  "2001:db8::1",
  "registry.internal",
  "host.docker.internal",
  "128.0.0.1",
  "localhost.example.com",
];

describe("bindRefusal", () => {
  it.each(LOOPBACK)("allows loopback %j without a setting", (host) => {
    expect(isLoopbackHost(host)).toBe(true);
    expect(bindRefusal(host, false)).toBeNull();
  });

  it.each(NETWORK)("refuses %j without ALLOW_NETWORK_BIND, and allows it with", (host) => {
    expect(isLoopbackHost(host)).toBe(false);
    expect(bindRefusal(host, false)).toMatch(/ALLOW_NETWORK_BIND=true/);
    expect(bindRefusal(host, true)).toBeNull();
  });

  it("names what it refuses", () => {
    expect(bindRefusal("0.0.0.0", false)).toMatch(/^refusing to listen on non-loopback address 0\.0\.0\.0: /);
    expect(bindRefusal("", false)).toMatch(/^refusing to listen on every interface: /);
  });
});
