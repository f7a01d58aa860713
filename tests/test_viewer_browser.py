"""The viewer in a real headless Chromium, driven by Playwright, against `harness serve` run as a process.

One browser for the module, and one tab in it that every test drives in
turn (a new tab costs Chromium a renderer process: more than the page's
own work); one server with `--agent` (fork on) over a runs folder holding
one run of each kind, and one without it over a folder of its own. The
module runs on one xdist worker (its group), so all this is made once.
The pages are used as a person would: read the table, click a record,
watch a live run grow, follow a diff, fork from a record's panel. Waits
are Playwright's `expect`, which polls in the browser, never sleeps.

Chromium is Debian's (`apt-get install chromium`, which .ci/run does),
driven through `executable_path`; Playwright's own browser download is not
used. Without a chromium on PATH these tests skip, saying so.

With HARNESS_VIEWER_SCREENSHOTS=DIR the tests save the docs'
screenshots of the three pages into DIR (docs/ in the repository).
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

pytest.importorskip("starlette", reason="the viewer needs the web extra: pip install 'harness-trace[web]'")
pytest.importorskip("uvicorn", reason="the viewer needs the web extra: pip install 'harness-trace[web]'")
sync_api = pytest.importorskip("playwright.sync_api", reason="browser tests need the playwright package")

from viewer_runs import AGENT, ROOT, XSS, fork_value, runs_folder, search_seq  # noqa: E402, F401 - runs_folder: the `folder` fixture

import harness  # noqa: E402
from harness.review.cost import run_cost  # noqa: E402
from harness.testing import fixed_plan, read_records, steps  # noqa: E402

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
pytestmark = [
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="no chromium on PATH: install it (as root: apt-get update && apt-get install -y chromium)",
    ),
    pytest.mark.xdist_group("viewer_browser"),  # one worker: one browser, one folder, one server for the module
]
TIMEOUT = 30_000  # ms: generous, the machine is shared; nothing here is a timing assertion
expect = sync_api.expect
expect.set_options(timeout=TIMEOUT)
SHOTS = os.environ.get("HARNESS_VIEWER_SCREENSHOTS")


def serve(folder: Path, *extra: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "serve", str(folder), "--port", "0", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    found = re.search(r"http://127\.0\.0\.1:\d+/", line)
    if not found:
        proc.kill()
        raise AssertionError(f"harness serve did not start: {line!r} {proc.communicate()[1]}")
    return proc, found[0]


def stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def server(folder: tuple[Path, dict[str, str]]) -> Iterator[str]:
    proc, url = serve(folder[0], "--agent", AGENT)
    yield url
    stop(proc)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture(scope="module")
def tab(browser: Any) -> Iterator[Any]:
    """The module's one tab (each test starts it on about:blank; see `page`)."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(TIMEOUT)
    yield pg
    context.close()


@pytest.fixture
def page(tab: Any) -> Iterator[Any]:
    """The tab, for one test: the script errors it logs meanwhile fail the test; afterwards it is left on
    about:blank, so nothing of the test's pages (timers, event streams) runs on into the next test."""
    errors: list[str] = []

    def thrown(e: Any) -> None:
        errors.append(str(e))

    def logged(m: Any) -> None:
        if m.type == "error":
            errors.append(m.text)

    tab.on("pageerror", thrown)
    tab.on("console", logged)
    try:
        yield tab
        tab.goto("about:blank")
    finally:
        tab.remove_listener("pageerror", thrown)
        tab.remove_listener("console", logged)
    assert not [e for e in errors if "Content Security Policy" in e or "TypeError" in e or "ReferenceError" in e], (
        errors
    )


def open_page(page: Any, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("body[data-loaded]")


def shot(page: Any, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / name))


def test_the_runs_page_lists_finished_paused_crashed_and_corrupt_runs(page: Any, server: str, folder: Any) -> None:
    _path, ids = folder
    open_page(page, server)
    expected = {
        "done": "done",
        "fork": "done",
        "failed": "failed",
        "paused": "paused",
        "killed": "interrupted",
        "unreadable": "unreadable",
        "corrupt": "done",
        "torn": "interrupted",
    }
    for role, status in expected.items():
        row = page.locator(f'tr[data-id="{ids[role]}"]')
        assert row.locator(".badge").inner_text() == status, role
    fork_row = page.locator(f'tr[data-id="{ids["fork"]}"]')
    assert (
        "fork of" in fork_row.inner_text()
        and fork_row.locator("td.parent a").get_attribute("href") == f"/runs/{ids['done']}"
    )
    shot(page, "viewer-runs.png")
    page.fill("#filter", "pay 5")
    expect(page.locator("tr.run")).to_have_count(1)
    assert page.locator("tr.run").get_attribute("data-id") == "paused"
    page.fill("#filter", "")
    page.select_option("#status", "interrupted")
    expect(page.locator("tr.run")).to_have_count(2)  # killed, torn
    # the corrupt run's damage is in its middle: its own page, which reads the whole file, shows it
    open_page(page, f"{server}runs/corrupt")
    banner = page.locator("#corruption").inner_text()
    assert "TraceCorruption" in banner and "line 7" in banner and "checksum" in banner
    assert page.locator("table.records tr.rec").count() == 6


