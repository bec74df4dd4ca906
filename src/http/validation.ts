/**
 * Request validation failures as the `errors` member of an `invalid` problem: one entry per
 * offending field, named by its path.
 */
import type { z } from "zod";

export interface FieldError {
  field: string;
  message: string;
}

const fieldName = (path: readonly PropertyKey[]) => path.map(String).join(".");

export function fieldErrors(issues: readonly z.core.$ZodIssue[]): FieldError[] {
  return issues.flatMap((issue) =>
    // zod reports unknown keys at their object (`topology`); each one is its own field (`topology.regoin`).
    issue.code === "unrecognized_keys"
      ? issue.keys.map((key) => ({ field: fieldName([...issue.path, key]), message: "is not a known field" }))
      : [{ field: fieldName(issue.path) || "(body)", message: issue.message }],
  );
}
