// A run's page: header, banners (corruption, torn tail, paused), a timeline with one lane per agent,
// the records of the current window, and a panel with the record clicked, whole. Live runs grow in place.
import { h, api, runUrl, apiRun, shortId, time, duration, badge, pretty, nav, fail } from "/static/common.js";

const WINDOW = 300; // records drawn at once; the overview above shows them all
const CELL = 30; // px per timeline column
const GLYPH = { H: "◆", P: "P", A: "A", V: "V", C: "C", K: "✓", D: "■", F: "✕", Z: "‖", R: "↻", X: "⇄",
  E: "!", r: "⟲", c: "✎", s: "⊡", e: "•", n: "■", S: "↱", J: "↲", Q: "⇥", M: "→", G: "←", T: "▣", a: "↩", o: "?" };
const NAMES = { H: "header", P: "PLAN", A: "ACT", V: "VERIFY", C: "CHECKPOINT", K: "checkpoint", D: "DONE",
  F: "FAILED / failure", Z: "PAUSED", R: "retry", X: "crossing", E: "error", r: "resume", c: "reconcile",
  s: "seal", e: "event", n: "end", S: "spawn", J: "join", Q: "exit", M: "send", G: "receive", T: "artifact",
  a: "answer", o: "other" };
const SVG = "http://www.w3.org/2000/svg";
const COLOR = {};
const PRIORITY = { F: 5, E: 5, R: 4, Z: 3, r: 3, c: 3, a: 3, D: 2, n: 2 }; // what a crowded overview still shows

const app = document.getElementById("app");
const id = decodeURIComponent(location.pathname.slice("/runs/".length));
const params = new URLSearchParams(location.search);
const st = {
  summary: null, config: null, codes: "", laneCodes: "", lanes: [], total: 0, start: 0, window: [],
  follow: false, selected: null, source: null, live: false, end: 0, redraw: false, verified: null,
};

const head = h("section", { class: "run-head" });
const banners = h("div", { class: "banners" });
const overview = h("canvas", { class: "overview", height: 40, title: "the whole run: click to move the window" });
const lanesBox = h("div", { class: "lanes" });
const pager = h("div", { class: "pager" });
const table = h("tbody");
const detail = h("aside", { class: "detail", hidden: true });
const legend = h("div", { class: "legend" });

app.replaceChildren(nav(""), h("main", { class: "run" },
  head, banners,
  h("section", { class: "card timeline" },
    h("div", { class: "card-title" }, h("h2", {}, "Timeline"), legend),
    overview, lanesBox, pager),
  h("section", { class: "card" },
    h("table", { class: "records" },
      h("thead", {}, h("tr", {}, ["Seq", "Line", "Agent", "Record", "Step", "Att.", "Role", "What"].map((t) => h("th", {}, t)))),
      table))),
  detail);

function colorOf(cls) {
  if (!COLOR[cls]) COLOR[cls] = getComputedStyle(document.body).getPropertyValue(`--c-${cls}`).trim() || "#94a3b8";
  return COLOR[cls];
}

function drawLegend() {
  const used = new Set(st.codes);
  const items = Object.keys(NAMES).filter((c) => used.has(c)).map((c) =>
    h("span", { class: "key" }, h("span", { class: `chip-mini cls-${c}` }, GLYPH[c]), NAMES[c]));
  if (st.summary && (st.summary.branch != null || st.summary.parent != null)) {
    for (const r of ["served", "answered", "live"]) items.push(h("span", { class: "key" }, h("span", { class: `chip-mini role-${r}` }, ""), r));
  }
  if (used.has("S") || used.has("J")) items.push(h("span", { class: "key" }, h("span", { class: "arrow-key life" }, ""), "spawn / join"));
  if (used.has("G")) items.push(h("span", { class: "key" }, h("span", { class: "arrow-key message" }, ""), "message"));
  legend.replaceChildren(...items);
}

