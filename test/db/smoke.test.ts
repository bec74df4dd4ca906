import { expect, it } from "vitest";
import { useTestDatabase } from "../support/database.js";
import { publishSimpleFleet } from "../../fixtures/records.js";

const db = useTestDatabase();

it("publishes and resolves through the runtime roles", async () => {
  await publishSimpleFleet(db.registry);
  const route = await db.registry.resolveRoute("act_smoke", "tenant-a", "cap:t.search");
  expect(route.outcome).toBe("created");
});
