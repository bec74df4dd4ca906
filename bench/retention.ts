/**
 * Route retention mechanisms, measured side by side in one process (issue 24; docs/scaling.md,
 * "Route retention"):
 *
 *   npx tsx bench/retention.ts [--routes=60000] [--rounds=6] [--seconds=10] [--concurrency=16]
 *     [--candidates=none,btree,brin,partitioned,partman] [--replicas=10000]
 *
 * Every candidate gets its own database with the same seeded fleet (fixtures/seed.ts) and the
 * same route history: `--routes` released routes spread evenly over a simulated evidence window
 * of 32 minutes (32 one-minute partitions where the table is partitioned), plus three routes that
 * stay reserved, back-dated into the oldest minute. Then, alternating candidates round by round
 * (A B C D E, then E D C B A, ...) so that other load on a shared machine hits each alike:
 *
 * - routing: resolve+settle cycles of new actions at `--concurrency` for `--seconds`, while a
 *   retention worker removes the oldest routes at the rate routing adds new ones (a moving
 *   cutoff: after n new routes, the window's oldest n/routes of its span is due), so the table
 *   stays at its steady-state size. The `none` candidate (today's table without the settled
 *   index, nothing removed) is the baseline. After each round `VACUUM` runs, as autovacuum would
 *   (it is off on the development machine's server), and its WAL is recorded;
 * - removal cost: with nothing else running, two minutes of history removed in one step right
 *   after a CHECKPOINT (pages a window old are first changed after one, full-page images
 *   included): WAL of the retention statements (EXPLAIN (ANALYZE, WAL): this backend's records
 *   only) plus the WAL of the VACUUM that reclaims the space, per removed route, and the shared
 *   buffers the statements touched per removed route (how directly they find what is due);
 * - lookup: the one-key read of a route by action_id (the statement resolve, settle and GET run
 *   first), as a generic plan: shared buffers touched, relations locked, and server CPU per
 *   `aip_get_route` call over 2,000 random routes (serial, one session);
 * - serial cycle: server CPU per resolve+settle with no retention running (what the schema
 *   itself costs every route);
 * - size: table and index bytes per live route at the end;
 * - safety: whether the three reserved routes survived, and the invariant checker.
 *
 * Candidates:
 * - `none`: no retention (the settled index dropped): the baseline;
 * - `btree`: batched deletes over the partial index `(settled_at) WHERE NOT reserved`, oldest
 *   settlement first (aip_remove_routes_settled_before, functions/82_retention.sql: what ships);
 * - `brin`: the same deletes over a BRIN index on settled_at instead (cheaper to maintain);
 * - `partitioned`: declarative range partitions of assigned_at, one per minute, created ahead and
 *   dropped behind once every route in them is released and settled before the cutoff (a
 *   partition holding a reserved route waits); the primary key must become (action_id, assigned_at);
 * - `partman`: the same partitions managed by pg_partman 4 (`run_maintenance` with a retention
 *   interval), when the server has the extension (Debian: postgresql-15-partman). Not a candidate
 *   for the product (not on PGlite); measured for comparison.
 */
import pg from "pg";
import { loadFunctionSet } from "../src/db/sql-files.js";
import type { Registry } from "../src/registry/registry.js";
import type { Layout } from "../fixtures/layout.js";
import { closedLoop, type Measurement } from "./lib/load.js";
import { seedFleet } from "../fixtures/seed.js";
import { dropDatabase, externalServer, freshDatabase, MACHINE_URL, type BenchDatabase } from "./lib/target.js";
import { backendCpuMs } from "./workloads/cost.js";
import { resolveNew, settle, warmUp } from "./workloads/routing.js";

const args = new Map(
  process.argv.slice(2).map((arg) => {
    const [key, value] = arg.replace(/^--/, "").split("=");
    return [key as string, value ?? "true"];
  }),
);
const ROUTES = Number(args.get("routes") ?? 60_000);
const ROUNDS = Number(args.get("rounds") ?? 6);
const SECONDS = Number(args.get("seconds") ?? 10);
const CONCURRENCY = Number(args.get("concurrency") ?? 16);
const REPLICAS = Number(args.get("replicas") ?? 10_000);
const PARTITIONS = 32;
const WIDTH_MS = 60_000;
const SPAN_MS = PARTITIONS * WIDTH_MS;
const BATCH = 500;
const RESERVED = 3;

