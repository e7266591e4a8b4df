// The consul-xds-bridge console: one page, views chosen by the URL
// fragment, data from the admin API's JSON endpoints, polled every 2 s
// (EventSource cannot send an Authorization header; fetch can). All text
// from the bridge is inserted as text, never as HTML: NACK messages and
// Consul metadata come from proxies and services, not from the operator.
"use strict";

const POLL_MS = 2000;
const TOKEN_KEY = "consul-xds-bridge.admin-token";
const TYPES = ["CDS", "EDS", "LDS", "RDS", "SDS"];
const view = document.getElementById("view");
const live = document.getElementById("live");
const logout = document.getElementById("logout");

// ---- DOM helpers --------------------------------------------------------

// h builds an element: attributes (class, data-*, href, ...) and children
// (strings become text nodes, null/false are skipped).
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}
const badge = (s, extra) => h("span", { class: "badge " + s + (extra ? " " + extra : "") }, s || "-");
const short = (v) => (v || "").length > 12 ? v.slice(0, 12) : (v || "-");

function ago(ts) {
  if (!ts) return "-";
  const s = Math.max(0, Math.round((Date.now() - new Date(ts).getTime()) / 1000));
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m" + (s % 60) + "s";
  if (s < 86400) return Math.floor(s / 3600) + "h" + Math.floor((s % 3600) / 60) + "m";
  return Math.floor(s / 86400) + "d";
}

// ---- API ----------------------------------------------------------------

class AuthError extends Error {}

async function api(path, opts) {
  const headers = Object.assign({}, (opts && opts.headers) || {});
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers["Authorization"] = "Bearer " + token;
  const resp = await fetch(path, Object.assign({}, opts, { headers, cache: "no-store" }));
  if (resp.status === 401) throw new AuthError("the admin API needs its bearer token");
  let body = null;
  try { body = await resp.json(); } catch (e) { /* not JSON */ }
  if (!resp.ok && !(opts && opts.acceptStatus && opts.acceptStatus.includes(resp.status))) {
    throw new Error(path + ": " + resp.status + " " + ((body && body.error) || resp.statusText));
  }
  return body;
}

// ---- views ----------------------------------------------------------------

// setView replaces the page; parts that are null (an empty list, a
// section with nothing to say) are left out: replaceChildren would print
// them as the text "null".
function setView(...parts) {
  view.replaceChildren(...parts.flat(Infinity).filter((p) => p !== null && p !== undefined && p !== false && p !== ""));
}

const state = { group: "", status: "", node: "", catalogFilter: "", open: new Set(), dumpKey: "" };

const views = {
  proxies: { load: () => api("/v1/proxies"), render: renderProxies },
  proxy: {
    load: async (node) => {
      const proxies = await api("/v1/proxies");
      const mine = (proxies || []).filter((p) => p.node_id === node);
      let dump = null, dumpErr = "";
      try { dump = await api("/v1/config_dump?node=" + encodeURIComponent(node)); } catch (e) {
        if (e instanceof AuthError) throw e;
        dumpErr = e.message;
      }
      const history = await api("/v1/proxies/history?node=" + encodeURIComponent(node));
      let catalog = null;
      try { catalog = await api("/v1/catalog", { acceptStatus: [503] }); } catch (e) { if (e instanceof AuthError) throw e; }
      return { node, streams: mine, dump, dumpErr, history, catalog };
    },
    render: renderProxy,
  },
  catalog: { load: () => api("/v1/catalog", { acceptStatus: [503] }), render: renderCatalog },
  policy: { load: () => api("/v1/policy"), render: renderPolicy },
  plan: { load: () => api("/v1/policy"), render: renderPlan, static: true },
  try: { load: () => api("/v1/proxies"), render: renderTry, static: true },
  activity: { load: () => api("/v1/history"), render: renderActivity }, // insight.js
  group: { load: loadReach, render: renderReach }, // insight.js
};

