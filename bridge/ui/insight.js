// The console's drawn views: the Activity page's charts (GET /v1/history),
// a proxy group's reach (listener -> virtual host -> route -> cluster ->
// service, from /v1/config_dump and /v1/catalog), and the banner shown on
// every page while Consul does not answer (GET /v1/consul). Loaded before
// app.js, whose helpers (h, api, badge, ago, setView) these call at run
// time; like app.js, every text from the bridge is inserted as text.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";

function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) el.setAttribute(k, String(v));
  for (const c of children.flat()) if (c !== null && c !== undefined) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

// fmtNum prints a chart value: whole numbers as they are, else 3
// significant digits.
function fmtNum(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return "-";
  if (Number.isInteger(v)) return String(v);
  return Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 10 ? v.toFixed(1) : v.toFixed(2);
}

// chart draws points [{t: Date, v: number}] as a sparkline with its
// y-axis (0 and the largest value), its time span and the latest value.
// The figure's data-* attributes say what it drew (the browser test
// reads them).
function chart(id, title, unit, points, opts) {
  opts = opts || {};
  const W = 320, H = 96, L = 40, R = 6, T = 8, B = 18;
  const latest = points.length ? points[points.length - 1].v : null;
  const top = Math.max(1, ...points.map((p) => p.v));
  const t0 = points.length ? points[0].t.getTime() : 0;
  const t1 = points.length ? points[points.length - 1].t.getTime() : 0;
  const x = (t) => L + (t1 > t0 ? (t - t0) / (t1 - t0) : 1) * (W - L - R);
  const y = (v) => T + (1 - v / top) * (H - T - B);
  const kids = [
    svg("line", { x1: L, y1: T, x2: L, y2: H - B, class: "axis" }),
    svg("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis" }),
    svg("text", { x: L - 4, y: T + 8, class: "tick", "text-anchor": "end" }, fmtNum(top)),
    svg("text", { x: L - 4, y: H - B, class: "tick", "text-anchor": "end" }, "0"),
  ];
  if (points.length) {
    kids.push(svg("text", { x: L, y: H - 4, class: "tick" }, ago(points[0].t) + " ago"),
      svg("text", { x: W - R, y: H - 4, class: "tick", "text-anchor": "end" }, "now"));
    const xy = points.map((p) => x(p.t.getTime()).toFixed(1) + "," + y(p.v).toFixed(1));
    if (opts.bars) {
      const bw = Math.max(1.5, (W - L - R) / Math.max(points.length, 1) - 1);
      for (const p of points) if (p.v > 0) kids.push(svg("rect", { x: (x(p.t.getTime()) - bw / 2).toFixed(1), y: y(p.v).toFixed(1), width: bw.toFixed(1), height: (H - B - y(p.v)).toFixed(1), class: "bar" }));
    } else {
      kids.push(svg("polyline", { points: xy.join(" "), class: "line" }));
      const [lx, ly] = xy[xy.length - 1].split(",");
      kids.push(svg("circle", { cx: lx, cy: ly, r: 2.5, class: "dot" }));
    }
  } else {
    kids.push(svg("text", { x: (L + W) / 2, y: H / 2, class: "tick", "text-anchor": "middle" }, "no data yet"));
  }
  return h("figure", { class: "chart box", id: "chart-" + id, "data-chart": id, "data-points": points.length, "data-latest": latest === null ? "" : latest, "data-total": opts.total === undefined ? "" : opts.total },
    h("figcaption", {}, h("strong", {}, title), " ",
      h("span", { class: "latest" }, latest === null ? "-" : fmtNum(latest) + (unit ? " " + unit : "")),
      opts.note ? h("div", { class: "muted" }, opts.note) : null),
    svg("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": title }, kids));
}

// shortType names a type URL as its xDS service does (CDS, EDS, ...).
function shortType(url) {
  const names = { Cluster: "CDS", ClusterLoadAssignment: "EDS", Listener: "LDS", RouteConfiguration: "RDS", Secret: "SDS" };
  const last = String(url).split(".").pop();
  return names[last] || last;
}

