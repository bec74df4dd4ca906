/**
 * The fleet dashboard: one self-contained HTML page (no build step, no external assets) that
 * polls the API with a bearer token the operator pastes in: what is (GET /v1/fleet/status and
 * /v1/fleet/regions: replicas, capacity, circuits, catalog) and what happened (GET
 * /v1/fleet/activity: requests per minute, refusals by problem code and latency percentiles over
 * the last hour or three, the busiest tenants and any one tenant's own view), with the build and
 * the database's schema version (/readyz). The token lives in sessionStorage (this tab only, gone
 * when it closes) and is sent only as an Authorization header to the same origin; it can also be
 * handed over in the URL fragment (#token=...), which browsers never send to a server, and is
 * removed from the address bar at once.
 *
 * Everything the page shows is written with textContent or as SVG attributes built here: no markup
 * from the API is interpreted. Charts are inline SVG drawn by the page's own script.
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
#build { font-size: 13px; color: var(--muted); font-variant-numeric: tabular-nums; }
.head { display: flex; flex-wrap: wrap; gap: 10px; align-items: baseline; justify-content: space-between; margin-bottom: 10px; }
.head h2 { margin: 0; }
.controls { display: flex; flex-wrap: wrap; gap: 8px; align-items: center; font-size: 13px; color: var(--muted); }
select { padding: 5px 8px; border: 1px solid var(--line); border-radius: 6px; background: var(--card); color: var(--fg); font: inherit; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(340px, 1fr)); gap: 20px; margin-top: 14px; }
figure { margin: 0; }
figcaption { font-size: 13px; font-weight: 600; margin-bottom: 4px; }
svg.chart { width: 100%; height: auto; display: block; overflow: visible; }
svg.chart text { font-size: 11px; fill: var(--muted); }
svg.chart circle { stroke: none; }
svg.chart .axis { stroke: var(--line); stroke-width: 1; }
svg.chart polyline { fill: none; stroke-width: 2; stroke-linejoin: round; }
.c0 { stroke: #2b6cb0; fill: #2b6cb0; background: #2b6cb0; } .c1 { stroke: #1f9d55; fill: #1f9d55; background: #1f9d55; }
.c2 { stroke: #d69e2e; fill: #d69e2e; background: #d69e2e; } .c3 { stroke: #805ad5; fill: #805ad5; background: #805ad5; }
.c4 { stroke: #c53030; fill: #c53030; background: #c53030; } .c5 { stroke: #319795; fill: #319795; background: #319795; }
.c6 { stroke: #dd6b20; fill: #dd6b20; background: #dd6b20; } .c7 { stroke: #718096; fill: #718096; background: #718096; }
svg.chart rect.c0, svg.chart rect.c1, svg.chart rect.c2, svg.chart rect.c3, svg.chart rect.c4, svg.chart rect.c5, svg.chart rect.c6, svg.chart rect.c7 { stroke: none; }
.empty-chart { color: var(--muted); font-size: 13px; padding: 60px 0; text-align: center; border: 1px dashed var(--line); border-radius: 8px; }
tr.pick { cursor: pointer; } tr.pick:hover td { background: color-mix(in srgb, var(--accent) 8%, transparent); }
tr.picked td { background: color-mix(in srgb, var(--accent) 16%, transparent); }
.two { display: grid; grid-template-columns: repeat(auto-fit, minmax(360px, 1fr)); gap: 16px; margin-top: 14px; }
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

var activityMinutes = Math.min(180, Math.max(15, Number(params.get("minutes")) || 60));
var activityTenant = params.get("tenant") || "";
var latencyKind = "resolve";
var KIND_LABELS = { resolve: "resolves", settle: "settlements", catalog: "catalog reads", publish: "publications", lifecycle: "lifecycle", other: "other" };
var SVG = "http://www.w3.org/2000/svg";
var refreshes = 0;

function el(tag, attrs, text) {
  var node = tag.indexOf("svg:") === 0 ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, String(attrs[k])); });
  if (text !== undefined) node.textContent = String(text);
  return node;
}
function fmt(n) { return n === null || n === undefined ? "–" : (Math.round(n * 10) / 10).toLocaleString(); }
function ms(n) { return n === null || n === undefined ? "–" : n >= 1000 ? (Math.round(n / 100) / 10) + " s" : fmt(n) + " ms"; }
function hhmm(iso) { var d = new Date(iso); return ("0" + d.getHours()).slice(-2) + ":" + ("0" + d.getMinutes()).slice(-2); }
function niceMax(v) { if (v <= 0) return 1; var p = Math.pow(10, Math.floor(Math.log10(v))); var m = v / p; return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p; }

/** A chart frame: y axis from 0 to max with three labels, x labels at both ends and the middle. */
function frame(svg, series, max, unit) {
  var W = 400, H = 130, L = 40;
  svg.setAttribute("viewBox", "0 0 " + W + " " + (H + 18));
  [0, 0.5, 1].forEach(function (f) {
    var y = H - f * (H - 8);
    svg.appendChild(el("svg:line", { x1: L, x2: W, y1: y, y2: y, class: "axis" }));
    svg.appendChild(el("svg:text", { x: L - 6, y: y + 4, "text-anchor": "end" }, fmt(max * f) + (f === 1 && unit ? " " + unit : "")));
  });
  var n = series.length;
  [0, Math.floor((n - 1) / 2), n - 1].forEach(function (i, j) {
    if (!series[i]) return;
    svg.appendChild(el("svg:text", { x: L + (i / Math.max(1, n - 1)) * (W - L), y: H + 15, "text-anchor": j === 0 ? "start" : j === 2 ? "end" : "middle" }, hhmm(series[i].at)));
  });
  return { x: function (i) { return L + (i / Math.max(1, n - 1)) * (W - L); }, y: function (v) { return H - (v / max) * (H - 8); }, W: W, L: L, H: H };
}

