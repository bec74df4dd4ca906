/**
 * The fleet dashboard: one self-contained HTML page (no build step, no external assets) that
 * polls GET /v1/fleet/status with a bearer token the operator pastes in. The token lives in
 * sessionStorage (this tab only, gone when it closes) and is sent only as an Authorization
 * header to the same origin; it can also be handed over in the URL fragment (#token=...), which
 * browsers never send to a server, and is removed from the address bar at once.
 *
 * Everything the page shows is written with textContent: no markup from the API is interpreted.
 */

const STYLE = `
:root { color-scheme: light dark; --bg: #f6f7f9; --fg: #1c2430; --muted: #5d6b7e; --card: #fff; --line: #dde2e8;
  --ready: #1f9d55; --draining: #d69e2e; --offline: #8795a8; --expired: #c53030; --accent: #2b6cb0; }
@media (prefers-color-scheme: dark) { :root { --bg: #11161d; --fg: #e3e8ef; --muted: #97a3b4; --card: #1a212b; --line: #2c3642; } }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; background: var(--bg); color: var(--fg); }
header { display: flex; flex-wrap: wrap; gap: 12px; align-items: center; justify-content: space-between; padding: 16px 24px; border-bottom: 1px solid var(--line); background: var(--card); }
h1 { font-size: 20px; margin: 0; }
h2 { font-size: 14px; text-transform: uppercase; letter-spacing: .04em; color: var(--muted); margin: 0 0 10px; }
#state { font-size: 13px; padding: 3px 10px; border-radius: 999px; background: var(--line); }
#state[data-kind="ok"] { background: color-mix(in srgb, var(--ready) 20%, transparent); }
#state[data-kind="error"] { background: color-mix(in srgb, var(--expired) 22%, transparent); }
form { display: flex; flex-wrap: wrap; gap: 8px; align-items: center; padding: 12px 24px; }
form label { font-size: 13px; color: var(--muted); }
input { flex: 1 1 320px; min-width: 0; padding: 7px 10px; border: 1px solid var(--line); border-radius: 6px; background: var(--card); color: var(--fg); font: inherit; }
button { padding: 7px 14px; border: 1px solid var(--line); border-radius: 6px; background: var(--card); color: var(--fg); font: inherit; cursor: pointer; }
button[type="submit"] { background: var(--accent); border-color: var(--accent); color: #fff; }
main { padding: 8px 24px 24px; display: grid; gap: 20px; }
.tiles { display: grid; grid-template-columns: repeat(auto-fill, minmax(150px, 1fr)); gap: 12px; }
.tile { background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 12px 14px; }
.tile .label { display: block; font-size: 12px; color: var(--muted); }
.tile .value { display: block; font-size: 28px; font-weight: 600; font-variant-numeric: tabular-nums; }
.tile.warn .value { color: var(--expired); }
section.card { background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 14px 16px; }
.bar { display: flex; height: 18px; border-radius: 6px; overflow: hidden; background: var(--line); }
.bar span { display: block; height: 100%; }
.legend { display: flex; flex-wrap: wrap; gap: 14px; margin-top: 8px; font-size: 13px; }
.legend i { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 5px; }
.ready { background: var(--ready); } .draining { background: var(--draining); } .offline { background: var(--offline); } .expired { background: var(--expired); }
.used { background: var(--accent); }
table { width: 100%; border-collapse: collapse; font-variant-numeric: tabular-nums; }
th, td { text-align: right; padding: 6px 8px; border-bottom: 1px solid var(--line); }
th:first-child, td:first-child { text-align: left; }
th { font-size: 12px; color: var(--muted); font-weight: 600; }
.note { color: var(--muted); font-size: 13px; margin: 6px 0 0; }
footer { padding: 0 24px 24px; color: var(--muted); font-size: 12px; }
[hidden] { display: none !important; }
`;