function route() {
  const [name, ...rest] = location.hash.replace(/^#\/?/, "").split("/");
  return { name: views[name] ? name : "proxies", arg: decodeURIComponent(rest.join("/")) };
}

let generation = 0;
async function refresh(full) {
  const r = route();
  const v = views[r.name];
  const gen = ++generation;
  document.querySelectorAll("[data-nav]").forEach((a) =>
    a.classList.toggle("active", a.dataset.nav === r.name || ((r.name === "proxy" || r.name === "group") && a.dataset.nav === "proxies")));
  updateBanner(); // insight.js: on every page, whatever the view
  // The plan form keeps what the operator typed: it is drawn once per visit.
  if (v.static && !full) return;
  try {
    const data = await v.load(r.arg);
    if (gen !== generation) return; // a newer refresh is under way
    v.render(data, r.arg);
    live.textContent = "live · updated " + new Date().toLocaleTimeString();
    live.classList.remove("down");
  } catch (e) {
    if (gen !== generation) return;
    if (e instanceof AuthError) { renderLogin(e.message); return; }
    live.textContent = "cannot reach the bridge: " + e.message;
    live.classList.add("down");
  }
  logout.hidden = !sessionStorage.getItem(TOKEN_KEY);
}

function renderLogin(why) {
  live.textContent = "signed out";
  const input = h("input", { type: "password", id: "token", autocomplete: "current-password", placeholder: "admin token" });
  const form = h("form", {
    class: "box login", id: "login",
    onsubmit: (ev) => {
      ev.preventDefault();
      sessionStorage.setItem(TOKEN_KEY, input.value.trim());
      refresh(true);
    },
  },
  h("h1", {}, "Sign in"),
  h("p", { class: "muted" }, "This bridge's admin API requires a bearer token: the file the bridge logged at start as ",
    "admin_token_file (admin { token_file }, else admin-token in its state directory). It is kept in this tab's session storage only."),
  h("label", { for: "token" }, "Admin token"), input,
  h("button", { class: "primary", type: "submit" }, "Sign in"),
  why && sessionStorage.getItem(TOKEN_KEY) ? h("p", { class: "diag" }, "That token was refused.") : null);
  setView(form);
  input.focus();
}

function renderProxies(proxies) {
  proxies = proxies || [];
  const counts = { ALL: proxies.length, SYNCED: 0, STALE: 0, NACKED: 0, NOT_SENT: 0 };
  for (const p of proxies) counts[p.status] = (counts[p.status] || 0) + 1;
  const groups = [...new Set(proxies.map((p) => p.group || ""))].sort();
  const shown = proxies.filter((p) =>
    (!state.group || (p.group || "") === state.group.replace(/^-$/, "")) && (!state.status || p.status === state.status) &&
    (!state.node || p.node_id.includes(state.node)));
  const types = TYPES.filter((t) => proxies.some((p) => p.types && p.types[t]));

  const cards = h("div", { class: "cards", id: "counts" }, Object.entries(counts).map(([k, n]) =>
    h("button", {
      class: "card" + ((state.status || "ALL") === k ? " sel" : ""), "data-count": k,
      onclick: () => { state.status = k === "ALL" ? "" : k; refresh(true); },
    }, h("span", { class: "n" }, n), k === "ALL" ? "proxies" : k)));
  const groupSel = h("select", { id: "filter-group", onchange: (e) => { state.group = e.target.value; refresh(true); } },
    h("option", { value: "" }, "all groups"),
    groups.map((g) => h("option", { value: g || "-", selected: state.group === (g || "-") }, g || "(no group)")));
  const statusSel = h("select", { id: "filter-status", onchange: (e) => { state.status = e.target.value; refresh(true); } },
    h("option", { value: "" }, "any status"),
    ["SYNCED", "STALE", "NACKED", "NOT_SENT"].map((s) => h("option", { value: s, selected: state.status === s }, s)));

  const rows = [];
  for (const p of shown) {
    const nacks = types.map((t) => [t, p.types[t]]).filter(([, ts]) => ts && ts.status === "NACKED" && ts.last_nack);
    rows.push(h("tr", { class: "proxy" + (p.status === "NACKED" ? " nacked" : ""), "data-node": p.node_id },
      h("td", {}, h("a", { href: "#/proxy/" + encodeURIComponent(p.node_id) }, p.node_id),
        p.group_error ? h("div", { class: "diag" }, "group kept at last good state: " + p.group_error) : null,
        downgradedLine(p)),
      h("td", {}, p.group ? h("a", { class: "group-link", href: "#/group/" + encodeURIComponent(p.group) }, p.group) : h("span", { class: "muted" }, "none"),
        p.node_cluster !== p.group ? h("div", { class: "muted" }, "node.cluster " + p.node_cluster) : null),
      h("td", {}, badge(p.status, "proxy-status")),
      h("td", { class: "hide-narrow" }, p.kind),
      h("td", { class: "hide-narrow" }, p.user_agent || "-"),
      h("td", { class: "hide-narrow", title: p.connected_since }, ago(p.connected_since)),
      types.map((t) => {
        const ts = p.types[t];
        return h("td", { "data-type": t }, ts ? [badge(ts.status), " ", h("span", { class: "mono muted" }, short(ts.version_acked || ts.version_sent))] : "-");
      })));
    for (const [t, ts] of nacks) {
      rows.push(h("tr", { class: "nack-row", "data-node": p.node_id },
        h("td", { colspan: 6 + types.length },
          h("strong", {}, t + " NACKED version "), h("span", { class: "mono nack-version" }, ts.last_nack.version),
          h("span", { class: "muted" }, ts.version_acked ? " (still holding " + short(ts.version_acked) + ")" : " (holds no version of it yet)"), ": ",
          h("span", { class: "nack-text mono" }, ts.last_nack.error))));
    }
  }
  const table = h("div", { class: "scroll" }, h("table", { id: "proxies" },
    h("thead", {}, h("tr", {}, h("th", {}, "Node"), h("th", {}, "Group"), h("th", {}, "Status"),
      h("th", { class: "hide-narrow" }, "Transport"), h("th", { class: "hide-narrow" }, "User agent"),
      h("th", { class: "hide-narrow" }, "Since"), types.map((t) => h("th", {}, t)))),
    h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 6 + types.length, class: "muted" },
      proxies.length ? "No proxy matches the filters." : "No proxy is connected.")))));
  const nodeSearch = h("input", { type: "search", id: "filter-node", placeholder: "node id", value: state.node,
    oninput: (e) => { state.node = e.target.value; refresh(true); } });
  setView(h("h1", {}, "Proxies"), cards, h("div", { class: "filters" }, nodeSearch, groupSel, statusSel), table);
  const f = document.getElementById("filter-node");
  if (state.node && f) { f.focus(); f.setSelectionRange(f.value.length, f.value.length); }
}