function renderActivity(hist) {
  const builds = (hist.builds || []).map((b) => Object.assign({}, b, { t: new Date(b.at) }));
  const samples = (hist.samples || []).map((s) => Object.assign({}, s, { t: new Date(s.at) }));
  const every = (hist.interval_seconds || 2) + " s";
  const c2p = builds.filter((b) => b.change_to_push_ms !== undefined && b.change_to_push_ms !== null).map((b) => ({ t: b.t, v: b.change_to_push_ms }));
  const fan = samples.filter((s) => s.fanout_ms !== undefined && s.fanout_ms !== null).map((s) => ({ t: s.t, v: s.fanout_ms }));
  const nacks = samples.map((s) => ({ t: s.t, v: s.nacks }));
  const proxies = samples.map((s) => ({ t: s.t, v: s.proxies }));
  const last = samples.length ? samples[samples.length - 1] : null;
  setView(h("h1", {}, "Activity"),
    h("p", { class: "muted" }, "This bridge's own recent history, kept in memory (the last " + (hist.size || 300) +
      " builds and samples, one sample every " + every + "; a restart starts afresh). Prometheus on /metrics keeps the long view."),
    h("div", { class: "charts" },
      chart("change-to-push", "Change → push", "ms", c2p, { note: "per build: Consul change to snapshot set, debounce included" }),
      chart("fanout", "Fan-out", "ms", fan, { note: "mean time to hand an update to every proxy, per " + every }),
      chart("nacks", "NACKs", "", nacks, { bars: true, total: last ? last.nacks_total : 0, note: "rejected pushes per " + every + "; " + (last ? last.nacks_total : 0) + " since start" }),
      chart("proxies", "Connected proxies", "", proxies, { note: "xDS streams, sampled every " + every })),
    h("h2", {}, "Last builds (newest first)"),
    h("div", { class: "scroll" }, h("table", { id: "builds" },
      h("thead", {}, h("tr", {}, ["When", "Change → push", "Build", "Update", "Types"].map((c) => h("th", {}, c)))),
      h("tbody", {}, builds.length ? builds.slice(-20).reverse().map((b) => h("tr", {},
        h("td", { title: b.at }, ago(b.at) + " ago"), h("td", {}, b.change_to_push_ms === undefined ? "-" : fmtNum(b.change_to_push_ms) + " ms"),
        h("td", {}, fmtNum(b.build_ms) + " ms"), h("td", {}, fmtNum(b.update_ms) + " ms"), h("td", { class: "mono" }, (b.types || []).map(shortType).join(" "))))
        : h("tr", {}, h("td", { colspan: 5, class: "muted" }, "No build changed anything yet."))))));
}

// ---- reach -----------------------------------------------------------------

// find collects the values of key anywhere in a decoded JSON value.
function find(value, key, out) {
  out = out || [];
  if (value && typeof value === "object") {
    for (const [k, v] of Object.entries(value)) {
      if (k === key) out.push(v);
      find(v, key, out);
    }
  }
  return out;
}

function matchSummary(m) {
  if (!m) return "any";
  const parts = [];
  if (m.prefix !== undefined) parts.push("prefix " + (m.prefix || "/"));
  if (m.path !== undefined) parts.push("path " + m.path);
  if (m.path_separated_prefix !== undefined) parts.push("prefix " + m.path_separated_prefix + "/");
  if (m.safe_regex) parts.push("regex " + m.safe_regex.regex);
  for (const hd of m.headers || []) parts.push("header " + hd.name);
  for (const q of m.query_parameters || []) parts.push("query " + q.name);
  if (m.grpc) parts.push("gRPC");
  return parts.join(", ") || "any";
}

async function loadReach(group) {
  const dump = await api("/v1/config_dump?cluster=" + encodeURIComponent(group));
  let catalog = null;
  try { catalog = await api("/v1/catalog", { acceptStatus: [503] }); } catch (e) { if (e instanceof AuthError) throw e; }
  return { group, dump, catalog };
}