// Plain ES2020, no template literals: this text is itself embedded in one.
const SCRIPT = `
"use strict";
var KEY = "aip-registry.dashboard.token";
var params = new URLSearchParams(location.search);
var refreshSeconds = Math.min(300, Math.max(2, Number(params.get("refresh")) || 5));
var timer = null;
var $ = function (id) { return document.getElementById(id); };

if (location.hash.indexOf("#token=") === 0) {
  sessionStorage.setItem(KEY, decodeURIComponent(location.hash.slice(7)));
  history.replaceState(null, "", location.pathname + location.search);
}

function setState(kind, text) {
  var state = $("state");
  state.dataset.kind = kind;
  state.textContent = text;
}
function setText(id, value) { $(id).textContent = String(value); }
function pct(part, whole) { return whole > 0 ? Math.round((part / whole) * 1000) / 10 : 0; }

function segment(cls, value, total, label) {
  var span = document.createElement("span");
  span.className = cls;
  span.style.width = pct(value, total) + "%";
  span.title = label + ": " + value;
  return span;
}

function render(s, regions) {
  var total = s.replicas;
  setText("m-replicas", total);
  setText("m-ready", s.ready_replicas);
  setText("m-draining", s.draining_replicas);
  setText("m-offline", s.offline_replicas);
  setText("m-expired", s.expired_leases);
  setText("m-circuits", s.open_circuits);
  setText("m-capacity", pct(s.active_assignments, s.ready_capacity) + "%");
  $("t-expired").classList.toggle("warn", s.expired_leases > 0);
  $("t-circuits").classList.toggle("warn", s.open_circuits > 0);

  var bar = $("status-bar");
  bar.replaceChildren(
    segment("ready", s.ready_replicas, total, "ready"),
    segment("draining", s.draining_replicas, total, "draining"),
    segment("expired", s.expired_leases, total, "lease expired"),
    segment("offline", s.offline_replicas, total, "offline"));
  setText("l-ready", s.ready_replicas);
  setText("l-draining", s.draining_replicas);
  setText("l-expired", s.expired_leases);
  setText("l-offline", s.offline_replicas);

  $("capacity-bar").replaceChildren(segment("used", s.active_assignments, s.ready_capacity, "reserved"));
  setText("capacity-text", s.active_assignments + " of " + s.ready_capacity + " ready slots reserved (" + pct(s.active_assignments, s.ready_capacity) + "%)");

  setText("c-revision", s.catalog_revision);
  setText("c-types", s.connector_types);
  setText("c-versions", s.active_versions);
  setText("c-instances", s.enabled_instances);

  $("regions").hidden = !regions;
  $("regions-missing").hidden = !!regions;
  if (regions) {
    var rows = regions.map(function (r) {
      var tr = document.createElement("tr");
      [r.region, r.replicas, r.ready, r.draining, r.offline, r.expired, r.open_circuits,
       r.active_assignments + " / " + r.ready_capacity].forEach(function (value) {
        var td = document.createElement("td");
        td.textContent = String(value);
        tr.appendChild(td);
      });
      return tr;
    });
    $("regions-body").replaceChildren.apply($("regions-body"), rows);
  }
  setText("observed", s.observed_at);
  $("observed").dateTime = s.observed_at;
  $("fleet").hidden = false;
}

function problemText(body, status) {
  return body && typeof body.detail === "string" ? body.detail : "HTTP " + status;
}

async function refresh() {
  var token = sessionStorage.getItem(KEY);
  if (!token) {
    setState("idle", "Enter a token with the fleet:read scope");
    return;
  }
  try {
    var init = { headers: { authorization: "Bearer " + token }, cache: "no-store" };
    var answers = await Promise.all([
      fetch("v1/fleet/status", init),
      // Per-region counts; a registry without the endpoint answers 404 and the page says so.
      fetch("v1/fleet/regions", init).catch(function () { return null; })]);
    var response = answers[0];
    var body = await response.json().catch(function () { return null; });
    if (!response.ok) {
      setState("error", (response.status === 401 || response.status === 403 ? "Token refused: " : "Registry error: ") + problemText(body, response.status));
      return;
    }
    var regionAnswer = answers[1] && answers[1].ok ? await answers[1].json().catch(function () { return null; }) : null;
    render(body, regionAnswer && Array.isArray(regionAnswer.regions) ? regionAnswer.regions : null);
    setState("ok", "Live · revision " + body.catalog_revision + " · refreshed " + new Date().toLocaleTimeString());
  } catch (error) {
    setState("error", "Registry unreachable");
  }
}

function schedule() {
  clearTimeout(timer);
  timer = setTimeout(function () {
    if (document.visibilityState === "visible") refresh().finally(schedule); else schedule();
  }, refreshSeconds * 1000);
}

$("auth").addEventListener("submit", function (event) {
  event.preventDefault();
  var value = $("token").value.trim();
  if (value) sessionStorage.setItem(KEY, value);
  $("token").value = "";
  refresh();
});
$("forget").addEventListener("click", function () {
  sessionStorage.removeItem(KEY);
  $("fleet").hidden = true;
  refresh();
});
document.addEventListener("visibilitychange", function () { if (document.visibilityState === "visible") refresh(); });
setText("refresh-seconds", refreshSeconds);
refresh().finally(schedule);
`;

