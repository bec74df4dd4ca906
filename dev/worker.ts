/**
 * The Worker for development and tests: src/entry/worker.ts, with the Neon driver pointed at the
 * local Neon proxy (dev/neon-proxy.ts) when the NEON_LOCAL_PROXY binding names one. `npm run dev`,
 * the workerd tests (vitest.config.ts) and bench/worker-cold-start.ts run this entry; a deployment
 * runs src/entry/worker.ts (wrangler.toml `main`), which has no such setting and no code for it.
 */
import { neonConfig } from "@neondatabase/serverless";
import worker, { LeaseClock as ProductionLeaseClock, type WaitUntil, type WorkerEnv } from "../src/entry/worker.js";

export { ActivityHistory } from "../src/entry/worker.js";
import type { ClockState } from "../src/maintenance/lease-clock.js";
import { pointNeonAtLocalProxy } from "./neon-local.js";

export interface DevWorkerEnv extends WorkerEnv {
  /** The URL of dev/neon-proxy.ts. */
  NEON_LOCAL_PROXY?: string;
}

/** Before the Worker's first statement, from whichever handler runs first (a request or the clock's alarm). */
function pointAtProxy(env: DevWorkerEnv): void {
  if (env.NEON_LOCAL_PROXY) pointNeonAtLocalProxy(neonConfig, env.NEON_LOCAL_PROXY);
}

export default {
  fetch(request: Request, env: DevWorkerEnv, ctx: WaitUntil): Promise<Response> {
    pointAtProxy(env);
    return worker.fetch(request, env, ctx);
  },
};

export class LeaseClock extends ProductionLeaseClock {
  constructor(state: ClockState, env: DevWorkerEnv) {
    pointAtProxy(env);
    super(state, env);
  }
}
