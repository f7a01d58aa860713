// The diff page: pick two runs (or open /diff?a=RUN&b=RUN); harness.diff() says what moved,
// the first divergence highlighted, every changed / inserted / removed record marked.
import { h, api, runUrl, shortId, nav, fail } from "/static/common.js";

const app = document.getElementById("app");
const params = new URLSearchParams(location.search);
const pickA = h("select", { id: "pick-a", "aria-label": "run a" });
const pickB = h("select", { id: "pick-b", "aria-label": "run b" });
const out = h("div", { class: "diff-out" });

app.replaceChildren(nav("diff"), h("main", {},
  h("div", { class: "titlebar" }, h("h1", {}, "Diff two runs")),
  h("form", { class: "toolbar pick", onsubmit: (ev) => {
    ev.preventDefault();
    location.search = `?a=${encodeURIComponent(pickA.value)}&b=${encodeURIComponent(pickB.value)}`;
  } }, h("label", {}, "a ", pickA), h("span", { class: "arrow" }, "→"), h("label", {}, "b ", pickB),
    h("button", { class: "primary", type: "submit" }, "Compare")),
  out));

// one side of a changed value: the window of its JSON text the server cut (harness.review.diff.marked), the
// characters that changed marked; the same logic as `harness diff`'s window around the first difference
function marked(text, marks, cls) {
  const out = [];
  let at = 0;
  for (const [lo, hi] of marks) {
    if (lo > at) out.push(text.slice(at, lo));
    out.push(h("mark", { class: cls }, text.slice(lo, hi)));
    at = hi;
  }
  if (at < text.length) out.push(text.slice(at));
  return out;
}

function change(c, m) {
  return h("div", { class: "change" }, h("code", { class: "path" }, c.field),
    h("div", { class: "side old", title: "a" }, h("span", { class: "sign" }, "−"), h("code", {}, marked(m.old, m.old_marks, "del"))),
    h("div", { class: "side new", title: "b" }, h("span", { class: "sign" }, "+"), h("code", {}, marked(m.new, m.new_marks, "ins"))));
}

function side(run, seq) {
  return seq == null ? h("span", { class: "dim" }, "—") : h("a", { href: `${runUrl(run)}?line=${seq}` }, String(seq));
}

function drawDiff(d) {
  if (d.equal) {
    out.replaceChildren(h("div", { class: "banner ok", id: "equal" }, h("strong", {}, "Equal "), `after normalization: ${d.records_b} records.`));
    return;
  }
  const f = d.first;
  const rows = d.moved.map((m, i) => h("tr", { class: `moved moved-${m.op}${i === 0 ? " first" : ""}` },
    h("td", {}, h("span", { class: `op-tag op-${m.op}` }, m.op), i === 0 ? h("span", { class: "first-tag" }, "first divergence") : ""),
    h("td", { class: "num" }, side(d.a, m.seq_a)), h("td", { class: "num" }, side(d.b, m.seq_b)),
    h("td", {}, m.describe),
    h("td", { class: "changes" }, m.op === "changed"
      ? m.changes.map((c, n) => change(c, m.marks[n]))
      : h("code", { class: "payload" }, JSON.stringify(m.record)))));
  out.replaceChildren(
    h("div", { class: "banner diverge", id: "first" }, h("strong", {}, "First divergence: "), d.headline,
      h("div", { class: "counts" },
        h("span", { class: "pill op-changed" }, `${d.changed} changed`),
        h("span", { class: "pill op-inserted" }, `${d.inserted} inserted`),
        h("span", { class: "pill op-removed" }, `${d.removed} removed`),
        d.relocated ? h("span", { class: "pill op-moved" }, `${d.relocated} moved`) : "",
        ` · a has ${d.records_a} records, b has ${d.records_b}`),
      f ? h("div", { class: "jump" }, "open at the divergence: ",
        f.seq_a != null ? h("a", { href: `${runUrl(d.a)}?line=${f.seq_a}` }, `a seq ${f.seq_a}`) : "", " ",
        f.seq_b != null ? h("a", { href: `${runUrl(d.b)}?line=${f.seq_b}` }, `b seq ${f.seq_b}`) : "") : "",
      (d.notes || []).map((n) => h("div", { class: "note" }, n))),
    h("table", { class: "diff" },
      h("thead", {}, h("tr", {}, ["", "seq a", "seq b", "record", "what moved"].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows)),
    d.total > d.moved.length ? h("p", { class: "dim" }, `… and ${d.total - d.moved.length} more differences.`) : "");
}

async function main() {
  const a = params.get("a"), b = params.get("b");
  try {
    const runs = (await api("/api/runs")).runs;
    for (const [sel, want] of [[pickA, a], [pickB, b]]) {
      sel.replaceChildren(...runs.map((r) => h("option", { value: r.id, selected: r.id === want },
        `${shortId(r.id)} · ${r.status} · ${r.goal ?? ""}`.slice(0, 90))));
    }
    if (!a && runs.length > 1) pickA.value = runs[1].id;
    if (a && b) {
      out.replaceChildren(h("p", { class: "loading" }, "Comparing…"));
      drawDiff(await api(`/api/diff?a=${encodeURIComponent(a)}&b=${encodeURIComponent(b)}`));
    } else {
      out.replaceChildren(h("p", { class: "dim" }, "Pick two runs, or tick two rows on the runs page."));
    }
    document.body.dataset.loaded = "1";
  } catch (err) {
    fail(out, err);
    document.body.dataset.loaded = "error";
  }
}

main();
