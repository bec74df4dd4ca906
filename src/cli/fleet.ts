/**
 * The fleet commands: `status` (the fleet status as tables), `doctor` (readiness, the invariant
 * checker and fleet warnings; non-zero when something is wrong) and `expire-leases`.
 */
import type { FleetRegion, FleetStatus } from "../client/index.js";
import { LEASE_EXPIRY_BATCH, type RangeBound } from "../limits.js";
import { EXIT, UsageError, str, withBackend, type CommandContext } from "./context.js";
import { percent, table } from "./table.js";

export function renderStatus(status: FleetStatus, regions: FleetRegion[] | null, target: string): string {
  const sections = [
    `Fleet status of ${target} at ${status.observed_at}`,
    table(
      ["CATALOG REVISION", "CONNECTOR TYPES", "ACTIVE VERSIONS", "ENABLED INSTANCES"],
      [[status.catalog_revision, status.connector_types, status.active_versions, status.enabled_instances]],
    ),
    table(
      ["REPLICAS", "READY", "DRAINING", "OFFLINE", "EXPIRED LEASES", "OPEN CIRCUITS"],
      [[status.replicas, status.ready_replicas, status.draining_replicas, status.offline_replicas, status.expired_leases, status.open_circuits]],
    ),
    table(
      ["READY CAPACITY", "RESERVED", "USED"],
      [[status.ready_capacity, status.active_assignments, percent(status.active_assignments, status.ready_capacity)]],
    ),
  ];
  if (regions?.length) {
    sections.push(
      table(
        ["REGION", "REPLICAS", "READY", "DRAINING", "OFFLINE", "EXPIRED", "OPEN CIRCUITS", "RESERVED", "READY CAPACITY"],
        regions.map((r) => [r.region, r.replicas, r.ready, r.draining, r.offline, r.expired, r.open_circuits, r.active_assignments, r.ready_capacity]),
      ),
    );
  }
  return sections.join("\n\n");
}

export async function status(ctx: CommandContext): Promise<number> {
  return withBackend(ctx, ["fleet:read"], async (backend) => {
    const [fleet, regions] = await Promise.all([backend.fleetStatus(), backend.fleetRegions()]);
    ctx.io.out(ctx.values.json === true ? JSON.stringify(regions ? { ...fleet, regions } : fleet, null, 2) : renderStatus(fleet, regions, backend.target));
    return EXIT.ok;
  });
}

