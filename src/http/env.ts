/** Hono environment shared by the app and its route files. */
import type { RequestSpan } from "../telemetry/tracing.js";
import type { Principal } from "./auth.js";

interface AppVariables {
  requestId: string;
  principal: Principal;
  /** The request's span in its trace (src/observability/request-trace.ts). */
  span: RequestSpan;
}

export interface AppEnv {
  Variables: AppVariables;
}