function drawHead() {
  const s = st.summary, hd = s.header || {};
  const end = s.last_ts ?? s.started;
  const meta = [
    ["run id", hd.run_id ?? "—"], ["started", time(s.started)],
    ["duration", s.started != null && end != null ? duration(end - s.started) : "—"],
    ["records", String(st.total)], ["lanes", st.lanes.join(", ") || "main"],
    ["entrypoint", (hd.env && hd.env.entrypoint) || "—"],
  ];
  const parent = s.parent
    ? h("div", { class: "parent" }, "fork of ",
        s.parent_id ? h("a", { href: runUrl(s.parent_id) }, shortId(s.parent)) : h("code", {}, s.parent),
        s.branch != null ? ` at seq ${s.branch}` : " (rerun)",
        s.parent_id ? h("a", { class: "button small", href: `/diff?a=${encodeURIComponent(s.parent_id)}&b=${encodeURIComponent(id)}` }, "Diff with parent") : "")
    : "";
  head.replaceChildren(
    h("div", { class: "titlebar" }, h("h1", {}, "Run ", h("span", { class: "mono" }, id)), badge(s.status),
      s.state ? h("span", { class: "state" }, "state ", h("strong", {}, s.state)) : "",
      sealBadge(s),
      st.live ? h("span", { class: "live-dot", title: "following the file as it is written" }, "live") : ""),
    h("div", { class: "goal" }, h("span", { class: "label" }, "goal"), h("code", {}, hd.goal === undefined ? "—" : typeof hd.goal === "string" ? hd.goal : JSON.stringify(hd.goal))),
    h("dl", { class: "meta" }, meta.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    h("div", { class: "file" }, h("span", { class: "label" }, "file"), h("code", {}, s.path)),
    parent);
}

// sealed: replay() checked the seal's content hash of every byte and the blobs' sizes; `harness verify` (asked for
// after the page is drawn) also reads every blob and checks a keyed seal's HMAC: "intact" once it says so
function sealBadge(s) {
  if (!s.seal) return s.unsealed ? h("span", { class: "seal unsealed", id: "seal", title: `ended without a seal: ${s.seal_command}` }, "not sealed") : "";
  const v = st.verified;
  const how = s.seal.keyed ? "keyed seal (HMAC-SHA256)" : "seal (content hash)";
  if (!v) return h("span", { class: "seal", id: "seal", title: `${how}; checking every blob…` }, "⊡ sealed");
  const ok = v.ok;
  return h("span", { class: `seal ${ok ? "intact" : "broken"}`, id: "seal", "data-intact": ok ? "1" : "0",
    title: v.report.join("\n") }, ok ? "⊡ sealed · intact" : "⊡ sealed · not intact");
}

function drawBanners(extra) {
  const s = st.summary, out = [];
  if (s.error) {
    const e = s.error;
    out.push(h("div", { class: "banner error", id: "corruption" },
      h("strong", {}, e.reason === "unreadable" ? "Unreadable trace" : "TraceCorruption"),
      e.line != null ? ` at line ${e.line}` : "", e.seq != null ? ` (seq ${e.seq})` : "", e.reason !== "unreadable" ? `: ${e.reason}` : "",
      h("div", { class: "detail-text" }, e.detail),
      h("div", { class: "hint" }, e.line != null ? `The ${Math.max(0, e.line - 1)} records before it are shown below; nothing after it is.` : "")));
  }
  if (s.broken) {
    out.push(h("div", { class: "banner error" }, h("strong", {}, "Unreadable line "), `${s.broken.line}: ${s.broken.detail}`));
  }
  if (s.torn > 0 && s.status !== "running") {
    out.push(h("div", { class: "banner warn", id: "torn" }, h("strong", {}, "Torn tail: "),
      `${s.torn} bytes after the last complete line, an unfinished record from a writer that stopped mid-line. `,
      "It is not part of the run; resuming sets it aside in a .torn-N file."));
  }
  if (s.status === "interrupted" && !s.error && !s.broken) {
    out.push(h("div", { class: "banner info", id: "interrupted" }, h("strong", {}, "Interrupted: "),
      `the writer stopped in ${s.state} without finishing the run (a crash or a kill). `,
      s.detail ? `Its last word: ${s.detail}. ` : "",
      s.resume ? "Resume it to finish it in this file:" : "Run it again with resume=True to finish it in this file.",
      s.resume ? h("pre", { class: "command" }, s.resume) : null));
  }
  if (s.pending && s.resume) {
    const p = s.pending;
    out.push(h("div", { class: "banner paused", id: "paused" },
      h("strong", {}, "PAUSED: "), `step ${p.step} waited at seq `,
      h("a", { href: "#", onclick: (ev) => { ev.preventDefault(); openLine(p.seq); } }, String(p.seq)),
      "question" in p ? " for an answer, and it was answered. " : " for an operator's word on an uncertain operation, and it was reconciled. ",
      "Resume the run to go on:",
      h("pre", { class: "command" }, s.resume)));
  } else if (s.pending && "budget" in s.pending) {
    const p = s.pending, b = p.budget, what = b.exceeded;
    out.push(h("div", { class: "banner paused", id: "paused" },
      h("strong", {}, "PAUSED on its budget: "), `step ${p.step} in ${p.state} at seq `,
      h("a", { href: "#", onclick: (ev) => { ev.preventDefault(); openLine(p.seq); } }, String(p.seq)),
      ` would have made a live ${b.call.boundary} call past its ${what} limit (${b.spent[what]} spent, the call `,
      `${b.call[what]} more, limit ${b.limit[what]}); it was not made. Resume it with a larger budget to go on:`,
      h("pre", { class: "command" }, s.resume)));
  } else if (s.pending && "question" in s.pending) {
    const p = s.pending;
    out.push(h("div", { class: "banner paused", id: "paused" },
      h("strong", {}, "PAUSED: "), `step ${p.step} asked a question in ${p.state} at seq `,
      h("a", { href: "#", onclick: (ev) => { ev.preventDefault(); openLine(p.seq); } }, String(p.seq)),
      " (harness.interrupt) and waits for an answer:",
      h("pre", { class: "command" }, JSON.stringify(p.question)),
      "Answer it, and the run goes on from there:",
      h("pre", { class: "command" }, s.answer)));
  } else if (s.pending) {
    const p = s.pending;
    out.push(h("div", { class: "banner paused", id: "paused" },
      h("strong", {}, "PAUSED: "), `step ${p.step} called the unsafe tool `, h("code", {}, p.tool), " at seq ",
      h("a", { href: "#", onclick: (ev) => { ev.preventDefault(); openLine(p.seq); } }, String(p.seq)),
      " and the run died before its outcome was recorded. Did it take effect? Tell harness, then resume the run:",
      h("div", { class: "args" }, h("span", { class: "label" }, "args"), h("code", {}, JSON.stringify(p.args))),
      h("pre", { class: "command" }, s.reconcile.happened),
      h("pre", { class: "command" }, s.reconcile.not_happened)));
  }
  if (st.verified && !st.verified.ok) {
    out.push(h("div", { class: "banner error", id: "verify" }, h("strong", {}, "harness verify: not intact"),
      h("pre", { class: "report" }, st.verified.report.join("\n"))));
  }
  if (s.unsealed) {
    out.push(h("div", { class: "banner info", id: "unsealed" }, h("strong", {}, "Not sealed: "),
      "the run ended without a seal (written before seals, migrated, or its writer died writing it). Seal it to make it tamper-evident:",
      h("pre", { class: "command" }, s.seal_command)));
  }
  if (s.annotations) {
    const a = s.annotations;
    out.push(h("details", { class: "banner info annotations", id: "annotations", open: true },
      h("summary", {}, h("strong", {}, `Annotations (${a.notes ? a.notes.length : "unreadable"}) `), h("code", {}, a.file),
        h("span", { class: "hint" }, " · outside the seal")),
      a.error ? h("div", { class: "detail-text" }, a.error)
        : h("table", { class: "notes" }, h("tbody", {}, a.notes.map((n) => h("tr", { class: "note" },
          h("td", { class: "key" }, n.key), h("td", {}, h("pre", {}, typeof n.value === "string" ? n.value : pretty(n.value))),
          h("td", { class: "at dim" }, n.at ?? "")))))));
  }
  if (s.cost && s.cost.models.length) { // `harness cost`: model calls and tokens by model, live apart from served
    const cols = ["calls", "input", "cached", "output"];
    const calls = (how) => s.cost.models.filter((m) => m.how === how).reduce((n, m) => n + m.calls, 0);
    out.push(h("details", { class: "banner info ledger", id: "ledger", open: true },
      h("summary", {}, h("strong", {}, `Model calls: ${calls("live")} live, ${calls("served")} served`),
        h("span", { class: "hint" }, " · served: taken from the parent's recording, not billed again (harness cost)")),
      h("table", { class: "notes" }, h("thead", {}, h("tr", {}, ["model", "", ...cols].map((c) => h("th", {}, c)))),
        h("tbody", {}, s.cost.models.map((m) => h("tr", { class: `row-${m.how}` }, h("td", { class: "key" }, m.model),
          h("td", { class: "dim" }, m.how), ...cols.map((c) => h("td", {}, String(m[c])))))))));
  }
  if (extra) out.push(extra);
  banners.replaceChildren(...out);
}

function drawOverview() {
  const n = st.codes.length, lanes = Math.max(1, st.lanes.length);
  const ratio = window.devicePixelRatio || 1;
  const w = Math.max(100, overview.clientWidth), laneH = lanes > 1 ? 14 : 26;
  overview.style.height = `${lanes * laneH + 6}px`;
  overview.width = Math.floor(w * ratio);
  overview.height = Math.floor((lanes * laneH + 6) * ratio);
  const ctx = overview.getContext("2d");
  ctx.scale(ratio, ratio);
  ctx.clearRect(0, 0, w, lanes * laneH + 6);
  if (!n) return;
  const best = new Array(lanes * w).fill(null);
  for (let i = 0; i < n; i++) {
    const x = Math.floor((i * w) / n), lane = st.laneCodes ? st.laneCodes.charCodeAt(i) - 48 : 0;
    const k = lane * w + x, c = st.codes[i], prev = best[k];
    if (prev === null || (PRIORITY[c] || 0) > (PRIORITY[prev] || 0)) best[k] = c;
  }
  const barW = Math.max(1, w / n);
  const crowded = n > w * 2; // many records per pixel: a quiet background, and only what stands out in colour
  for (const pass of crowded ? [false, true] : [null]) { // crowded: the background first, the marks over it
    for (let k = 0; k < best.length; k++) {
      if (best[k] === null) continue;
      const notable = (PRIORITY[best[k]] || 0) > 0;
      if (pass !== null && notable !== pass) continue;
      const lane = Math.floor(k / w), x = k % w;
      ctx.fillStyle = pass === false ? "#cbd5e1" : colorOf(best[k]);
      ctx.fillRect(x, 3 + lane * laneH + 1, pass ? 2 : Math.ceil(barW), laneH - 2);
    }
  }
  ctx.strokeStyle = "#0f172a";
  ctx.lineWidth = 1.5;
  const x0 = (st.start * w) / n, x1 = ((st.start + st.window.length) * w) / n;
  ctx.strokeRect(x0 + 0.75, 1, Math.max(3, x1 - x0 - 1.5), lanes * laneH + 4);
}

function chip(b) {
  const cls = `chip cls-${b.cls}` + (b.role ? ` role-${b.role}` : "") + (st.selected === b.line ? " selected" : "") + (b.failed ? " failed" : "");
  const title = `seq ${b.seq} · ${b.label}` + (b.step != null ? ` · step ${b.step}` : "") + (b.attempt != null ? ` · attempt ${b.attempt}` : "") + (b.role ? ` · ${b.role}` : "") + (b.note ? `\n${b.note}` : "");
  return h("button", { class: cls, title, "data-line": b.line, style: { left: `${(b.col - st.col0) * CELL + 4}px` }, onclick: () => openLine(b.line) }, GLYPH[b.cls] || "?");
}

function drawWindow() {
  const rows = st.window;
  st.col0 = rows.length ? Math.min(...rows.map((b) => b.col)) : 0;
  const width = rows.length ? (Math.max(...rows.map((b) => b.col)) - st.col0 + 2) * CELL + 8 : 0;
  const lanes = st.lanes.length ? st.lanes : ["main"];
  const byLane = lanes.map(() => []);
  for (const b of rows) (byLane[b.lane] || (byLane[b.lane] = [])).push(chip(b));
  const s = st.summary;
  if (s && s.torn > 0 && s.status !== "running" && rows.length && st.start + rows.length === st.total) {
    const last = rows[rows.length - 1];
    (byLane[last.lane] || (byLane[last.lane] = [])).push(h("span", { class: "chip torn", title: `torn tail: ${s.torn} bytes of an unfinished record, not part of the run`,
      style: { left: `${(last.col + 1 - st.col0) * CELL + 4}px` } }, "…"));
  }
  const laneRows = h("div", { class: "lane-rows", style: { width: `${width}px` } },
    lanes.map((name, i) => h("div", { class: "lane", "data-agent": name }, byLane[i] || [])));
  lanesBox.replaceChildren(
    h("div", { class: "lane-names" }, lanes.map((name) => h("div", { class: "lane-name", title: name }, name))),
    h("div", { class: "lane-scroll" }, laneRows));
  drawLinks(laneRows, rows);
  const from = rows.length ? st.start + 1 : 0, to = st.start + rows.length;
  pager.replaceChildren(
    h("button", { onclick: () => load(0), disabled: st.start === 0 }, "« first"),
    h("button", { onclick: () => load(Math.max(0, st.start - WINDOW)), disabled: st.start === 0 }, "◀ earlier"),
    h("span", { class: "range" }, `records ${from}–${to} of ${st.total}`),
    h("button", { onclick: () => load(st.start + WINDOW), disabled: to >= st.total }, "later ▶"),
    h("button", { onclick: () => load(Math.max(0, st.total - WINDOW)), disabled: to >= st.total }, "last »"),
    h("label", { class: "follow" }, h("input", { type: "checkbox", checked: st.follow, onchange: (e) => { st.follow = e.target.checked; if (st.follow) load(Math.max(0, st.total - WINDOW)); } }), " follow the end"));
  table.replaceChildren(...rows.map((b) => h("tr", { class: `rec${st.selected === b.line ? " selected" : ""}${b.failed || b.cls === "F" ? " failed" : ""}${b.cls === "R" ? " retry" : ""}`, "data-line": b.line, onclick: () => openLine(b.line) },
    h("td", { class: "num" }, b.seq ?? "—"), h("td", { class: "num dim" }, b.line), h("td", {}, b.agent),
    h("td", { class: "what" }, h("span", { class: `chip-mini cls-${b.cls}` }, GLYPH[b.cls] || "?"), " ", b.label),
    h("td", { class: "num" }, b.step ?? ""), h("td", { class: "num" }, b.attempt ?? ""),
    h("td", {}, b.role ? h("span", { class: `role-tag role-${b.role}` }, b.role) : ""),
    h("td", { class: "note" }, b.note))));
  if (st.follow) { const sc = lanesBox.querySelector(".lane-scroll"); if (sc) sc.scrollLeft = sc.scrollWidth; }
}

// the arrows between agents in the window: spawn -> the child's first record, the child's exit -> its join,
// a send -> its receive (found by the sender and its own clock count at the send)
function links(rows) {
  const out = [];
  const byOwn = new Map(rows.filter((b) => b.own != null).map((b) => [`${b.agent}#${b.own}`, b]));
  rows.forEach((b, i) => {
    const l = b.link;
    if (!l) return;
    if (l.spawn !== undefined) {
      const first = rows.slice(i + 1).find((c) => c.agent === l.spawn);
      if (first) out.push({ from: b, to: first, kind: "life" });
    } else if (l.join !== undefined) {
      const last = rows.slice(0, i).reverse().find((c) => c.agent === l.join);
      if (last) out.push({ from: last, to: b, kind: "life" });
    } else if (l.receive !== undefined) {
      const send = byOwn.get(`${l.receive}#${l.sent}`);
      if (send) out.push({ from: send, to: b, kind: "message" });
    }
  });
  return out;
}

function drawLinks(laneRows, rows) {
  const found = links(rows);
  if (!found.length) return;
  const chips = new Map([...laneRows.querySelectorAll(".chip[data-line]")].map((c) => [Number(c.dataset.line), c]));
  const centre = (b) => {
    const c = chips.get(b.line);
    return c && { x: c.offsetLeft + c.offsetWidth / 2, y: c.parentElement.offsetTop + c.offsetTop + c.offsetHeight / 2 };
  };
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("class", "links");
  svg.setAttribute("width", laneRows.scrollWidth);
  svg.setAttribute("height", laneRows.scrollHeight);
  const defs = document.createElementNS(SVG, "defs");
  for (const kind of ["life", "message"]) {
    const marker = document.createElementNS(SVG, "marker");
    for (const [k, v] of Object.entries({ id: `head-${kind}`, viewBox: "0 0 8 8", refX: "7", refY: "4", markerWidth: "7", markerHeight: "7", orient: "auto" })) marker.setAttribute(k, v);
    const tip = document.createElementNS(SVG, "path");
    tip.setAttribute("d", "M0,0 L8,4 L0,8 z");
    tip.setAttribute("class", `tip ${kind}`);
    marker.append(tip);
    defs.append(marker);
  }
  svg.append(defs);
  for (const { from, to, kind } of found) {
    const a = centre(from), b = centre(to);
    if (!a || !b) continue;
    const path = document.createElementNS(SVG, "path");
    const down = b.y > a.y ? 1 : -1, r = 13; // leave and enter each chip at its edge
    const ax = a.x + (a.y === b.y ? r : 0), ay = a.y + (a.y === b.y ? 0 : down * r);
    const bx = b.x - (a.y === b.y ? r : 4), by = b.y - (a.y === b.y ? 0 : down * r);
    path.setAttribute("d", `M${ax},${ay} C${ax},${(ay + by) / 2} ${bx},${(ay + by) / 2} ${bx},${by}`);
    path.setAttribute("class", `link ${kind}`);
    path.setAttribute("marker-end", `url(#head-${kind})`);
    path.setAttribute("data-from", from.line);
    path.setAttribute("data-to", to.line);
    svg.append(path);
  }
  laneRows.append(svg);
}

function drawAll() {
  drawHead(); drawLegend(); drawOverview(); drawWindow();
}

async function load(start) {
  const body = await api(apiRun(id, `/records?start=${start}&count=${WINDOW}`));
  st.start = body.start;
  st.window = body.records;
  drawOverview();
  drawWindow();
}

overview.addEventListener("click", (ev) => {
  const rect = overview.getBoundingClientRect();
  const at = Math.floor(((ev.clientX - rect.left) / rect.width) * st.total);
  st.follow = false;
  load(Math.max(0, Math.min(st.total - WINDOW, at - WINDOW / 2)));
});

function field(name, value, cls) {
  return h("section", { class: `field ${cls || ""}` }, h("h3", {}, name), h("pre", {}, typeof value === "string" ? value : pretty(value)));
}

// a payload stored in blobs/<sha256>: read back by the server (size and sha256 checked), or why it was not
function blobField(name, value, ref) {
  const where = h("div", { class: "blob-ref" }, "stored in blob ", h("code", {}, `${String(ref.sha256).slice(0, 16)}…`), ` · ${ref.size} bytes`,
    ref.error ? "" : " · sha256 checked");
  if (ref.error) return h("section", { class: "field error blob" }, h("h3", {}, name), where, h("pre", {}, ref.error));
  return h("section", { class: "field blob" }, h("h3", {}, name), where, h("pre", {}, typeof value === "string" ? value : pretty(value)));
}

// a model call's answer, streamed or not, as the server assembled it (harness.trace.stream.reply): its text, the
// tools it called and why it stopped, above the raw request and response
function replyField(rep) {
  const m = rep.message || {};
  const calls = (m.tool_calls || []).map((c) => h("div", { class: "call" }, `→ ${c.name} ${c.arguments}`));
  return h("section", { class: "field reply", id: "reply" }, h("h3", {}, "model reply"),
    typeof m.content === "string" ? h("pre", {}, m.content) : "",
    typeof m.refusal === "string" ? h("pre", {}, `refused: ${m.refusal}`) : "",
    calls, h("div", { class: "finish" }, `finish reason: ${rep.finish_reason ?? "—"}`));
}

// a record's ts counts seconds from the header's (docs/FORMAT.md): its wall clock, and how far into the run
function when(r) {
  const start = st.summary.started;
  if (r.ts == null) return null;
  if (r.kind === "header" || start == null) return time(r.ts);
  return `${time(start + r.ts)} (+${duration(r.ts)})`;
}

async function openLine(line) {
  st.selected = line;
  if (line <= st.start || line > st.start + st.window.length) {
    await load(Math.max(0, Math.min(Math.max(0, st.total - WINDOW), line - 1 - Math.floor(WINDOW / 2))));
  } else {
    drawWindow();
  }
  const body = await api(apiRun(id, `/record?line=${line}`));
  const r = body.inline, b = body.brief, stored = body.stored || {};
  const known = ["seq", "kind", "ts", "crc", "from", "to", "step", "attempt", "agent", "vc", "key", "reused", "mutated"];
  const meta = [["seq", r.seq], ["line", body.line], ["kind", r.kind], ["agent", body.lane], ["role", b.role],
    ["step", r.step], ["attempt", b.attempt], ["key", r.key], ["time", when(r)],
    ["bytes", body.bytes]].filter(([, v]) => v !== undefined && v !== null);
  const sections = [];
  if (body.reply) sections.push(replyField(body.reply));
  if (body.view) sections.push(field("behavior view (what goldens and diffs compare)", body.view, "view"));
  if (r.vc !== undefined) sections.push(field("vector clock", r.vc));
  for (const [k, v] of Object.entries(r)) {
    if (known.includes(k)) continue;
    const name = k === "response" || k === "result" ? (r.kind === "checkpoint" ? "checkpoint result" : k) : k;
    sections.push(stored[k] ? blobField(name, v, stored[k]) : field(name, v, k === "error" ? "error" : ""));
  }
  for (const [k, ref] of Object.entries(stored)) if (ref.error) sections.push(blobField(k, undefined, ref));
  const forkBox = [];
  if (st.config && st.config.fork && body.forkable) {
    const editor = h("textarea", { class: "json", id: "fork-value", spellcheck: "false", rows: 6 });
    editor.value = pretty(body.forkable.value);
    const msg = h("div", { class: "fork-msg" });
    forkBox.push(h("section", { class: "fork" }, h("h3", {}, `Fork here: replace ${body.forkable.what} at seq ${body.forkable.at}`),
      editor,
      h("button", { class: "primary", id: "fork-button", onclick: async () => {
        let value;
        try { value = JSON.parse(editor.value); } catch (e) { msg.textContent = `Not JSON: ${e.message}`; return; }
        msg.textContent = "Forking…";
        try {
          const res = await api(apiRun(id, "/fork"), { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ at: body.forkable.at, value }) });
          location.href = res.url;
        } catch (e) { msg.textContent = e.message; }
      } }, "Fork here"), msg));
  }
  detail.hidden = false;
  detail.replaceChildren(
    h("div", { class: "detail-head" }, h("span", { class: `chip-mini cls-${b.cls}` }, GLYPH[b.cls] || "?"),
      h("h2", {}, b.label), h("button", { class: "close", title: "close", onclick: () => { detail.hidden = true; st.selected = null; drawWindow(); } }, "×")),
    h("dl", { class: "meta" }, meta.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, String(v))])),
    ...sections, ...forkBox,
    h("details", {}, h("summary", {}, "The whole record"), h("pre", { class: "whole" }, pretty(body.record))));
  document.body.classList.add("with-detail");
}

