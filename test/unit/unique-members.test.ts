/** Repeated member names in JSON texts (tokens' headers and claims: src/http/unique-members.ts). */
import { describe, expect, it } from "vitest";
import { duplicateMemberName } from "../../src/http/unique-members.js";

describe("duplicateMemberName", () => {
  it.each([
    ['{"a":1,"a":2}', "a"],
    ['{"a":1,"\\u0061":2}', "a"],
    ['{"x":{"b":1,"b":2}}', "b"],
    ['{"x":[{"c":1},{"c":1,"c":2}]}', "c"],
    ['{"a\\"b":1,"a\\"b":2}', 'a"b'],
    ['{"arr":["a","a"],"s":"a","z":{"a":"a"},"arr":0}', "arr"],
  ])("finds the repeated name in %s", (json, name) => {
    expect(duplicateMemberName(json)).toBe(name);
  });

  it.each([
    '{"a":1,"b":2}',
    '{"a":["a","a"],"b":{"a":1}}',
    '{"a":"{\\"a\\":1,\\"a\\":2}"}',
    '{"a":",\\"a\\""}',
    '[{"a":1},{"a":1}]',
    "{}",
    '{"":1,"x":{"":2}}',
  ])("finds none in %s", (json) => {
    expect(duplicateMemberName(json)).toBeUndefined();
  });
});
