"""``GET /openapi``: the OpenAPI document (``/openapi.json``) rendered as a page.

One static HTML page with its script inline: no CDN, no build step, nothing fetched but
``/openapi.json`` from the same broker, so it works on a laptop without a network. The script
lists every operation by path (method, summary, parameters, request and response content
types with their schemas, ``$ref`` resolved), with a filter box. It only reads the document;
it sends no request of its own to the API.
"""

from __future__ import annotations

from aiohttp import web

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Longboat HTTP API</title>
<style>
body { font: 14px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 70rem; padding: 1rem; }
h1 { margin: 0 0 .25rem; font-size: 1.5rem; }
#filter { width: 100%; padding: .4rem; margin: .75rem 0; font-size: 1rem; box-sizing: border-box; }
details { border: 1px solid #ccd; border-radius: 4px; margin: .3rem 0; }
summary { cursor: pointer; padding: .35rem .5rem; font-family: ui-monospace, monospace; }
.m { display: inline-block; min-width: 4.5rem; font-weight: bold; }
.get { color: #06c; } .post { color: #080; } .put, .patch { color: #a60; } .delete { color: #c00; }
.s { font-family: system-ui, sans-serif; color: #444; margin-left: .5rem; }
.body { padding: .25rem .75rem .75rem; }
table { border-collapse: collapse; } td, th { padding: .15rem .5rem; text-align: left; }
pre { background: #f5f5f8; padding: .5rem; overflow-x: auto; margin: .25rem 0; }
code { font-family: ui-monospace, monospace; }
</style>
</head>
<body>
<h1 id="title">Longboat HTTP API</h1>
<div id="desc"></div>
<div>Source: <a href="/openapi.json"><code>/openapi.json</code></a></div>
<input id="filter" placeholder="filter: path, method or words of the summary">
<div id="ops">loading /openapi.json ...</div>
<script>
"use strict";
const el = (tag, attrs, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const k of kids) e.append(k);
  return e;
};
function resolve(doc, schema, depth) {
  if (!schema || depth > 6) return schema;
  if (schema.$ref) {
    const name = schema.$ref.split("/").pop();
    return resolve(doc, (doc.components.schemas || {})[name] || {}, depth + 1);
  }
  if (Array.isArray(schema)) return schema.map(s => resolve(doc, s, depth + 1));
  if (typeof schema !== "object") return schema;
  const out = {};
  for (const [k, v] of Object.entries(schema)) out[k] = resolve(doc, v, depth + 1);
  return out;
}
function content(doc, title, c) {
  const box = el("div", {}, el("strong", {}, title));
  for (const [type, media] of Object.entries(c || {})) {
    box.append(el("div", {}, el("code", {}, type)));
    if (media.schema) {
      box.append(el("pre", {}, JSON.stringify(resolve(doc, media.schema, 0), null, 2)));
    }
  }
  return box;
}
function operation(doc, path, method, op) {
  const body = el("div", {class: "body"});
  const params = op.parameters || [];
  if (params.length) {
    const t = el("table", {}, el("tr", {}, el("th", {}, "parameter"), el("th", {}, "in"),
      el("th", {}, "type"), el("th", {}, "required")));
    for (const p of params) {
      t.append(el("tr", {}, el("td", {}, el("code", {}, p.name)), el("td", {}, p.in),
        el("td", {}, (p.schema || {}).type || ""), el("td", {}, p.required ? "yes" : "")));
    }
    body.append(t);
  }
  if (op.requestBody) body.append(content(doc, "Request body", op.requestBody.content));
  for (const [status, r] of Object.entries(op.responses || {})) {
    body.append(content(doc, status + ": " + (r.description || ""), r.content));
  }
  const d = el("details", {"data-text": (method + " " + path + " " + (op.summary || "")).toLowerCase()},
    el("summary", {}, el("span", {class: "m " + method}, method.toUpperCase()), path,
      el("span", {class: "s"}, op.summary || "")), body);
  return d;
}
fetch("/openapi.json").then(r => r.json()).then(doc => {
  document.getElementById("title").textContent = doc.info.title + " (OpenAPI " + doc.openapi + ")";
  document.getElementById("desc").textContent = doc.info.description || "";
  const ops = document.getElementById("ops");
  ops.textContent = "";
  for (const path of Object.keys(doc.paths).sort()) {
    for (const [method, op] of Object.entries(doc.paths[path])) {
      ops.append(operation(doc, path, method, op));
    }
  }
  const filter = document.getElementById("filter");
  filter.addEventListener("input", () => {
    const words = filter.value.toLowerCase().split(/\\s+/).filter(Boolean);
    for (const d of ops.children) {
      d.hidden = !words.every(w => d.dataset.text.includes(w));
    }
  });
}).catch(e => { document.getElementById("ops").textContent = "cannot load /openapi.json: " + e; });
</script>
</body>
</html>
"""


async def openapi_page(request: web.Request) -> web.Response:
    return web.Response(text=PAGE, content_type="text/html", charset="utf-8")
