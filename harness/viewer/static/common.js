// Shared by the three pages. Every value that comes from a trace reaches the page through
// h() as text (textContent) or as an attribute value: never as HTML.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "text") el.textContent = String(v);
    else if (k === "style") for (const [p, s] of Object.entries(v)) el.style.setProperty(p, s);
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export async function api(path, options) {
  const r = await fetch(path, options);
  let body = null;
  try { body = await r.json(); } catch { body = null; }
  if (!r.ok) {
    const err = new Error((body && body.message) || `${r.status} ${r.statusText}`);
    err.status = r.status;
    err.body = body;
    throw err;
  }
  return body;
}

// a run address is a path below the runs folder: encode each part, keep the slashes
export function runUrl(id) {
  return "/runs/" + id.split("/").map(encodeURIComponent).join("/");
}
export function apiRun(id, rest = "/summary") {
  return "/api/runs/" + id.split("/").map(encodeURIComponent).join("/") + rest;
}

export function shortId(id) {
  const base = String(id).split("/").pop();
  return base.length > 14 ? base.slice(0, 8) + "…" : base;
}

export function time(ts) {
  if (ts === null || ts === undefined) return "—";
  const d = typeof ts === "number" ? new Date(ts * 1000) : new Date(ts);
  const p = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

export function duration(seconds) {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) return "—";
  if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
  if (seconds < 60) return `${seconds.toFixed(seconds < 10 ? 2 : 1)} s`;
  const m = Math.floor(seconds / 60), s = Math.round(seconds % 60);
  if (m < 60) return `${m} min ${s} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

export function badge(status) {
  return h("span", { class: `badge status-${status}`, text: status });
}

export function pretty(value) {
  return JSON.stringify(value, null, 2);
}

export function nav(active) {
  const link = (href, text, key) => h("a", { href, class: key === active ? "active" : "" }, text);
  return h("header", { class: "top" },
    h("a", { class: "brand", href: "/" }, h("span", { class: "logo" }, "◆"), "harness"),
    h("nav", {}, link("/", "Runs", "runs"), link("/diff", "Diff", "diff")));
}

export function fail(where, err) {
  where.replaceChildren(h("div", { class: "banner error" }, h("strong", {}, "Could not load: "), err.message));
}
