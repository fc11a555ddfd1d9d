// The Longboat console: one page, routed by the URL's hash, drawn from the broker's JSON.
//
// Plain JavaScript for current browsers: no build step, no library, nothing fetched from
// elsewhere. Every value from the cluster (topic names, keys, values, headers) reaches the
// page through esc() or textContent, never as markup.
//
// Each page is an async function that fetches, draws into #main, and calls ready(name);
// pages that change (overview, topic, groups) draw again every REFRESH_MS while shown. A
// route change bumps `generation`, which stops the previous page's timer and drops its
// answers still in flight.
//
// Admin actions (create, delete, alter a topic's config, reset a group's offsets) exist only
// when /console/api/settings says the broker has console_admin_enabled: otherwise no form is
// drawn and apiWrite() refuses before any request. They call the public REST routes, so the
// broker's authentication and ACLs judge the console's user exactly as they judge curl.
"use strict";

const REFRESH_MS = 5000;
const GROUP_REFRESH_MS = 2000;
const PAGE_ROWS = 100;
const MESSAGES_DEFAULT = 50;
const LAG_HISTORY_MAX = 300;

const main = document.getElementById("main");
let cluster = null; // {cluster_id}
let settings = { admin_enabled: false }; // /console/api/settings
let generation = 0;
let timer = null;
let routeStart = 0;
window.consoleTimings = []; // [{page, ms}]: route start to drawn (read by the browser tests)

// ------------------------------------------------------------------ helpers