function legend(id, entries) {
  $(id).replaceChildren.apply($(id), entries.map(function (e) {
    var span = el("span");
    span.appendChild(el("i", { class: e.cls }));
    span.appendChild(document.createTextNode(e.label + " "));
    span.appendChild(el("b", {}, e.value));
    return span;
  }));
}

function lineChart(id, series, lines, unit) {
  var svg = $(id);
  svg.replaceChildren();
  var max = 0;
  lines.forEach(function (line) { series.forEach(function (p) { var v = line.value(p); if (v !== null && v > max) max = v; }); });
  max = niceMax(max);
  var f = frame(svg, series, max, unit);
  lines.forEach(function (line) {
    var points = [];
    series.forEach(function (p, i) { var v = line.value(p); if (v !== null) points.push({ x: f.x(i), y: f.y(v), zero: v === 0, title: hhmm(p.at) + " " + line.label + ": " + fmt(v) + (unit ? " " + unit : "") }); });
    if (points.length === 0) return;
    var poly = el("svg:polyline", { points: points.map(function (q) { return q.x.toFixed(1) + "," + q.y.toFixed(1); }).join(" "), class: line.cls });
    poly.appendChild(el("svg:title", {}, line.label));
    svg.appendChild(poly);
    // Each minute's value as a dot with its own tooltip (a lone minute would draw no line); idle minutes get none.
    points.forEach(function (q) {
      if (q.zero) return;
      var dot = el("svg:circle", { cx: q.x.toFixed(1), cy: q.y.toFixed(1), r: 2.5, class: line.cls });
      dot.appendChild(el("svg:title", {}, q.title));
      svg.appendChild(dot);
    });
  });
}

function barChart(id, series, codes) {
  var svg = $(id);
  svg.replaceChildren();
  var max = 0;
  series.forEach(function (p) { var t = 0; codes.forEach(function (c) { t += p.refusals[c] || 0; }); if (t > max) max = t; });
  max = niceMax(max);
  var f = frame(svg, series, max, "");
  var w = Math.max(1, (f.W - f.L) / Math.max(1, series.length) - 1);
  series.forEach(function (p, i) {
    var base = 0;
    codes.forEach(function (c, k) {
      var v = p.refusals[c] || 0;
      if (!v) return;
      var y0 = f.y(base), y1 = f.y(base + v);
      var rect = el("svg:rect", { x: (f.x(i) - w / 2).toFixed(1), y: y1.toFixed(1), width: w.toFixed(1), height: Math.max(1, y0 - y1).toFixed(1), class: "c" + ((k + 4) % 8) });
      rect.appendChild(el("svg:title", {}, hhmm(p.at) + " " + c + ": " + v));
      svg.appendChild(rect);
      base += v;
    });
  });
}