type Name = "none" | "btree" | "brin" | "partitioned" | "partman";
const ALL: Name[] = ["none", "btree", "brin", "partitioned", "partman"];

interface Step {
  removed: number;
  walBytes: number;
  /** Shared buffers the step touched (hit or read). */
  buffers: number;
}

interface Candidate {
  name: Name;
  db: BenchDatabase;
  /** One retention step toward `cutoff` on the owner's session (undefined: no retention). */
  retain?: (client: pg.Client, cutoff: Date) => Promise<Step>;
  /** Cumulative figures. */
  inserted: number;
  removed: number;
  retentionWal: number;
  retentionCalls: number;
  retentionErrors: number;
  vacuumWal: number;
  rounds: (Measurement & { removed: number })[];
  serialCpu: number[];
  lookupCpu: number[];
}

/** WAL of the `partitioned` candidate's partitions created ahead (a fixed cost per partition). */
let partitionsAheadWal = 0;

/** The start of the simulated window's newest minute: history lies in [T0 - SPAN, T0), new routes after T0. */
let T0 = 0;
/** After `inserted` new routes the window's oldest inserted/ROUTES of its span is due. */
const cutoffFor = (inserted: number) => new Date(T0 - SPAN_MS + Math.min(inserted / ROUTES, 1) * SPAN_MS);

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? Number.NaN;

async function ownerClient(db: BenchDatabase): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: db.ownerUrl, application_name: "aip-bench-retention" });
  client.on("error", () => {});
  await client.connect();
  return client;
}

/** WAL bytes of one statement (EXPLAIN ANALYZE counts this backend's records only), and its `removed` result. */
async function walOf(client: pg.Client, call: string, params: unknown[]): Promise<Step> {
  const { rows } = await client.query<{ "QUERY PLAN": [{ Plan: Record<string, number> }] }>(
    `EXPLAIN (ANALYZE, WAL, BUFFERS, FORMAT JSON) SELECT set_config('bench.removed', (${call})::text, false)`,
    params,
  );
  const plan = rows[0]?.["QUERY PLAN"][0].Plan ?? {};
  const [removed] = (await client.query<{ n: string }>("SELECT current_setting('bench.removed') AS n")).rows;
  return {
    removed: Number(removed?.n ?? 0),
    walBytes: plan["WAL Bytes"] ?? 0,
    buffers: (plan["Shared Hit Blocks"] ?? 0) + (plan["Shared Read Blocks"] ?? 0),
  };
}

/** VACUUM (VERBOSE) of the route table (every partition); returns the WAL bytes it reports. */
async function vacuum(client: pg.Client): Promise<number> {
  let bytes = 0;
  const onNotice = (notice: { message?: string }) => {
    const match = /WAL usage: \d+ records, \d+ full page images, (\d+) bytes/.exec(notice.message ?? "");
    if (match) bytes += Number(match[1]);
  };
  client.on("notice", onNotice);
  try {
    await client.query("VACUUM (VERBOSE) aip_route_assignments");
  } finally {
    client.off("notice", onNotice);
  }
  return bytes;
}

// Schema and history -----------------------------------------------------------------------------

/** Released routes spread evenly over [T0 - SPAN, T0), in action order by time (as `act_` + UUIDv7 IDs are). */
const HISTORY_SQL = `
  INSERT INTO aip_route_assignments (
    action_id, capability_id, tenant_id, instance_id, version_id, replica_id,
    catalog_revision, binding_policy_revision, credential_revision_ref, quota_policy_ref, replica_health_revision,
    fence_token, admission_policy_revision, admission_max_tenant_in_flight, admission_max_instance_in_flight,
    admission_max_binding_in_flight, admission_max_tenant_retry_in_flight, admission_circuit_failure_threshold,
    admission_circuit_open_ms, assigned_at, reserved, last_settlement, settled_at, updated_at)
  SELECT 'act_afill_' || lpad(g.i::text, 9, '0'), b.capability_id, b.tenant_id, b.instance_id, i.version_id, r.replica_id,
         1, b.policy_revision, b.credential_revision_ref, b.quota_policy_ref, r.health_revision,
         'route_' || md5('fill' || g.i), 1, 1000, 500, 250, 100, 5, 30000,
         t.at, false, 'completed', t.at + interval '50 milliseconds', t.at + interval '50 milliseconds'
  FROM generate_series(1, $1::integer) g(i)
  CROSS JOIN LATERAL (SELECT to_timestamp(($2::double precision - $3::double precision + (g.i - 1) * ($3::double precision / $1::integer)) / 1000) AS at) t
  JOIN (SELECT row_number() OVER (ORDER BY x.tenant_id, x.capability_id, x.instance_id) AS n, x.*
        FROM aip_capability_bindings x) b ON b.n = 1 + (g.i % (SELECT count(*) FROM aip_capability_bindings))
  JOIN aip_connector_instances i ON i.instance_id = b.instance_id
  JOIN aip_connector_replicas r ON r.instance_id = i.instance_id`;

