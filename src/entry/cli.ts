/**
 * The operator CLI: `npx --no-install aip-registry <command>` (bin/aip-registry.mjs runs this
 * file compiled, dist/entry/cli.js).
 *
 * Transport per command: `migrate` talks SQL (it must: a Worker never migrates); `serve` starts
 * the Node server; `apply`, `status`, `doctor`, `expire-leases`, `routes` and `catalog` talk to the HTTP API
 * (--url, --token) or, with --database-url, call the same SQL functions directly; `token` and
 * `registration` are local.
 * Results go to stdout, progress and errors to stderr. Exit codes: 0 ok, 1 refused or unhealthy,
 * 2 usage or invalid input, 3 registry unavailable (retry).
 */
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { parseArgs, type ParseArgsConfig } from "node:util";
import { RegistryProblem, RegistryTimeoutError } from "../client/index.js";
import { MigrationError } from "../db/migrate.js";
import { LEASE_EXPIRY_BATCH, ROUTE_RETENTION_BATCH } from "../limits.js";
import { RegistryError } from "../registry/errors.js";
import { EXIT, type CommandContext, type Io } from "../cli/context.js";
import { Annotated, FleetFileError, RegistryUnreachable, UsageError } from "../cli/errors.js";

type Options = NonNullable<ParseArgsConfig["options"]>;

const HTTP: Options = {
  url: { type: "string" },
  token: { type: "string" },
  "database-url": { type: "string" },
  "data-dir": { type: "string" },
  timeout: { type: "string" },
  json: { type: "boolean" },
};

interface Command {
  summary: string;
  usage: string;
  options: Options;
  run(ctx: CommandContext): Promise<number>;
}

