// GET /dashboard's page, kept as the HTML it is: edit it here, the build embeds it.

#include "ratewall/admin/dashboard_page.hpp"

namespace ratewall {

std::string_view dashboard_page() {
  static constexpr std::string_view page = R"html(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>ratewall dashboard</title>
<style>
:root {
  --bg: #f6f7f9; --panel: #fff; --text: #1d2330; --muted: #5e6778; --line: #d9dde5;
  --allowed: #2e8b57; --denied: #d1403a; --shadow: #c98a12;
  --good: #2e8b57; --warn: #c98a12; --bad: #d1403a; --idle: #8a93a3;
}
@media (prefers-color-scheme: dark) {
  :root {
    --bg: #14171c; --panel: #1d2128; --text: #e3e6eb; --muted: #9aa3b2; --line: #343a45;
    --allowed: #4cc38a; --denied: #f0625c; --shadow: #e9b949;
  }
}
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--text);
  font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; }
header { display: flex; align-items: baseline; gap: 16px; padding: 12px 20px;
  border-bottom: 1px solid var(--line); background: var(--panel); }
header h1 { margin: 0; font-size: 18px; }
#status { color: var(--muted); }
main { padding: 16px 20px; display: grid; gap: 16px;
  grid-template-columns: repeat(auto-fit, minmax(560px, 1fr)); }
section { background: var(--panel); border: 1px solid var(--line); border-radius: 6px;
  padding: 12px 14px; min-width: 0; }
section.wide { grid-column: 1 / -1; }
h2 { margin: 0 0 8px; font-size: 15px; }
h3 { margin: 0; font-size: 14px; }
#routes { display: grid; gap: 12px; grid-template-columns: repeat(auto-fit, minmax(400px, 1fr)); }
.route { border: 1px solid var(--line); border-radius: 4px; padding: 8px 10px; }
.route-head { display: flex; justify-content: space-between; align-items: baseline; gap: 8px; }
.adaptive { font-size: 12px; color: var(--good); }
.adaptive.lowered { color: var(--warn); font-weight: 600; }
.legend { display: flex; gap: 12px; flex-wrap: wrap; color: var(--muted); font-size: 12px; }
.legend span::before { content: ""; display: inline-block; width: 10px; height: 10px;
  margin-right: 4px; border-radius: 2px; background: currentColor; vertical-align: -1px; }
.legend .allowed { color: var(--allowed); }
.legend .denied { color: var(--denied); }
.legend .shadow_denied { color: var(--shadow); }
.legend b { color: var(--text); font-weight: 600; }
svg.chart { width: 100%; height: 120px; display: block; margin-top: 6px; }
svg.chart .grid { stroke: var(--line); stroke-width: 1; }
svg.chart .axis { fill: var(--muted); font-size: 10px; }
svg.chart polyline { fill: none; stroke-width: 1.8; stroke-linejoin: round; }
svg.chart polyline[data-series="allowed"] { stroke: var(--allowed); }
svg.chart polyline[data-series="denied"] { stroke: var(--denied); }
svg.chart polyline[data-series="shadow_denied"] { stroke: var(--shadow); stroke-dasharray: 4 3; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 4px 8px 4px 0; border-bottom: 1px solid var(--line);
  vertical-align: top; }