async function seedHistory(db: BenchDatabase, l: Layout): Promise<void> {
  // Three routes reserved by real resolves, back-dated into the oldest minute: retention must keep them.
  const handle = await db.registry(1);
  try {
    for (let n = 0; n < RESERVED; n++) {
      const held = await resolveNew(handle.registry, l, "reserved");
      await db.withOwner((s) =>
        s.query("UPDATE aip_route_assignments SET assigned_at = $2 WHERE action_id = $1", [held.actionId, new Date(T0 - SPAN_MS + 1000 + n)]),
      );
    }
  } finally {
    await handle.close();
  }
  await db.withOwner(async (s) => {
    await s.exec("BEGIN; SET LOCAL session_replication_role = replica");
    await s.query(HISTORY_SQL, [ROUTES, T0, SPAN_MS]);
    await s.exec("COMMIT");
  });
}

/** Replace the route table by one partitioned by assigned_at (same columns), keeping its rows. */
async function partitionTable(db: BenchDatabase, partman: boolean): Promise<void> {
  const functions = await loadFunctionSet();
  await db.withOwner(async (s) => {
    await s.exec("BEGIN");
    await s.exec(`DO $$ DECLARE f regprocedure; BEGIN
      FOR f IN SELECT p.oid::regprocedure FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'aip\\_%' LOOP
        EXECUTE format('DROP FUNCTION %s', f); END LOOP; END $$`);
    await s.exec(`
      ALTER TABLE aip_route_assignments RENAME TO aip_route_assignments_flat;
      ALTER INDEX aip_route_assignments_pkey RENAME TO aip_route_assignments_flat_pkey;
      ALTER INDEX aip_route_assignments_reserved_idx RENAME TO aip_route_assignments_flat_reserved_idx;
      DROP INDEX aip_route_assignments_settled_idx;
      CREATE TABLE aip_route_assignments (LIKE aip_route_assignments_flat INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
        PARTITION BY RANGE (assigned_at);
      ALTER TABLE aip_route_assignments ADD PRIMARY KEY (action_id, assigned_at);
      CREATE INDEX aip_route_assignments_reserved_idx ON aip_route_assignments (replica_id) WHERE reserved;
      ALTER TABLE aip_route_assignments ADD FOREIGN KEY (replica_id) REFERENCES aip_connector_replicas (replica_id);`);
    if (partman) {
      await s.exec("CREATE SCHEMA partman; CREATE EXTENSION pg_partman SCHEMA partman");
      await s.query(
        `SELECT partman.create_parent('public.aip_route_assignments', 'assigned_at', 'native', '1 minute',
           p_premake := 8, p_start_partition := $1, p_jobmon := false)`,
        [new Date(T0 - SPAN_MS).toISOString()],
      );
    } else {
      for (let k = -PARTITIONS; k < 4; k++) await s.exec(partitionDdl(T0 + k * WIDTH_MS));
    }
    await s.exec(`
      INSERT INTO aip_route_assignments SELECT * FROM aip_route_assignments_flat;
      DROP TABLE aip_route_assignments_flat;`);
    for (const file of functions.files) await s.exec(file.sql);
    await s.exec(PARTITION_RETENTION_SQL);
    await s.exec("COMMIT");
    await s.exec("ANALYZE");
  });
}

const partitionName = (from: number) => `aip_route_assignments_p${Math.round(from / 1000)}`;
const partitionDdl = (from: number) =>
  `CREATE TABLE IF NOT EXISTS ${partitionName(from)} PARTITION OF aip_route_assignments
     FOR VALUES FROM ('${new Date(from).toISOString()}') TO ('${new Date(from + WIDTH_MS).toISOString()}') WITH (fillfactor = 80)`;

