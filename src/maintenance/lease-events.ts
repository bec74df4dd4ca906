/**
 * How a runtime learns lease deadlines from the answers the app serves, so that lease maintenance
 * can run when a lease can end instead of on a fixed clock (src/maintenance/cycle.ts). Runtime-neutral:
 * the Node server feeds its timer; the Worker tells its LeaseClock Durable Object after the
 * response (waitUntil), so a host never waits for it.
 */
import type { Context } from "hono";
import { log } from "../telemetry/log.js";

export type LeaseNotice =
  /** A lifecycle answer that holds a live lease (register, heartbeat, drain). */
  | { source: "lifecycle"; operation: "register" | "heartbeat" | "drain"; replica_id: string; sequence: number; expires_at: string }
  /** An expiry batch's `next_deadline`: the earliest lease still live. */
  | { source: "expiry"; expires_at: string };

/** Told of every lease deadline; a returned promise is awaited after the response (Workers: waitUntil). */
export type LeaseListener = (notice: LeaseNotice) => void | Promise<void>;

const logFailure = (error: unknown) => log.error("lease deadline not delivered", { error: String(error) });

/** Hands `notice` to `listener` without ever failing or delaying the request that learned it. */
export function announceLease(c: Context, listener: LeaseListener | undefined, notice: LeaseNotice): void {
  if (!listener) return;
  let pending: void | Promise<void>;
  try {
    pending = listener(notice);
  } catch (error) {
    logFailure(error);
    return;
  }
  if (!pending) return;
  const settled = pending.catch(logFailure);
  let executionCtx: { waitUntil(promise: Promise<unknown>): void } | undefined;
  try {
    executionCtx = c.executionCtx;
  } catch {
    // No execution context (Node): the promise simply runs to its end.
  }
  executionCtx?.waitUntil(settled);
}