// downgradedLine says, under a proxy's node id, that its Envoy is older
// than what it is served needs: what was rewritten or left out is in the
// title and on the proxy's page.
function downgradedLine(p) {
  const d = p.downgraded || [];
  if (!d.length) return null;
  return h("div", { class: "diag downgraded", title: d.join("\n") },
    "Envoy " + p.envoy_version + ": " + d.length + " newer feature" + (d.length > 1 ? "s" : "") + " rewritten or left out");
}

// tree renders JSON as nested <details>, keeping open the paths the
// operator opened across refreshes.
function tree(value, path, label) {
  const key = label === undefined ? null : h("span", { class: "k" }, label + ": ");
  if (value === null || typeof value !== "object") {
    let cls = typeof value === "string" ? "s" : "num";
    if (value === "[redacted]") cls = "red";
    return h("div", { class: "leaf" }, key, h("span", { class: cls }, JSON.stringify(value)));
  }
  const entries = Array.isArray(value) ? value.map((v, i) => [i, v]) : Object.entries(value);
  const name = !Array.isArray(value) && (value.name || value.cluster_name);
  const summary = Array.isArray(value) ? "[" + entries.length + "]" : "{" + (name ? " " + name + " " : "…") + "}";
  const d = h("details", { "data-path": path, open: state.open.has(path) },
    h("summary", {}, key, h("span", { class: "muted" }, summary)));
  d.addEventListener("toggle", () => { if (d.open) state.open.add(path); else state.open.delete(path); });
  d.addEventListener("toggle", () => {
    if (d.open && d.childElementCount === 1) d.append(...entries.map(([k, v]) => tree(v, path + "/" + k, k)));
  }, { once: false });
  if (d.open) d.append(...entries.map(([k, v]) => tree(v, path + "/" + k, k)));
  return d;
}

