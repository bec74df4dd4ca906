/**
 * The default 4 MiB page bound with genuinely large definitions, end to end: 17 definitions of
 * exactly 250,000 canonical bytes each. A page holds 16 of them (4,000,000 bytes; a 17th would
 * pass 4,194,304), and what goes over the wire stays within the bound plus the page envelope.
 */
import { beforeAll, expect, it } from "vitest";
import { useTestDatabase } from "../support/database.js";
import { binding, connectorType, instance, version } from "../../fixtures/records.js";
import { createTestApi, type TestApi } from "../support/http.js";

const SIZE = 250_000;
const MAX_PAGE_BYTES = 4 * 1024 * 1024;
const caps = Array.from({ length: 17 }, (_, n) => `cap:big.${String(n).padStart(2, "0")}`);

interface Page {
  capabilities: { capability: { id: string } }[];
  total: number;
  page_bytes: number;
  next_cursor: string | null;
}
const ids = (page: Page) => page.capabilities.map((d) => d.capability.id);

const db = useTestDatabase();
let api: TestApi;
let token: string;

beforeAll(async () => {
  api = createTestApi(db.registry);
  // The canonical size of a definition grows one byte per description character.
  const { rows } = await db.owner.query<{ bytes: number }>(
    `SELECT octet_length(aip_canonical_json(jsonb_build_object('capability', $1::jsonb,
       'contract_digest', 'sha256:' || repeat('0', 64), 'schema_digest', 'sha256:' || repeat('0', 64)))) AS bytes`,
    [
      JSON.stringify({
        id: caps[0],
        name: "big.00",
        description: "",
        kind: "tool",
        input_schema: { type: "object", properties: { q: { type: "string" } } },
        output_schema: { type: "object" },
      }),
    ],
  );
  const description = "x".repeat(SIZE - rows[0]!.bytes);
  const spec = (id: string) => ({ id, description });
  // Two versions: a manifest may hold at most 4 MiB.
  await db.registry.publish([
    connectorType("ctype_big"),
    await version("cver_big_1", "ctype_big", caps.slice(0, 9).map(spec)),
    await version("cver_big_2", "ctype_big", caps.slice(9).map(spec)),
    instance("cinst_big_1", "ctype_big", "cver_big_1", "tenant-big"),
    instance("cinst_big_2", "ctype_big", "cver_big_2", "tenant-big"),
    ...caps.map((cap, n) => binding("tenant-big", cap, n < 9 ? "cinst_big_1" : "cinst_big_2")),
  ]);
  token = await api.tenantToken("tenant-big");
}, 60_000);

it("stops a default page before 4 MiB and continues on the next", async () => {
  const response = await api.call("GET", "/v1/catalog/capabilities", { token });
  expect(response.status).toBe(200);
  const text = await response.text();
  const page = JSON.parse(text) as Page;
  expect(ids(page)).toEqual(caps.slice(0, 16));
  expect(page).toMatchObject({ total: 17, page_bytes: 16 * SIZE });
  expect(page.page_bytes + SIZE).toBeGreaterThan(MAX_PAGE_BYTES);
  // The wire body is the definitions plus a small envelope.
  expect(Buffer.byteLength(text)).toBeLessThanOrEqual(MAX_PAGE_BYTES);
  expect(Buffer.byteLength(text)).toBeLessThan(16 * SIZE + 1024);

  const next = (await (await api.call("GET", `/v1/catalog/capabilities?cursor=${encodeURIComponent(page.next_cursor!)}`, { token })).json()) as Page;
  expect(ids(next)).toEqual(caps.slice(16));
  expect(next).toMatchObject({ total: 17, page_bytes: SIZE, next_cursor: null });
});

it("honours a smaller max_bytes to the byte", async () => {
  const count = async (maxBytes: number) =>
    ((await (await api.call("GET", `/v1/catalog/capabilities?max_bytes=${maxBytes}`, { token })).json()) as Page).capabilities.length;
  expect(await count(4 * SIZE)).toBe(4);
  expect(await count(4 * SIZE - 1)).toBe(3);
  expect(await count(SIZE)).toBe(1);
  const refused = await api.call("GET", `/v1/catalog/capabilities?max_bytes=${SIZE - 1}`, { token });
  expect(refused.status).toBe(400);
});
