/**
 * The HTTP-level conformance suite: every route of design.md section 6 with its success path and
 * main problem codes. Call it inside a test file with a target (see target.ts).
 */
import { catalogConformance } from "./catalog.js";
import { concurrencyConformance } from "./concurrency.js";
import { fleetConformance } from "./fleet.js";
import { operationsConformance } from "./operations.js";
import { publicationConformance } from "./publication.js";
import { readerConformance } from "./reader.js";
import { replicaConformance } from "./replicas.js";
import { routingConformance } from "./routing.js";
import { Api, type ConformanceTarget } from "./target.js";

export type { ConformanceTarget } from "./target.js";

export function defineConformanceSuite(target: ConformanceTarget): void {
  const api = new Api(target);
  operationsConformance(api);
  publicationConformance(api);
  catalogConformance(api);
  routingConformance(api);
  replicaConformance(api);
  readerConformance(api);
  concurrencyConformance(api);
  fleetConformance(api);
}

/** A run prefix: lowercase, unique, short enough for every ID the suite derives from it. */
export function conformancePrefix(label: string): string {
  const random = crypto.getRandomValues(new Uint8Array(4));
  return `cf${label}${Array.from(random, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}