/**
 * The `partitioned` candidate's retention step (owner): create the partitions of the next four
 * minutes, then drop every partition wholly before the cutoff whose routes are all released and
 * settled before it. A partition holding a reserved route, or one settled after the cutoff (a
 * route assigned near its end settles after it), waits: deleting rows out of it would be the
 * batched delete again. Returns routes removed.
 */
const PARTITION_RETENTION_SQL = `
CREATE FUNCTION bench_partition_ahead(p_width_ms bigint) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  v_from bigint;
BEGIN
  FOR k IN 0 .. 3 LOOP
    v_from := (floor(extract(epoch FROM clock_timestamp()) * 1000 / p_width_ms) + k) * p_width_ms;
    EXECUTE format('CREATE TABLE IF NOT EXISTS %I PARTITION OF aip_route_assignments FOR VALUES FROM (%L) TO (%L) WITH (fillfactor = 80)',
                   'aip_route_assignments_p' || (v_from / 1000), to_timestamp(v_from / 1000.0), to_timestamp((v_from + p_width_ms) / 1000.0));
  END LOOP;
  RETURN 0;
END
$$;

CREATE FUNCTION bench_partition_retention(p_cutoff timestamptz) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  v_removed integer := 0;
  v_n integer;
  v_from bigint;
  p record;
BEGIN
  FOR p IN
    SELECT c.oid::regclass AS part,
           (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \\(''([^'']+)''\\)'))[1]::timestamptz AS upper_bound
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'aip_route_assignments'::regclass
  LOOP
    CONTINUE WHEN p.upper_bound > p_cutoff;
    EXECUTE format('SELECT count(*) FILTER (WHERE reserved OR settled_at >= %L), count(*) FROM %s', p_cutoff, p.part) INTO v_n, v_from;
    IF v_n = 0 THEN
      EXECUTE format('DROP TABLE %s', p.part);
      v_removed := v_removed + v_from;
    END IF;
  END LOOP;
  RETURN v_removed;
END
$$;`;

async function prepare(name: Name, db: BenchDatabase): Promise<void> {
  // The experiment removes routes minutes old to keep up with routing; the retention policy's guard
  // (migration 0010) would keep them. The mechanism is what is measured, so the owner steps around
  // the policy here (the trigger that records removed actions stays on the table the batched
  // candidates delete from: it is part of their cost).
  await db.withOwner((s) => s.exec("ALTER TABLE aip_route_assignments DISABLE TRIGGER aip_route_assignments_retention_guard"));
  switch (name) {
    case "none":
      await db.withOwner((s) => s.exec("DROP INDEX aip_route_assignments_settled_idx"));
      break;
    case "btree":
      break;
    case "brin":
      await db.withOwner((s) =>
        s.exec(
          "DROP INDEX aip_route_assignments_settled_idx; CREATE INDEX aip_route_assignments_settled_brin ON aip_route_assignments USING brin (settled_at)",
        ),
      );
      break;
    case "partitioned":
    case "partman":
      await partitionTable(db, name === "partman");
      break;
  }
  await db.withOwner((s) => s.exec("VACUUM ANALYZE aip_route_assignments"));
}

function retainer(name: Name): Candidate["retain"] {
  switch (name) {
    case "none":
      return undefined;
    case "btree":
    case "brin":
      return async (client, cutoff) => {
        const total: Step = { removed: 0, walBytes: 0, buffers: 0 };
        for (;;) {
          const step = await walOf(client, "aip_remove_routes_settled_before($1, $2)", [cutoff, BATCH]);
          total.removed += step.removed;
          total.walBytes += step.walBytes;
          total.buffers += step.buffers;
          if (step.removed < BATCH) return total;
        }
      };
    case "partitioned":
      return async (client, cutoff) => {
        // Creating partitions ahead is a fixed cost per partition, counted apart from removal.
        partitionsAheadWal += (await walOf(client, "bench_partition_ahead($1)", [WIDTH_MS])).walBytes;
        return walOf(client, "bench_partition_retention($1)", [cutoff]);
      };
    case "partman":
      return async (client, cutoff) => {
        // pg_partman drops partitions older than now() - retention, whatever they hold: count what goes first.
        const retention = `${Math.max(1, Math.floor((Date.now() - cutoff.getTime()) / 1000))} seconds`;
        await client.query("UPDATE partman.part_config SET retention = $1, retention_keep_table = false WHERE parent_table = 'public.aip_route_assignments'", [
          retention,
        ]);
        const { rows } = await client.query<{ n: string }>(
          `SELECT coalesce(sum(c.reltuples), 0)::bigint AS n FROM partman.show_partitions('public.aip_route_assignments') p
           JOIN pg_class c ON c.relname = p.partition_tablename
           WHERE (partman.show_partition_info(p.partition_schemaname || '.' || p.partition_tablename)).child_end_time <= now() - $1::interval`,
          [retention],
        );
        const step = await walOf(client, "(SELECT 0 FROM partman.run_maintenance('public.aip_route_assignments', p_jobmon := false))", []);
        return { ...step, removed: Number(rows[0]?.n ?? 0) };
      };
  }
}

