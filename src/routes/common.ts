/**
 * Shared pieces of the route definitions: problem responses for the OpenAPI document, the bearer
 * security requirement, and small helpers.
 */
import { z } from "@hono/zod-openapi";
import { PROBLEM_STATUS, PROBLEM_TITLES, type ProblemCode } from "../registry/errors.js";
import { Id, Problem } from "../schemas.js";
import { PROBLEM_CONTENT_TYPE } from "../http/problem.js";

export const bearer = [{ bearer: [] as string[] }];

/** OpenAPI responses for the given problem codes, grouped by status. */
export function problems(...codes: ProblemCode[]) {
  const byStatus = new Map<number, ProblemCode[]>();
  for (const code of ["invalid", "unauthorized", "forbidden", "storage", ...codes] as ProblemCode[]) {
    const status = PROBLEM_STATUS[code];
    const list = byStatus.get(status) ?? [];
    if (!list.includes(code)) list.push(code);
    byStatus.set(status, list);
  }
  return Object.fromEntries(
    [...byStatus].map(([status, list]) => [
      status,
      {
        description: list.map((code) => `\`${code}\`: ${PROBLEM_TITLES[code]}`).join("; "),
        content: { [PROBLEM_CONTENT_TYPE]: { schema: Problem } },
      },
    ]),
  );
}

export const json = <T extends z.ZodTypeAny>(schema: T, description: string) => ({
  description,
  content: { "application/json": { schema } },
});

export const jsonBody = <T extends z.ZodTypeAny>(schema: T) => ({
  required: true,
  content: { "application/json": { schema } },
});

export const pathId = (name: string, example: string) =>
  Id().openapi({ param: { name, in: "path" }, example });
