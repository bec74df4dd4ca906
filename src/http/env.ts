/** Hono environment shared by the app and its route files. */
import type { Principal } from "./auth.js";

interface AppVariables {
  requestId: string;
  principal: Principal;
}

export interface AppEnv {
  Variables: AppVariables;
}
