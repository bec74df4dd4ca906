/**
 * The client's errors: every non-2xx answer is a RegistryProblem (the registry's RFC 9457 problem,
 * or one made up from a proxy's answer that keeps its status), and a call that ran out of time is
 * a RegistryTimeoutError. A call the caller aborted rejects with the caller's own reason, and a
 * network failure with the fetch implementation's own error.
 */
import type { Problem, ProblemCode } from "./wire.js";

/** A problem+json answer of the registry. */
export class RegistryProblem extends Error {
  readonly status: number;
  readonly code: ProblemCode | (string & {});
  /** `Retry-After` in milliseconds (429 and 503), or the problem's `retry_after_ms`. */
  readonly retryAfterMs: number | undefined;
  constructor(
    readonly problem: Problem,
    readonly response: { status: number; headers: Headers },
  ) {
    super(`${problem.code}: ${problem.detail}`);
    this.name = "RegistryProblem";
    this.status = response.status;
    this.code = problem.code;
    const header = Number(response.headers.get("retry-after"));
    this.retryAfterMs = typeof problem.retry_after_ms === "number" ? problem.retry_after_ms : Number.isFinite(header) && header > 0 ? header * 1000 : undefined;
  }

  /** Narrows on the problem code: `if (error instanceof RegistryProblem && error.is("capacity-exceeded"))`. */
  is(code: ProblemCode): boolean {
    return this.code === code;
  }
}

/**
 * A call that did not complete (answer body included) within its timeout. Named `TimeoutError`,
 * as `AbortSignal.timeout()` names its reason. Every registry call is safe to retry.
 */
export class RegistryTimeoutError extends Error {
  override readonly name = "TimeoutError";
  constructor(
    readonly method: string,
    readonly path: string,
    readonly timeoutMs: number,
  ) {
    super(`${method} ${path} did not complete within ${timeoutMs} ms`);
  }
}

/** The problem an error answer carries, or one that says what came back instead. */
export async function problemOf(response: Response): Promise<RegistryProblem> {
  const text = await response.text();
  let problem: Problem;
  try {
    const parsed = JSON.parse(text) as Problem;
    if (typeof parsed?.code !== "string") throw new Error("not a problem");
    problem = parsed;
  } catch {
    // Not from the registry (a proxy, a load balancer): keep the status, say what came back.
    problem = {
      type: "about:blank",
      title: response.statusText || "HTTP error",
      status: response.status,
      detail: text.slice(0, 200) || `HTTP ${response.status}`,
      code: `http-${response.status}`,
    };
  }
  return new RegistryProblem(problem, response);
}