def test_a_run_page_shows_its_records_and_the_panel_opens_on_click(page: Any, server: str, folder: Any) -> None:
    path, ids = folder
    recs = read_records(path / f"{ids['fork']}.jsonl")
    open_page(page, f"{server}runs/{ids['fork']}")
    assert page.locator("table.records tr.rec").count() == len(recs)
    assert page.locator(".lane .chip").count() == len(recs)
    assert page.locator(".chip.role-answered").count() == 1 and page.locator(".chip.role-served").count() > 0
    ledger = run_cost(path / f"{ids['fork']}.jsonl").to_json(None)["models"]  # what `harness cost` says
    live, served = (sum(m["calls"] for m in ledger if m["how"] == how) for how in ("live", "served"))
    assert live > 0 and served > 0
    expect(page.locator("#ledger summary")).to_contain_text(f"Model calls: {live} live, {served} served")
    llm = next(r for r in recs if r.get("boundary") == "llm" and r["seq"] > recs[0].get("branch", 0))
    page.click(f'.chip[data-line="{llm["seq"]}"]')
    panel = page.locator("aside.detail")
    panel.wait_for(state="visible")
    text = panel.inner_text()
    assert "crossing llm" in text and llm["request"]["prompt"][:30] in text and str(llm["seq"]) in text
    page.click("aside.detail summary")
    whole = orjson.loads(page.locator("aside.detail pre.whole").inner_text())
    assert whole == llm


def test_a_concurrent_run_has_a_lane_per_agent_and_draws_spawns_joins_and_messages(
    page: Any, server: str, folder: Any
) -> None:
    path, _ids = folder
    recs = read_records(path / "agents.jsonl")  # examples/pipeline.py, recorded
    open_page(page, f"{server}runs/agents")
    assert page.locator(".lane-name").all_inner_texts() == ["main", "synthesizer", "worker_a", "worker_b"]
    for agent in ("synthesizer", "worker_a", "worker_b"):
        mine = [r for r in recs if r.get("agent") == agent]
        assert page.locator(f'.lane[data-agent="{agent}"] .chip').count() == len(mine)
    a = page.locator('.lane[data-agent="worker_a"] .chip').first.bounding_box()
    b = page.locator('.lane[data-agent="worker_b"] .chip').first.bounding_box()
    assert abs(a["x"] - b["x"]) <= 30 and a["y"] < b["y"]  # side by side: concurrent, in lanes of their own
    lives = page.locator("svg.links path.link.life")
    messages = page.locator("svg.links path.link.message")
    assert lives.count() == 6 and messages.count() == 2  # three spawns, three joins; two summaries sent
    by_seq = {r["seq"]: r for r in recs}
    for i in range(messages.count()):  # each message arrow goes from a send to the receive that got it
        send = by_seq[int(messages.nth(i).get_attribute("data-from"))]
        got = by_seq[int(messages.nth(i).get_attribute("data-to"))]
        assert send["request"]["send"] == got["agent"] and got["response"]["sent"] == send["vc"]


def test_a_causal_fork_of_a_concurrent_run_marks_what_it_reused_and_what_ran_live(
    page: Any, server: str, folder: Any
) -> None:
    path, ids = folder
    recs = read_records(path / f"{ids['agents_fork']}.jsonl")  # forked at worker_a's search
    open_page(page, f"{server}runs/{ids['agents_fork']}")
    for rec in recs[1:]:
        want = "served" if rec.get("reused") else "answered" if rec.get("mutated") else "live"
        chip = page.locator(f'.chip[data-line="{rec["seq"]}"]')
        assert f"role-{want}" in (chip.get_attribute("class") or ""), (rec["seq"], want)
    worker_b = page.locator('.lane[data-agent="worker_b"] .chip')
    assert worker_b.count() > 0 and page.locator('.lane[data-agent="worker_b"] .chip.role-served').count() == (
        worker_b.count()
    )  # concurrent with the branch: served, never re-run
    mutated = page.locator(".chip.role-answered")
    assert mutated.count() == 1 and mutated.get_attribute("title").startswith("seq")
    mutated.click()
    panel = page.locator("aside.detail")
    panel.wait_for(state="visible")
    assert "crossing search" in panel.inner_text() and "vector clock" in panel.inner_text().lower()
    shot(page, "viewer-run.png")


