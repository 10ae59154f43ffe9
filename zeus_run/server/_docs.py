"""The API's documentation: the bearer scheme in the OpenAPI document, and a ``/docs`` page served from the package.

The page is one self-contained HTML file (no CDN, no external script): it asks
for the token, fetches ``/v1/openapi.json`` with it and lists every route with
its parameters, body and answers. The token stays in the page.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse

from zeus_run.remote import HEALTH_PATH, OPENAPI_PATH

DOCS_PATH = "/docs"
BEARER = "bearer"


def install(app: FastAPI) -> None:
    """Declare the bearer scheme in ``app``'s OpenAPI document and serve the ``/docs`` page."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            schema.setdefault("components", {})["securitySchemes"] = {
                BEARER: {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "The job's own token (it acts on that job only), or the operator's (--token-file, or "
                    "ROOT/.serve.token): ZEUS_SERVER_TOKEN.",
                }
            }
            schema["security"] = [{BEARER: []}]
            health = schema.get("paths", {}).get(HEALTH_PATH, {}).get("get")
            if health is not None:
                health["security"] = []
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    @app.get(DOCS_PATH, include_in_schema=False)
    def docs() -> HTMLResponse:
        return HTMLResponse(PAGE.replace("__OPENAPI__", OPENAPI_PATH))


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>zeus-run server API</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:15px/1.45 system-ui,sans-serif;margin:2em auto;max-width:60em;padding:0 1em;color:#222}
code,pre{font:13px ui-monospace,monospace;background:#f4f4f4;padding:.1em .3em}
pre{padding:.6em;overflow:auto}
.op{border:1px solid #ddd;border-radius:6px;margin:1em 0;padding:.6em 1em}
.m{font-weight:bold;display:inline-block;min-width:4.5em}
.err{color:#a00}
details summary{cursor:pointer}
</style></head><body>
<h1>zeus-run server API</h1>
<p>Every path but <code>/v1/health</code> needs <code>Authorization: Bearer TOKEN</code>.
The schema is at <code>__OPENAPI__</code>.</p>
<form id="f"><label>Token <input id="t" type="password" size="40" autocomplete="off"></label>
<button>Show the API</button></form>
<div id="out"></div>
<script>
"use strict";
const out = document.getElementById("out");
function el(tag, text, cls) { const e = document.createElement(tag); if (text) e.textContent = text;
  if (cls) e.className = cls; return e; }
function resolve(schema, doc) {
  if (schema && schema["$ref"]) { const name = schema["$ref"].split("/").pop();
    return [name, doc.components.schemas[name]]; }
  return ["", schema];
}
function show(doc) {
  out.replaceChildren();
  out.append(el("p", doc.info.title + " " + doc.info.version + ": " + (doc.info.description || "")));
  for (const [path, ops] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(ops)) {
      const box = el("div", "", "op");
      const head = el("div"); head.append(el("span", method.toUpperCase(), "m"), el("code", path));
      box.append(head, el("p", op.summary || ""));
      if (op.description) box.append(el("p", op.description));
      for (const p of op.parameters || []) box.append(el("div", p.in + " " + p.name + (p.required ? " (required)" : "")
        + ": " + (p.description || "")));
      const body = op.requestBody && op.requestBody.content["application/json"];
      if (body) { const [name, s] = resolve(body.schema, doc); const d = el("details");
        d.append(el("summary", "body " + name), el("pre", JSON.stringify(s, null, 1))); box.append(d); }
      for (const [code, r] of Object.entries(op.responses || {})) {
        const c = r.content && r.content["application/json"]; const d = el("details");
        const [name, s] = c ? resolve(c.schema, doc) : ["", null];
        d.append(el("summary", code + " " + (r.description || "") + (name ? " (" + name + ")" : "")));
        if (s) d.append(el("pre", JSON.stringify(s, null, 1)));
        box.append(d);
      }
      out.append(box);
    }
  }
}
document.getElementById("f").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const r = await fetch("__OPENAPI__", {headers: {Authorization: "Bearer " + document.getElementById("t").value}});
  if (!r.ok) { out.replaceChildren(el("p", "HTTP " + r.status + ": " + (await r.text()), "err")); return; }
  show(await r.json());
});
</script></body></html>
"""
