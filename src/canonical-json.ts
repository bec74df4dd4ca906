/**
 * RFC 8785 (JCS) canonical JSON and the registry's `sha256:` digests, for clients of the registry
 * (the CLI computes a manifest_digest and a schema bundle digest before publishing). The registry itself recomputes every
 * digest in SQL (functions/03_canonical_json.sql); test/unit/canonical-json.test.ts keeps both in step.
 */
export function canonicalJson(value: unknown): string {
  // What JSON.stringify would send is what gets canonicalized: toJSON() first (a Date becomes its
  // ISO string), undefined array elements become null, undefined members are left out.
  if (value !== null && typeof value === "object" && typeof (value as { toJSON?: unknown }).toJSON === "function") {
    return canonicalJson((value as { toJSON: () => unknown }).toJSON());
  }
  if (value === null || typeof value === "boolean" || typeof value === "string") return JSON.stringify(value);
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new TypeError("canonical JSON cannot represent a non-finite number");
    // ECMAScript number serialization is exactly what JCS prescribes; -0 serializes as 0.
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) return `[${value.map((item) => canonicalJson(item === undefined ? null : item)).join(",")}]`;
  if (typeof value === "object") {
    const record = value as Record<string, unknown>;
    // Default string ordering compares UTF-16 code units, which is JCS's member order.
    const members = Object.keys(record)
      .filter((key) => record[key] !== undefined)
      .sort()
      .map((key) => `${JSON.stringify(key)}:${canonicalJson(record[key])}`);
    return `{${members.join(",")}}`;
  }
  throw new TypeError(`canonical JSON cannot represent a ${typeof value}`);
}

export async function sha256Digest(text: string): Promise<string> {
  const bytes = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)));
  return `sha256:${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

export function canonicalDigest(value: unknown): Promise<string> {
  return sha256Digest(canonicalJson(value));
}

/**
 * The schema bundle digest of a manifest's capabilities, which an attestation states as
 * `schema_bundle_digest`: the canonical `{"schemas": [{capability_id, input, output}, ...]}` in
 * manifest order, a missing output schema as null (functions/22_publish_versions.sql verifies it).
 */
export function schemaBundleDigest(capabilities: readonly { id?: unknown; input_schema?: unknown; output_schema?: unknown }[]): Promise<string> {
  return canonicalDigest({
    schemas: capabilities.map((capability) => ({
      capability_id: capability.id,
      input: capability.input_schema,
      output: capability.output_schema ?? null,
    })),
  });
}