const COMMANDS: Record<string, Command> = {
  migrate: {
    summary: "Expand the tables and install this build's SQL functions beside the running builds' (--finalize: drop unused older ones)",
    usage:
      "migrate [--database-url URL | --data-dir DIR] [--json]\n" +
      "migrate --finalize [--seen-within DURATION] [--force] [--database-url URL | --data-dir DIR] [--json]\n" +
      "  SQL: --database-url, else CONTROL_DATABASE_URL or DATABASE_URL, else the embedded PGlite under DIR/pglite (default .data).\n" +
      "  migrate applies the pending expand migrations and installs this build's function set beside those of builds still\n" +
      "  serving; it never removes anything a running build uses (what MIGRATE_ON_START runs). --finalize, once every server\n" +
      "  runs this build (docs/upgrades.md), drops the function sets of older builds and applies the contract migrations that\n" +
      "  waited for them; it refuses, naming them, while a server of such a build is connected or was seen within DURATION\n" +
      "  (default 15m; 90s, 15m, 2h, 1d); --force drops them anyway. --role-prefix P names this database's group roles\n" +
      "  P_aip_data and P_aip_control on its first migration (default: the database's name).",
    options: {
      "database-url": { type: "string" },
      "data-dir": { type: "string" },
      json: { type: "boolean" },
      finalize: { type: "boolean" },
      "seen-within": { type: "string" },
      force: { type: "boolean" },
      "role-prefix": { type: "string" },
    },
    run: async (ctx) => (await import("../cli/server.js")).migrate(ctx),
  },
  serve: {
    summary: "Start the HTTP server (same as npm start)",
    usage: "serve [--port N] [--host H] [--data-dir DIR] [--database-url URL]\n  Every other setting comes from the environment (see README: configuration).",
    options: { port: { type: "string" }, host: { type: "string" }, "data-dir": { type: "string" }, "database-url": { type: "string" } },
    run: async (ctx) => (await import("../cli/server.js")).serve(ctx),
  },
  apply: {
    summary: "Publish a fleet file (YAML or JSON) as one batch; --dry-run shows the diff",
    usage: "apply -f FILE [--dry-run] [--json] [--url URL] [--token T | --database-url URL]",
    options: { ...HTTP, file: { type: "string", short: "f" }, "dry-run": { type: "boolean" } },
    run: async (ctx) => (await import("../cli/apply.js")).apply(ctx),
  },
  status: {
    summary: "Show the fleet status as tables",
    usage: "status [--json] [--url URL] [--token T | --database-url URL]",
    options: HTTP,
    run: async (ctx) => (await import("../cli/fleet.js")).status(ctx),
  },
  "expire-leases": {
    summary: "Expire stale replica leases now and release their routes",
    usage: `expire-leases [--limit N] [--all] [--json] [--url URL] [--token T | --database-url URL]\n  --limit: replicas per batch (default ${LEASE_EXPIRY_BATCH.default}, at most ${LEASE_EXPIRY_BATCH.max}); --all: repeat until a batch comes back short.`,
    options: { ...HTTP, limit: { type: "string" }, all: { type: "boolean" } },
    run: async (ctx) => (await import("../cli/fleet.js")).expireLeases(ctx),
  },
  routes: {
    summary: "Export released routes as NDJSON (routes export), run route retention now (routes prune), or show and set its policy (routes policy)",
    usage:
      "routes export --before TIME [--after TIME] [--out FILE] [--limit N] [--no-record] [--json] [--url URL] [--token T | --database-url URL]\n" +
      "  Every tenant's released routes settled in [--after, --before), one JSON object per line (GET /v1/routes/{action_id}'s\n" +
      "  record and reservation state), page by page: to stdout, or to FILE (created, never overwritten, synced to disk).\n" +
      "  TIME: RFC 3339 with an offset, or a duration ago (90m, 12h, 30d). --before is applied as an hour before now at the latest.\n" +
      "  Then it records the export watermark (ROUTE_RETENTION_REQUIRE_EXPORT removes nothing settled after it); --no-record does not.\n" +
      "routes prune [--limit N] [--all] [--json] [--url URL] [--token T | --database-url URL [--retention-days N] [--require-export]]\n" +
      `  Removes released routes past the evidence window now: --limit per batch (default ${ROUTE_RETENTION_BATCH.default}, at most ${ROUTE_RETENTION_BATCH.max});\n` +
      "  --all repeats until a batch comes back short. Over HTTP the server's ROUTE_RETENTION_DAYS applies; over SQL --retention-days,\n" +
      "  else ROUTE_RETENTION_DAYS, else 30 (and --require-export or ROUTE_RETENTION_REQUIRE_EXPORT): either can only make the\n" +
      "  database's policy stricter, which is what applies.\n" +
      "routes policy --database-url URL [--retention-days N] [--require-export | --no-require-export] [--json]\n" +
      "  Shows the database's route retention policy; with the owner's URL, sets it (shorter windows and dropping the export\n" +
      "  requirement included: servers can only make it stricter, with their ROUTE_RETENTION_DAYS and _REQUIRE_EXPORT).",
    options: {
      ...HTTP,
      before: { type: "string" },
      after: { type: "string" },
      out: { type: "string" },
      limit: { type: "string" },
      "no-record": { type: "boolean" },
      all: { type: "boolean" },
      "retention-days": { type: "string" },
      "require-export": { type: "boolean" },
      "no-require-export": { type: "boolean" },
    },
    run: async (ctx) => (await import("../cli/routes.js")).routes(ctx),
  },
  catalog: {
    summary: "Show what changed in a tenant's catalog after a revision (catalog changes --since R)",
    usage:
      "catalog changes --since R [--limit N] [--json] [--url URL] [--token T | --database-url URL --tenant T]\n" +
      "  Every capability added, changed or removed in the tenant's catalog after revision R (GET /v1/catalog/changes, all pages),\n" +
      "  and the revision that brings you to. The tenant is the token's (a token minted from AUTH_HS256_SECRET takes --tenant);\n" +
      "  over SQL, --tenant. Exit 1 with changes-expired when R is older than the history kept: list the catalog again.",
    options: { ...HTTP, since: { type: "string" }, tenant: { type: "string" }, limit: { type: "string" } },
    run: async (ctx) => (await import("../cli/catalog.js")).catalog(ctx),
  },
  doctor: {
    summary: "Check readiness and the registry's invariants (exit 1 on a problem)",
    usage: "doctor [--json] [--url URL] [--token T | --database-url URL]",
    options: HTTP,
    run: async (ctx) => (await import("../cli/fleet.js")).doctor(ctx),
  },
  registration: {
    summary: "Print the register body a replica's host sends, as a fleet file admits it (local)",
    usage:
      "registration -f FILE REPLICA_ID [--request-id ID] [--lease-ttl-ms N]\n" +
      "  The artifact and manifest digests of the replica's version, its instance's config_revision and the version's\n" +
      "  capability count: what the registry checks at register. The registry is not contacted.",
    options: { file: { type: "string", short: "f" }, "request-id": { type: "string" }, "lease-ttl-ms": { type: "string" } },
    run: async (ctx) => (await import("../cli/registration.js")).registration(ctx),
  },
  token: {
    summary: "Mint a development token (HS256, the server's secret)",
    usage:
      "token --scope S[,S...] [--tenant ID] [--peer-principal ID] [--ttl 1h] [--subject NAME] [--json | --dashboard] [--data-dir DIR]\n" +
      "  Scopes: catalog:read routes:write routes:read replicas:write registry:read registry:admin fleet:read.\n" +
      "  --peer-principal: a connector-host token (replicas:write) drives only the replicas provisioned for this principal.\n" +
      "  Secret: AUTH_HS256_SECRET, else DIR/auth-secret (written by npm start). --dashboard prints a dashboard link carrying the token.",
    options: {
      scope: { type: "string", multiple: true },
      tenant: { type: "string" },
      "peer-principal": { type: "string" },
      ttl: { type: "string" },
      subject: { type: "string" },
      json: { type: "boolean" },
      dashboard: { type: "boolean" },
      url: { type: "string" },
      "data-dir": { type: "string" },
    },
    run: async (ctx) => (await import("../cli/token.js")).token(ctx),
  },
};