function renderProxy(data) {
  const { node, streams, dump, dumpErr, history, catalog } = data;
  const head = [h("p", {}, h("a", { href: "#/proxies" }, "← all proxies")), h("h1", {}, "Proxy ", h("span", { class: "mono" }, node))];
  if (!streams.length) head.push(h("div", { class: "box error" }, "This node is not connected now."));
  // Clusters this proxy's group routes to that have no healthy endpoint.
  const groups = new Set(streams.map((p) => p.group).filter(Boolean));
  const starved = [];
  for (const u of Object.values((catalog && catalog.used_by) || {})) {
    for (const st of u.starved || []) if (st.groups.some((g) => groups.has(g))) starved.push(st);
  }
  if (starved.length) head.push(h("div", { class: "box error", id: "starved" }, h("strong", {}, "Routes of this group send traffic to clusters with no healthy endpoint:"),
    h("ul", { class: "plain" }, starved.map((st) => h("li", { class: "mono", "data-starved": st.cluster }, st.cluster + ": 0 of " + st.endpoints + " healthy")))));
  const blocks = streams.map((p) => h("div", { class: "box", "data-stream": p.stream },
    h("dl", { class: "kv" },
      h("dt", {}, "status"), h("dd", {}, badge(p.status, "proxy-status")),
      h("dt", {}, "group"), h("dd", {}, (p.group || "none") + " (node.cluster " + p.node_cluster + ")"),
      h("dt", {}, "transport"), h("dd", {}, p.kind + " · stream " + p.stream),
      h("dt", {}, "user agent"), h("dd", {}, p.user_agent || "-"),
      h("dt", {}, "remote"), h("dd", {}, p.remote_address || "-"),
      h("dt", {}, "connected"), h("dd", {}, ago(p.connected_since) + " ago (" + p.connected_since + ")"),
      p.group_error ? [h("dt", {}, "group error"), h("dd", { class: "diag" }, p.group_error)] : null,
      p.envoy_version ? [h("dt", {}, "Envoy"), h("dd", {}, p.envoy_version,
        (p.downgraded || []).length ? h("ul", { class: "plain diag downgraded" }, p.downgraded.map((d) => h("li", {}, d))) : null)] : null,
      (p.relayed_envoys || []).length ? [h("dt", {}, "relays for"), h("dd", { class: "mono relayed" }, p.relayed_envoys.join(", "))] : null),
    h("h2", {}, "Per type: sent, ACKed, NACKed"),
    h("div", { class: "scroll" }, h("table", {},
      h("thead", {}, h("tr", {}, ["Type", "Status", "Sent", "ACKed", "Current", "Last NACK"].map((c) => h("th", {}, c)))),
      h("tbody", {}, TYPES.filter((t) => p.types[t]).map((t) => {
        const ts = p.types[t];
        return h("tr", { class: ts.status === "NACKED" ? "nacked" : "" },
          h("td", {}, t), h("td", {}, badge(ts.status)),
          h("td", { class: "mono" }, short(ts.version_sent), h("div", { class: "muted" }, ts.sent_at ? ago(ts.sent_at) + " ago" : "")),
          h("td", { class: "mono" }, short(ts.version_acked), h("div", { class: "muted" }, ts.acked_at ? ago(ts.acked_at) + " ago" : "")),
          h("td", { class: "mono" }, short(ts.version_current)),
          h("td", {}, ts.last_nack ? [h("span", { class: "mono" }, short(ts.last_nack.version)), " ", ago(ts.last_nack.at), " ago: ",
            h("span", { class: "nack-text mono" }, ts.last_nack.error)] : "-"));
      }))))));
  let dumpEl;
  if (dump) {
    const doc = { versions: dump.versions, clusters: dump.clusters, endpoints: dump.endpoints, listeners: dump.listeners, routes: dump.routes, secrets: dump.secrets || [], route_sources: dump.route_sources || {} };
    dumpEl = h("div", { class: "box tree", id: "dump" }, Object.entries(doc).map(([k, v]) => tree(v, "/" + k, k)));
  } else {
    dumpEl = h("div", { class: "box error" }, dumpErr || "no config dump");
  }
  const hist = h("div", { class: "scroll" }, h("table", { id: "history" },
    h("thead", {}, h("tr", {}, ["When", "Event", "Type", "Version", "Stream", "Detail"].map((c) => h("th", {}, c)))),
    h("tbody", {}, (history || []).length ? history.map((e) => h("tr", { class: e.event === "nack" ? "nacked" : "", "data-event": e.event },
      h("td", { title: e.at }, ago(e.at) + " ago"), h("td", {}, h("span", { class: "badge " + ({ nack: "bad", ack: "ok" }[e.event] || "none") }, e.event.toUpperCase())),
      h("td", {}, e.type), h("td", { class: "mono" }, short(e.version)), h("td", { class: "mono muted" }, e.stream),
      h("td", { class: e.event === "nack" ? "nack-text mono" : "muted" }, e.event === "nack" ? e.error : e.event === "push" ? e.resources + " resources" : "")))
      : h("tr", {}, h("td", { colspan: 6, class: "muted" }, "Nothing recorded.")))));
  setView(...head, ...blocks,
    h("h2", {}, "Last pushes, ACKs and NACKs (newest first)"), hist,
    h("h2", {}, "What it was sent (config dump, private keys redacted)"), dumpEl);
}

