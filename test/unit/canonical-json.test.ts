/**
 * Canonical JSON three ways must agree byte for byte: the registry's SQL (aip_canonical_json, which
 * computes every pinned digest), the `canonicalize` package (the RFC 8785 reference
 * implementation in JavaScript) and src/canonical-json.ts (what clients use to compute a
 * manifest_digest). Then: digests computed in TypeScript are accepted by admission.
 *
 * Inputs respect what jsonb can hold: no U+0000 and no lone surrogates in strings, no duplicate
 * keys (JSON.stringify never writes any; the raw-text cases cover jsonb's last-wins rule).
 */
import canonicalize from "canonicalize";
import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import { canonicalDigest, canonicalJson } from "../../src/canonical-json.js";
import { PROBLEM_SQLSTATE } from "../../src/registry/errors.js";
import { useTestDatabase } from "../support/database.js";
import { connectorType, version } from "../../fixtures/records.js";
import { refusal } from "../support/assertions.js";

const db = useTestDatabase();

async function sqlCanonical(jsonText: string): Promise<string> {
  const { rows } = await db.owner.query<{ c: string }>("SELECT aip_canonical_json($1::jsonb) AS c", [jsonText]);
  return rows[0]!.c;
}

// Characters that stress escaping and JCS member order: controls, quote and backslash, DEL,
// line separators, the BMP private-use area and specials (>= U+E000, where UTF-16 order and code
// point order disagree with astral characters) and astral characters (surrogate pairs).
const special = fc.constantFrom(
  "\u0001",
  "\u001f",
  "\b",
  "\f",
  "\n",
  "\r",
  "\t",
  '"',
  "\\",
  "/",
  "\u007f",
  "\u0080",
  "\u00e9",
  "\u2028",
  "\u2029",
  "\ud7ff",
  "\ue000",
  "\uf8ff",
  "\ufb01",
  "\ufeff",
  "\uffff",
  "\u{10000}",
  "\u{1f600}",
  "\u{10ffff}",
  "a",
  "A",
  "0",
  "",
);
const text = fc
  .string({
    unit: fc.oneof(special, fc.string({ unit: "binary", minLength: 1, maxLength: 1 }), fc.string({ unit: "grapheme-ascii", minLength: 1, maxLength: 1 })),
    maxLength: 8,
  })
  .filter((s) => !s.includes("\u0000"));
const number = fc.oneof(
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.integer(),
  fc.bigInt(-(2n ** 80n), 2n ** 80n).map(Number),
  fc
    .tuple(fc.integer({ min: 1, max: 999 }), fc.integer({ min: -330, max: 310 }))
    .map(([s, e]) => Number(`${s}e${e}`))
    .filter(Number.isFinite),
  fc.constantFrom(
    1e21,
    1e20,
    1e-7,
    1e-6,
    -0,
    0.1 + 0.2,
    1e23,
    2 ** 53,
    2 ** 53 + 2,
    2 ** 63,
    2 ** 64,
    5e-324,
    2.2250738585072014e-308,
    1.7976931348623157e308,
    -1.5,
    123456789012345680000,
  ),
);
const { value: jsonValue } = fc.letrec((tie) => ({
  value: fc.oneof({ maxDepth: 4, depthSize: "small" }, fc.constant(null), fc.boolean(), number, text, tie("array"), tie("object")),
  array: fc.array(tie("value"), { maxLength: 5 }),
  object: fc.dictionary(text, tie("value"), { maxKeys: 6 }),
}));

