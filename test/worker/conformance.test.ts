/**
 * The HTTP conformance suite (test/conformance) against the Worker inside workerd, on the Neon
 * driver through the local proxy: once over the HTTP /sql path (neon()) and once over the
 * WebSocket path (a Pool per request). Node runs the same suite in test/http/conformance.test.ts.
 */
import { describe } from "vitest";
import { conformancePrefix, defineConformanceSuite } from "../conformance/index.js";
import { TRANSPORTS, workerEnv, workerTarget } from "./support.js";

for (const transport of TRANSPORTS) {
  describe(`Worker, Neon ${transport} transport`, () => {
    defineConformanceSuite(workerTarget(workerEnv({ NEON_TRANSPORT: transport }), conformancePrefix(transport === "http" ? "wh" : "ww")));
  });
}
