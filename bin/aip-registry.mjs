#!/usr/bin/env node
// `npx aip-registry ...`: runs the TypeScript CLI (src/cli.ts) through tsx, resolved from this
// package rather than from the caller's working directory.
import { register } from "tsx/esm/api";

register();
const { run } = await import("../src/cli.ts");
await run();
