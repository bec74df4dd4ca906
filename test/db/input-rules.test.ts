/**
 * Input rules kept on purpose in both layers: zod (src/schemas.ts) gives callers precise 400s
 * before a round trip, and the SQL readers repeat them because the database must hold whoever
 * calls it. Both read their bounds and lists from the same TypeScript modules (the SQL side
 * through the generated functions/01_constants.sql), and the checks themselves are written twice:
 * one table of cases goes to both, through the schemas the routes use and through the
 * SQL entry points (or, where an entry point needs a whole record first, the SQL validator the
 * entry point calls), and the verdicts must agree: refused by zod exactly when the database
 * answers `invalid`. Lengths are UTF-8 bytes in both (octet_length), so the multi-byte cases
 * matter most.
 */
import { describe, expect, it } from "vitest";
import { z } from "@hono/zod-openapi";
import { fromDatabaseError } from "../../src/registry/errors.js";
import { JSON_DEPTH_MAX, LEASE_TTL_MS, TEXT_BYTES } from "../../src/limits.js";
import { boundedNesting, CatalogQuery, Change, Digest, LifecycleOperation, LifecycleRequest, ResolveRequest, SettlementOutcome } from "../../src/schemas.js";
import { VERSION_STATUSES } from "../../src/vocabulary.js";
import { useTestDatabase } from "../support/database.js";

const db = useTestDatabase();

/** True when the statement is not refused as invalid input (any other answer or refusal is fine). */
async function sqlAccepts(text: string, params: unknown[]): Promise<boolean> {
  try {
    await db.owner.query(text, params);
    return true;
  } catch (error) {
    return fromDatabaseError(error).code !== "invalid";
  }
}

const json = (value: unknown) => JSON.stringify(value);

interface Rule {
  /** zod's verdict on a case. */
  zod: (value: unknown) => boolean;
  /** The database's verdict on the same case. */
  sql: (value: unknown) => Promise<boolean>;
  /** [name, value, accepted]: the expected verdict keeps both sides from agreeing on nonsense. */
  cases: [string, unknown, boolean][];
}

const nested = (depth: number, leaf: (inner: unknown) => unknown) => {
  let value: unknown = 1;
  for (let i = 0; i < depth; i++) value = leaf(value);
  return value;
};
const bytesOf = (s: string) => new TextEncoder().encode(s).length;
/** A well-formed catalog cursor of the current revision, padded with `fill` to exactly `bytes`. */
const cursorOf = (revision: number, bytes: number, fill: string) => {
  let cursor = `${revision}:0:0000000000000000:`;
  while (bytesOf(cursor) + bytesOf(fill) <= bytes) cursor += fill;
  return cursor + "a".repeat(bytes - bytesOf(cursor));
};

const idCases = (max: number): [string, unknown, boolean][] => [
  ["ASCII at the limit", "a".repeat(max), true],
  ["ASCII over the limit", "a".repeat(max + 1), false],
  ["two-byte characters at the limit", "é".repeat(max / 2), true],
  ["two-byte characters one byte over", `${"é".repeat(max / 2)}a`, false],
  ["four-byte characters at the limit", "😀".repeat(max / 4), true],
  ["four-byte characters one byte over", `${"😀".repeat(max / 4)}a`, false],
  ["three-byte character across the limit", `${"a".repeat(max - 2)}€`, false],
  ["empty", "", false],
  ["blank", "   ", false],
  ["NUL", "a\u0000b", false],
  ["not a string", 5, false],
];

/** A put_replica change that both layers accept. */
const REPLICA = {
  op: "put_replica",
  id: "r",
  instance_id: "i",
  version_id: "v",
  endpoint: "https://h.example/aip",
  peer_principal_id: "service:r",
  peer_principal_kind: "service",
  peer_did: "did:web:h.example",
  trust_domain: "example",
  transport_profile: "aip.native.http.v1",
  capacity: 1,
};

