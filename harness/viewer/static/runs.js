// The runs page: the runs folder as a table, newest first, filterable, refreshed by itself.
import { h, api, runUrl, shortId, time, duration, badge, nav, fail } from "/static/common.js";

const SHOWN = 500; // rows drawn at once; the filter narrows, "show more" adds
const app = document.getElementById("app");
const state = { runs: [], folder: "", etag: null, shown: SHOWN, picked: [], updated: null, took: 0 };

const filter = h("input", { type: "search", id: "filter", placeholder: "Filter: id, goal, status, entrypoint…", "aria-label": "filter" });
const statusSel = h("select", { id: "status", "aria-label": "status" },
  ["all", "running", "done", "failed", "paused", "interrupted", "unreadable"].map((s) => h("option", { value: s }, s)));
const counts = h("span", { class: "counts" });
const updated = h("span", { class: "updated" });
const diffBtn = h("button", { id: "diff-picked", disabled: true, onclick: () => {
  const [a, b] = state.picked;
  location.href = `/diff?a=${encodeURIComponent(a)}&b=${encodeURIComponent(b)}`;
} }, "Diff the two picked");
const tbody = h("tbody");
const more = h("div", { class: "more" });
const folder = h("code", { class: "folder" });

app.replaceChildren(
  nav("runs"),
  h("main", {},
    h("div", { class: "titlebar" }, h("h1", {}, "Runs"), folder),
    h("div", { class: "toolbar" }, filter, statusSel, diffBtn, counts, updated),
    h("table", { class: "runs" },
      h("thead", {}, h("tr", {},
        h("th", { class: "pick", title: "pick two runs to diff" }, "⇄"),
        ["Status", "Run", "Goal", "Steps", "Attempt", "Records", "Started", "Duration", "Parent"].map((t) => h("th", {}, t)))),
      tbody),
    more));

filter.addEventListener("input", () => { state.shown = SHOWN; draw(); });
statusSel.addEventListener("change", () => { state.shown = SHOWN; draw(); });

function matches(run, words, status) {
  if (status !== "all" && run.status !== status) return false;
  if (!words.length) return true;
  const hay = [run.id, run.run_id, run.goal, run.status, run.entrypoint, run.parent].join(" ").toLowerCase();
  return words.every((w) => hay.includes(w));
}

function row(run) {
  const end = run.last_ts ?? run.start_ts;
  const dur = run.start_ts != null && end != null ? end - run.start_ts : null;
  const pick = h("input", { type: "checkbox", "aria-label": `pick ${run.id}`, checked: state.picked.includes(run.id) });
  pick.addEventListener("change", () => {
    state.picked = state.picked.filter((x) => x !== run.id);
    if (pick.checked) state.picked.push(run.id);
    if (state.picked.length > 2) state.picked = state.picked.slice(-2);
    diffBtn.disabled = state.picked.length !== 2;
    draw();
  });
  const parent = run.parent
    ? h("span", {}, "fork of ",
        run.parent_id ? h("a", { href: runUrl(run.parent_id) }, shortId(run.parent)) : h("code", {}, shortId(run.parent)),
        run.branch != null ? ` @ seq ${run.branch}` : "")
    : "";
  return h("tr", { class: `run status-row-${run.status}`, "data-id": run.id },
    h("td", { class: "pick" }, pick),
    h("td", {}, badge(run.status), run.sealed ? h("span", { class: "sealed-mark", title: "sealed: its last record seals every byte and blob before it" }, " ⊡") : ""),
    h("td", { class: "id" }, h("a", { href: runUrl(run.id), title: run.run_id || run.id }, run.id)),
    h("td", { class: "goal", title: run.goal ?? "" }, run.goal ?? "—"),
    h("td", { class: "num" }, run.steps ?? "—"),
    h("td", { class: "num" }, run.attempt ?? "—"),
    h("td", { class: "num" }, run.records),
    h("td", { class: "time" }, time(run.start_ts ?? run.started)),
    h("td", { class: "num" }, duration(dur)),
    h("td", { class: "parent" }, parent));
}

function draw() {
  const words = filter.value.toLowerCase().split(/\s+/).filter(Boolean);
  const chosen = state.runs.filter((r) => matches(r, words, statusSel.value));
  const rows = chosen.slice(0, state.shown).map(row);
  if (!rows.length) {
    const text = state.runs.length ? "No run matches the filter." : "No runs in this folder yet: runs appear here as they start.";
    rows.push(h("tr", {}, h("td", { colspan: 10, class: "empty" }, text)));
  }
  tbody.replaceChildren(...rows);
  const by = {};
  for (const r of state.runs) by[r.status] = (by[r.status] || 0) + 1;
  counts.replaceChildren(`${chosen.length} of ${state.runs.length} runs`,
    ...Object.entries(by).map(([s, n]) => h("span", { class: `pill status-${s}` }, `${n} ${s}`)));
  more.replaceChildren(chosen.length > state.shown
    ? h("button", { onclick: () => { state.shown += SHOWN; draw(); } }, `Show ${Math.min(SHOWN, chosen.length - state.shown)} more of ${chosen.length - state.shown}`)
    : "");
}

async function refresh() {
  const t0 = performance.now();
  try {
    const r = await fetch("/api/runs", { headers: state.etag ? { "If-None-Match": state.etag } : {} });
    if (r.status === 200) {
      const body = await r.json();
      state.etag = r.headers.get("etag");
      state.runs = body.runs;
      folder.textContent = body.folder;
      draw();
    } else if (r.status !== 304) {
      throw new Error((await r.json()).message);
    }
    state.took = performance.now() - t0;
    updated.textContent = `updated ${time(Date.now() / 1000).slice(11)}`;
    document.body.dataset.loaded = "1";
  } catch (err) {
    updated.textContent = `not updated: ${err.message}`;
  }
  // refresh by itself; a folder that takes long to list is asked less often
  setTimeout(refresh, Math.max(1500, state.took * 4));
}

refresh();
