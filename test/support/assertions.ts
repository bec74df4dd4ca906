/**
 * The assertions the suites share: a refusal (the RegistryError a call must fail with) and the
 * catalog revision as the database holds it.
 */
import type pg from "pg";
import { expect } from "vitest";
import { RegistryError } from "../../src/registry/errors.js";

/** The RegistryError the promise rejects with; fails the test if it resolves or throws anything else. */
export async function refusal(promise: Promise<unknown>): Promise<RegistryError> {
  let result: unknown;
  try {
    result = await promise;
  } catch (error) {
    if (error instanceof RegistryError) return error;
    throw error;
  }
  throw new Error(`expected a refusal, but the call succeeded: ${JSON.stringify(result)?.slice(0, 300)}`);
}

/** The refusal of a call that must fail with `code`, for further checks. */
export async function expectRefusal(call: Promise<unknown>, code: string): Promise<RegistryError> {
  const error = await refusal(call);
  expect(error.code, error.message).toBe(code);
  return error;
}

/** The catalog revision (read as the owner, outside any registry function). */
export async function catalogRevision(owner: pg.Pool | pg.Client): Promise<number> {
  const { rows } = await owner.query<{ revision: string }>("SELECT revision FROM aip_catalog_revision WHERE singleton");
  return Number(rows[0]!.revision);
}
