// Types of the workerd test environment: the Worker's bindings (`env` from "cloudflare:workers")
// and what test/global-setup.ts provides (repeated here: that file is Node code, outside the
// Workers type check).
import type { DevWorkerEnv } from "../../dev/worker.js";
import type { PgServerInfo } from "../support/server.js";

declare global {
  namespace Cloudflare {
    interface Env extends DevWorkerEnv {}
  }
}

declare module "vitest" {
  export interface ProvidedContext {
    pgServer: PgServerInfo;
    neonProxyUrl: string;
    workerDatabase: string;
    jwksOrigin: string;
    otlpOrigin: string;
  }
}