function follow() {
  const s = st.summary;
  if (s.error || s.broken) return;
  st.live = true;
  const es = new EventSource(apiRun(id, `/events?from=${s.end}`));
  st.source = es;
  es.addEventListener("record", (ev) => {
    const m = JSON.parse(ev.data), b = m.brief;
    if (m.line <= st.codes.length) return; // never twice (the stream starts where the summary ended)
    if (!st.lanes[b.lane]) { st.lanes[b.lane] = b.agent; st.laneCodes = st.laneCodes || "0".repeat(st.codes.length); }
    st.codes += b.cls;
    if (st.lanes.length > 1) st.laneCodes += String.fromCharCode(48 + b.lane);
    st.total = Math.max(st.total, m.line);
    if (m.record.ts != null && st.summary.started != null) st.summary.last_ts = st.summary.started + m.record.ts;
    const shown = st.start + st.window.length; // the window, loaded after the summary, may hold it already
    if (m.line > shown && (st.follow || shown === m.line - 1)) {
      st.window.push(b);
      if (st.window.length > WINDOW) { st.window.shift(); st.start += 1; }
    }
    schedule();
  });
  es.addEventListener("end", async () => {
    es.close();
    st.live = false;
    await refreshSummary();
  });
  es.addEventListener("corrupt", async () => { es.close(); st.live = false; await refreshSummary(); });
  // the file was replaced or rewritten under the stream: what is shown is another run's; load it again
  es.addEventListener("reset", () => { es.close(); st.live = false; location.reload(); });
}