function renderReach(data) {
  const { group, dump, catalog } = data;
  const used = (catalog && catalog.used_by) || {};
  const svcOf = {}, eps = {};
  for (const [svc, u] of Object.entries(used)) {
    for (const c of u.clusters || []) svcOf[c] = svc;
    Object.assign(eps, u.endpoints || {});
  }
  const routes = {};
  for (const rc of dump.routes || []) routes[rc.name] = rc;
  const clusterEl = (name, weight) => {
    const e = Object.values(eps[name] || {});
    const healthy = e.filter((x) => x.health === "HEALTHY").length;
    const svc = svcOf[name];
    return h("li", { class: "reach-cluster", "data-cluster": name },
      h("span", { class: "mono" }, name), weight !== undefined ? h("span", { class: "muted" }, " weight " + weight) : null, " → ",
      svc ? ["service ", h("strong", { class: "reach-service" }, svc), " ",
        h("span", { class: "badge reach-health " + (healthy ? (healthy === e.length ? "ok" : "warning") : "bad") }, healthy + "/" + e.length + " healthy")]
        : h("span", { class: "muted" }, "not a Consul service"));
  };
  const targets = (r) => {
    if (!r) return [];
    if (r.cluster) return [clusterEl(r.cluster)];
    if (r.weighted_clusters) return (r.weighted_clusters.clusters || []).map((c) => clusterEl(c.name, c.weight === undefined ? 0 : c.weight));
    return [];
  };
  const routeEl = (rt) => h("li", { class: "reach-route", "data-route": rt.name || "" },
    h("span", {}, "match ", h("span", { class: "mono" }, matchSummary(rt.match))),
    rt.redirect ? h("span", { class: "muted" }, " → redirect") : null,
    rt.direct_response ? h("span", { class: "muted" }, " → direct response " + rt.direct_response.status) : null,
    h("ul", { class: "plain" }, targets(rt.route)));
  const rcEl = (rc) => (rc.virtual_hosts || []).map((vh) => h("div", { class: "reach-vhost", "data-vhost": vh.name },
    h("strong", {}, "virtual host " + vh.name), " ", h("span", { class: "muted mono" }, (vh.domains || []).join(" ")),
    h("ul", { class: "plain" }, (vh.routes || []).map(routeEl))));
  const listeners = (dump.listeners || []).map((l) => {
    const sa = (l.address && l.address.socket_address) || {};
    const body = [];
    for (const name of find(l, "route_config_name")) {
      body.push(routes[name] ? rcEl(routes[name]) : h("div", { class: "diag" }, "route configuration " + name + " is not served"));
    }
    for (const rc of find(l, "route_config")) body.push(rcEl(rc));
    for (const tcp of find(l, "typed_config").filter((t) => /TcpProxy$/.test(t["@type"] || ""))) {
      body.push(h("div", {}, h("strong", {}, "TCP"), h("ul", { class: "plain" }, tcp.cluster ? clusterEl(tcp.cluster)
        : ((tcp.weighted_clusters || {}).clusters || []).map((c) => clusterEl(c.name, c.weight)))));
    }
    return h("div", { class: "box reach-listener", "data-listener": l.name },
      h("h2", {}, "listener ", h("span", { class: "mono" }, l.name), " ", h("span", { class: "muted mono" }, (sa.address || "") + ":" + (sa.port_value || ""))),
      body.length ? body : h("div", { class: "muted" }, "no route"));
  });
  setView(h("p", {}, h("a", { href: "#/proxies" }, "← all proxies")),
    h("h1", {}, "Reach of group ", h("span", { class: "mono" }, group)),
    h("p", { class: "muted" }, "What this group's proxies are served now: listener → virtual host → route → cluster → Consul service, ",
      "with the endpoints EDS tells them are healthy."),
    h("div", { id: "reach" }, listeners.length ? listeners : h("div", { class: "box" }, "This group is served no listener.")));
}

// ---- Consul banner -----------------------------------------------------------

const banner = document.getElementById("consul-banner");

// updateBanner shows, on every page, that the local Consul does not
// answer: the bridge then serves the last state it read.
async function updateBanner() {
  let st = null;
  try { st = await api("/v1/consul"); } catch (e) { st = null; }
  if (!st || st.reachable) {
    banner.hidden = true;
    banner.replaceChildren();
    return;
  }
  banner.replaceChildren(
    h("strong", {}, "Consul at ", h("span", { class: "mono", id: "consul-address" }, st.address), " is unreachable"),
    st.unreachable_since ? " since " + new Date(st.unreachable_since).toLocaleTimeString() + " (" + ago(st.unreachable_since) + ")" : "",
    ". Proxies keep the last state the bridge read",
    st.last_success ? " (last answer " + ago(st.last_success) + " ago)" : "", ".",
    st.last_error ? h("div", { class: "mono" }, st.last_error) : null);
  banner.hidden = false;
}
