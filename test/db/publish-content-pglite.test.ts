/**
 * The embedded default (PGlite) stores a version's content-addressed rows before the publication
 * lock as PostgreSQL does (test/db/publish-content.test.ts has the concurrent cases, which need two
 * sessions): migration 0007 applies, the manifest is kept once under its digest and read back, and
 * a refused batch or a dry run leaves no manifest or definition behind.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { migrate } from "../../src/db/migrate.js";
import { openPglite, pgliteExecutor, pgliteSession } from "../../src/db/pglite.js";
import { Registry } from "../../src/registry/registry.js";
import { connectorType, instance, version } from "../../fixtures/records.js";
import { refusal } from "../support/assertions.js";

let db: Awaited<ReturnType<typeof openPglite>>;
let registry: Registry;

beforeAll(async () => {
  db = await openPglite();
  await migrate(pgliteSession(db));
  const executor = pgliteExecutor(db);
  registry = new Registry({ data: executor, control: executor });
  await registry.publish([connectorType("ctype_pgl_content")]);
});
afterAll(() => db?.close());

const stored = async () =>
  (
    await db.query<{ manifests: number; definitions: number; versions: number }>(
      `SELECT (SELECT count(*)::int FROM aip_manifests) AS manifests, (SELECT count(*)::int FROM aip_capability_definitions) AS definitions,
              (SELECT count(*)::int FROM aip_connector_versions) AS versions`,
    )
  ).rows[0];

it("keeps one manifest per digest, reads it back, and leaves nothing of a refused batch or a dry run", async () => {
  const one = await version("cver_pgl_1", "ctype_pgl_content", ["cap:pgl.a", "cap:pgl.b"], { version: "1.0.0" });
  const two = await version("cver_pgl_2", "ctype_pgl_content", ["cap:pgl.a", "cap:pgl.b"], { version: "1.0.1" });
  await registry.publish([one, two]);
  expect(await stored()).toEqual({ manifests: 1, definitions: 2, versions: 2 });
  const read = (await registry.adminGet("version", "cver_pgl_2")) as Record<string, unknown>;
  expect(read).toMatchObject({ manifest_digest: one.manifest_digest, manifest: one.manifest });

  const fresh = await version("cver_pgl_3", "ctype_pgl_content", ["cap:pgl.c"]);
  const error = await refusal(registry.publish([fresh, instance("cinst_pgl_x", "ctype_pgl_missing", "cver_pgl_3", "tenant-p")]));
  expect(error.extensions.change_index).toBe(1);
  expect(await stored()).toEqual({ manifests: 1, definitions: 2, versions: 2 });
  expect((await registry.publish([fresh], { dryRun: true })).results[0]?.outcome).toBe("created");
  expect(await stored()).toEqual({ manifests: 1, definitions: 2, versions: 2 });
});