export async function doctor(ctx: CommandContext): Promise<number> {
  const { io } = ctx;
  return withBackend(ctx, ["registry:admin", "fleet:read"], async (backend) => {
    const lines: string[] = [];
    let failures = 0;
    let warnings = 0;
    const check = (level: "ok" | "warn" | "FAIL", text: string) => {
      if (level === "FAIL") failures++;
      if (level === "warn") warnings++;
      lines.push(`${level.padEnd(5)} ${text}`);
    };

    io.err(`checking ${backend.target}`);
    const ready = await backend.readiness();
    if (ready.status === "ready") check("ok", `schema: version ${ready.schema_version}, functions intact, catalog revision ${ready.catalog_revision}`);
    else check("FAIL", `schema: not ready: ${ready.reason ?? "unknown reason"}`);
    for (const set of ready.function_sets ?? []) {
      if (!set.this)
        check(
          "ok",
          `function set ${set.name} of release ${set.release} is installed beside this build's (last seen ${set.last_seen ?? "never"}); \`aip-registry migrate --finalize\` drops it once no server uses it`,
        );
    }
    if (ready.role_warning) check("warn", ready.role_warning);
    if (ready.connect_public) {
      check(
        "warn",
        "every role may connect to this database (CONNECT is granted to PUBLIC): run `aip-registry migrate`, which revokes it, or REVOKE CONNECT ON DATABASE ... FROM PUBLIC",
      );
    }
    const foreign = ready.session?.other_registry_roles ?? [];
    if (foreign.length > 0) {
      check(
        "warn",
        `this login (${ready.session?.role}) also holds ${foreign.join(", ")}: it may use other registry databases on this server; give each registry logins of its own`,
      );
    }
    if (ready.tables_intact === false) {
      check("FAIL", "tables: the registry's tables, columns or indexes differ from what the migrations made (changed by hand); compare them with drizzle/");
    }
    if (ready.status !== "ready" && ready.reason?.startsWith("schema not installed")) {
      // The invariant checker and the fleet status are functions of the schema it lacks: a
      // deployment step is missing (exit 1), not an outage to retry (exit 3).
      if (ctx.values.json === true)
        io.out(JSON.stringify({ target: backend.target, healthy: false, readiness: ready, invariants: null, fleet: null, warnings }, null, 2));
      else io.out(`${lines.join("\n")}\n\n1 problem, ${warnings} warnings`);
      return EXIT.failed;
    }

    io.err("running the invariant checker");
    const report = await backend.checkInvariants();
    const violations = report.violations;
    if (report.healthy) check("ok", `invariants: no violations (checked at ${report.checked_at})`);
    else check("FAIL", `invariants: ${violations.length} ${violations.length === 1 ? "violation" : "violations"} (checked at ${report.checked_at})`);

    const fleet = await backend.fleetStatus();
    if (fleet.expired_leases > 0) {
      check(
        "warn",
        `${fleet.expired_leases} replica ${fleet.expired_leases === 1 ? "lease has" : "leases have"} expired without being marked offline (lease maintenance is behind; run \`aip-registry expire-leases\`)`,
      );
    }
    if (fleet.replicas > 0 && fleet.ready_replicas === 0) check("warn", "no replica is ready: no new route can be created");
    if (fleet.open_circuits > 0) check("warn", `${fleet.open_circuits} replica ${fleet.open_circuits === 1 ? "circuit is" : "circuits are"} open`);
    check(
      "ok",
      `fleet: ${fleet.ready_replicas} of ${fleet.replicas} replicas ready, ${fleet.active_assignments} of ${fleet.ready_capacity} ready slots reserved`,
    );

    if (ctx.values.json === true) {
      io.out(JSON.stringify({ target: backend.target, healthy: failures === 0, readiness: ready, invariants: report, fleet, warnings }, null, 2));
    } else {
      io.out(lines.join("\n"));
      if (violations.length) {
        io.out("");
        io.out(
          table(
            ["VIOLATION", "DETAIL"],
            violations.map((v) => [v.kind, JSON.stringify(v.detail)]),
          ),
        );
      }
      io.out("");
      io.out(`${failures} ${failures === 1 ? "problem" : "problems"}, ${warnings} ${warnings === 1 ? "warning" : "warnings"}`);
    }
    return failures > 0 ? EXIT.failed : EXIT.ok;
  });
}

/** An integer option refused outside its bound (src/limits.ts), as the API refuses it. */
function boundedInt(value: string | undefined, name: string, bound: RangeBound): number {
  if (value === undefined) return bound.default;
  const n = Number(value);
  if (!Number.isInteger(n) || n < bound.min || n > bound.max) throw new UsageError(`--${name} must be an integer from ${bound.min} to ${bound.max}`);
  return n;
}

export async function expireLeases(ctx: CommandContext): Promise<number> {
  const limit = boundedInt(str(ctx.values, "limit"), "limit", LEASE_EXPIRY_BATCH);
  const all = ctx.values.all === true;
  return withBackend(ctx, ["registry:admin"], async (backend) => {
    let expired = 0;
    let released = 0;
    // --all: batches until one comes back short, bounded so a flood of expiries cannot loop forever.
    for (let batch = 1; batch <= (all ? 1000 : 1); batch++) {
      const result = await backend.expireLeases(limit);
      expired += result.expired;
      released += result.released;
      if (all) ctx.io.err(`batch ${batch}: expired ${result.expired}, released ${result.released}`);
      if (result.expired < limit) break;
    }
    ctx.io.out(
      ctx.values.json === true
        ? JSON.stringify({ expired, released })
        : `expired ${expired} replica ${expired === 1 ? "lease" : "leases"}; released ${released} ${released === 1 ? "route" : "routes"}`,
    );
    return EXIT.ok;
  });
}