function renderCatalog(cat) {
  if (!cat || !cat.services) {
    setView(h("h1", {}, "Catalog"), h("div", { class: "box" }, (cat && cat.error) || "No catalog read from Consul yet."));
    return;
  }
  const used = cat.used_by || {};
  const filter = h("input", { type: "text", id: "filter-service", placeholder: "filter services", value: state.catalogFilter,
    oninput: (e) => { state.catalogFilter = e.target.value; refresh(true); } });
  const services = cat.services.filter((s) => s.name.includes(state.catalogFilter));
  const rows = services.map((s) => {
    const u = used[s.name] || { clusters: [], groups: [] };
    const n = { passing: 0, warning: 0, critical: 0, maintenance: 0 };
    for (const i of s.instances || []) n[i.status] = (n[i.status] || 0) + 1;
    // What EDS tells proxies of an instance: the service's own cluster
    // first, else any of its clusters that has the endpoint.
    const eds = (i) => {
      const key = i.address.includes(":") ? "[" + i.address + "]:" + i.port : i.address + ":" + i.port;
      const eps = u.endpoints || {};
      for (const c of [s.name, ...(u.clusters || [])]) if (eps[c] && eps[c][key]) return eps[c][key];
      return null;
    };
    return h("tr", { class: "service", "data-service": s.name },
      h("td", {}, h("strong", {}, s.name), s.datacenter ? h("div", { class: "muted" }, "dc " + s.datacenter) : null,
        h("div", { class: "muted" }, "index " + s.index)),
      h("td", {}, Object.entries(n).filter(([, c]) => c).map(([st, c]) => [badge(st), " " + c + " "])),
      h("td", {}, h("ul", { class: "instances" }, (s.instances || []).map((i) => {
        const e = eds(i);
        return h("li", { "data-instance": i.id },
          h("span", { title: "Consul's check state" }, badge(i.status, "instance-status")), " ",
          e ? h("span", { class: "eds", title: "what EDS tells proxies (weight " + e.weight + ")" }, badge(e.health, "eds-status"), h("span", { class: "muted" }, " w" + e.weight), " ")
            : h("span", { class: "eds muted", title: "not in any served cluster" }, "not served "),
          h("span", { class: "mono" }, i.address + ":" + i.port),
          " ", h("span", { class: "muted" }, i.id + " on " + i.node + (i.tags && i.tags.length ? " [" + i.tags.join(", ") + "]" : "")),
          (i.checks || []).filter((c) => c.status !== "passing").map((c) =>
            h("div", { class: "muted check" }, "check " + (c.name || c.id) + ": " + c.status)));
      })),
      (u.starved || []).map((st) => h("div", { class: "diag starved", "data-starved": st.cluster },
        "⚠ " + st.cluster + ": 0 of " + st.endpoints + " endpoints healthy, and routes of " + st.groups.join(", ") + " send traffic here (503s)"))),
      h("td", {}, (u.clusters || []).join(", ") || h("span", { class: "muted" }, "not served")),
      h("td", { class: "groups" }, (u.groups || []).join(", ") || h("span", { class: "muted" }, "-")));
  });
  setView(h("h1", {}, "Catalog"),
    h("p", { class: "muted" }, (cat.complete ? "Complete" : "Incomplete") + " read from Consul, " + cat.services.length +
      " services, received " + ago(cat.received_at) + " ago.",
    (cat.pending || []).length ? " Loading: " + cat.pending.map((k) => k.name || JSON.stringify(k)).join(", ") + "." : "",
    (cat.unreachable || []).length ? " Unreachable: " + cat.unreachable.map((k) => k.name || JSON.stringify(k)).join(", ") + "." : ""),
    h("div", { class: "filters" }, filter),
    h("div", { class: "scroll" }, h("table", { id: "catalog" },
      h("thead", {}, h("tr", {}, ["Service", "Consul checks", "Instances: Consul check, EDS health", "Clusters", "Groups"].map((c) => h("th", {}, c)))),
      h("tbody", {}, rows))));
  const f = document.getElementById("filter-service");
  if (state.catalogFilter && f) { f.focus(); f.setSelectionRange(f.value.length, f.value.length); }
}

