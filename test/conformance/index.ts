/**
 * The HTTP-level conformance suite: every route of design.md section 6 with its success path and
 * main problem codes. Call it inside a test file with a target (see target.ts).
 */
import { catalogConformance } from "./catalog.js";
import { concurrencyConformance } from "./concurrency.js";
import { fleetConformance } from "./fleet.js";
import { operationsConformance } from "./operations.js";
import { publicationConformance } from "./publication.js";
import { readerConformance } from "./reader.js";
import { replicaConformance } from "./replicas.js";
import { retentionConformance } from "./retention.js";
import { routingConformance } from "./routing.js";
import { describe, expect, it } from "vitest";
import { Api, type ConformanceTarget } from "./target.js";

export type { ConformanceTarget } from "./target.js";

export function defineConformanceSuite(target: ConformanceTarget): void {
  const api = new Api(target);
  operationsConformance(api);
  publicationConformance(api);
  catalogConformance(api);
  routingConformance(api);
  replicaConformance(api);
  readerConformance(api);
  concurrencyConformance(api);
  fleetConformance(api);
  retentionConformance(api);
  describe("the published OpenAPI document", () => {
    // Runs last: every call above went through Api.call, which checks the answer's body against
    // the document (test/conformance/openapi-schema.ts).
    it("described every answer the suite received, successes and problems alike", () => {
      const checked = [...api.checked];
      for (const expected of [
        "PUT /v1/routes/{action_id} 201",
        "PUT /v1/routes/{action_id} 200",
        "GET /v1/catalog/capabilities 200",
        "POST /v1/admin/publications 200",
        "GET /v1/fleet/status 200",
      ]) {
        expect(checked).toContain(expected);
      }
      const problemStatuses = new Set(checked.map((entry) => Number(entry.split(" ").at(-1))).filter((status) => status >= 400));
      expect([...problemStatuses].sort()).toEqual(expect.arrayContaining([400, 401, 403, 404, 405, 409, 413]));
    });
  });
}

/** A run prefix: lowercase, unique, short enough for every ID the suite derives from it. */
export function conformancePrefix(label: string): string {
  const random = crypto.getRandomValues(new Uint8Array(4));
  return `cf${label}${Array.from(random, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}
