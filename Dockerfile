# syntax=docker/dockerfile:1
# The Node server as an image (docs/deploy.md, "A container image"):
#
#   docker build -t aip-registry .
#   docker run -p 8787:8787 -e DATABASE_URL=... -e AUTH_JWKS_URL=... aip-registry
#
# Two stages: the first installs every dependency and builds dist/ from src/; the second holds
# only what the server runs (production dependencies, dist/, the CLI, the SQL) and runs it as the
# unprivileged `node` user. The build context is only what .dockerignore lets in: no secrets, no
# node_modules or dist/ from the host (test/cli/docker.test.ts). Secrets and settings come from
# the environment at run time, never from the image.

ARG NODE_VERSION=24

FROM node:${NODE_VERSION}-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# No install scripts: `prepare` would build before src/ is here, and none of the dependencies'
# scripts is needed to build or run the server (esbuild's binary is its platform package).
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY scripts/build.mjs scripts/
COPY src/ src/
RUN node scripts/build.mjs --if-stale \
 && npm prune --omit=dev --ignore-scripts --no-audit --no-fund

FROM node:${NODE_VERSION}-slim
# HOST and ALLOW_NETWORK_BIND: reachable from outside the container; put a TLS-terminating proxy in
# front (README: ALLOW_NETWORK_BIND).
ENV NODE_ENV=production \
    PORT=8787 \
    DATA_DIR=/data \
    HOST=0.0.0.0 \
    ALLOW_NETWORK_BIND=true
WORKDIR /app
# Owned by root and read-only to the server: it writes nothing but its data directory.
COPY package.json ./
COPY --from=build /app/node_modules/ node_modules/
COPY --from=build /app/dist/ dist/
COPY bin/ bin/
COPY functions/ functions/
COPY drizzle/ drizzle/
# The embedded database (used when DATABASE_URL is unset) lives under DATA_DIR: mount a volume there.
RUN mkdir -p /data && chown node:node /data
USER node
EXPOSE 8787
# Liveness: /healthz touches nothing (readiness, /readyz, asks the database; leave it to the orchestrator).
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
  CMD ["node", "-e", "fetch(`http://127.0.0.1:${process.env.PORT}/healthz`).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# node is PID 1 and receives `docker stop`'s SIGTERM itself: it drains for up to SHUTDOWN_DRAIN_MS
# (8 s), then closes the database (2 s at most). `docker stop --time 15` leaves it room.
STOPSIGNAL SIGTERM
CMD ["node", "dist/entry/node.js"]