const RULES: Record<string, Rule> = {
  "Id (TEXT_BYTES.id): version id of set_version_status (aip_pub_prepare)": {
    zod: (id) => Change.safeParse({ op: "set_version_status", id, status: "active" }).success,
    sql: (id) => sqlAccepts("SELECT aip_pub_prepare($1::jsonb)", [json({ op: "set_version_status", id, status: "active" })]),
    cases: idCases(TEXT_BYTES.id),
  },
  "Id (TEXT_BYTES.secret_provider_ref): secret_provider_ref of put_instance (aip_pub_prepare)": {
    zod: (ref) =>
      Change.safeParse({ op: "put_instance", id: "i", connector_type_id: "t", version_id: "v", tenant_id: "tn", config_revision: 1, secret_provider_ref: ref })
        .success,
    sql: (ref) =>
      sqlAccepts("SELECT aip_pub_prepare($1::jsonb)", [
        json({ op: "put_instance", id: "i", connector_type_id: "t", version_id: "v", tenant_id: "tn", config_revision: 1, secret_provider_ref: ref }),
      ]),
    cases: idCases(TEXT_BYTES.secret_provider_ref),
  },
  "Id (TEXT_BYTES.peer_did): peer_did of put_replica (aip_pub_prepare)": {
    zod: (peer_did) => Change.safeParse({ ...REPLICA, peer_did }).success,
    sql: (peer_did) => sqlAccepts("SELECT aip_pub_prepare($1::jsonb)", [json({ ...REPLICA, peer_did })]),
    cases: idCases(TEXT_BYTES.peer_did),
  },
  "Endpoint (TEXT_BYTES.endpoint bytes, aip_check_endpoint)": {
    zod: (endpoint) => Change.safeParse({ ...REPLICA, endpoint }).success,
    sql: (endpoint) => sqlAccepts("SELECT aip_pub_prepare($1::jsonb)", [json({ ...REPLICA, endpoint })]),
    cases: [
      ["at the limit", `https://h.example/${"a".repeat(TEXT_BYTES.endpoint - 18)}`, true],
      ["one byte over", `https://h.example/${"a".repeat(TEXT_BYTES.endpoint - 17)}`, false],
      ["two-byte characters one byte over", `https://h.example/${"é".repeat((TEXT_BYTES.endpoint - 18) / 2)}a`, false],
      ["a query", "https://h.example/?q=1", false],
    ],
  },
  "Id (TEXT_BYTES.id): capability_id of a resolve (aip_resolve_route)": {
    zod: (capability_id) => ResolveRequest.safeParse({ capability_id }).success,
    sql: (capability_id) => sqlAccepts("SELECT aip_resolve_route('act-seam', 'tenant-seam', $1, '{}'::jsonb)", [capability_id]),
    // The function takes it as a text parameter: only strings reach it.
    cases: idCases(TEXT_BYTES.id).filter(([, value]) => typeof value === "string"),
  },
  "Label: topology.region of a resolve (aip_resolve_route)": {
    zod: (region) => ResolveRequest.safeParse({ capability_id: "cap:seam", topology: { region } }).success,
    sql: (region) => sqlAccepts("SELECT aip_resolve_route('act-seam', 'tenant-seam', 'cap:seam', $1::jsonb)", [json({ region })]),
    cases: [
      ["letters, digits, dots, dashes, underscores", "eu-west_1.a", true],
      ["128 characters", "a".repeat(128), true],
      ["129 characters", "a".repeat(129), false],
      ["empty", "", false],
      ["a space", "eu west", false],
      ["non-ASCII letter", "eu-wést", false],
      ["not a string", 5, false],
    ],
  },
  "Digest (aip_check_digest, as admission and attestation call it)": {
    zod: (d) => Digest.safeParse(d).success,
    sql: (d) => sqlAccepts("SELECT aip_check_digest('manifest_digest', $1)", [d]),
    cases: [
      ["lowercase hex", `sha256:${"0a".repeat(32)}`, true],
      ["uppercase hex", `sha256:${"0A".repeat(32)}`, false],
      ["63 digits", `sha256:${"a".repeat(63)}`, false],
      ["65 digits", `sha256:${"a".repeat(65)}`, false],
      ["other algorithm", `sha512:${"a".repeat(64)}`, false],
      ["multi-byte digit", `sha256:${"a".repeat(63)}é`, false],
      ["empty", "", false],
    ],
  },
  "Nesting depth JSON_DEPTH_MAX (aip_canonical_json, which admission and publication run)": {
    zod: (v) => boundedNesting(z.unknown()).safeParse(v).success,
    sql: (v) => sqlAccepts("SELECT aip_canonical_json($1::jsonb)", [json(v)]),
    cases: [
      ["arrays at the limit", nested(JSON_DEPTH_MAX, (x) => [x]), true],
      ["arrays one deeper", nested(JSON_DEPTH_MAX + 1, (x) => [x]), false],
      ["objects at the limit", nested(JSON_DEPTH_MAX, (x) => ({ k: x })), true],
      ["objects one deeper", nested(JSON_DEPTH_MAX + 1, (x) => ({ k: x })), false],
      ["mixed one deeper", nested(JSON_DEPTH_MAX + 1, (x) => (Array.isArray(x) ? { k: x } : [x])), false],
      ["wide and shallow", { a: Array.from({ length: 200 }, (_, i) => ({ i })) }, true],
    ],
  },
  "Enum: settlement outcome (aip_settle_route)": {
    zod: (o) => SettlementOutcome.safeParse(o).success,
    sql: (o) => sqlAccepts("SELECT aip_settle_route('act-seam', 'tenant-seam', '{}'::jsonb, $1)", [o]),
    cases: [
      ...SettlementOutcome.options.map((o): [string, unknown, boolean] => [o, o, true]),
      ["upper case", "COMPLETED", false],
      ["unknown", "expired", false],
      ["empty", "", false],
    ],
  },
  // (With registration evidence optional, so that a register is judged on its operation alone.)
  "Enum: replica lifecycle operation (aip_replica_transition)": {
    zod: (op) => LifecycleOperation.safeParse(op).success,
    sql: (op) => sqlAccepts("SELECT aip_replica_transition('crepl-seam', $1, $2::jsonb, NULL, true)", [op, json({ request_id: "r", previous_sequence: 0 })]),
    cases: [
      ...LifecycleOperation.options.map((o): [string, unknown, boolean] => [o, o, true]),
      ["capitalized", "Register", false],
      ["unknown", "delete", false],
    ],
  },
  "Enum: version status of set_version_status (aip_pub_prepare)": {
    zod: (status) => Change.safeParse({ op: "set_version_status", id: "v", status }).success,
    sql: (status) => sqlAccepts("SELECT aip_pub_prepare($1::jsonb)", [json({ op: "set_version_status", id: "v", status })]),
    cases: [
      ...VERSION_STATUSES.map((s): [string, unknown, boolean] => [s, s, true]),
      ["unknown", "retired", false],
      ["capitalized", "Active", false],
      ["missing", undefined, false],
    ],
  },
  "Enum: instance status of put_instance (aip_pub_prepare)": {
    zod: (status) =>
      Change.safeParse({
        op: "put_instance",
        id: "i",
        connector_type_id: "t",
        version_id: "v",
        tenant_id: "tn",
        config_revision: 1,
        secret_provider_ref: "r",
        status,
      }).success,
    sql: (status) =>
      sqlAccepts("SELECT aip_pub_prepare($1::jsonb)", [
        json({ op: "put_instance", id: "i", connector_type_id: "t", version_id: "v", tenant_id: "tn", config_revision: 1, secret_provider_ref: "r", status }),
      ]),
    cases: [
      ["enabled", "enabled", true],
      ["disabled", "disabled", true],
      ["missing (defaults to enabled)", undefined, true],
      ["unknown", "paused", false],
    ],
  },
  "Lease bounds: lease_ttl_ms of a heartbeat (aip_replica_transition)": {
    zod: (lease_ttl_ms) => LifecycleRequest.safeParse({ request_id: "r", previous_sequence: 0, lease_ttl_ms }).success,
    sql: (lease_ttl_ms) =>
      sqlAccepts("SELECT aip_replica_transition('crepl-seam', 'heartbeat', $1::jsonb, NULL, false)", [
        json({ request_id: "r", previous_sequence: 0, lease_ttl_ms }),
      ]),
    cases: [
      ["the minimum", LEASE_TTL_MS.min, true],
      ["below the minimum", LEASE_TTL_MS.min - 1, false],
      ["the maximum", LEASE_TTL_MS.max, true],
      ["above the maximum", LEASE_TTL_MS.max + 1, false],
      ["not an integer", 1500.5, false],
      ["a string", "30000", false],
      ["absent (default)", undefined, true],
    ],
  },
  "Lifecycle request_id and previous_sequence (aip_replica_transition)": {
    zod: (request) => LifecycleRequest.safeParse(request).success,
    sql: (request) => sqlAccepts("SELECT aip_replica_transition('crepl-seam', 'heartbeat', $1::jsonb, NULL, false)", [json(request)]),
    cases: [
      ["two-byte request_id at 256 bytes", { request_id: "é".repeat(128), previous_sequence: 0 }, true],
      ["two-byte request_id at 257 bytes", { request_id: `${"é".repeat(128)}a`, previous_sequence: 0 }, false],
      ["largest safe sequence", { request_id: "r", previous_sequence: Number.MAX_SAFE_INTEGER }, true],
      ["sequence beyond safe integers", { request_id: "r", previous_sequence: Number.MAX_SAFE_INTEGER + 1 }, false],
      ["negative sequence", { request_id: "r", previous_sequence: -1 }, false],
    ],
  },
  "Catalog q: 512 bytes (aip_catalog_page)": {
    zod: (q) => CatalogQuery.safeParse({ q }).success,
    sql: (q) => sqlAccepts("SELECT * FROM aip_catalog_page('tenant-seam', $1::jsonb, NULL)", [json({ q })]),
    cases: [
      ["ASCII at 512", "q".repeat(512), true],
      ["ASCII at 513", "q".repeat(513), false],
      ["two-byte at 512", "é".repeat(256), true],
      ["two-byte at 513 (257 UTF-16 units)", `${"é".repeat(256)}a`, false],
      ["three-byte at 510", "€".repeat(170), true],
      ["three-byte at 513 (171 UTF-16 units)", "€".repeat(171), false],
      ["four-byte at 512", "😀".repeat(128), true],
      ["four-byte at 516 (258 UTF-16 units)", "😀".repeat(129), false],
    ],
  },
};

