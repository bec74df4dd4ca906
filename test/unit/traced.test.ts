/**
 * Statements of a request name its trace (src/db/traced.ts): the same statement with a
 * sqlcommenter comment appended and the same parameters; outside a request, the statement as it
 * was. The operation is the SQL function called, without any schema prefix.
 */
import { expect, it } from "vitest";
import { operationOf, traced } from "../../src/db/traced.js";
import { runInRequest } from "../../src/telemetry/request-context.js";
import { untraced } from "../../src/telemetry/tracing.js";
import { primaryStatement, replicaStatement } from "../../src/registry/catalog-replica.js";

it("names a statement by the SQL function it calls, schema-qualified or not", () => {
  expect(operationOf("SELECT aip_resolve_route($1::text, $2::text, $3::text, $4::jsonb) AS result")).toBe("aip_resolve_route");
  expect(operationOf("SELECT aip_fs_0_2_0.aip_resolve_route($1::text) AS result")).toBe("aip_resolve_route");
  expect(operationOf('SELECT "registry".aip_settle_route ($1::text) AS result')).toBe("aip_settle_route");
  const catalog = {
    columns: "catalog_revision::text AS revision, page AS text",
    from: (after: string) => `aip_catalog_page($1::text, $2::jsonb, $3::bigint${after})`,
  };
  expect(operationOf(primaryStatement(catalog))).toBe("aip_catalog_page");
  // The replica's read measures its lag first (pg_* functions), then calls the page function.
  expect(operationOf(replicaStatement(catalog))).toBe("aip_catalog_page");
  expect(operationOf("select 1")).toBe("SELECT");
});

it("appends the request's traceparent as a comment, and leaves statements outside requests alone", async () => {
  const sent: { text: string; params: readonly unknown[] | undefined }[] = [];
  const executor = traced({
    query: async <R extends Record<string, unknown>>(text: string, params?: readonly unknown[]) => {
      sent.push({ text, params });
      return [] as R[];
    },
  });
  await executor.query("SELECT aip_fleet_status() AS result", []);
  const span = untraced.startRequest({ method: "GET", url: "http://r/", header: () => "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" });
  await runInRequest(span, () => executor.query("SELECT aip_get_route($1::text, $2::text) AS result", ["act_1", "tenant-a"]));
  expect(sent).toEqual([
    { text: "SELECT aip_fleet_status() AS result", params: [] },
    {
      text: `SELECT aip_get_route($1::text, $2::text) AS result /*traceparent='00-0af7651916cd43dd8448eb211c80319c-${span.spanId}-01'*/`,
      params: ["act_1", "tenant-a"],
    },
  ]);
});