const tile = (id: string, label: string, extra = "") =>
  `<div class="tile"${extra}><span class="label">${label}</span><span class="value" id="${id}">–</span></div>`;
const legend = (cls: string, id: string, label: string) => `<span><i class="${cls}"></i>${label} <b id="${id}">–</b></span>`;

export function dashboardPage(nonce: string): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<link rel="icon" href="data:,">
<title>AIP registry · fleet dashboard</title>
<style nonce="${nonce}">${STYLE}</style>
</head>
<body>
<header>
  <h1>AIP registry · fleet</h1>
  <span id="state" role="status" aria-live="polite">Loading…</span>
</header>
<form id="auth" autocomplete="off">
  <label for="token">Bearer token with <code>fleet:read</code> (kept in this tab only)</label>
  <input id="token" name="token" type="password" spellcheck="false" placeholder="eyJhbGciOi…">
  <button type="submit">Connect</button>
  <button type="button" id="forget">Forget token</button>
</form>
<main id="fleet" hidden>
  <div class="tiles">
    ${tile("m-replicas", "Replicas")}
    ${tile("m-ready", "Ready")}
    ${tile("m-draining", "Draining")}
    ${tile("m-offline", "Offline")}
    ${tile("m-expired", "Expired leases", ' id="t-expired"')}
    ${tile("m-circuits", "Open circuits", ' id="t-circuits"')}
    ${tile("m-capacity", "Capacity used")}
  </div>
  <section class="card" aria-labelledby="h-status">
    <h2 id="h-status">Replicas by status</h2>
    <div class="bar" id="status-bar" role="img" aria-label="Replicas by status"></div>
    <div class="legend">${legend("ready", "l-ready", "ready")}${legend("draining", "l-draining", "draining")}${legend("expired", "l-expired", "lease expired")}${legend("offline", "l-offline", "offline")}</div>
  </section>
  <section class="card" aria-labelledby="h-capacity">
    <h2 id="h-capacity">Capacity</h2>
    <div class="bar" id="capacity-bar" role="img" aria-label="Reserved share of ready capacity"></div>
    <p class="note" id="capacity-text"></p>
  </section>
  <section class="card" aria-labelledby="h-regions">
    <h2 id="h-regions">Replicas by region</h2>
    <table id="regions" hidden>
      <thead><tr><th>Region</th><th>Replicas</th><th>Ready</th><th>Draining</th><th>Offline</th><th>Expired</th><th>Open circuits</th><th>Reserved / ready capacity</th></tr></thead>
      <tbody id="regions-body"></tbody>
    </table>
    <p class="note" id="regions-missing">This registry does not report regions (GET /v1/fleet/regions).</p>
  </section>
  <section class="card" aria-labelledby="h-catalog">
    <h2 id="h-catalog">Catalog</h2>
    <div class="tiles">
      ${tile("c-revision", "Catalog revision")}
      ${tile("c-types", "Connector types")}
      ${tile("c-versions", "Active versions")}
      ${tile("c-instances", "Enabled instances")}
    </div>
  </section>
</main>
<footer>Observed at <time id="observed">–</time> · refreshes every <span id="refresh-seconds">5</span> s (<code>?refresh=</code> seconds) · aggregates only, no identifiers</footer>
<script nonce="${nonce}">${SCRIPT}</script>
</body>
</html>`;
}

/** Only the page's own nonce-bearing script and style run; it talks to its own origin only. */
export function dashboardCsp(nonce: string): string {
  return [
    "default-src 'none'",
    `script-src 'nonce-${nonce}'`,
    `style-src 'nonce-${nonce}'`,
    "connect-src 'self'",
    "img-src 'self' data:",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join("; ");
}
