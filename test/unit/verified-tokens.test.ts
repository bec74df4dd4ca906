/** The verified-token cache on its own: expiry, maximum age and eviction, on an explicit clock. */
import { describe, expect, it } from "vitest";
import { VerifiedTokens, type Principal } from "../../src/http/auth.js";

const principal = (subject: string): Principal => ({ subject, tenantId: "t", peerPrincipalId: null, scopes: new Set(["routes:write"]) });

describe("VerifiedTokens", () => {
  it("keeps a principal until the token's expiry when that comes before the maximum age", () => {
    let now = 1_000_000;
    const cache = new VerifiedTokens(10, 60_000, () => now);
    cache.set("a", principal("a"), now + 30_000);
    now += 29_999;
    expect(cache.get("a")?.subject).toBe("a");
    now += 1;
    expect(cache.get("a")).toBeUndefined();
  });

  it("keeps a principal no longer than the maximum age", () => {
    let now = 0;
    const cache = new VerifiedTokens(10, 60_000, () => now);
    cache.set("a", principal("a"), now + 3_600_000);
    now = 59_999;
    expect(cache.get("a")?.subject).toBe("a");
    now = 60_000;
    expect(cache.get("a")).toBeUndefined();
  });

  it("does not keep a token that has already expired", () => {
    const cache = new VerifiedTokens(10, 60_000, () => 5_000);
    cache.set("a", principal("a"), 5_000);
    expect(cache.get("a")).toBeUndefined();
  });

  it("evicts the oldest entry when full", () => {
    const cache = new VerifiedTokens(2, 60_000, () => 0);
    cache.set("a", principal("a"), 10_000);
    cache.set("b", principal("b"), 10_000);
    cache.set("c", principal("c"), 10_000);
    expect(cache.get("a")).toBeUndefined();
    expect(cache.get("b")?.subject).toBe("b");
    expect(cache.get("c")?.subject).toBe("c");
  });
});

describe("VerifiedTokens under a key set", () => {
  it("drops a principal as soon as the key set it was verified under is no longer current", () => {
    let current = 1;
    const cache = new VerifiedTokens(
      10,
      60_000,
      () => 0,
      (version) => version === current,
    );
    cache.set("a", principal("a"), 10_000, 1);
    expect(cache.get("a")?.subject).toBe("a");
    current = 2;
    expect(cache.get("a")).toBeUndefined();
    current = 1; // gone for good: a verification under the new set must come first
    expect(cache.get("a")).toBeUndefined();
  });
});
