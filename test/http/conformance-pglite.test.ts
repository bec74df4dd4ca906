/**
 * The HTTP conformance suite (test/conformance) against createApp() on PGlite, the embedded
 * default `npm start` gives users: the same SQL functions in process, in one session. The data
 * and control executors share that session (there are no database roles to separate them).
 */
import { afterAll } from "vitest";
import { migrate } from "../../src/db/migrate.js";
import { openPglite, pgliteExecutor, pgliteSession } from "../../src/db/pglite.js";
import { Registry } from "../../src/registry/registry.js";
import { conformancePrefix, defineConformanceSuite } from "../conformance/index.js";
import { createTestApi } from "../support/http.js";

const db = await openPglite();
await migrate(pgliteSession(db));
const executor = pgliteExecutor(db);
const api = createTestApi(new Registry({ data: executor, control: executor }));
afterAll(() => db.close());

defineConformanceSuite({
  prefix: conformancePrefix("pgl"),
  fetch: (path, init) => Promise.resolve(api.app.request(path, init)),
  mintToken: (claims) => api.token(claims),
});