def test_a_sealed_run_shows_it_is_intact_with_its_annotations_and_blob_payloads_inline(
    page: Any, server: str, folder: Any
) -> None:
    path, ids = folder
    open_page(page, f"{server}runs/{ids['done']}")
    page.wait_for_selector('#seal[data-intact="1"]')  # harness verify, asked for by the page, found it intact
    assert "sealed · intact" in page.locator("#seal").inner_text()
    notes = page.locator("#annotations tr.note")
    assert notes.count() == 2 and "the search result decided the answer" in notes.nth(0).inner_text()
    assert notes.nth(1).locator("td.key").inner_text() == "ticket"
    recs = read_records(path / "blob.jsonl")
    stored = next(r for r in recs if "blobs" in r)
    open_page(page, f"{server}runs/blob?line={stored['seq']}")
    panel = page.locator("aside.detail")
    panel.locator(".field.blob").wait_for(state="visible")
    text = panel.inner_text()
    assert f"stored in blob {stored['blobs']['result']['sha256'][:16]}" in text and "sha256 checked" in text
    assert "quarterly report" in text and "row 59" in text  # the payload, read back from blobs/


def test_a_paused_run_shows_its_operation_and_the_reconcile_command(page: Any, server: str, folder: Any) -> None:
    path, _ids = folder
    open_page(page, f"{server}runs/paused")
    banner = page.locator("#paused").inner_text()
    assert "PAUSED" in banner and "pay" in banner
    assert f"harness reconcile {path / 'paused.jsonl'} --not-happened" in banner
    open_page(page, f"{server}runs/torn")
    assert "Torn tail" in page.locator("#torn").inner_text()


def test_trace_strings_are_shown_as_text_and_execute_nothing(page: Any, server: str) -> None:
    open_page(page, server)
    open_page(page, f"{server}runs/xss")
    assert "<script>window.__pwned = 1</script><img src=x onerror=" in page.locator(".run-head .goal").inner_text()
    page.click('.chip[data-line="3"]')
    page.locator("aside.detail").wait_for(state="visible")
    assert XSS in page.locator("aside.detail").inner_text()
    page.click('tr.rec[data-line="4"]')
    expect(page.locator("aside.detail h2")).to_contain_text("VERIFY")  # the ACT -> VERIFY record
    assert page.evaluate("window.__pwned") is None
    assert page.locator("img").count() == 0 and page.locator("main script").count() == 0


def test_a_live_run_grows_on_the_page_while_a_child_process_writes_it(page: Any, server: str, folder: Any) -> None:
    path, _ = folder
    name = f"live-{uuid.uuid4().hex[:8]}"
    trace, gate = path / f"{name}.jsonl", path / f"{name}.go"
    writer = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "viewer_runs.py"), "slow", str(trace), "8", str(gate)]
    )
    runs = page.context.new_page()  # a second tab, for the runs page, left open: it updates by itself
    try:
        while not (trace.exists() and trace.read_bytes().count(b'"to":"ACT"') >= 3):
            assert writer.poll() is None
            time.sleep(0.02)
        open_page(runs, server)
        badge = runs.locator(f'tr[data-id="{name}"] .badge')
        expect(badge).to_have_count(1)
        expect(badge).to_have_text("running")  # the new run, running
        open_page(page, f"{server}runs/{name}")
        assert page.locator(".run-head .badge").inner_text() == "running"
        before = page.locator("table.records tr.rec").count()
        assert before == len(read_records(trace))
        gate.touch()  # the writer goes on: the page follows
        expect(page.locator("table.records tr.rec").nth(before)).to_be_attached()  # a record written after it opened
        assert writer.wait(timeout=60) == 0
        page.wait_for_selector('body[data-status="done"]')
        final = read_records(trace)
        assert page.locator("table.records tr.rec").count() == len(final)
        assert page.locator("table.records tr.rec").last.inner_text().split()[0] == str(final[-1]["seq"])
        expect(badge).to_have_text("done")  # on the runs page, without a reload
    finally:
        runs.close()
        if writer.poll() is None:
            writer.kill()


