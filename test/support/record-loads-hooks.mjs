// The module hooks of test/support/record-loads.mjs (they run on Node's hooks thread).
import { appendFileSync } from "node:fs";

/** @type {string | undefined} */
let file;

/** @param {{ file: string }} data */
export function initialize(data) {
  file = data.file;
}

/** @type {import("node:module").ResolveHook} */
export async function resolve(specifier, context, next) {
  const resolved = await next(specifier, context);
  if (file && resolved.url.includes("/@opentelemetry/")) appendFileSync(file, `${resolved.url}\n`);
  return resolved;
}