describe("zod and the SQL readers give the same verdict", () => {
  for (const [rule, { zod, sql, cases }] of Object.entries(RULES)) {
    it(rule, async () => {
      for (const [name, value, accepted] of cases) {
        expect({ name, zod: zod(value), sql: await sql(value) }).toEqual({ name, zod: accepted, sql: accepted });
      }
    });
  }

  it("Catalog cursor: 1100 bytes (aip_catalog_page)", async () => {
    const { rows } = await db.owner.query<{ revision: string }>("SELECT revision::text AS revision FROM aip_catalog_revision WHERE singleton");
    const revision = Number(rows[0]!.revision);
    const cases: [string, string, boolean][] = [
      ["ASCII at 1100", cursorOf(revision, 1100, "a"), true],
      ["ASCII at 1101", cursorOf(revision, 1101, "a"), false],
      ["two-byte fill at 1100", cursorOf(revision, 1100, "é"), true],
      ["two-byte fill at 1101", cursorOf(revision, 1101, "é"), false],
      ["four-byte fill at 1100", cursorOf(revision, 1100, "😀"), true],
      ["four-byte fill at 1101", cursorOf(revision, 1101, "😀"), false],
    ];
    for (const [name, cursor, accepted] of cases) {
      // The length is the rule here: a cursor this test makes up is refused after that too (it is
      // not bound to any walk of the tenant's), which is not the verdict being compared.
      const sql = await db.owner.query("SELECT * FROM aip_catalog_page('tenant-seam', $1::jsonb, NULL)", [json({ cursor })]).then(
        () => true,
        (error: unknown) => !/must be at most \d+ bytes/.test(JSON.stringify(fromDatabaseError(error).extensions)),
      );
      expect({ name, zod: CatalogQuery.safeParse({ cursor }).success, sql }).toEqual({ name, zod: accepted, sql: accepted });
    }
  });
});