function list(title, items, cls) {
  if (!items || !items.length) return null;
  return h("div", { class: "box " + (cls || "") }, h("strong", {}, title), h("ul", { class: "plain" }, items.map((i) => h("li", { class: "mono" }, i))));
}

function renderPolicy(st) {
  const result = st.last_error
    ? h("div", { class: "box error", id: "last-reload" }, h("strong", {}, "Last reload rejected " + ago(st.last_error.at) + " ago; the previous policy keeps serving:"),
      h("ul", { class: "plain" }, st.last_error.diagnostics.map((d) => h("li", { class: "mono diag" }, d))))
    : h("div", { class: "box ok", id: "last-reload" }, st.waiting ? st.waiting : "Last reload accepted " + ago(st.loaded_at) + " ago.");
  setView(h("h1", {}, "Policy"),
    h("div", { class: "cards" },
      h("div", { class: "card" }, h("span", { class: "n" }, st.successful_reloads), "accepted reloads"),
      h("div", { class: "card" }, h("span", { class: "n" }, st.failed_reloads), "rejected reloads"),
      h("div", { class: "card" }, h("span", { class: "n" }, (st.failed_groups || []).length), "failing groups")),
    result,
    list("Failing proxy groups (kept at their last good state)", (st.failed_groups || []).map((g) => (g.group || "(proxyless)") + ": " + g.error), "error"),
    list("Policy warnings", st.policy_warnings),
    list("Catalog warnings", st.warnings),
    h("h2", {}, "Sources"),
    h("div", { class: "scroll" }, h("table", { id: "sources" },
      h("thead", {}, h("tr", {}, ["Source", "Kind", "SHA-256", "KV index"].map((c) => h("th", {}, c)))),
      h("tbody", {}, (st.sources || []).map((s) => h("tr", {},
        h("td", { class: "mono" }, s.name), h("td", {}, s.kind),
        h("td", { class: "mono", title: s.sha256 }, s.sha256.slice(0, 16) + "…"), h("td", {}, s.modify_index || "-")))))),
    h("p", {}, h("a", { href: "#/plan" }, "Plan a change →")));
}

