// The module hooks of test/support/record-loads.mjs (they run on Node's hooks thread).
import { appendFileSync } from "node:fs";

let file;

export function initialize(data) {
  file = data.file;
}

export async function resolve(specifier, context, next) {
  const resolved = await next(specifier, context);
  if (file && resolved.url.includes("/@opentelemetry/")) appendFileSync(file, `${resolved.url}\n`);
  return resolved;
}