def test_a_run_opened_before_its_header_is_written_shows_once_it_is(page: Any, server: str, folder: Any) -> None:
    path, ids = folder
    trace = path / f"new-{uuid.uuid4().hex[:8]}.jsonl"
    with open(trace, "ab") as writer:
        fcntl.flock(writer, fcntl.LOCK_EX)  # a writer holds the file, and has written nothing yet
        page.goto(f"{server}runs/{trace.stem}")
        page.wait_for_selector('body[data-waiting="header"]')  # the page has seen the file without a header
        writer.write((path / f"{ids['done']}.jsonl").read_bytes())
        writer.flush()
    page.wait_for_selector('body[data-status="done"]')
    assert page.locator("table.records tr.rec").count() == len(read_records(trace))
    assert page.locator(".banner.error").count() == 0


def test_a_diff_highlights_the_first_divergence(page: Any, server: str, folder: Any) -> None:
    path, ids = folder
    branch = search_seq(path / f"{ids['done']}.jsonl")
    open_page(page, f"{server}diff?a={ids['done']}&b={ids['fork']}")
    first = page.locator("#first").inner_text()
    assert f"seq {branch}" in first
    row = page.locator("table.diff tr.first")
    assert (
        row.count() == 1
        and "first divergence" in row.inner_text()
        and row.locator(".op-tag").text_content() == "changed"
    )
    assert row.locator("td.num").nth(1).inner_text() == str(branch)
    engine = harness.diff(path / f"{ids['done']}.jsonl", path / f"{ids['fork']}.jsonl")
    assert page.locator("table.diff tr.moved").count() == len(engine.moved)  # docs/viewer-diff.png: a model's fork


def test_fork_from_the_page_creates_a_child_run(page: Any, server: str, folder: Any) -> None:
    path, ids = folder
    parent = path / f"{ids['done']}.jsonl"
    branch = search_seq(parent)
    before = set(path.glob("*.jsonl"))
    open_page(page, f"{server}runs/{ids['done']}?line={branch}")
    page.locator("#fork-value").wait_for(state="visible")
    page.fill("#fork-value", orjson.dumps(fork_value(parent)).decode())
    page.click("#fork-button")
    page.wait_for_url(re.compile(r".*/runs/[0-9a-f]{32}\?job=[0-9a-f]{32}$"))
    page.wait_for_selector('body[data-status="done"]')
    # the run's file is done a moment before the fork's job is: the banner follows the job
    expect(page.locator("#job")).to_contain_text("done, state DONE")  # the fork's job done
    new = set(path.glob("*.jsonl")) - before
    assert len(new) == 1
    child = new.pop()
    header = read_records(child)[0]
    assert header["parent"] == harness.replay(parent).run_id and header["branch"] == branch
    assert page.locator("table.records tr.rec").count() == len(read_records(child))


@pytest.fixture(scope="module")
def plain(folder: tuple[Path, dict[str, str]], tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """`harness serve` without --agent over a folder of its own: a copy of the finished run, a copy of the paused
    run, reconciled, a run at the top and one in a subfolder (named like an API action: team/events), and a
    folder symlinked out (holding a run) that is never entered. Its URL and runs folder."""
    path, ids = folder
    base = tmp_path_factory.mktemp("plain")
    runs = base / "runs"
    (runs / "team").mkdir(parents=True)
    (base / "elsewhere").mkdir()
    shutil.copy(path / f"{ids['done']}.jsonl", runs / f"{ids['done']}.jsonl")
    shutil.copy(path / "paused.jsonl", runs / "paused.jsonl")
    harness.reconcile(runs / "paused.jsonl", happened=False, evidence="the bank shows no such payment")
    tools = {"work": lambda i: {"i": i}}
    harness.Executor(planner=fixed_plan(steps(1)), tools=tools, trace=runs / "top.jsonl").run("the top run")
    harness.Executor(planner=fixed_plan(steps(2)), tools=tools, trace=runs / "team" / "events.jsonl").run(
        "the nested run"
    )
    shutil.copy(runs / "top.jsonl", base / "elsewhere" / "hidden.jsonl")
    (runs / "out").symlink_to(base / "elsewhere")
    proc, url = serve(runs)
    yield url, runs
    stop(proc)


def test_without_agent_there_is_no_fork_button(page: Any, plain: Any, folder: Any) -> None:
    url, runs = plain
    _path, ids = folder
    branch = search_seq(runs / f"{ids['done']}.jsonl")
    open_page(page, f"{url}runs/{ids['done']}?line={branch}")
    page.locator("aside.detail h2").wait_for(state="visible")
    assert page.locator("#fork-button").count() == 0 and page.locator("#fork-value").count() == 0


# --- model streams: their text on the run page, a fork of the text, the changed words on the diff page -------------


@pytest.fixture(scope="module")
def model_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str], Path]]:
    """`harness serve` over a model agent's runs (tests/stream_agent.py), forking on, its model server up."""
    stream_agent = pytest.importorskip("stream_agent", reason="the model runs need the openai client")
    from chat_server import ChatServer

    path = tmp_path_factory.mktemp("model-runs")
    ids = stream_agent.record_runs(path)
    model = ChatServer()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MODEL_URL", model.url)  # for the forks the viewer runs: the agent reads it
        proc, url = serve(path, "--agent", "tests.stream_agent:make_agent")
    try:
        yield url, ids, path
    finally:
        stop(proc)
        model.stop()


