/**
 * The published client's wire types (src/client/wire.ts) are generated from the server's zod
 * schemas (scripts/generate-client-types.ts) so that the client depends on nothing: here, the file
 * is current, and (at compile time: `npm run typecheck`) every generated type is exactly the zod
 * schema's, z.infer for what the server answers and z.input for what the client sends. A member
 * added to a schema without regenerating fails both. The per-operation lifecycle requests are
 * requests the server's schema accepts, and the client imports nothing but its own modules (so the
 * published package needs nothing else).
 */
import type { z } from "@hono/zod-openapi";
import { readdirSync, readFileSync } from "node:fs";
import { expect, it } from "vitest";
import { CLIENT_TYPES, CLIENT_TYPES_FILE, renderClientTypes } from "../../scripts/generate-client-types.js";
import type { LifecycleRequests } from "../../src/client/lifecycle.js";
import type * as W from "../../src/client/wire.js";
import type { ProblemCode } from "../../src/registry/errors.js";
import type * as S from "../../src/schemas.js";

/** true when A and B are assignable to each other (the generated type says what the schema says). */
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
type Out<K extends keyof typeof S> = (typeof S)[K] extends z.ZodType ? z.infer<(typeof S)[K]> : never;
type In<K extends keyof typeof S> = (typeof S)[K] extends z.ZodType ? z.input<(typeof S)[K]> : never;

// Each line fails to compile when the generated type and the schema disagree.
const exact: { [K in keyof typeof CLIENT_TYPES]: true } & { ProblemCode: true } = {
  ProblemCode: true satisfies Same<W.ProblemCode, ProblemCode>,
  Problem: true satisfies Same<W.Problem, Out<"Problem">>,
  Topology: true satisfies Same<W.Topology, Out<"Topology">>,
  RouteAssignment: true satisfies Same<W.RouteAssignment, Out<"RouteAssignment">>,
  SettlementOutcome: true satisfies Same<W.SettlementOutcome, Out<"SettlementOutcome">>,
  SettlementResult: true satisfies Same<W.SettlementResult, Out<"SettlementResult">>,
  ResolveOutcome: true satisfies Same<W.ResolveOutcome, Out<"ResolveOutcome">>,
  CapabilityDefinition: true satisfies Same<W.CapabilityDefinition, Out<"CapabilityDefinition">>,
  CatalogPage: true satisfies Same<W.CatalogPage, Out<"CatalogPage">>,
  CatalogEntry: true satisfies Same<W.CatalogEntry, Out<"CatalogEntry">>,
  CatalogChange: true satisfies Same<W.CatalogChange, Out<"CatalogChange">>,
  CatalogChanges: true satisfies Same<W.CatalogChanges, Out<"CatalogChanges">>,
  LifecycleOperation: true satisfies Same<W.LifecycleOperation, Out<"LifecycleOperation">>,
  LifecycleResponse: true satisfies Same<W.LifecycleResponse, Out<"LifecycleResponse">>,
  PublicationResult: true satisfies Same<W.PublicationResult, Out<"PublicationResult">>,
  VersionIdentity: true satisfies Same<W.VersionIdentity, Out<"VersionIdentity">>,
  InstanceIdentity: true satisfies Same<W.InstanceIdentity, Out<"InstanceIdentity">>,
  ReplicaIdentity: true satisfies Same<W.ReplicaIdentity, Out<"ReplicaIdentity">>,
  FleetStatus: true satisfies Same<W.FleetStatus, Out<"FleetStatus">>,
  FleetRegion: true satisfies Same<W.FleetRegion, Out<"FleetRegion">>,
  FleetRegions: true satisfies Same<W.FleetRegions, Out<"FleetRegions">>,
  LeaseExpiryResult: true satisfies Same<W.LeaseExpiryResult, Out<"LeaseExpiryResult">>,
  RouteRetentionResult: true satisfies Same<W.RouteRetentionResult, Out<"RouteRetentionResult">>,
  RouteEvidence: true satisfies Same<W.RouteEvidence, Out<"RouteEvidence">>,
  RoutesPage: true satisfies Same<W.RoutesPage, Out<"RoutesPage">>,
  RouteExportWatermarks: true satisfies Same<W.RouteExportWatermarks, Out<"RouteExportWatermarks">>,
  InvariantReport: true satisfies Same<W.InvariantReport, Out<"InvariantReport">>,
  AdminRecordKind: true satisfies Same<W.AdminRecordKind, Out<"AdminRecordKind">>,
  BindingsPage: true satisfies Same<W.BindingsPage, Out<"BindingsPage">>,
  Readiness: true satisfies Same<W.Readiness, Out<"Readiness">>,
  TopologyPreference: true satisfies Same<W.TopologyPreference, In<"TopologyPreference">>,
  ResolveRequest: true satisfies Same<W.ResolveRequest, In<"ResolveRequest">>,
  LifecycleRequest: true satisfies Same<W.LifecycleRequest, In<"LifecycleRequest">>,
  Change: true satisfies Same<W.Change, In<"Change">>,
  // Queries: the client sends numbers (the server parses the decimal strings into the same).
  CatalogQuery: true satisfies Same<W.CatalogQuery, Out<"CatalogQuery">>,
  CatalogChangesQuery: true satisfies Same<W.CatalogChangesQuery, Out<"CatalogChangesQuery">>,
};

// The per-operation lifecycle requests are narrower than the server's one schema, never wider.
type Accepted<T> = [T] extends [In<"LifecycleRequest">] ? true : false;
const lifecycle: { [K in keyof LifecycleRequests]: true } = {
  register: true satisfies Accepted<LifecycleRequests["register"]>,
  heartbeat: true satisfies Accepted<LifecycleRequests["heartbeat"]>,
  drain: true satisfies Accepted<LifecycleRequests["drain"]>,
  offline: true satisfies Accepted<LifecycleRequests["offline"]>,
};

it("src/client/ imports nothing outside itself, and its modules only each other", () => {
  const dir = new URL("../../src/client/", import.meta.url);
  for (const file of readdirSync(dir)) {
    const imports = [...readFileSync(new URL(file, dir), "utf8").matchAll(/^(?:import|export)[^;]*?from\s+"([^"]+)"/gms)].map((m) => m[1]);
    expect(
      imports.filter((path) => !/^\.\/[\w-]+\.js$/.test(path ?? "")),
      file,
    ).toEqual([]);
  }
  expect(Object.keys(lifecycle)).toEqual(["register", "heartbeat", "drain", "offline"]);
});

it("src/client/wire.ts matches the server's schemas (run npm run client:types)", () => {
  expect(readFileSync(CLIENT_TYPES_FILE, "utf8")).toBe(renderClientTypes());
  expect(Object.keys(exact).sort()).toEqual([...Object.keys(CLIENT_TYPES), "ProblemCode"].sort());
});