function schedule() {
  if (st.redraw) return;
  st.redraw = true;
  requestAnimationFrame(() => { st.redraw = false; drawAll(); });
}

async function refreshSummary() {
  st.summary = await api(apiRun(id));
  st.lanes = st.summary.lanes; st.codes = st.summary.codes; st.laneCodes = st.summary.lane_codes; st.total = st.summary.records;
  drawBanners(jobBanner);
  drawAll();
  document.body.dataset.status = st.summary.status;
}

async function checkSeal() {
  try { st.verified = await api(apiRun(id, "/verify")); } catch (e) { st.verified = { ok: false, report: [e.message], problems: [e.message] }; }
  if (st.summary) { drawHead(); drawBanners(jobBanner); }
}

let jobBanner = null;
async function waitForJob(job) {
  for (;;) {
    const j = await api(`/api/jobs/${encodeURIComponent(job)}`);
    const text = j.state === "running" ? `Fork of ${j.parent} at seq ${j.at}: running…`
      : j.state === "done" ? `Fork of ${j.parent} at seq ${j.at}: done, state ${j.result.state}, ${j.result.live_calls} live calls after the branch.`
      : `Fork of ${j.parent} at seq ${j.at} failed: ${j.error}`;
    jobBanner = h("div", { class: `banner ${j.state === "failed" ? "error" : "info"}`, id: "job" }, text);
    if (st.summary) drawBanners(jobBanner); else banners.replaceChildren(jobBanner);
    if (j.state !== "running") return j;
    await new Promise((r) => setTimeout(r, 400));
  }
}

