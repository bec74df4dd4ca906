/**
 * Node start-up of the entry points, alternated round by round in one process (so a busy machine
 * weighs on each alike): the CLI's `--version` and the server's start to its "listening" line,
 * against a migrated PostgreSQL database (a scratch database, created and dropped).
 *
 *   tsx   the TypeScript run through tsx (tsx src/entry/cli.ts, tsx src/entry/node.ts): what ran before the build
 *   dist  the compiled code (node bin/aip-registry.mjs, its build check included; node dist/entry/node.js)
 *   npm   npm start (npm, prestart's build check, then exec node dist/entry/node.js)
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres npx tsx bench/node-startup.ts   (ROUNDS=10)
 */
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { migrate } from "../src/db/migrate.js";
import { withPgSession } from "../src/db/pg.js";

const root = fileURLToPath(new URL("..", import.meta.url));
const ROUNDS = Number(process.env.ROUNDS ?? 10);
const admin = new URL(process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres");
const scratch = `aip_bench_startup_${process.pid}`;
const target = new URL(admin);
target.pathname = `/${scratch}`;

type Command = [command: string, args: string[], cwd: string];
const tsx = `${root}node_modules/.bin/tsx`;
const variants: Record<string, { cli?: Command; server: Command }> = {
  tsx: { cli: [tsx, [`${root}src/entry/cli.ts`, "--version"], "/"], server: [tsx, [`${root}src/entry/node.ts`], "/"] },
  dist: { cli: [process.execPath, [`${root}bin/aip-registry.mjs`, "--version"], "/"], server: [process.execPath, [`${root}dist/entry/node.js`], "/"] },
  npm: { server: ["npm", ["start"], root] },
};

/** Milliseconds from spawn to exit 0 (`until` unset) or to `until` on stdout (then the group is stopped). */
function time([command, args, cwd]: Command, env: Record<string, string>, until?: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const child = spawn(command, args, { cwd, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"], detached: true });
    let output = "";
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      const ms = performance.now() - started;
      if (until) process.kill(-(child.pid as number), "SIGTERM");
      resolve(ms);
    };
    child.stdout.on("data", (chunk: Buffer) => {
      output += chunk.toString();
      if (until && output.includes(until)) finish();
    });
    child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()));
    child.once("exit", (code) => {
      if (!until && code === 0) finish();
      else if (!done) reject(new Error(`${command} ${args.join(" ")} exited ${code}:\n${output}`));
    });
  });
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] as number;

async function main() {
  const client = new pg.Client({ connectionString: admin.toString() });
  await client.connect();
  await client.query(`CREATE DATABASE ${scratch}`);
  try {
    await withPgSession(target.toString(), (session) => migrate(session));
    const env = {
      DATABASE_URL: target.toString(),
      AUTH_HS256_SECRET: "node-startup-bench-secret-0123456789abcdef",
      ACCESS_LOG: "false",
      LEASE_MAINTENANCE_INTERVAL_MS: "0",
      MIGRATE_ON_START: "false",
    };
    const results = Object.fromEntries(Object.keys(variants).map((name) => [name, { cli: [] as number[], server: [] as number[] }]));
    for (let round = 0; round < ROUNDS; round++) {
      for (const [name, variant] of Object.entries(variants)) {
        const result = results[name] as { cli: number[]; server: number[] };
        if (variant.cli) result.cli.push(await time(variant.cli, env));
        result.server.push(await time(variant.server, { ...env, PORT: "0" }, "listening on"));
      }
    }
    console.log(`node ${process.version}, ${ROUNDS} rounds, medians`);
    for (const [name, { cli, server }] of Object.entries(results)) {
      console.log(`${name.padEnd(5)} --version ${cli.length ? `${median(cli).toFixed(0)} ms` : "-"}   server to listening ${median(server).toFixed(0)} ms`);
    }
  } finally {
    await client.query(`DROP DATABASE IF EXISTS ${scratch} WITH (FORCE)`);
    await client.end();
  }
}

await main();