def test_a_streamed_model_reply_shows_as_its_text(page: Any, model_server: Any) -> None:
    url, ids, _ = model_server
    stream_agent = pytest.importorskip("stream_agent")
    open_page(page, f"{url}runs/{ids['model']}")
    calls = page.locator("table.records tr.rec", has_text="crossing http")
    assert calls.locator("td.note").all_inner_texts() == [f"echo: {q}" for q in stream_agent.QUESTIONS]
    second = calls.nth(1)
    second.click()
    reply = page.locator("#reply")
    reply.wait_for(state="visible")
    assert reply.locator("pre").inner_text() == f"echo: {stream_agent.QUESTIONS[1]}"
    assert "finish reason" in reply.inner_text()
    editor = orjson.loads(page.locator("#fork-value").input_value())  # a fork edits the message, not its chunks
    assert editor["stream"]["message"]["content"] == f"echo: {stream_agent.QUESTIONS[1]}" and "chunks" not in editor
    shot(page, "viewer-stream.png")

    editor["stream"]["message"]["content"] = "Because nobody can trust a trace they could rewrite."
    page.fill("#fork-value", orjson.dumps(editor, option=orjson.OPT_INDENT_2).decode())
    page.click("#fork-button")
    page.wait_for_url(re.compile(r".*/runs/[0-9a-f]{32}\?job=[0-9a-f]{32}$"))
    expect(page.locator("#job")).to_contain_text("done, state DONE")  # the fork's job done
    page.reload()
    page.wait_for_selector("body[data-loaded]")
    notes = page.locator("table.records tr.rec", has_text="crossing http").locator("td.note").all_inner_texts()
    assert notes[1] == "Because nobody can trust a trace they could rewrite."  # the client read the new stream


def test_the_diff_page_marks_the_changed_words(page: Any, model_server: Any) -> None:
    url, ids, _ = model_server
    open_page(page, f"{url}diff?a={ids['model']}&b={ids['model_fork']}")
    first = page.locator("table.diff tr.first")
    assert first.locator(".change .path").first.inner_text() == "reply.text"  # the behavior view: what was said
    removed, added = first.locator("mark.del").all_inner_texts(), first.locator("mark.ins").all_inner_texts()
    assert "database" in removed and "spreadsheet" in added and "append only" not in "".join(removed + added)
    later = page.locator("table.diff tr.moved").nth(1).locator("mark.ins").all_inner_texts()
    assert later  # the step after the branch: its args changed, and the changed words are marked there too
    shot(page, "viewer-diff.png")


def test_runs_in_subfolders_are_listed_and_open_by_their_path(page: Any, plain: Any, folder: Any) -> None:
    """Issue 26: the runs page listed the top folder only. A subfolder's run is listed under its path and opens,
    even one named like an API action (team/events); a folder symlinked out is never entered."""
    url, _runs = plain
    _path, ids = folder
    open_page(page, url)
    listed = page.locator("td.id a").all_inner_texts()
    assert sorted(listed) == sorted([ids["done"], "paused", "team/events", "top"])  # not out/hidden
    page.click('td.id a:text-is("team/events")')
    page.wait_for_selector("body[data-loaded]")
    assert page.url.endswith("/runs/team/events")
    assert "the nested run" in page.locator(".run-head .goal").inner_text()


def test_a_reconciled_run_offers_the_resume_not_the_reconcile(page: Any, plain: Any) -> None:
    """Issue 26: after a reconcile the page still offered the reconcile command, which harness then refuses."""
    url, runs = plain
    open_page(page, f"{url}runs/paused")
    banner = page.locator("#paused").inner_text()
    assert "reconciled" in banner and f"harness resume {runs / 'paused.jsonl'} --agent" in banner
    assert "harness reconcile" not in banner