async function main() {
  try {
    const config = api("/api/config"); // asked for alongside the summary, not before it
    const job = params.get("job");
    let jobDone = null;
    if (job) jobDone = waitForJob(job);
    for (let tries = 0; ; tries++) {
      try { st.summary = await api(apiRun(id)); break; } catch (e) {
        if (!(job && e.status === 404 && tries < 100)) throw e;
        if (jobDone && (await Promise.race([jobDone, new Promise((r) => setTimeout(() => r(null), 300))]))?.state === "failed") throw e;
      }
    }
    // a run being created: its writer holds the file before the header is whole; wait for the header
    for (let tries = 0; st.summary.status === "running" && st.summary.error && tries < 100; tries++) {
      document.body.dataset.waiting = "header"; // a state a person (and a test) can see
      await new Promise((r) => setTimeout(r, 200));
      st.summary = await api(apiRun(id));
    }
    delete document.body.dataset.waiting;
    st.config = await config;
    const s = st.summary;
    if (s.seal) checkSeal();
    st.lanes = s.lanes; st.codes = s.codes; st.laneCodes = s.lane_codes; st.total = s.records;
    st.follow = s.status === "running";
    drawBanners(jobBanner);
    drawHead();
    await load(st.follow ? Math.max(0, st.total - WINDOW) : 0);
    drawLegend();
    document.body.dataset.status = s.status;
    document.body.dataset.loaded = "1";
    if (s.status === "running" || job) follow();
    const want = parseInt(params.get("line") || "", 10);
    if (want > 0) openLine(want);
  } catch (err) {
    fail(banners, err);
    document.body.dataset.loaded = "error";
  }
}

window.addEventListener("resize", () => drawOverview());
main();
