/**
 * The registry's bookkeeping invariants as a test assertion. Use it after every test that
 * touches routes, replicas or counters:
 *
 *   afterEach(() => expectHealthy(db.registry));
 *
 * It calls aip_check_invariants() (one statement, read-only) and fails with the violations.
 */
import { expect } from "vitest";
import type { Registry } from "../../src/registry/registry.js";

export async function expectHealthy(registry: Registry): Promise<void> {
  const report = await registry.checkInvariants();
  expect(report.violations, "aip_check_invariants() violations").toEqual([]);
  expect(report.healthy).toBe(true);
}