function version(): string {
  try {
    return (JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string }).version;
  } catch {
    return "unknown";
  }
}

function help(): string {
  const width = Math.max(...Object.keys(COMMANDS).map((name) => name.length));
  return [
    "Usage: aip-registry <command> [options]",
    "",
    "Commands:",
    ...Object.entries(COMMANDS).map(([name, command]) => `  ${name.padEnd(width)}  ${command.summary}`),
    "",
    "HTTP commands use --url (AIP_REGISTRY_URL, default http://127.0.0.1:$PORT or 8787) and --token (AIP_REGISTRY_TOKEN);",
    "without a token they mint a short-lived one from AUTH_HS256_SECRET or the development secret in .data/auth-secret.",
    "Exit codes: 0 ok, 1 refused or unhealthy, 2 usage or invalid input, 3 registry unavailable.",
    "Run `aip-registry help <command>` for a command's options.",
  ].join("\n");
}

/** Prints an error for a person and picks the exit code. */
function report(thrown: unknown, io: Io): number {
  const notes = thrown instanceof Annotated ? thrown.notes : [];
  const error = thrown instanceof Annotated ? thrown.original : thrown;
  const print = (message: string, details: string[] = []) => {
    io.err(`error: ${message}`);
    for (const line of [...details, ...notes]) io.err(`  ${line}`);
  };
  if (error instanceof UsageError) {
    print(error.message);
    return EXIT.usage;
  }
  if (error instanceof FleetFileError) {
    print(error.message, error.issues);
    return EXIT.usage;
  }
  if (error instanceof RegistryProblem || error instanceof RegistryError) {
    const code = error.code;
    const detail = error instanceof RegistryProblem ? error.problem.detail : error.message;
    const extensions: Record<string, unknown> = error instanceof RegistryProblem ? error.problem : error.extensions;
    const fields = (extensions.errors as { field: string; message: string }[] | undefined) ?? [];
    // An admission refusal names its field, and for a digest the one the registry computed.
    const named = ["field", "computed"].filter((key) => typeof extensions[key] === "string").map((key) => `${key}: ${String(extensions[key])}`);
    print(`${code}: ${detail}`, [...fields.map((f) => `${f.field}: ${f.message}`), ...named]);
    return code === "storage" || code === "busy" || /^http-50[234]$/.test(code) ? EXIT.unavailable : EXIT.failed;
  }
  if (error instanceof MigrationError) {
    print(error.message);
    return EXIT.failed;
  }
  if (error instanceof RegistryUnreachable || error instanceof RegistryTimeoutError) {
    print(error instanceof RegistryTimeoutError ? `the registry did not answer in time: ${error.message} (--timeout)` : error.message);
    return EXIT.unavailable;
  }
  print(error instanceof Error ? error.message : String(error));
  return EXIT.failed;
}

export async function main(argv: string[], env: Record<string, string | undefined>, io: Io): Promise<number> {
  const [name, ...rest] = argv;
  // No command is a usage error (scripts that forgot one must not succeed); asking for help is not.
  if (name === undefined) {
    io.err(`error: no command given\n\n${help()}`);
    return EXIT.usage;
  }
  if (name === "help" || name === "--help" || name === "-h") {
    const command = name === "help" && rest[0] ? COMMANDS[rest[0]] : undefined;
    io.out(command ? `Usage: aip-registry ${command.usage}` : help());
    return EXIT.ok;
  }
  if (name === "--version" || name === "version") {
    io.out(version());
    return EXIT.ok;
  }
  const command = COMMANDS[name];
  if (!command) {
    io.err(`error: unknown command "${name}"\n\n${help()}`);
    return EXIT.usage;
  }
  let parsed: { values: CommandContext["values"]; positionals: string[] };
  try {
    parsed = parseArgs({ args: rest, options: { ...command.options, help: { type: "boolean", short: "h" } }, allowPositionals: true, strict: true });
  } catch (error) {
    io.err(`error: ${(error as Error).message}\nUsage: aip-registry ${command.usage}`);
    return EXIT.usage;
  }
  if (parsed.values.help === true) {
    io.out(`Usage: aip-registry ${command.usage}`);
    return EXIT.ok;
  }
  try {
    return await command.run({ values: parsed.values, positionals: parsed.positionals, env, io });
  } catch (error) {
    return report(error, io);
  }
}

export async function run(): Promise<void> {
  const io: Io = {
    out: (text) => process.stdout.write(`${text}\n`),
    err: (text) => process.stderr.write(`${text}\n`),
  };
  const code = await main(process.argv.slice(2), process.env, io);
  process.exitCode = code;
  // Let stdout drain, but do not hang on a handle a library forgot to close.
  setTimeout(() => process.exit(code), 2000).unref();
}

// `node dist/entry/cli.js ...`, or `tsx src/entry/cli.ts ...` in development; the bin imports run() instead.
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await run();
