import { beforeAll, expect, it } from "vitest";
import { useTestDatabase } from "../support/database.js";
import { publishSimpleFleet } from "../../fixtures/records.js";
import { createTestApi, type TestApi } from "../support/http.js";

const db = useTestDatabase();
let api: TestApi;
beforeAll(async () => {
  api = createTestApi(db.registry);
  await publishSimpleFleet(db.registry);
});

it("resolves, reads and settles a route over HTTP", async () => {
  const token = await api.tenantToken("tenant-a");
  const created = await api.call("PUT", "/v1/routes/act_http_smoke", { token, body: { capability_id: "cap:t.search" } });
  expect(created.status).toBe(201);
  const assignment = await created.json();
  const read = await api.call("GET", "/v1/routes/act_http_smoke", { token });
  expect(await read.json()).toEqual(assignment);
  const settled = await api.call("POST", "/v1/routes/act_http_smoke/settlement", { token, body: { assignment, outcome: "completed" } });
  expect(await settled.json()).toEqual({ action_id: "act_http_smoke", released: true, last_settlement: "completed" });
});
