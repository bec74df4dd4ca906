/** Content negotiation and validators of compressed representations (src/http/compression.ts, src/catalog/serve.ts). */
import { brotliDecompressSync, gunzipSync } from "node:zlib";
import { describe, expect, it } from "vitest";
import { etagOf, keyDigest, validatorRevision } from "../../src/catalog/serve.js";
import { negotiateCoding, varyOnEncoding } from "../../src/http/compression.js";
import { nodeCompressor } from "../../src/node/compression.js";

const BOTH = ["br", "gzip"] as const;

describe("negotiateCoding", () => {
  it.each([
    [undefined, null],
    ["", null],
    ["gzip", "gzip"],
    ["gzip, deflate, br", "br"],
    ["br;q=0.5, gzip", "gzip"],
    ["BR, GZIP", "br"],
    ["x-gzip", "gzip"],
    ["deflate", null],
    ["gzip;q=0, br;q=0", null],
    ["*", "br"],
    ["*;q=0", null],
    ["gzip;q=0.5, identity", null],
    ["gzip;q=0.5, *;q=0.8", "br"],
    ["br;q=0.2, *;q=0.5", "gzip"],
    ["identity;q=0, gzip;q=0.1", "gzip"],
    ["gzip ; q = 0.7, br;q=0.6", "gzip"],
    ["br;q=garbage", "br"], // a malformed weight is ignored
  ])("%j -> %j", (header, expected) => {
    expect(negotiateCoding(header, BOTH)).toBe(expected);
  });

  it("offers only what the server has", () => {
    expect(negotiateCoding("br", ["gzip"])).toBeNull();
    expect(negotiateCoding("br, gzip", [])).toBeNull();
  });
});

it("adds accept-encoding to Vary once, beside what is there", () => {
  const headers = new Headers({ vary: "authorization" });
  varyOnEncoding(headers);
  varyOnEncoding(headers);
  expect(headers.get("vary")).toBe("authorization, accept-encoding");
  const star = new Headers({ vary: "*" });
  varyOnEncoding(star);
  expect(star.get("vary")).toBe("*");
});

it("gives each coding of a catalog answer its own strong ETag, and validates any of them for the same request", () => {
  const digest = keyDigest("page-key");
  const tags = [etagOf(7, digest), etagOf(7, digest, "br"), etagOf(7, digest, "gzip")];
  expect(new Set(tags).size).toBe(3);
  expect(tags[1]).toBe(`"7-${digest}-br"`);
  for (const tag of tags) {
    expect(validatorRevision(tag, digest)).toBe(7);
    expect(validatorRevision(`W/${tag}`, digest)).toBe(7);
    expect(validatorRevision(tag, keyDigest("another request"))).toBeNull();
  }
  expect(validatorRevision(`"7-${digest}-deflate"`, digest)).toBeNull();
});

it("compresses inline and on the thread pool alike, each coding round-tripping", async () => {
  for (const size of [2_000, 200_000]) {
    const text = JSON.stringify(Array.from({ length: size / 20 }, (_, i) => ({ id: `cap:${i}` }))).slice(0, size);
    expect(brotliDecompressSync(await nodeCompressor.compress(text, "br")).toString()).toBe(text);
    expect(gunzipSync(await nodeCompressor.compress(Buffer.from(text), "gzip")).toString()).toBe(text);
  }
});