function renderPlan(st) {
  const docs = (st.sources || []).filter((s) => s.kind === "file" || s.kind === "kv");
  const sel = h("select", { id: "plan-doc" },
    docs.map((s) => h("option", { value: s.name }, "replace " + s.kind + " " + s.name)),
    h("option", { value: "console.hcl" }, "add as a new document"));
  const text = h("textarea", { id: "plan-text", spellcheck: "false", placeholder: 'proxy "edge" {\n  listener "http" { ... }\n}' });
  const upload = h("input", { type: "file", accept: ".hcl,text/plain", onchange: async (e) => {
    const f = e.target.files[0];
    if (f) text.value = await f.text();
  } });
  const out = h("div", { id: "plan-result" });
  const run = async (ev) => {
    ev.preventDefault();
    out.replaceChildren(h("p", { class: "muted" }, "planning…"));
    try {
      // JSON, so a page on another site cannot post the same (the bridge
      // refuses any other body on a POST).
      const res = await api("/v1/plan", { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ name: sel.value, document: text.value }), acceptStatus: [422] });
      out.replaceChildren(renderPlanResult(res));
    } catch (e) {
      if (e instanceof AuthError) { renderLogin(e.message); return; }
      out.replaceChildren(h("div", { class: "box error" }, e.message));
    }
  };
  setView(h("h1", {}, "Plan"),
    h("p", { class: "muted" }, "Paste or upload a policy document to see what the bridge would push, per proxy group, ",
      "against the catalog it serves now. Nothing is applied: the policy comes only from the bridge's files and Consul KV."),
    h("form", { class: "box", onsubmit: run },
      h("div", { class: "filters" }, sel, upload),
      text,
      h("p", {}, h("button", { class: "primary", type: "submit", id: "plan-run" }, "Plan"))),
    out);
}

function renderPlanResult(res) {
  const parts = [];
  if (res.diagnostics && res.diagnostics.length) {
    const errs = !res.sections;
    parts.push(h("div", { class: "box " + (errs ? "error" : ""), id: "plan-diagnostics" },
      h("strong", {}, errs ? "The policy with this document is invalid; it would be rejected:" : "Diagnostics:"),
      h("ul", { class: "plain" }, res.diagnostics.map((d) => h("li", { class: "mono diag" }, d)))));
  }
  if (!res.sections) return h("div", {}, parts);
  // The same summary as the plan command: every role counted.
  const n = { "+": 0, "~": 0, "-": 0 };
  let roles = 0, reached = 0;
  for (const s of res.sections) {
    if (!s.changes.length) continue;
    roles++; reached += s.proxies || 0;
    for (const c of s.changes) n[c.action]++;
  }
  parts.push(h("p", { id: "plan-summary" }, res.changed
    ? "Changes (document " + res.document + (res.replaces ? ", replacing the active one" : ", added") + "): " +
      n["+"] + " to add, " + n["~"] + " to change, " + n["-"] + " to remove, in " + roles + " of " + res.sections.length +
      " roles, reaching " + reached + " connected proxies."
    : "No changes."));
  for (const s of res.sections) {
    const cls = { "+": "plan-add", "~": "plan-mod", "-": "plan-del" };
    parts.push(h("div", { class: "box plan-section", "data-node-cluster": s.node_cluster, "data-proxyless": s.proxyless ? "true" : "false" },
      h("strong", {}, s.title + (s.proxies ? " (" + s.proxies + " connected)" : "")),
      s.changes.length ? h("ul", { class: "plain" }, s.changes.map((c) =>
        h("li", { class: "mono " + cls[c.action] }, c.action + " " + c.kind + " " + c.name + (c.detail ? ": " + c.detail : ""),
          (c.fields || []).length ? h("ul", { class: "plain plan-fields" }, c.fields.map((f) => h("li", { class: "mono" }, f))) : "")))
        : h("div", { class: "muted" }, "No changes.")));
  }
  if (res.warnings && res.warnings.length) parts.push(list("Warnings", res.warnings));
  return h("div", {}, parts);
}