function esc(v) {
  return String(v ?? "").replace(/[&<>"']/g, (c) =>
    ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

function enc(v) {
  return encodeURIComponent(v);
}

async function api(path) {
  const resp = await fetch(path, { headers: { Accept: "application/json" } });
  let body = null;
  try {
    body = await resp.json();
  } catch (e) {
    body = null;
  }
  if (!resp.ok) {
    const msg = body && body.message ? body.message : resp.status + " " + resp.statusText;
    throw new Error(msg);
  }
  return body;
}

// The one way the page writes: admin actions only. A refusal (401, 403, a bad request, a
// group not empty) is said in words; the broker answers those before changing anything.
async function apiWrite(method, path, body) {
  if (!settings.admin_enabled) throw new Error("This console is read-only (console_admin_enabled is off).");
  const init = { method: method, headers: { Accept: "application/json" } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(path, init);
  let out = null;
  try {
    out = await resp.json();
  } catch (e) {
    out = null;
  }
  if (!resp.ok) {
    const msg = out && out.message ? out.message : resp.statusText;
    const what = resp.status === 401 ? "Not authenticated (401)" : resp.status === 403 ? "Not allowed (403)" : "Refused (" + resp.status + ")";
    const end = /[.!?]$/.test(msg) ? "" : ".";
    throw new Error(what + ": " + msg + end + (resp.status < 500 ? " Nothing was changed." : ""));
  }
  return out;
}

// An admin panel that outlives the redraws of its page (they replace main's HTML; the panel
// is put back, with what the user typed), dropped on a route change.
let panels = { gen: -1, byId: new Map() };

function adminPanel(gen, id, title, html, bind) {
  if (panels.gen !== gen) panels = { gen: gen, byId: new Map() };
  let el = panels.byId.get(id);
  if (!el) {
    el = document.createElement("section");
    el.className = "admin";
    el.id = id;
    el.innerHTML = "<h2>" + esc(title) + "</h2>" + html + '<p class="admin-result" aria-live="polite"></p>';
    bind(el);
    panels.byId.set(id, el);
  }
  return el;
}

// Run an admin action from `button`: its outcome (or why it was refused) shown in the panel.
async function act(el, button, fn) {
  const out = el.querySelector(".admin-result");
  button.disabled = true;
  out.className = "admin-result muted";
  out.textContent = "working…";
  try {
    const text = await fn();
    out.className = "admin-result done";
    out.textContent = text;
  } catch (e) {
    out.className = "admin-result error";
    out.textContent = e.message;
  } finally {
    button.disabled = false;
  }
}

function v3(path) {
  return "/v3/clusters/" + enc(cluster.cluster_id) + path;
}

function fmtInt(n) {
  return n === null || n === undefined ? "?" : Number(n).toLocaleString("en-US");
}

function fmtBytes(n) {
  if (n === null || n === undefined) return "?";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = Number(n);
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return (i === 0 ? v.toFixed(0) : v.toFixed(1)) + " " + units[i];
}

function fmtRate(n) {
  if (!n) return "0";
  return n >= 100 ? n.toFixed(0) : n.toFixed(1);
}

function fmtTime(ms) {
  return ms === null || ms === undefined ? "" : new Date(ms).toISOString().replace("T", " ").replace("Z", "");
}

function tag(text, cls) {
  return '<span class="tag ' + (cls || "") + '">' + esc(text) + "</span>";
}

function card(label, n, cls, id) {
  return '<div class="card ' + (cls || "") + '"' + (id ? ' id="' + id + '"' : "") +
    '><div class="muted">' + esc(label) + '</div><div class="n">' + esc(n) + "</div></div>";
}

function table(head, rows, opts) {
  // head: [[label, cls]], rows: [[html cells], rowClass]
  const o = opts || {};
  let s = "<table" + (o.id ? ' id="' + o.id + '"' : "") + "><thead><tr>";
  for (const [label, cls] of head) s += '<th class="' + (cls || "") + '">' + esc(label) + "</th>";
  s += "</tr></thead><tbody>";
  for (const [cells, rowCls] of rows) {
    s += '<tr class="' + (rowCls || "") + '">';
    for (let i = 0; i < cells.length; i++) s += '<td class="' + (head[i][1] || "") + '">' + cells[i] + "</td>";
    s += "</tr>";
  }
  if (!rows.length) s += '<tr><td colspan="' + head.length + '" class="muted">none</td></tr>';
  return s + "</tbody></table>";
}

function params() {
  const q = location.hash.indexOf("?");
  return new URLSearchParams(q >= 0 ? location.hash.slice(q + 1) : "");
}

function setHashParams(base, p) {
  const s = p.toString();
  const h = base + (s ? "?" + s : "");
  if (location.hash !== h) location.hash = h;
  else route();
}

// One page of rows at a time: a topic of 1,000 partitions draws 100 rows, not 1,000.
function paged(rows, page) {
  const pages = Math.max(1, Math.ceil(rows.length / PAGE_ROWS));
  const p = Math.min(Math.max(0, page), pages - 1);
  return { rows: rows.slice(p * PAGE_ROWS, (p + 1) * PAGE_ROWS), page: p, pages: pages };
}

function pager(pg, total, what) {
  if (pg.pages <= 1) return "";
  return '<div class="pager"><button data-page="' + (pg.page - 1) + '"' + (pg.page === 0 ? " disabled" : "") +
    '>&larr;</button><span>page ' + (pg.page + 1) + " of " + pg.pages + " (" + fmtInt(total) + " " + esc(what) +
    ')</span><button data-page="' + (pg.page + 1) + '"' + (pg.page + 1 >= pg.pages ? " disabled" : "") +
    ">&rarr;</button></div>";
}

function bindPager(el, onPage) {
  for (const b of el.querySelectorAll("button[data-page]")) {
    b.addEventListener("click", () => onPage(Number(b.dataset.page)));
  }
}

// A line plot as inline SVG: series [{label, points: [[t_ms, value]], color}].
function plot(title, series, unitFmt) {
  const W = 460, H = 150, L = 52, R = 8, T = 8, B = 22;
  const pts = series.flatMap((s) => s.points);
  const first = series[0].points;
  const last = first.length ? first[first.length - 1][1] : null;
  let svg = '<div class="plot"><div class="title">' + esc(title) +
    (last === null ? "" : ' <span class="last">now: ' + esc(unitFmt(last)) + "</span>") + "</div>";
  if (pts.length < 2) {
    return svg + '<svg width="' + W + '" height="' + H + '" role="img" aria-label="' + esc(title) +
      '"><text x="' + W / 2 + '" y="' + H / 2 + '" text-anchor="middle" fill="#6a7383">collecting samples…</text></svg></div>';
  }
  const t0 = Math.min(...pts.map((p) => p[0])), t1 = Math.max(...pts.map((p) => p[0]));
  const vmax = Math.max(1e-9, ...pts.map((p) => p[1]));
  const x = (t) => L + ((t - t0) / Math.max(1, t1 - t0)) * (W - L - R);
  const y = (v) => T + (1 - v / vmax) * (H - T - B);
  svg += '<svg width="' + W + '" height="' + H + '" role="img" aria-label="' + esc(title) + '">';
  svg += '<line x1="' + L + '" y1="' + (H - B) + '" x2="' + (W - R) + '" y2="' + (H - B) + '" stroke="#ccd3de"/>';
  svg += '<line x1="' + L + '" y1="' + T + '" x2="' + L + '" y2="' + (H - B) + '" stroke="#ccd3de"/>';
  svg += '<text x="' + (L - 4) + '" y="' + (T + 10) + '" text-anchor="end" font-size="11" fill="#6a7383">' +
    esc(unitFmt(vmax)) + "</text>";
  svg += '<text x="' + (L - 4) + '" y="' + (H - B) + '" text-anchor="end" font-size="11" fill="#6a7383">0</text>';
  const span = Math.round((t1 - t0) / 1000);
  svg += '<text x="' + L + '" y="' + (H - 6) + '" font-size="11" fill="#6a7383">-' + esc(fmtSpan(span)) + "</text>";
  svg += '<text x="' + (W - R) + '" y="' + (H - 6) + '" text-anchor="end" font-size="11" fill="#6a7383">now</text>';
  for (const s of series) {
    if (!s.points.length) continue;
    const d = s.points.map((p) => x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1)).join(" ");
    svg += '<polyline fill="none" stroke="' + (s.color || "#1f6feb") + '" stroke-width="1.6" points="' + d +
      '"><title>' + esc(s.label) + "</title></polyline>";
  }
  return svg + "</svg></div>";
}

function fmtSpan(s) {
  return s >= 120 ? Math.round(s / 60) + " min" : s + " s";
}

// ------------------------------------------------------------------ decoding

function b64bytes(b64) {
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

// A key, value or header from the API (base64): JSON if it parses as JSON, text if it is
// UTF-8 without control characters, else base64. Returns {kind, text}.
function decode(b64) {
  if (b64 === null || b64 === undefined) return { kind: "null", text: "null" };
  const bytes = b64bytes(b64);
  // Confluent's wire format: magic byte 0, a 4-byte schema id, the encoded data. Named, so
  // the reader knows to pick "schema registry" to see it decoded.
  if (bytes.length >= 5 && bytes[0] === 0) {
    const id = ((bytes[1] << 24) | (bytes[2] << 16) | (bytes[3] << 8) | bytes[4]) >>> 0;
    return { kind: "schema " + id, text: b64 };
  }
  let text;
  try {
    text = utf8.decode(bytes);
  } catch (e) {
    return { kind: "binary", text: b64 };
  }
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u0008\u000e-\u001f]/.test(text)) return { kind: "binary", text: b64 };
  const t = text.trim();
  if (t && (t[0] === "{" || t[0] === "[" || t[0] === '"' || /^-?\d/.test(t) || t === "true" || t === "false")) {
    try {
      return { kind: "json", text: JSON.stringify(JSON.parse(t), null, 2) };
    } catch (e) {
      /* text */
    }
  }
  return { kind: "text", text: text };
}

function decoded(b64) {
  const d = decode(b64);
  return tag(d.kind, d.kind === "text" || d.kind === "json" || d.kind === "null" ? "" : "warn") +
    '<pre class="value">' + esc(d.text) + "</pre>";
}

// A value the broker decoded with its schema registry (format=avro: Avro or JSON Schema,
// by the schema id the value carries): JSON already.
function registryDecoded(v) {
  return v === null ? decoded(null) : tag("schema registry") + '<pre class="value">' + esc(JSON.stringify(v, null, 2)) + "</pre>";
}

// ------------------------------------------------------------------ pages

async function overview(gen) {
  const c = await api("/console/api/cluster");
  if (gen !== generation) return;
  const h = c.health;
  const q = c.quorum;
  let s = "<h1>Cluster " + esc(c.cluster_id) + "</h1>";
  s += '<div class="cards">' +
    card("Brokers", c.brokers.length, "", "card-brokers") +
    card("Controllers", q.nodes.length) +
    card("Active controller", q.leader_id ?? "none", q.leader_id == null ? "bad" : "") +
    card("Topics", c.topics) +
    card("Partitions", fmtInt(h.partitions), "", "card-partitions") +
    card("Under-replicated", h.under_replicated, h.under_replicated ? "warn" : "", "card-urp") +
    card("Under min ISR", h.under_min_isr, h.under_min_isr ? "bad" : "") +
    card("Offline", h.offline, h.offline ? "bad" : "", "card-offline") +
    "</div>";
  s += "<h2>Brokers</h2>" + table(
    [["Broker"], ["Address"], ["Rack"], ["State"], ["Leaders", "num"], ["Replicas", "num"],
      ["Size on disk", "num"], ["Metadata lag", "num"]],
    c.brokers.map((b) => {
      const tags = [];
      if (!b.reachable) tags.push(tag("unreachable", "bad"));
      if (b.fenced) tags.push(tag("fenced", "bad"));
      if (b.in_controlled_shutdown) tags.push(tag("shutting down", "warn"));
      const state = tags.length ? tags.join(" ") : tag("running", "ok");
      return [[esc(b.broker_id) + (b.broker_id === c.served_by ? ' <span class="muted">(this one)</span>' : ""),
        esc(b.host + ":" + b.port), esc(b.rack ?? ""), state + (b.error ? ' <span class="muted">' + esc(b.error) + "</span>" : ""),
        fmtInt(b.leaders), fmtInt(b.replicas), fmtBytes(b.size_bytes), b.metadata_lag ?? "?"],
        !b.reachable || b.fenced ? "bad" : ""];
    }), { id: "brokers" });
  s += "<h2>Controller quorum</h2>" + table(
    [["Node"], ["Role"], ["Term", "num"], ["Last index", "num"], ["Commit", "num"], ["Applied", "num"],
      ["Replication lag", "num"]],
    q.nodes.map((n) => n.reachable
      ? [[esc(n.node_id), n.role === "leader" ? tag("leader", "ok") : esc(n.role), fmtInt(n.term),
        fmtInt(n.last_index), fmtInt(n.commit), fmtInt(n.applied), n.lag === null ? "?" : fmtInt(n.lag)],
        n.lag > 100 ? "warn" : ""]
      : [[esc(n.node_id), tag("unreachable", "bad") + ' <span class="muted">' + esc(n.error) + "</span>",
        "", "", "", "", ""], "bad"]), { id: "quorum" });
  s += "<h2>Unhealthy partitions</h2>";
  s += table(
    [["Topic"], ["Partition", "num"], ["Leader", "num"], ["Replicas"], ["ISR"], ["Problem"]],
    c.unhealthy.map((p) => [[topicLink(p.topic), p.partition, p.leader, esc(p.replicas.join(", ")),
      esc(p.isr.join(", ")), [p.offline ? tag("offline", "bad") : "", p.under_min_isr ? tag("under min ISR", "bad") : "",
        p.under_replicated ? tag("under-replicated", "warn") : ""].join(" ")], p.offline ? "bad" : "warn"]),
    { id: "unhealthy" });
  if (h.under_replicated + h.offline + h.under_min_isr > c.unhealthy.length) {
    s += '<p class="muted">Showing the first ' + c.unhealthy.length + ".</p>";
  }
  main.innerHTML = s;
  ready("overview");
  refresh(gen, () => overview(gen), REFRESH_MS);
}

function topicLink(name) {
  return '<a href="#/topic/' + esc(enc(name)) + '">' + esc(name) + "</a>";
}

const topicsState = { filter: "", internal: false, page: 0 };

async function topicsPage(gen) {
  const d = await api("/console/api/topics");
  const create = !settings.admin_enabled ? null : adminPanel(gen, "create-topic", "Create a topic",
    '<form class="bar"><label>Name<input name="name" required></label>' +
    '<label>Partitions<input name="partitions" type="number" min="1" value="1" class="w6"></label>' +
    '<label>Replication factor<input name="rf" type="number" min="1" value="1" class="w6"></label>' +
    '<button type="submit">Create</button></form>',
    (el) => el.querySelector("form").addEventListener("submit", (e) => {
      e.preventDefault();
      const f = new FormData(e.target);
      const name = String(f.get("name")).trim();
      act(el, e.target.querySelector("button"), async () => {
        await apiWrite("POST", v3("/topics"), {
          topic_name: name, partitions_count: Number(f.get("partitions")), replication_factor: Number(f.get("rf")),
        });
        if (gen === generation) {
          Object.assign(d, await api("/console/api/topics"));
          draw();
        }
        return "Created topic " + name + ".";
      });
    }));
  if (gen !== generation) return;
  const draw = () => {
    const f = topicsState.filter.toLowerCase();
    const rows = d.topics.filter((t) => (topicsState.internal || !t.internal) && t.name.toLowerCase().includes(f));
    const pg = paged(rows, topicsState.page);
    let s = "<h1>Topics</h1>";
    s += '<div class="bar"><input id="topic-filter" placeholder="filter by name" value="' + esc(topicsState.filter) +
      '"><label><input type="checkbox" id="show-internal"' + (topicsState.internal ? " checked" : "") +
      "> internal topics</label>" + '<span class="muted">' + fmtInt(rows.length) + " topic(s), " +
      fmtInt(rows.reduce((a, t) => a + t.partitions, 0)) + " partition(s)</span></div>";
    if (d.unreachable_brokers.length) {
      s += '<p class="error">Brokers ' + esc(d.unreachable_brokers.join(", ")) +
        " did not answer: offsets and sizes of what they lead are unknown.</p>";
    }
    s += pager(pg, rows.length, "topics");
    s += table(
      [["Topic"], ["Partitions", "num"], ["Replication", "num"], ["Records", "num"], ["Size", "num"],
        ["Records/s", "num"], ["Bytes/s", "num"], ["Under-replicated", "num"], ["Offline", "num"]],
      pg.rows.map((t) => [[topicLink(t.name), fmtInt(t.partitions), t.replication_factor, fmtInt(t.records),
        fmtBytes(t.size_bytes), fmtRate(t.records_per_s), fmtBytes(t.bytes_per_s), t.under_replicated, t.offline],
        t.offline ? "bad" : t.under_replicated ? "warn" : ""]),
      { id: "topics" });
    main.innerHTML = s;
    if (create) main.querySelector("h1").after(create);
    const input = document.getElementById("topic-filter");
    input.addEventListener("input", () => {
      topicsState.filter = input.value;
      topicsState.page = 0;
      draw();
      const again = document.getElementById("topic-filter");
      again.focus();
      again.setSelectionRange(again.value.length, again.value.length);
    });
    document.getElementById("show-internal").addEventListener("change", (e) => {
      topicsState.internal = e.target.checked;
      topicsState.page = 0;
      draw();
    });
    bindPager(main, (p) => {
      topicsState.page = p;
      draw();
    });
  };
  draw();
  ready("topics");
}

async function topicPage(gen, name) {
  let [t, cfg] = await Promise.all([
    api("/console/api/topics/" + enc(name)),
    api(v3("/topics/" + enc(name) + "/configs")),
  ]);
  if (gen !== generation) return;
  const state = { page: 0 };
  const draw = () => {
    const pg = paged(t.partition_list, state.page);
    let s = "<h1>Topic " + esc(t.name) + "</h1>";
    s += '<div class="cards">' + card("Partitions", fmtInt(t.partitions)) + card("Replication", t.replication_factor) +
      card("Records", fmtInt(t.records), "", "card-records") + card("Size", fmtBytes(t.size_bytes)) +
      card("On disk (all replicas)", fmtBytes(t.disk_bytes)) +
      card("Under-replicated", t.under_replicated, t.under_replicated ? "warn" : "") +
      card("Offline", t.offline, t.offline ? "bad" : "") + "</div>";
    s += "<h2>Throughput</h2><div class=\"plots\" id=\"throughput\">" +
      plot("records/s (produced, over the last minutes)", [{ label: "records/s", points: t.throughput.map((p) => [p[0], p[1]]) }], fmtRate) +
      plot("bytes/s", [{ label: "bytes/s", color: "#8e44ad", points: t.throughput.map((p) => [p[0], p[2]]) }], fmtBytes) +
      "</div>";
    s += "<h2>Partitions</h2>" + pager(pg, t.partition_list.length, "partitions");
    s += table(
      [["Partition", "num"], ["Leader", "num"], ["Replicas"], ["ISR"], ["Start offset", "num"],
        ["End offset (HW)", "num"], ["Records", "num"], ["Size", "num"], [""]],
      pg.rows.map((p) => [[p.partition, p.leader, esc(p.replicas.join(", ")), esc(p.isr.join(", ")),
        fmtInt(p.log_start_offset), fmtInt(p.high_watermark),
        p.high_watermark === null ? "?" : fmtInt(p.high_watermark - p.log_start_offset), fmtBytes(p.size_bytes),
        '<a href="#/messages?topic=' + esc(enc(t.name)) + "&partition=" + p.partition + '">messages</a>' +
        (p.offline ? " " + tag("offline", "bad") : p.under_replicated ? " " + tag("under-replicated", "warn") : "")],
        p.offline ? "bad" : p.under_replicated ? "warn" : ""]),
      { id: "partitions" });
    s += "<h2>Configs</h2>" + table(
      [["Name"], ["Value"], ["Source"]],
      cfg.data.map((c) => [[esc(c.name), esc(c.value), c.is_default ? '<span class="muted">default</span>' : tag(c.source || "topic")],
        ""]), { id: "configs" });
    main.innerHTML = s;
    if (settings.admin_enabled) {
      const alter = topicAdmin(gen, t.name, cfg, async () => {
        cfg = await api(v3("/topics/" + enc(name) + "/configs"));
        if (gen === generation) draw();
      });
      for (const el of alter) main.append(el);
    }
    bindPager(main, (p) => {
      state.page = p;
      draw();
    });
  };
  draw();
  ready("topic");
  const again = async () => {
    const fresh = await api("/console/api/topics/" + enc(name));
    if (gen !== generation) return;
    Object.assign(t, fresh);
    draw();
    refresh(gen, again, REFRESH_MS);
  };
  refresh(gen, again, REFRESH_MS);
}

// The topic page's admin panels: alter one config, delete the topic (typed confirmation).
function topicAdmin(gen, name, cfg, reload) {
  const alter = adminPanel(gen, "alter-config", "Alter a config",
    '<form class="bar"><label>Config<select name="name"></select></label>' +
    '<label>Value<input name="value" required></label><button type="submit">Set</button></form>',
    (el) => el.querySelector("form").addEventListener("submit", (e) => {
      e.preventDefault();
      const f = new FormData(e.target);
      const key = String(f.get("name")), value = String(f.get("value"));
      act(el, e.target.querySelector("button"), async () => {
        await apiWrite("PUT", v3("/topics/" + enc(name) + "/configs/" + enc(key)), { value: value });
        await reload();
        return "Set " + key + " = " + value + ".";
      });
    }));
  const select = alter.querySelector("select");
  if (!select.options.length) {
    for (const c of cfg.data) {
      const o = document.createElement("option");
      o.value = o.textContent = c.name;
      select.append(o);
    }
  }
  const del = adminPanel(gen, "delete-topic", "Delete this topic",
    '<form class="bar"><label>Type the topic name to confirm<input name="confirm" autocomplete="off"></label>' +
    '<button type="submit" disabled>Delete</button></form>',
    (el) => {
      const form = el.querySelector("form");
      const input = form.querySelector("input"), button = form.querySelector("button");
      input.addEventListener("input", () => {
        button.disabled = input.value !== name;
      });
      form.addEventListener("submit", (e) => {
        e.preventDefault();
        if (input.value !== name) return;
        act(el, button, async () => {
          await apiWrite("DELETE", v3("/topics/" + enc(name)));
          input.value = "";
          return "Deleted topic " + name + ".";
        }).then(() => {
          button.disabled = input.value !== name;
        });
      });
    });
  return [alter, del];
}

async function messagesPage(gen) {
  const p = params();
  const topics = (await api("/console/api/topics")).topics;
  if (gen !== generation) return;
  const topic = p.get("topic") || (topics.find((t) => !t.internal) || topics[0] || {}).name || "";
  const info = topics.find((t) => t.name === topic);
  const partition = Number(p.get("partition") || 0);
  const limit = Math.min(500, Math.max(1, Number(p.get("limit") || MESSAGES_DEFAULT)));
  const registry = p.get("values") === "registry";
  let s = "<h1>Messages</h1>";
  s += '<form class="bar" id="browse"><label>Topic<select name="topic">' +
    topics.map((t) => "<option" + (t.name === topic ? " selected" : "") + ' value="' + esc(t.name) + '">' + esc(t.name) + "</option>").join("") +
    '</select></label><label>Partition<input name="partition" type="number" min="0" value="' + partition +
    '" class="w6"></label><label>From offset<input name="offset" placeholder="earliest" value="' +
    esc(p.get("offset") || "") + '" class="w9"></label><label>or from time (UTC)<input name="time" type="datetime-local" step="1" value="' +
    esc(p.get("time") || "") + '"></label><label>Values<select name="values"><option value="">JSON, text or base64</option>' +
    '<option value="registry"' + (p.get("values") === "registry" ? " selected" : "") + ">schema registry (Avro, JSON Schema)</option>" +
    '</select></label><label>Show<input name="limit" type="number" min="1" max="500" value="' + limit +
    '" class="w5"></label><button type="submit">Read</button></form>';
  let body = "";
  if (info && partition >= info.partitions) {
    body = '<p class="error">Topic ' + esc(topic) + " has partitions 0 to " + (info.partitions - 1) + ".</p>";
  } else if (topic) {
    try {
      const base = v3("/topics/" + enc(topic) + "/partitions/" + partition);
      let from = p.get("offset") || "";
      if (!from && p.get("time")) {
        const ts = Date.parse(p.get("time") + "Z");
        const o = await api(base + "/offset?timestamp=" + ts);
        from = o.offset >= 0 ? String(o.offset) : "latest";
      }
      const offs = await api(base + "/offset");
      const r = await api(base + "/records?offset=" + enc(from || "earliest") + "&timeout_ms=0&format=" + (registry ? "avro" : "binary") +
        "&key_format=binary&max_bytes=4194304");
      if (gen !== generation) return;
      const recs = r.records.slice(0, limit);
      const next = recs.length ? recs[recs.length - 1].offset + 1 : r.next_offset;
      body += '<p class="muted" id="range">Partition ' + partition + " holds offsets " + fmtInt(offs.earliest_offset) + " to " +
        fmtInt(offs.latest_offset - 1) + " (high watermark " + fmtInt(r.high_watermark) + ").</p>";
      body += table(
        [["Offset", "num"], ["Timestamp (UTC)"], ["Key"], ["Value"], ["Headers"]],
        recs.map((m) => [[m.offset, esc(fmtTime(m.timestamp)), decoded(m.key), registry ? registryDecoded(m.value) : decoded(m.value),
          m.headers.map((hd) => "<div><b>" + esc(hd.name) + "</b>: " + decoded(hd.value) + "</div>").join("")], ""]),
        { id: "messages" });
      if (next < r.high_watermark) {
        const np = new URLSearchParams({ topic: topic, partition: partition, offset: next, limit: limit });
        if (registry) np.set("values", "registry");
        body += '<p><a id="next" href="#/messages?' + esc(np.toString()) + '">next from offset ' + next + " &rarr;</a></p>";
      }
    } catch (e) {
      body = '<p class="error">' + esc(e.message) + "</p>";
    }
  } else {
    body = '<p class="muted">No topics yet.</p>';
  }
  main.innerHTML = s + body;
  document.getElementById("browse").addEventListener("submit", (e) => {
    e.preventDefault();
    const f = new FormData(e.target);
    const np = new URLSearchParams();
    for (const k of ["topic", "partition", "offset", "time", "limit", "values"]) if (f.get(k)) np.set(k, f.get(k));
    if (np.get("offset")) np.delete("time");
    setHashParams("#/messages", np);
  });
  ready("messages");
}

async function groupsPage(gen) {
  const d = await api(v3("/consumer-groups"));
  const sums = await Promise.all(d.data.map((g) =>
    api(v3("/consumer-groups/" + enc(g.consumer_group_id) + "/lag-summary")).catch(() => null)));
  if (gen !== generation) return;
  let s = "<h1>Consumer groups</h1>";
  s += table(
    [["Group"], ["State"], ["Assignor"], ["Generation", "num"], ["Total lag", "num"], ["Max lag", "num"]],
    d.data.map((g, i) => [['<a href="#/group/' + esc(enc(g.consumer_group_id)) + '">' + esc(g.consumer_group_id) + "</a>",
      esc(g.state), esc(g.partition_assignor), g.generation ?? "", sums[i] ? fmtInt(sums[i].total_lag) : "?",
      sums[i] ? fmtInt(sums[i].max_lag) : "?"], ""]),
    { id: "groups" });
  main.innerHTML = s;
  ready("groups");
  refresh(gen, () => groupsPage(gen), REFRESH_MS);
}

// Lag over time, kept in the tab's sessionStorage per group: leaving and coming back keeps
// the plot (the broker keeps no lag history).
function lagHistory(group, total, now) {
  const key = "longboat.lag." + group;
  let h = [];
  try {
    h = JSON.parse(sessionStorage.getItem(key) || "[]");
  } catch (e) {
    h = [];
  }
  h.push([now, total]);
  h = h.slice(-LAG_HISTORY_MAX);
  try {
    sessionStorage.setItem(key, JSON.stringify(h));
  } catch (e) {
    /* full: the plot keeps what it has */
  }
  return h;
}

async function groupPage(gen, group) {
  const base = v3("/consumer-groups/" + enc(group));
  const [g, members, lags] = await Promise.all([api(base), api(base + "/consumers"), api(base + "/lags")]);
  if (gen !== generation) return;
  const rows = lags.data;
  const total = rows.reduce((a, r) => a + (r.lag || 0), 0);
  const hist = lagHistory(group, total, Date.now());
  const assigned = {};
  for (const r of rows) {
    if (r.consumer_id) (assigned[r.consumer_id] = assigned[r.consumer_id] || []).push(r.topic_name + "-" + r.partition_id);
  }
  let s = "<h1>Consumer group " + esc(group) + "</h1>";
  s += '<div class="cards">' + card("State", g.state) + card("Members", members.data.length) +
    card("Generation", g.generation ?? "") + card("Total lag", fmtInt(total), total ? "warn" : "", "card-lag") + "</div>";
  s += '<h2>Lag over time</h2><div class="plots" id="lag-plot">' +
    plot("total lag (records), sampled every " + GROUP_REFRESH_MS / 1000 + " s while this page is open",
      [{ label: "lag", color: "#c0392b", points: hist }], fmtInt) + "</div>";
  s += "<h2>Members</h2>" + table(
    [["Consumer"], ["Client"], ["Assigned partitions"]],
    members.data.map((m) => [[esc(m.consumer_id), esc(m.client_id ?? ""),
      esc((assigned[m.consumer_id] || []).sort().join(", "))], ""]), { id: "members" });
  s += "<h2>Lag per partition</h2>" + table(
    [["Topic"], ["Partition", "num"], ["Committed offset", "num"], ["Log end offset", "num"], ["Lag", "num"], ["Consumer"]],
    rows.map((r) => [[topicLink(r.topic_name), r.partition_id, r.current_offset ?? "-", fmtInt(r.log_end_offset),
      r.lag ?? "-", esc(r.consumer_id ?? "")], r.lag ? "warn" : ""]),
    { id: "lags" });
  main.innerHTML = s;
  if (settings.admin_enabled) {
    main.append(adminPanel(gen, "reset-offsets", "Reset the group's offsets",
      '<p class="muted">Every partition the group has committed, to the earliest or latest offset. ' +
      "The group must be empty (no members).</p>" +
      '<form class="bar"><label>To<select name="to"><option value="earliest">earliest</option>' +
      '<option value="latest">latest</option></select></label><button type="submit">Reset</button></form>',
      (el) => el.querySelector("form").addEventListener("submit", (e) => {
        e.preventDefault();
        const to = String(new FormData(e.target).get("to"));
        act(el, e.target.querySelector("button"), async () => {
          const r = await apiWrite("POST", base + "/offsets:reset", { to: to, all_topics: true, execute: true });
          return "Reset " + r.partitions.length + " partition(s) to " + to + ".";
        });
      })));
  }
  ready("group");
  refresh(gen, () => groupPage(gen, group), GROUP_REFRESH_MS);
}

async function reportsPage(gen) {
  const d = await api("/console/api/reports");
  if (gen !== generation) return;
  let s = "<h1>Fault-injection runs</h1>";
  if (!d.enabled) {
    s += '<p class="muted" id="reports-off">Off: start the broker with <code>console_reports_dir</code> set ' +
      "(for example <code>--override console_reports_dir=var/jepsen</code>) to list the <code>jepsen_tests</code> runs found there.</p>";
  } else {
    s += table(
      [["Run"], ["Verdict"], ["Workload"], ["Nemeses"], ["Seed", "num"], ["Operations", "num"], ["Anomalies"], ["Finished (UTC)"]],
      d.runs.map((r) => [['<a href="#/report/' + esc(enc(r.run)) + '">' + esc(r.run) + "</a>",
        r.error ? tag("unreadable", "bad") : r.valid === true ? tag("valid", "ok") : r.valid === false ? tag("INVALID", "bad") : tag(String(r.valid)),
        esc(r.workload ?? ""), esc((r.nemeses || []).join(", ")), esc(r.seed ?? ""), fmtInt(r.ops),
        esc(Object.entries(r.counts || {}).map(([k, v]) => k + " " + v).join(", ")), esc(fmtTime(r.mtime * 1000))],
        r.valid === false || r.error ? "bad" : ""]),
      { id: "runs" });
  }
  main.innerHTML = s;
  ready("reports");
}

async function reportPage(gen, run) {
  const d = await api("/console/api/reports/" + run.split("/").map(enc).join("/"));
  if (gen !== generation) return;
  const res = d.results || {};
  const result = res.result || {};
  const cfg = res.config || {};
  let s = "<h1>Run " + esc(run) + "</h1>";
  s += '<div class="cards">' +
    card("Verdict", result.valid === true ? "valid" : result.valid === false ? "INVALID" : String(result.valid), result.valid === false ? "bad" : "", "card-verdict") +
    card("Operations", fmtInt(res.ops)) + card("Wall time", res.wall_time_s != null ? Math.round(res.wall_time_s) + " s" : "?") + "</div>";
  if (d.has_report) {
    s += '<p><a id="html-report" target="_blank" rel="noopener" href="/console/api/reports/' + esc(run.split("/").map(enc).join("/")) +
      '/report.html">The run\'s HTML report (plots and anomaly tables)</a></p>';
  }
  s += "<h2>Anomalies</h2>" + table([["Kind"], ["Count", "num"]],
    Object.entries(result.counts || {}).map(([k, v]) => [[esc(k), fmtInt(v)], (result.anomaly_types || []).includes(k) ? "bad" : ""]),
    { id: "anomalies" });
  if ((res.warnings || []).length) {
    s += "<h2>Warnings</h2><ul>" + res.warnings.map((w) => "<li>" + esc(typeof w === "string" ? w : JSON.stringify(w)) + "</li>").join("") + "</ul>";
  }
  s += "<h2>Faults (schedule)</h2>" + table(
    [["At (s)", "num"], ["Duration (s)", "num"], ["Kind"], ["Targets"], ["Spec"]],
    (d.schedule || []).map((f) => [[esc(f.at_s), esc(f.duration_s), esc(f.kind), esc((f.targets || []).join(", ")), esc(f.spec ?? "")], ""]),
    { id: "schedule" });
  s += "<h2>Configuration</h2>" + table([["Key"], ["Value"]],
    Object.entries(cfg).map(([k, v]) => [[esc(k), esc(typeof v === "string" ? v : JSON.stringify(v))], ""]), { id: "config" });
  if (result.stats) s += '<h2>Statistics</h2><pre class="value">' + esc(JSON.stringify(result.stats, null, 2)) + "</pre>";
  main.innerHTML = s;
  ready("report");
}

// ------------------------------------------------------------------ routing

function ready(page) {
  main.dataset.page = page;
  main.dataset.ready = String(generation);
  if (!main.dataset.timed) {
    main.dataset.timed = "1";
    window.consoleTimings.push({ page: page, ms: performance.now() - routeStart, since_navigation_ms: performance.now() });
  }
}

// Draw again after `ms`, unless the route changed meanwhile. A failed refresh shows the
// error above the last drawing and tries again.
function refresh(gen, fn, ms) {
  clearTimeout(timer);
  timer = setTimeout(async () => {
    if (gen !== generation) return;
    if (document.hidden) {
      refresh(gen, fn, ms); // a tab in the background asks nothing
      return;
    }
    try {
      await fn();
    } catch (e) {
      if (gen !== generation) return;
      showError(e);
      refresh(gen, fn, ms);
    }
  }, ms);
}

function showError(e) {
  let el = document.getElementById("refresh-error");
  if (!el) {
    el = document.createElement("p");
    el.id = "refresh-error";
    el.className = "error";
    main.prepend(el);
  }
  el.textContent = "Could not refresh: " + e.message;
}

async function route() {
  generation++;
  const gen = generation;
  clearTimeout(timer);
  routeStart = performance.now();
  delete main.dataset.ready;
  delete main.dataset.timed;
  const hash = location.hash.replace(/^#/, "") || "/";
  const path = hash.split("?")[0];
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const nav = parts[0] === "topic" ? "topics" : parts[0] === "group" ? "groups" : parts[0] === "report" ? "reports" : parts[0] || "overview";
  for (const a of document.querySelectorAll("header nav a")) a.classList.toggle("active", a.dataset.nav === nav);
  try {
    if (!cluster) {
      [cluster, settings] = await Promise.all([
        api("/v3/clusters").then((c) => c.data[0]),
        api("/console/api/settings"),
      ]);
      if (settings.admin_enabled) {
        document.getElementById("footer").textContent = "Admin actions on (console_admin_enabled): they use the " +
          "public API as your user, under its ACLs. Pages refresh every few seconds.";
      }
      document.getElementById("cluster").textContent = "cluster " + cluster.cluster_id;
    }
    if (parts.length === 0) await overview(gen);
    else if (parts[0] === "topics") await topicsPage(gen);
    else if (parts[0] === "topic" && parts[1] !== undefined) await topicPage(gen, parts[1]);
    else if (parts[0] === "messages") await messagesPage(gen);
    else if (parts[0] === "groups") await groupsPage(gen);
    else if (parts[0] === "group" && parts[1] !== undefined) await groupPage(gen, parts[1]);
    else if (parts[0] === "reports") await reportsPage(gen);
    else if (parts[0] === "report" && parts.length > 1) await reportPage(gen, parts.slice(1).join("/"));
    else {
      main.innerHTML = '<p class="error">No page ' + esc(hash) + '. <a href="#/">Overview</a></p>';
      ready("missing");
    }
  } catch (e) {
    if (gen !== generation) return;
    main.innerHTML = '<p class="error" id="page-error">' + esc(e.message) + "</p>";
    ready("error");
  }
}

window.addEventListener("hashchange", route);
route();
