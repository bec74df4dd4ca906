#!/usr/bin/env node
// `aip-registry ...`: the compiled CLI (dist/entry/cli.js, built from src/entry/cli.ts by scripts/build.mjs).
// In a clone (scripts/ beside dist/; the installed package has no scripts/), a dist/ built from
// older sources is rebuilt first, so the command never runs code that differs from src/.
import { existsSync } from "node:fs";

const build = new URL("../scripts/build.mjs", import.meta.url);
if (existsSync(build)) await (await import(build.href)).ensureBuilt();
const { run } = await import("../dist/entry/cli.js");
await run();
