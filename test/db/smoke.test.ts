import { afterAll, beforeAll, expect, it } from "vitest";
import { createTestDatabase, type TestDatabase } from "../support/database.js";
import { publishSimpleFleet } from "../support/fleet.js";

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db?.close());

it("publishes and resolves through the runtime roles", async () => {
  await publishSimpleFleet(db.registry);
  const route = await db.registry.resolveRoute("act_smoke", "tenant-a", "cap:t.search");
  expect(route.outcome).toBe("created");
});
