/**
 * The identity provider's key set in the Node server's metrics (src/http/jwks.ts): fetches by
 * outcome, the age of the set in use, and the backoff after failed fetches. Read at scrape time.
 */
import type { KeySetStatus } from "../http/jwks.js";
import type { MetricRegistry } from "./prometheus.js";

export interface KeySetSource {
  status(): KeySetStatus;
}

export class KeySetMetrics {
  private readonly fetchTotal;
  private readonly age;
  private readonly keys;
  private readonly failures;
  private readonly backoff;
  private readonly counted = new Map<string, number>();

  constructor(
    metrics: MetricRegistry,
    private readonly source: KeySetSource,
  ) {
    this.fetchTotal = metrics.counter(
      "aip_auth_jwks_fetch_total",
      "Fetches of the identity provider's key set (AUTH_JWKS_URL) by outcome: ok, http-error, timeout, network, too-large, malformed.",
      ["outcome"],
    );
    this.age = metrics.gauge("aip_auth_jwks_age_seconds", "Age of the key set that verifies tokens; absent before the first good fetch.");
    this.keys = metrics.gauge("aip_auth_jwks_keys", "Keys in the key set that verifies tokens.");
    this.failures = metrics.gauge("aip_auth_jwks_consecutive_failures", "Failed key-set fetches since the last good one.");
    this.backoff = metrics.gauge("aip_auth_jwks_backoff_seconds", "Time until the next key-set fetch may be tried after failures (0: not backing off).");
  }

  collect(): void {
    const status = this.source.status();
    for (const [outcome, total] of Object.entries(status.fetches)) {
      const delta = total - (this.counted.get(outcome) ?? 0);
      // Every outcome is shown from the first scrape, at 0 until it happens.
      this.fetchTotal.inc({ outcome }, Math.max(0, delta));
      this.counted.set(outcome, total);
    }
    if (status.ageMs === undefined) this.age.reset();
    else this.age.set({}, status.ageMs / 1000);
    this.keys.set({}, status.keys);
    this.failures.set({}, status.consecutiveFailures);
    this.backoff.set({}, status.backoffMs / 1000);
  }
}