th { color: var(--muted); font-weight: 500; font-size: 12px; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.chip { display: inline-block; padding: 0 6px; border-radius: 8px; font-size: 12px; color: #fff; }
.chip.up, .chip.closed, .chip.ready { background: var(--good); }
.chip.degraded, .chip.half_open { background: var(--warn); }
.chip.down, .chip.open, .chip.not-ready { background: var(--bad); }
.chip.idle { background: var(--idle); }
.muted { color: var(--muted); }
code { font-size: 12px; }
</style>
</head>
<body>
<header>
  <h1>ratewall</h1>
  <span id="status">loading…</span>
</header>
<main>
  <section class="wide">
    <h2>Requests per second by route <span class="muted" id="window"></span></h2>
    <div id="routes"></div>
  </section>
  <section>
    <h2>Most limited subjects <span class="muted" id="top-window"></span></h2>
    <table id="top"><thead><tr><th>Subject</th><th>Hash</th><th class="num">Denied</th></tr>
    </thead><tbody></tbody></table>
  </section>
  <section>
    <h2>Upstreams <span class="muted">(last minute)</span></h2>
    <table id="upstreams"><thead><tr><th>Name</th><th>Targets</th><th>Health</th>
      <th class="num">Responses</th><th class="num">Failures</th><th class="num">Connections</th>
    </tr></thead><tbody></tbody></table>
  </section>
  <section>
    <h2>Store</h2>
    <table id="store"><tbody></tbody></table>
  </section>
  <section>
    <h2>Configuration</h2>
    <table id="config"><thead><tr><th>Route</th><th>Match</th><th>Upstream</th><th>Limits</th>
    </tr></thead><tbody></tbody></table>
    <p class="muted" id="config-more"></p>
  </section>
</main>
<script>
"use strict";
// Everything below writes text (textContent) and SVG attributes only, never markup: names
// and paths from the configuration cannot become script.
const SVG = "http://www.w3.org/2000/svg";
const SERIES = [["allowed", "allowed"], ["denied", "denied"], ["shadow_denied", "shadow denied"]];
const WIDTH = 600, HEIGHT = 120, TOP = 8, BOTTOM = 16;
const POLL_MS = 2000;

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}
function row(cells) {
  const tr = el("tr");
  for (const c of cells) {
    if (c instanceof Node) { const td = el("td"); td.append(c); tr.append(td); }
    else if (typeof c === "number") tr.append(el("td", {class: "num"}, String(c)));
    else tr.append(el("td", {}, c === null || c === undefined ? "" : String(c)));
  }
  return tr;
}
function chip(state) { return el("span", {class: "chip " + state}, state.replace("_", "-")); }
function fill(table, rows) { table.tBodies[0].replaceChildren(...rows); }
function fmt(rate) { return rate >= 10 ? rate.toFixed(0) : rate.toFixed(rate >= 1 ? 1 : 2); }

// Counts per bucket -> requests per second; the last bucket is still filling.
function rates(counts, bucket, current) {
  return counts.map((c, i) => c / (i === counts.length - 1 ? Math.max(current, 1) : bucket));
}

function chart(route, data) {
  const series = SERIES.map(([key]) => rates(route[key], data.bucket_seconds,
                                             data.current_bucket_seconds));
  const peak = Math.max(1, ...series.flat());
  const plot = HEIGHT - TOP - BOTTOM;
  const s = svg("svg", {class: "chart", viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
                        preserveAspectRatio: "none", "data-route": route.route,
                        "data-peak": peak.toFixed(3)});
  for (const f of [0, 0.5, 1]) {
    const y = TOP + plot * (1 - f);
    s.append(svg("line", {class: "grid", x1: 0, x2: WIDTH, y1: y, y2: y}));
  }
  const label = svg("text", {class: "axis", x: 2, y: TOP + 8});
  label.textContent = fmt(peak) + "/s";
  s.append(label);
  const minutes = Math.round(route.allowed.length * data.bucket_seconds / 60);
  const left = svg("text", {class: "axis", x: 2, y: HEIGHT - 3});
  left.textContent = "-" + minutes + " min";
  const right = svg("text", {class: "axis", x: WIDTH - 2, y: HEIGHT - 3, "text-anchor": "end"});
  right.textContent = "now";
  s.append(left, right);
  SERIES.forEach(([key], k) => {
    const values = series[k];
    const step = WIDTH / Math.max(1, values.length - 1);
    const points = values.map((v, i) =>
        `${(i * step).toFixed(1)},${(TOP + plot * (1 - v / peak)).toFixed(1)}`).join(" ");
    s.append(svg("polyline", {points, "data-route": route.route, "data-series": key,
                              "data-total": route.totals[key],
                              "data-last-rate": values[values.length - 1].toFixed(3)}));
  });
  return s;
}

function drawRoutes(data) {
  const cards = data.routes.map(route => {
    const card = el("div", {class: "route", "data-route": route.route});
    const head = el("div", {class: "route-head"});
    const upstream = el("span", {class: "muted"}, "→ " + route.upstream);
    head.append(el("h3", {}, route.route), upstream);
    if (route.adaptive) {
      // routes[].adaptive: the share of the configured limits that applies now.
      const a = route.adaptive;
      const factor = el("span", {class: a.factor < 1 ? "adaptive lowered" : "adaptive",
                                 "data-adaptive-factor": a.factor.toFixed(3)},
                        "limits × " + a.factor.toFixed(2));
      if (a.last_window) {
        factor.title = `last window: ${a.last_window.exchanges} exchanges, mean ` +
            `${a.last_window.mean_latency_ms.toFixed(1)} ms, ` +
            `${(100 * a.last_window.error_rate).toFixed(1)}% errors`;
      }
      upstream.append(" · ", factor);
    }
    const legend = el("div", {class: "legend"});
    for (const [key, name] of SERIES) {
      const item = el("span", {class: key, "data-series": key}, name + " ");
      item.append(el("b", {}, String(route.totals[key])));
      legend.append(item);
    }
    card.append(head, legend, chart(route, data));
    return card;
  });
  document.getElementById("routes").replaceChildren(...cards);
  const minutes = Math.round(data.routes.length ? data.routes[0].allowed.length *
                                                  data.bucket_seconds / 60 : 0);
  document.getElementById("window").textContent =
      `(last ${minutes} min, ${data.bucket_seconds} s buckets; totals over the window)`;
}

function drawTop(data) {
  document.getElementById("top-window").textContent = `(last ${data.top_window_seconds} s)`;
  const rows = data.top.map(t => row([t.name || t.subject, t.subject_hash, t.denied]));
  if (!rows.length) rows.push(row(["no subject denied", "", ""]));
  fill(document.getElementById("top"), rows);
}

function drawUpstreams(data) {
  fill(document.getElementById("upstreams"), data.upstreams.map(u => row([
    u.name, u.targets.join(", "), chip(u.health), u.responses_last_minute,
    u.failures_last_minute,
    u.max_connections ? `${u.connections_in_use} / ${u.max_connections}`
                      : String(u.connections_in_use)])));
}

function drawStore(data) {
  const st = data.store;
  const rows = [row(["type", st.kind]),
                row(["ready", chip(st.ready ? "ready" : "not-ready")]),
                row(["detail", st.detail])];
  const cfg = data.config.store;
  if (st.kind === "memory") {
    rows.push(row(["rows held", `${st.rows} of ${cfg.max_keys}`]),
              row(["evictions", String(st.evictions)]), row(["found full", String(st.full)]),
              row(["when full", cfg.on_full]));
  } else {
    rows.push(row(["url", cfg.redis.url]), row(["errors", String(st.errors)]),
              row(["fallback decisions", String(st.fallback_decisions)]),
              row(["on error", cfg.redis.on_error]));
    for (const b of st.breakers) rows.push(row(["breaker " + b.node, chip(b.breaker)]));
  }
  fill(document.getElementById("store"), rows);
}

function limitText(l) {
  const size = l.rate !== undefined ? `${l.rate} burst ${l.burst}`
             : l.limit !== undefined ? `${l.limit}` + (l.window ? ` per ${l.window}` : "") : "";
  return `${l.name}: ${l.algorithm} ${size}` + (l.shadow ? " (shadow)" : "");
}

function drawConfig(data) {
  const cfg = data.config;
  fill(document.getElementById("config"), cfg.routes.map(r => {
    const match = Object.entries(r.match).map(([k, v]) => `${k} ${v}`).join(", ");
    const limits = r.limits.length ? r.limits.map(limitText).join("; ") : "none";
    return row([r.name + (r.shadow ? " (shadow)" : ""), match, r.upstream, limits]);
  }));
  document.getElementById("config-more").textContent =
      `plans: ${cfg.plans.length ? cfg.plans.join(", ") : "none"}; ` +
      `API keys in the file: ${cfg.api_keys.length}; store: ${cfg.store.type}; ` +
      `admin token ${cfg.admin.token_set ? "set" : "not set"}`;
}

async function poll() {
  const status = document.getElementById("status");
  try {
    // From the origin alone: a page opened with user:token@ in its address must not pass them
    // on in a URL (fetch refuses such URLs); the browser sends them from its cache.
    const reply = await fetch(new URL("/admin/dashboard", location.origin),
                              {cache: "no-store", credentials: "same-origin"});
    if (!reply.ok) throw new Error(`HTTP ${reply.status}`);
    const data = await reply.json();
    drawRoutes(data);
    drawTop(data);
    drawUpstreams(data);
    drawStore(data);
    drawConfig(data);
    status.textContent = "updated " + new Date().toLocaleTimeString();
    document.body.dataset.updated = "true";
  } catch (e) {
    status.textContent = "update failed: " + e.message;
  }
}

poll();
setInterval(poll, POLL_MS);
</script>
</body>
</html>
)html";
  return page;
}

}  // namespace ratewall
