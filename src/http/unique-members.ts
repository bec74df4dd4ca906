/**
 * Duplicate member names in a JSON text. JSON.parse keeps the last of two `tenant_id` members
 * where another parser may keep the first: a token whose JOSE header or claims repeat a name means
 * two things to two parsers, and is refused (RFC 7519 section 4 and RFC 7515 section 5.2 let a
 * recipient refuse it). jose parses with JSON.parse, so the check is ours: one pass over text that
 * is already known to be valid JSON, run only for tokens whose signature verified, and for each
 * key set fetched from the identity provider (src/http/jwks.ts: two `keys` members are refused).
 */
export function duplicateMemberName(json: string): string | undefined {
  // One entry per open container: the member names of an object, null for an array.
  const open: (Set<string> | null)[] = [];
  let expectName = false;
  for (let i = 0; i < json.length; i++) {
    const c = json[i];
    if (c === '"') {
      const start = i;
      let escaped = false;
      for (i++; i < json.length && json[i] !== '"'; i++) {
        if (json[i] === "\\") {
          escaped = true;
          i++;
        }
      }
      const names = open[open.length - 1];
      if (expectName && names) {
        // Escapes decoded: "tenant_id" and "tenant\u005fid" are one name.
        const name = escaped ? (JSON.parse(json.slice(start, i + 1)) as string) : json.slice(start + 1, i);
        if (names.has(name)) return name;
        names.add(name);
        expectName = false;
      }
    } else if (c === "{") {
      open.push(new Set());
      expectName = true;
    } else if (c === "[") {
      open.push(null);
    } else if (c === "}" || c === "]") {
      open.pop();
    } else if (c === ",") {
      expectName = open[open.length - 1] != null;
    }
  }
  return undefined;
}
