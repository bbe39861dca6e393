// The /docs page: reads /openapi.json (this server's own) and shows every
// operation, grouped by tag. Text only goes through textContent: nothing the
// document holds is ever parsed as HTML.
"use strict";

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

function resolve(doc, schema) {
  // Follow one local $ref ("#/components/schemas/X"), for display.
  if (schema && typeof schema.$ref === "string" && schema.$ref.startsWith("#/")) {
    let node = doc;
    for (const part of schema.$ref.slice(2).split("/")) node = node && node[part];
    return node || schema;
  }
  return schema;
}

function schemaBlock(doc, content) {
  const blocks = [];
  for (const [media, body] of Object.entries(content || {})) {
    const schema = resolve(doc, body.schema);
    blocks.push(el("p", {}, el("code", {}, media)));
    if (schema) blocks.push(el("pre", {}, JSON.stringify(schema, null, 2)));
  }
  return blocks;
}

function operation(doc, path, method, op) {
  const body = el("div", { class: "body" });
  if (op.description) body.append(el("p", {}, op.description));
  const params = (op.parameters || []).map((p) => resolve(doc, p));
  if (params.length) {
    const rows = params.map((p) =>
      el("tr", {}, el("td", {}, el("code", {}, p.name)), el("td", {}, p.in), el("td", {}, p.description || "")));
    body.append(el("h3", {}, "Parameters"), el("table", {}, ...rows));
  }
  const request = resolve(doc, op.requestBody);
  if (request) body.append(el("h3", {}, "Request body"), ...schemaBlock(doc, request.content));
  const responses = Object.entries(op.responses || {});
  if (responses.length) {
    body.append(el("h3", {}, "Responses"));
    for (const [status, raw] of responses) {
      const answer = resolve(doc, raw);
      body.append(el("p", {}, el("strong", {}, status), " ", answer.description || ""));
      body.append(...schemaBlock(doc, answer.content));
    }
  }
  const summary = el("summary", {},
    el("span", { class: "method " + method }, method),
    el("span", { class: "path" }, path),
    el("span", { class: "what" }, op.summary || ""));
  const item = el("details", { "data-path": path.toLowerCase() }, summary, body);
  return item;
}

function render(doc) {
  const info = doc.info || {};
  document.getElementById("title").textContent = `${info.title || "API"} ${info.version || ""}`;
  const summary = document.getElementById("summary");
  summary.textContent = info.description || "";
  summary.append(" ", el("a", { href: "openapi.json" }, "openapi.json"));
  const groups = new Map();
  for (const [path, item] of Object.entries(doc.paths || {})) {
    for (const [method, op] of Object.entries(item)) {
      if (!["get", "post", "put", "patch", "delete", "head", "options"].includes(method)) continue;
      const tag = (op.tags && op.tags[0]) || "Other";
      if (!groups.has(tag)) groups.set(tag, []);
      groups.get(tag).push(operation(doc, path, method, op));
    }
  }
  const main = document.getElementById("operations");
  for (const [tag, items] of groups) {
    main.append(el("section", {}, el("h2", {}, tag), ...items));
  }
  document.getElementById("filter").addEventListener("input", (event) => {
    const wanted = event.target.value.trim().toLowerCase();
    for (const item of main.querySelectorAll("details")) {
      item.hidden = wanted !== "" && !item.dataset.path.includes(wanted);
    }
  });
}

fetch("openapi.json")  // relative: under --root-path too
  .then((reply) => {
    if (!reply.ok) throw new Error(`/openapi.json answered ${reply.status}`);
    return reply.json();
  })
  .then(render)
  .catch((error) => {
    document.getElementById("summary").textContent = `Could not read /openapi.json: ${error.message}`;
  });
