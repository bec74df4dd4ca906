// Preloaded with `node --import` (test/http/tracing.test.ts): records the URL of every module the
// process resolves under node_modules/@opentelemetry/ into the file AIP_RECORD_LOADS names, so a
// test can tell whether a server loaded OpenTelemetry at all.
import { register } from "node:module";

if (process.env.AIP_RECORD_LOADS) register("./record-loads-hooks.mjs", import.meta.url, { data: { file: process.env.AIP_RECORD_LOADS } });