function renderActivity(a) {
  $("activity").hidden = false;
  $("activity-missing").hidden = true;
  var minutes = a.series.length;
  var total = function (kind) { return a.totals.requests[kind] || 0; };
  var refused = 0;
  Object.keys(a.totals.refusals).forEach(function (c) { refused += a.totals.refusals[c]; });
  var latencyKey = a.tenant_id ? "all" : latencyKind;
  var lat = a.totals.latency_ms[latencyKey] || { p50: null, p95: null, p99: null };
  setText("a-resolves", fmt(total("resolve") / minutes));
  setText("a-settlements", fmt(total("settle") / minutes));
  setText("a-catalog", fmt(total("catalog") / minutes));
  setText("a-publications", total("publish"));
  setText("a-refusals", refused);
  setText("a-p99", ms(lat.p99));
  setText("a-p99-label", (a.tenant_id ? "p99, all requests" : "p99, " + KIND_LABELS[latencyKind]));
  $("t-refusals").classList.toggle("warn", refused > 0);
  setText("activity-scope", (a.scope === "process" ? "this server's requests" : "every isolate of the deployment") +
    (a.tenant_id ? " · tenant " + a.tenant_id : " · all tenants") + " · " + hhmm(a.from) + "–" + hhmm(a.to));

  var kinds = ["resolve", "settle", "catalog", "publish"];
  lineChart("chart-rates", a.series, kinds.map(function (k, i) {
    return { label: KIND_LABELS[k], cls: "c" + i, value: function (p) { return p.requests[k] || 0; } };
  }), "/min");
  legend("legend-rates", kinds.map(function (k, i) { return { cls: "c" + i, label: KIND_LABELS[k], value: fmt(total(k) / minutes) + "/min" }; }));

  var codes = Object.keys(a.totals.refusals).sort(function (x, y) { return a.totals.refusals[y] - a.totals.refusals[x]; });
  $("refusals-none").hidden = codes.length > 0;
  $("chart-refusals").hidden = codes.length === 0;
  if (codes.length) barChart("chart-refusals", a.series, codes);
  legend("legend-refusals", codes.map(function (c, k) { return { cls: "c" + ((k + 4) % 8), label: c, value: a.totals.refusals[c] }; }));

  var pct = ["p50", "p95", "p99"];
  lineChart("chart-latency", a.series, pct.map(function (q, i) {
    return { label: q, cls: "c" + (i === 2 ? 4 : i === 1 ? 2 : 0), value: function (p) { var l = p.latency_ms[latencyKey]; return l ? l[q] : null; } };
  }), "ms");
  legend("legend-latency", pct.map(function (q, i) { return { cls: "c" + (i === 2 ? 4 : i === 1 ? 2 : 0), label: q, value: ms(lat[q]) }; }));
  $("latency-kind").hidden = !!a.tenant_id;

  $("tenants-card").hidden = !!a.tenant_id || a.tenants.length === 0;
  $("tenant-back").hidden = !a.tenant_id;
  var rows = a.tenants.map(function (t) {
    var tr = el("tr", { class: "pick", tabindex: "0", title: "Show tenant " + t.tenant_id });
    [t.tenant_id, t.requests, t.resolves, t.settlements, t.refusals, ms(t.p99_ms)].forEach(function (v) { tr.appendChild(el("td", {}, v)); });
    var pick = function () { chooseTenant(t.tenant_id); };
    tr.addEventListener("click", pick);
    tr.addEventListener("keydown", function (e) { if (e.key === "Enter") pick(); });
    return tr;
  });
  $("tenants-body").replaceChildren.apply($("tenants-body"), rows);
  var outcomeRows = [];
  Object.keys(a.totals.outcomes).sort().forEach(function (kind) {
    var o = a.totals.outcomes[kind];
    Object.keys(o).sort(function (x, y) { return o[y] - o[x]; }).forEach(function (outcome) {
      var tr = el("tr");
      [KIND_LABELS[kind] || kind, outcome, o[outcome]].forEach(function (v) { tr.appendChild(el("td", {}, v)); });
      outcomeRows.push(tr);
    });
  });
  $("outcomes-body").replaceChildren.apply($("outcomes-body"), outcomeRows);
  setText("build", "v" + a.build.version + " · " + a.build.runtime + " · schema " + a.build.schema_version);
}