// Phases ------------------------------------------------------------------------------------------

async function insertedSinceT0(client: pg.Client): Promise<number> {
  const { rows } = await client.query<{ n: string }>("SELECT count(*) AS n FROM aip_route_assignments WHERE assigned_at >= $1", [new Date(T0)]);
  return Number(rows[0]?.n ?? 0);
}

async function routingRound(c: Candidate, l: Layout): Promise<void> {
  const owner = await ownerClient(c.db);
  const handle = await c.db.registry(Math.min(CONCURRENCY, 64));
  try {
    await warmUp(handle.registry, l, handle.size, 2);
    c.inserted = await insertedSinceT0(owner);
    let running = true;
    let removed = 0;
    let counted = 0;
    const retention = (async () => {
      if (!c.retain) return;
      while (running) {
        try {
          const step = await c.retain(owner, cutoffFor(c.inserted + counted));
          removed += step.removed;
          c.retentionWal += step.walBytes;
          c.retentionCalls++;
        } catch (error) {
          c.retentionErrors++;
          if (c.retentionErrors <= 3) console.log(`  ${c.name}: retention failed: ${(error as Error).message}`);
        }
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    })();
    const op = async () => {
      await settle(handle.registry, await resolveNew(handle.registry, l, "ret"));
      counted++;
    };
    const measurement = await closedLoop({ concurrency: CONCURRENCY, durationMs: SECONDS * 1000 }, op);
    running = false;
    await retention;
    c.inserted += counted;
    c.removed += removed;
    c.rounds.push({ ...measurement, removed });
    c.vacuumWal += await vacuum(owner);
  } finally {
    await handle.close();
    await owner.end();
  }
}

async function serialCycles(c: Candidate, l: Layout): Promise<void> {
  const handle = await c.db.registry(1);
  try {
    await warmUp(handle.registry, l, 1, 3);
    const pid = Number((await handle.pool.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]?.pid);
    const cpu0 = await backendCpuMs(pid);
    const m = await closedLoop({ concurrency: 1, durationMs: 3000 }, async () => settle(handle.registry, await resolveNew(handle.registry, l, "serial")));
    const cpu1 = await backendCpuMs(pid);
    if (cpu0 !== null && cpu1 !== null) c.serialCpu.push((cpu1 - cpu0) / m.ops);
  } finally {
    await handle.close();
  }
}

async function sampleRoutes(c: Candidate, n: number): Promise<{ action_id: string; tenant_id: string }[]> {
  const owner = await ownerClient(c.db);
  try {
    return (
      await owner.query<{ action_id: string; tenant_id: string }>("SELECT action_id, tenant_id FROM aip_route_assignments ORDER BY random() LIMIT $1", [n])
    ).rows;
  } finally {
    await owner.end();
  }
}

async function lookupCpu(c: Candidate, sample: { action_id: string; tenant_id: string }[]): Promise<void> {
  const handle = await c.db.registry(1);
  try {
    const registry: Registry = handle.registry;
    for (const route of sample.slice(0, 50)) await registry.getRoute(route.action_id, route.tenant_id);
    const pid = Number((await handle.pool.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]?.pid);
    const cpu0 = await backendCpuMs(pid);
    for (const route of sample) await registry.getRoute(route.action_id, route.tenant_id);
    const cpu1 = await backendCpuMs(pid);
    if (cpu0 !== null && cpu1 !== null) c.lookupCpu.push((cpu1 - cpu0) / sample.length);
  } finally {
    await handle.close();
  }
}

/** The generic plan of the one-key read: buffers it touches and relations it locks. */
async function lookupPlan(c: Candidate, sample: { action_id: string }[]) {
  const owner = await ownerClient(c.db);
  try {
    await owner.query("SET plan_cache_mode = force_generic_plan");
    await owner.query("PREPARE one_key(text) AS SELECT * FROM aip_route_assignments WHERE action_id = $1");
    let buffers = 0;
    let ms = 0;
    const probes = sample.slice(0, 200);
    for (const route of probes) {
      const { rows } = await owner.query<{ "QUERY PLAN": [{ Plan: Record<string, number>; "Execution Time": number }] }>(
        `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE one_key(${owner.escapeLiteral(route.action_id)})`,
      );
      const plan = rows[0]?.["QUERY PLAN"][0];
      buffers += (plan?.Plan["Shared Hit Blocks"] ?? 0) + (plan?.Plan["Shared Read Blocks"] ?? 0);
      ms += plan?.["Execution Time"] ?? 0;
    }
    await owner.query("BEGIN");
    await owner.query(`EXECUTE one_key(${owner.escapeLiteral(probes[0]?.action_id ?? "")})`);
    const { rows: locks } = await owner.query<{ relations: string; fast: string }>(
      "SELECT count(*) AS relations, count(*) FILTER (WHERE fastpath) AS fast FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'relation'",
    );
    await owner.query("COMMIT");
    return { buffers: buffers / probes.length, ms: ms / probes.length, relations: Number(locks[0]?.relations), fastPath: Number(locks[0]?.fast) };
  } finally {
    await owner.end();
  }
}

/** Two minutes of history removed with nothing else running: statement WAL, then the VACUUM that reclaims it. */
async function removalCost(c: Candidate) {
  if (!c.retain) return null;
  const owner = await ownerClient(c.db);
  try {
    await vacuum(owner);
    const start = cutoffFor(c.inserted).getTime();
    // Two whole minutes past the next partition boundary (and the last routes' 50 ms settlement
    // delay): the partitioned candidates drop two partitions, the others remove the same routes.
    const cutoff = new Date(T0 + Math.ceil((start - T0) / WIDTH_MS) * WIDTH_MS + 2 * WIDTH_MS + 1000);
    // The pages of routes a window old were last written long before the last checkpoint: their
    // first change after one writes a full-page image, as it would in production.
    await owner.query("CHECKPOINT").catch(() => console.log("  (CHECKPOINT not permitted: the quiet removal's WAL may omit full-page images)"));
    const t0 = performance.now();
    const step = await c.retain(owner, cutoff);
    const ms = performance.now() - t0;
    const vacuumBytes = await vacuum(owner);
    return { removed: step.removed, statementBytes: step.walBytes, buffers: step.buffers, vacuumBytes, ms };
  } finally {
    await owner.end();
  }
}

async function sizes(c: Candidate) {
  const owner = await ownerClient(c.db);
  try {
    const { rows } = await owner.query<{ heap: string; indexes: string; total: string; live: string; partitions: string }>(`
      SELECT coalesce(sum(pg_relation_size(t.relid) + pg_relation_size(t.relid, 'vm') + pg_relation_size(t.relid, 'fsm')), 0) AS heap,
             coalesce(sum(pg_indexes_size(t.relid)), 0) AS indexes,
             coalesce(sum(pg_total_relation_size(t.relid)), 0) AS total,
             (SELECT count(*) FROM aip_route_assignments) AS live,
             count(*) AS partitions
      FROM (SELECT relid FROM pg_partition_tree('aip_route_assignments') WHERE isleaf
            UNION SELECT 'aip_route_assignments'::regclass WHERE (SELECT relkind FROM pg_class WHERE oid = 'aip_route_assignments'::regclass) = 'r') t`);
    const { rows: perIndex } = await owner.query<{ name: string; bytes: string }>(`
      SELECT CASE WHEN x.indisprimary THEN 'primary key'
                  ELSE (SELECT amname FROM pg_am WHERE oid = i.relam) || ' ' ||
                       (SELECT string_agg(a.attname, ',' ORDER BY k.n) FROM unnest(x.indkey) WITH ORDINALITY k(attnum, n)
                        JOIN pg_attribute a ON a.attrelid = t.relid AND a.attnum = k.attnum) END AS name,
             sum(pg_relation_size(i.oid)) AS bytes
      FROM (SELECT relid FROM pg_partition_tree('aip_route_assignments') WHERE isleaf
            UNION SELECT 'aip_route_assignments'::regclass WHERE (SELECT relkind FROM pg_class WHERE oid = 'aip_route_assignments'::regclass) = 'r') t
      JOIN pg_index x ON x.indrelid = t.relid JOIN pg_class i ON i.oid = x.indexrelid
      GROUP BY 1 ORDER BY 1`);
    const { rows: kept } = await owner.query<{ n: string }>(
      "SELECT count(*) AS n FROM aip_route_assignments WHERE reserved AND action_id LIKE 'act\\_bench\\_%\\_reserved\\_%'",
    );
    const { rows: report } = await owner.query<{ r: { healthy: boolean; violations: unknown[] } }>("SELECT aip_check_invariants() AS r");
    const row = rows[0] ?? { heap: "0", indexes: "0", total: "0", live: "0", partitions: "0" };
    return {
      live: Number(row.live),
      partitions: Number(row.partitions),
      heapPerRoute: Number(row.heap) / Number(row.live),
      indexPerRoute: Number(row.indexes) / Number(row.live),
      totalMb: Number(row.total) / 2 ** 20,
      reservedKept: Number(kept[0]?.n ?? 0),
      violations: report[0]?.r.violations.length ?? -1,
      indexes: perIndex.map((x) => `${x.name} ${(Number(x.bytes) / Number(row.live)).toFixed(0)}`).join(", "),
    };
  } finally {
    await owner.end();
  }
}

// Main ------------------------------------------------------------------------------------------

async function main() {
  const server = await externalServer(process.env.BENCH_DATABASE_URL ?? MACHINE_URL, "machine");
  const wanted = (args.get("candidates")?.split(",") ?? ALL) as Name[];
  const probe = new pg.Client({ connectionString: server.adminUrl });
  await probe.connect();
  const partman = (await probe.query("SELECT 1 FROM pg_available_extensions WHERE name = 'pg_partman'")).rowCount === 1;
  const [settings] = (await probe.query<{ v: string; av: string }>("SELECT version() AS v, current_setting('autovacuum') AS av")).rows;
  await probe.end();
  const names = wanted.filter((n) => n !== "partman" || partman);
  if (wanted.includes("partman") && !partman) console.log("pg_partman is not available on this server: the partman candidate is skipped");
  console.log(`${settings?.v}; autovacuum ${settings?.av}`);
  console.log(
    `retention candidates ${names.join(", ")}: ${ROUTES} routes over ${PARTITIONS} one-minute partitions, ${ROUNDS} rounds x ${SECONDS} s at ${CONCURRENCY} in flight, alternating`,
  );
  T0 = Math.floor(Date.now() / WIDTH_MS) * WIDTH_MS;
  const candidates: Candidate[] = [];
  let l: Layout | undefined;
  try {
    for (const name of names) {
      const db = await freshDatabase(server, `aip_bench_ret_${name}`);
      const seeded = await db.withOwner((s) => seedFleet(s, { replicas: REPLICAS, types: Math.min(1000, REPLICAS) }));
      l = seeded.layout;
      await seedHistory(db, l);
      await prepare(name, db);
      const retain = retainer(name);
      candidates.push({
        name,
        db,
        ...(retain ? { retain } : {}),
        inserted: 0,
        removed: 0,
        retentionWal: 0,
        retentionCalls: 0,
        retentionErrors: 0,
        vacuumWal: 0,
        rounds: [],
        serialCpu: [],
        lookupCpu: [],
      });
      console.log(`  ${name}: seeded and prepared`);
    }
    const layout = l as Layout;
    const order = (round: number) => (round % 2 === 0 ? candidates : [...candidates].reverse());

    for (let round = 0; round < ROUNDS; round++) {
      for (const c of order(round)) {
        await routingRound(c, layout);
        const m = c.rounds.at(-1) as Measurement & { removed: number };
        console.log(
          `  round ${round + 1} ${c.name.padEnd(11)} ${m.throughput.toFixed(0)} cycles/s p50 ${m.latency.p50.toFixed(1)} p99 ${m.latency.p99.toFixed(1)} ms, removed ${m.removed} ${JSON.stringify(m.errors)}`,
        );
      }
    }
    for (let pass = 0; pass < 2; pass++) for (const c of order(pass)) await serialCycles(c, layout);
    const samples = new Map<Name, { action_id: string; tenant_id: string }[]>();
    for (const c of candidates) samples.set(c.name, await sampleRoutes(c, 2000));
    for (let pass = 0; pass < 2; pass++) for (const c of order(pass)) await lookupCpu(c, samples.get(c.name) ?? []);
    const plans = new Map<Name, Awaited<ReturnType<typeof lookupPlan>>>();
    for (const c of candidates) plans.set(c.name, await lookupPlan(c, samples.get(c.name) ?? []));
    const removals = new Map<Name, Awaited<ReturnType<typeof removalCost>>>();
    for (const c of candidates) removals.set(c.name, await removalCost(c));
    const sized = new Map<Name, Awaited<ReturnType<typeof sizes>>>();
    for (const c of candidates) sized.set(c.name, await sizes(c));

    const base = median((candidates.find((c) => c.name === "none") ?? candidates[0])?.rounds.map((m) => m.throughput) ?? []);
    console.log("");
    console.log(
      "| candidate | cycles/s while retention runs (median) | vs none | p99 | removed | retention WAL per removed route (load) | WAL per removed route (quiet: statement + VACUUM) | buffers per removed route (quiet) | lookup: buffers / relations locked (fast-path) | lookup server CPU | serial cycle server CPU | heap + index bytes per live route | reserved kept | checker |",
    );
    console.log("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
    for (const c of candidates) {
      const tput = median(c.rounds.map((m) => m.throughput));
      const p99 = median(c.rounds.map((m) => m.latency.p99));
      const r = removals.get(c.name);
      const p = plans.get(c.name);
      const s = sized.get(c.name);
      const quiet =
        r && r.removed > 0
          ? `${((r.statementBytes + r.vacuumBytes) / r.removed).toFixed(0)} B (${(r.statementBytes / r.removed).toFixed(0)} + ${(r.vacuumBytes / r.removed).toFixed(0)}), ${r.removed} routes in ${r.ms.toFixed(0)} ms`
          : "-";
      console.log(
        `| ${c.name} | ${tput.toFixed(0)} | ${(tput / base).toFixed(2)}x | ${p99.toFixed(0)} ms | ${c.removed} | ${c.removed ? `${(c.retentionWal / c.removed).toFixed(0)} B` : "-"} | ${quiet} | ${r && r.removed > 0 ? (r.buffers / r.removed).toFixed(2) : "-"} | ${p?.buffers.toFixed(1)} / ${p?.relations} (${p?.fastPath}) | ${median(c.lookupCpu).toFixed(3)} ms | ${median(c.serialCpu).toFixed(2)} ms | ${s ? `${s.heapPerRoute.toFixed(0)} + ${s.indexPerRoute.toFixed(0)}` : "-"} (${s?.live} routes${s && s.partitions > 1 ? `, ${s.partitions} partitions` : ""}) | ${s?.reservedKept}/${RESERVED} | ${s?.violations === 0 ? "healthy" : `${s?.violations} violations`} |`,
      );
    }
    for (const c of candidates) console.log(`${c.name}: index bytes per live route: ${sized.get(c.name)?.indexes}`);
    if (names.includes("partitioned")) console.log(`partitioned: partitions created ahead wrote ${partitionsAheadWal} B of WAL in all`);
    console.log(`\nnew routes per candidate: ${candidates.map((c) => `${c.name} ${c.inserted}`).join(", ")} (window: ${ROUTES} routes)`);
    if (candidates.some((c) => c.inserted > ROUTES)) {
      console.log("WARNING: a candidate added more routes than the window holds: its retention ran out of history to remove; rerun with a larger --routes");
    }
    for (const c of candidates) {
      const r = removals.get(c.name);
      if (r && (c.name === "partitioned" || c.name === "partman"))
        console.log(
          `${c.name}: the quiet removal (two partitions${c.name === "partman" ? ", and whatever run_maintenance created" : ""}) wrote ${r.statementBytes} B in its statement and ${r.vacuumBytes} B in VACUUM for ${r.removed} routes`,
        );
    }
    console.log(
      `VACUUM WAL after rounds, per new route: ${candidates.map((c) => `${c.name} ${(c.vacuumWal / Math.max(1, c.inserted)).toFixed(0)} B`).join(", ")}`,
    );
  } finally {
    for (const c of candidates) {
      await c.db.closePools();
      await dropDatabase(server, c.db.name);
    }
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