describe("canonical JSON", () => {
  it("agrees between SQL, the canonicalize reference and src/canonical-json.ts on arbitrary JSON", async () => {
    await fc.assert(
      fc.asyncProperty(jsonValue, async (value) => {
        const expected = canonicalize(value);
        expect(canonicalJson(value)).toBe(expected);
        expect(await sqlCanonical(JSON.stringify(value))).toBe(expected);
      }),
      { numRuns: 400 },
    );
  });

  it("orders members by UTF-16 code units, not code points", async () => {
    const value = { "\u{1f600}": 1, "\ue000": 2, "\uffff": 3, z: 4, "\u00e9": 5, "": 6, "\u{10000}a": 7, "\u{10000}": 8 };
    const expected = canonicalize(value)!;
    expect(expected.indexOf('"\u{1f600}"')).toBeLessThan(expected.indexOf('"\ue000"'));
    expect(canonicalJson(value)).toBe(expected);
    expect(await sqlCanonical(JSON.stringify(value))).toBe(expected);
  });

  it("serializes what JSON.stringify would send, like the reference: toJSON, undefined elements and members", () => {
    const value = { at: new Date(Date.UTC(2026, 0, 2, 3, 4, 5, 6)), list: [1, undefined, 2], gone: undefined };
    expect(canonicalJson(value)).toBe(canonicalize(value));
    expect(canonicalJson(value)).toBe('{"at":"2026-01-02T03:04:05.006Z","list":[1,null,2]}');
    expect(() => canonicalJson({ n: Number.NaN })).toThrow(TypeError);
  });

  it.each([
    ["1.0"],
    ["1E2"],
    ["-0"],
    ["-0.0"],
    ["0.10"],
    ["1e-7"],
    ["0.000001"],
    ["100000000000000000000000"],
    ["1e23"],
    ["12345678901234567890123"],
    ["0.1000000000000000055511151231257827"],
    ["9007199254740993"],
    ["4.35"],
    ["1e21"],
    ["999999999999999999999"],
    ['"\\u00e9\\/\\u001F\\uD83D\\uDE00"'],
    ['{"a":1,"a":2}'],
    ['{"b":[],"a":{}}'],
    ["[true,false,null]"],
    ['"\\u2028"'],
  ])("canonicalizes the JSON text %s like the reference", async (source) => {
    expect(await sqlCanonical(source)).toBe(canonicalize(JSON.parse(source)));
  });

  it("refuses numbers outside the IEEE 754 double range and nesting beyond 128 levels", async () => {
    const invalid = { code: PROBLEM_SQLSTATE, detail: expect.stringContaining('"code": "invalid"') };
    await expect(sqlCanonical("1e400")).rejects.toMatchObject(invalid);
    const nested = (depth: number) => `${"[".repeat(depth)}${"]".repeat(depth)}`;
    expect(await sqlCanonical(nested(128))).toBe(nested(128));
    await expect(sqlCanonical(nested(129))).rejects.toMatchObject({ ...invalid, message: expect.stringContaining("128 levels") });
  });
});

describe("manifest digests computed in TypeScript", () => {
  const typeId = "ctype_canonical";
  beforeAll(async () => {
    await db.registry.publish([connectorType(typeId)]);
  });

  it("are accepted by admission for arbitrary manifest content", async () => {
    let n = 0;
    await fc.assert(
      fc.asyncProperty(fc.dictionary(text, jsonValue, { maxKeys: 4 }), jsonValue, text, async (extensions, example, description) => {
        const id = `cap:canonical.${++n}`;
        const change = await version(`cver_canonical_${n}`, typeId, [
          { id, description: `d${description}`, input_schema: { type: "object", examples: [example] } },
        ]);
        const manifest: Record<string, unknown> = { ...change.manifest, extensions };
        const result = await db.registry.publish([{ ...change, manifest, manifest_digest: await canonicalDigest(manifest) }]);
        expect(result.results[0]?.outcome).toBe("created");
        // The definition's digests are the canonical ones as well.
        const definition = (await db.registry.adminCatalogPage(null, true, { capability_id: id })).capabilities[0]!;
        const capability = (manifest.capabilities as Record<string, unknown>[])[0]!;
        expect(definition.contract_digest).toBe(await canonicalDigest(capability));
        expect(definition.schema_digest).toBe(await canonicalDigest({ input: capability.input_schema, output: capability.output_schema }));
      }),
      { numRuns: 25 },
    );
  });

  it("is refused when computed over anything but the canonical form", async () => {
    const change = await version("cver_canonical_pretty", typeId, [{ id: "cap:canonical.pretty", description: "\u00e9\u{1f600}", weight: 1e21 }]);
    const { createHash } = await import("node:crypto");
    const pretty = `sha256:${createHash("sha256").update(JSON.stringify(change.manifest)).digest("hex")}`;
    const error = await refusal(db.registry.publish([{ ...change, manifest_digest: pretty }]));
    expect(error.code).toBe("admission");
    expect(error.extensions.computed).toBe(change.manifest_digest);
  });
});
