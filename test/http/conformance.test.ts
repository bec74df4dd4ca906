/**
 * The HTTP conformance suite (test/conformance) against createApp() in Node, over pg and the real
 * runtime roles. test/worker/conformance.test.ts runs the same suite against the Worker.
 */
import { afterAll } from "vitest";
import { conformancePrefix, defineConformanceSuite } from "../conformance/index.js";
import { createTestDatabase, type TestDatabase } from "../support/database.js";
import { createTestApi, type TestApi } from "../support/http.js";

const db: TestDatabase = await createTestDatabase();
const api: TestApi = createTestApi(db.registry);
afterAll(() => db.close());

defineConformanceSuite({
  prefix: conformancePrefix("node"),
  fetch: (path, init) => Promise.resolve(api.app.request(path, init)),
  mintToken: (claims) => api.token(claims),
});