function chooseTenant(tenant) {
  activityTenant = tenant;
  var url = new URL(location.href);
  if (tenant) url.searchParams.set("tenant", tenant); else url.searchParams.delete("tenant");
  history.replaceState(null, "", url.pathname + url.search);
  refresh();
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
    var activityUrl = "v1/fleet/activity?minutes=" + activityMinutes + (activityTenant ? "&tenant_id=" + encodeURIComponent(activityTenant) : "");
    var answers = await Promise.all([
      fetch("v1/fleet/status", init),
      // Per-region counts; a registry without the endpoint answers 404 and the page says so.
      fetch("v1/fleet/regions", init).catch(function () { return null; }),
      // The history; a Worker without its ActivityHistory object has none (404).
      fetch(activityUrl, init).catch(function () { return null; }),
      // The database's schema version, now and then (no token needed).
      refreshes++ % 12 === 0 ? fetch("readyz", { cache: "no-store" }).catch(function () { return null; }) : null]);
    var response = answers[0];
    var body = await response.json().catch(function () { return null; });
    if (!response.ok) {
      setState("error", (response.status === 401 || response.status === 403 ? "Token refused: " : "Registry error: ") + problemText(body, response.status));
      return;
    }
    var regionAnswer = answers[1] && answers[1].ok ? await answers[1].json().catch(function () { return null; }) : null;
    render(body, regionAnswer && Array.isArray(regionAnswer.regions) ? regionAnswer.regions : null);
    var activity = answers[2] && answers[2].ok ? await answers[2].json().catch(function () { return null; }) : null;
    if (activity && Array.isArray(activity.series)) renderActivity(activity);
    else { $("activity").hidden = true; $("activity-missing").hidden = false; }
    var ready = answers[3] ? await answers[3].json().catch(function () { return null; }) : null;
    if (ready) setText("db-schema", ready.schema_version === null ? "database schema unknown (" + (ready.reason || ready.status) + ")" : "database schema " + ready.schema_version + (ready.status === "ready" ? "" : " (" + ready.status + ")"));
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
$("window").value = String(activityMinutes);
$("window").addEventListener("change", function () { activityMinutes = Number($("window").value); refresh(); });
$("latency-kind").addEventListener("change", function () { latencyKind = $("latency-kind").value; refresh(); });
$("tenant-back").addEventListener("click", function () { chooseTenant(""); });
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
  <span id="build" title="This server's build and the database's schema (readyz)"></span>
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
  <section class="card" aria-labelledby="h-activity">
    <div class="head">
      <h2 id="h-activity">What happened</h2>
      <div class="controls">
        <span id="activity-scope"></span>
        <button type="button" id="tenant-back" hidden>All tenants</button>
        <label for="window">Window</label>
        <select id="window"><option value="15">15 minutes</option><option value="60">1 hour</option><option value="180">3 hours</option></select>
      </div>
    </div>
    <p class="note" id="activity-missing" hidden>This registry keeps no activity history (GET /v1/fleet/activity).</p>
    <div id="activity" hidden>
      <div class="tiles">
        ${tile("a-resolves", "Resolves / min")}
        ${tile("a-settlements", "Settlements / min")}
        ${tile("a-catalog", "Catalog reads / min")}
        ${tile("a-publications", "Publications")}
        ${tile("a-refusals", "Refusals", ' id="t-refusals"')}
        <div class="tile"><span class="label" id="a-p99-label">p99</span><span class="value" id="a-p99">–</span></div>
      </div>
      <div class="charts">
        <figure><figcaption>Requests per minute</figcaption><svg class="chart" id="chart-rates" role="img" aria-label="Requests per minute by kind"></svg><div class="legend" id="legend-rates"></div></figure>
        <figure><figcaption>Refusals per minute, by problem code</figcaption><svg class="chart" id="chart-refusals" role="img" aria-label="Refusals per minute by problem code"></svg><p class="empty-chart" id="refusals-none">No refusals in this window.</p><div class="legend" id="legend-refusals"></div></figure>
        <figure><figcaption>Latency <select id="latency-kind" aria-label="Latency of"><option value="resolve">resolves</option><option value="settle">settlements</option><option value="catalog">catalog reads</option><option value="publish">publications</option><option value="lifecycle">lifecycle</option></select></figcaption><svg class="chart" id="chart-latency" role="img" aria-label="Latency percentiles per minute"></svg><div class="legend" id="legend-latency"></div></figure>
      </div>
      <div class="two">
        <div id="tenants-card">
          <h2>Busiest tenants (select one for its own view)</h2>
          <table><thead><tr><th>Tenant</th><th>Requests</th><th>Resolves</th><th>Settlements</th><th>Refusals</th><th>p99</th></tr></thead><tbody id="tenants-body"></tbody></table>
        </div>
        <div>
          <h2>Outcomes</h2>
          <table><thead><tr><th>Kind</th><th>Outcome</th><th>Requests</th></tr></thead><tbody id="outcomes-body"></tbody></table>
        </div>
      </div>
    </div>
  </section>
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
<footer>Observed at <time id="observed">–</time> · <span id="db-schema">database schema –</span> · refreshes every <span id="refresh-seconds">5</span> s (<code>?refresh=</code> seconds) · fleet aggregates; the history names tenants, never tokens or records</footer>
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