// renderTry asks where the routes a node.cluster is served now send one
// request (GET /v1/try): the same matcher and words as route tests.
function renderTry(proxies) {
  const known = [...new Set((proxies || []).map((p) => p.node_cluster))].sort();
  const field = (id, label, attrs) => [h("label", { for: id }, label), h("input", Object.assign({ id, type: "text" }, attrs || {}))];
  const out = h("div", { id: "try-result" });
  const form = h("form", {
    class: "box", id: "try-form",
    onsubmit: async (ev) => {
      ev.preventDefault();
      const q = new URLSearchParams();
      for (const k of ["cluster", "listener", "host", "path", "method"]) q.set(k, document.getElementById("try-" + k).value.trim());
      for (const line of document.getElementById("try-headers").value.split("\n")) if (line.includes(":")) q.append("header", line);
      out.replaceChildren(h("p", { class: "muted" }, "evaluating…"));
      try {
        const res = await api("/v1/try?" + q.toString(), { acceptStatus: [404] });
        out.replaceChildren(renderTryResult(res));
      } catch (e) {
        if (e instanceof AuthError) { renderLogin(e.message); return; }
        out.replaceChildren(h("div", { class: "box error" }, e.message));
      }
    },
  },
  field("try-cluster", "node.cluster (proxy group)", { list: "try-known", value: known[0] || "" }),
  h("datalist", { id: "try-known" }, known.map((k) => h("option", { value: k }))),
  field("try-listener", "listener (optional when the group has one)"),
  field("try-host", "Host", { placeholder: "shop.example.com" }),
  field("try-path", "path", { value: "/" }),
  field("try-method", "method", { value: "GET" }),
  h("label", { for: "try-headers" }, "headers, one per line (Name: value)"),
  h("textarea", { id: "try-headers", spellcheck: "false", placeholder: "x-canary: 1" }),
  h("p", {}, h("button", { class: "primary", type: "submit", id: "try-run" }, "Try")));
  setView(h("h1", {}, "Try a request"),
    h("p", { class: "muted" }, "Where the routes this bridge serves now would send a request, evaluated as route tests evaluate it (consul-xds-bridge test)."),
    form, out);
}

function renderTryResult(res) {
  if (res.error) return h("div", { class: "box error" }, res.error);
  const o = res.outcome;
  return h("div", { class: "box", id: "try-outcome" },
    h("dl", { class: "kv" },
      h("dt", {}, "route configuration"), h("dd", { class: "mono" }, res.route_config),
      h("dt", {}, "virtual host"), h("dd", { class: "mono", id: "try-vhost" }, o.virtual_host || "none"),
      h("dt", {}, "route"), h("dd", { class: "mono", id: "try-route" }, (o.route || "none") + (res.source ? " (" + res.source + ")" : "")),
      h("dt", {}, "result"), h("dd", { class: "mono", id: "try-got" }, o.got)),
    (o.clusters || []).map((c) => h("div", { class: "try-cluster", "data-cluster": c.name },
      h("strong", {}, c.name + " (weight " + c.weight + ")"),
      h("ul", { class: "plain" }, ((res.endpoints || {})[c.name] || []).map((e) => h("li", { class: "mono" }, badge(e.health), " " + e.address + " w" + e.weight)),
        ((res.endpoints || {})[c.name] || []).length ? null : h("li", { class: "diag" }, "no endpoint: the request gets a 503")))));
}

// ---- wiring -------------------------------------------------------------

logout.addEventListener("click", () => { sessionStorage.removeItem(TOKEN_KEY); refresh(true); });
window.addEventListener("hashchange", () => { state.open.clear(); refresh(true); });
setInterval(() => { if (!document.hidden && !document.getElementById("login")) refresh(false); }, POLL_MS);
refresh(true);
