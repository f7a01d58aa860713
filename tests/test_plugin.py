"""The golden_trace plugin end to end: real pytest runs in a fresh project, alone and under xdist.

Every run's session is in-process (pytester.runpytest_inprocess), for speed:
a run "alone" whole, a run under xdist as its controller, whose two workers
are the fresh interpreters xdist starts. Runs put back the two globals syrupy
sets per session, so this session is left as it was. They load the plugins
named (syrupy, harness's, xdist's) and no other installed one: reading every
installed distribution's entry points is most of a small run's start. They
start without the PYTEST_XDIST_WORKER variable this session may run under:
syrupy reads it to decide whether it is a worker.
"""

from __future__ import annotations

import contextlib
import importlib
import re
import shutil
import signal
import tempfile
from pathlib import Path

import orjson
import pytest

# Imported out here, before any in-process run: pytester gives sys.modules back after each run, so a module first
# imported inside one would be imported again after it as a second copy. httpx imports httpcore on its first
# request; if that request is inside a run (a model agent's golden), httpx keeps the exception map it built from the
# dropped copy, and every later refused connection in this worker surfaces as httpcore's, not httpx's.
with contextlib.suppress(ImportError):
    import httpcore  # noqa: F401
import syrupy
from syrupy.extensions.base import SnapshotCollectionStorage

from harness.review.normalize import GOLDEN_HEAD

AGENT = """
from harness import Executor
from harness.testing import fixed_plan, read_records, steps

BUMP = {bump}


def work(i):
    return {{"value": i * 10 + (BUMP if i == 1 else 0)}}


def run(path):
    return Executor(planner=fixed_plan(steps(3)), tools={{"work": work}}, trace=path).run("three steps")


def test_run(tmp_path, golden_trace):
    assert golden_trace == run(tmp_path / "run.jsonl")
"""

SECOND = """

def test_records(tmp_path, golden_trace):
    run(tmp_path / "run.jsonl")
    assert golden_trace == read_records(tmp_path / "run.jsonl")
"""

MODES = ("alone", "xdist")
# the plugins a run needs, named (entry points not read: most of a run's start); the `pytest11` entry point is
# what test_without_syrupy_pytest_still_starts_and_golden_trace_says_what_to_install starts pytest through
PLUGINS = ("-p", "syrupy", "-p", "harness.pytest_plugin", "-p", "no:cacheprovider")


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)
    pytester.makeini("[pytest]\n")
    pytester.mkdir("tests")
    return pytester


def write_agent(project: pytest.Pytester, *, bump: int, second: bool = True) -> None:
    (project.path / "tests" / "test_agent.py").write_text(AGENT.format(bump=bump) + (SECOND if second else ""))


def run(project: pytest.Pytester, mode: str, *args: str) -> pytest.RunResult:
    # a rewritten agent of the same size within the same second would reuse the stale bytecode
    shutil.rmtree(project.path / "tests" / "__pycache__", ignore_errors=True)
    saved = SnapshotCollectionStorage.snapshot_dirname, syrupy._syrupy  # type: ignore[attr-defined]
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # xdist's workers inherit it
            if mode == "xdist":
                return project.runpytest_inprocess("-p", "xdist", *PLUGINS, "-n", "2", *args)
            return project.runpytest_inprocess(*PLUGINS, *args)
    finally:
        SnapshotCollectionStorage.snapshot_dirname, syrupy._syrupy = saved  # type: ignore[attr-defined]


def first_error_lines(result: pytest.RunResult, n: int) -> list[str]:
    """The first n lines of the first assertion message, without pytest's `E   ` margin."""
    lines = result.outlines
    start = next(i for i, line in enumerate(lines) if line.startswith("E "))
    return [re.sub(r"^E\s+", "", line) for line in lines[start : start + n]]


@pytest.mark.parametrize("mode", MODES)
def test_record_pass_change_fail_update_pass_and_unused(project: pytest.Pytester, mode: str) -> None:
    golden = project.path / "tests" / "golden" / "test_agent"
    write_agent(project, bump=0)

    if mode == "alone":  # (xdist runs are slow; missing goldens fail the same way there)
        missing = run(project, mode)
        assert missing.ret == 1
        missing.stdout.fnmatch_lines(
            ["*golden trace missing: *test_run.jsonl does not exist; record it with `pytest --snapshot-update`*"]
        )
        assert not golden.exists()

    recorded = run(project, mode, "--snapshot-update")
    assert recorded.ret == 0, recorded.stdout.str()
    recorded.stdout.fnmatch_lines(["*2 snapshots generated*"])
    assert sorted(p.name for p in golden.iterdir()) == ["test_records.jsonl", "test_run.jsonl"]
    before = (golden / "test_run.jsonl").read_text()
    assert before.splitlines()[0] == GOLDEN_HEAD

    passed = run(project, mode)
    assert passed.ret == 0
    passed.stdout.fnmatch_lines(["*2 snapshots passed*"])

    write_agent(project, bump=1)  # step 1's result moves from 10 to 11
    changed = run(project, mode)
    assert changed.ret == 1
    assert first_error_lines(changed, 2) == [
        "assert golden trace differs: first difference at seq 7: transition ACT -> VERIFY, step 1, attempt 1 changed"
        " (1 changed, 0 inserted, 0 removed)",
        "result.value: 10 -> 11",
    ]
    changed.assert_outcomes(failed=2)

    updated = run(project, mode, "--snapshot-update")
    assert updated.ret == 0
    updated.stdout.fnmatch_lines(["*2 snapshots updated*"])
    after = (golden / "test_run.jsonl").read_text()
    moved = [(a, b) for a, b in zip(before.splitlines(), after.splitlines(), strict=True) if a != b]
    # one line: the result is stored once
    assert [(a.count('"value":10'), b.count('"value":11')) for a, b in moved] == [(1, 1)]

    write_agent(project, bump=1, second=False)  # test_records is gone: its golden is unused
    unused = run(project, mode)
    assert unused.ret != 0
    unused.assert_outcomes(passed=1)  # test_run passes against its updated golden
    unused.stdout.fnmatch_lines(["*1 snapshot passed. 1 snapshot unused*"])
    assert (golden / "test_records.jsonl").exists()

    cleaned = run(project, mode, "--snapshot-update")
    assert cleaned.ret == 0
    cleaned.stdout.fnmatch_lines(["*1 unused snapshot deleted*"])
    assert sorted(p.name for p in golden.iterdir()) == ["test_run.jsonl"]


def test_a_golden_from_another_format_version_is_stale_with_how_to_re_record(project: pytest.Pytester) -> None:
    write_agent(project, bump=0, second=False)
    golden = project.path / "tests" / "golden" / "test_agent" / "test_run.jsonl"
    golden.parent.mkdir(parents=True)
    golden.write_text('{"format":"harness-golden","version":0}\n{"kind":"header"}\n')

    stale = run(project, "alone")
    assert stale.ret == 1
    assert first_error_lines(stale, 1) == [
        "assert stale golden trace: it was written as golden format version 0; this harness writes version 3; "
        "re-record it with `pytest --snapshot-update` (or `harness show --golden TRACE`)"
    ]
    assert "Traceback" not in stale.stdout.str()

    assert run(project, "alone", "--snapshot-update").ret == 0
    assert golden.read_text().splitlines()[0] == GOLDEN_HEAD
    assert run(project, "alone").ret == 0


def test_a_trace_that_cannot_be_read_fails_the_assertion_with_its_reason(project: pytest.Pytester) -> None:
    (project.path / "tests" / "test_bad.py").write_text(
        "def test_missing(golden_trace):\n    assert golden_trace == 'nowhere.jsonl'\n"
    )
    result = run(project, "alone")
    assert result.ret == 1
    assert first_error_lines(result, 1) == ["assert golden trace not compared: nowhere.jsonl: no such file"]


def test_goldens_land_in_golden_with_or_without_the_snapshot_dirname_option(project: pytest.Pytester) -> None:
    """`--snapshot-dirname=golden` (this project's own setting) and syrupy's default lead to the same files."""
    write_agent(project, bump=0, second=False)
    assert run(project, "alone", "--snapshot-dirname=golden", "--snapshot-update").ret == 0
    assert (project.path / "tests" / "golden" / "test_agent" / "test_run.jsonl").is_file()
    assert run(project, "alone").ret == 0
    assert not (project.path / "tests" / "__snapshots__").exists()


def test_without_syrupy_pytest_still_starts_and_golden_trace_says_what_to_install(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    hidden = project.mkdir("hide")
    (hidden / "syrupy").mkdir()
    (hidden / "syrupy" / "__init__.py").write_text("raise ImportError('No module named syrupy')\n")
    monkeypatch.setenv("PYTHONPATH", str(hidden))
    (project.path / "tests" / "test_it.py").write_text(
        "def test_plain():\n    assert True\n\n\ndef test_golden(golden_trace):\n    assert golden_trace == []\n"
    )
    result = project.runpytest_subprocess("-p", "no:syrupy", "-p", "no:hypothesispytest", "-p", "no:xdist", "tests")
    result.assert_outcomes(passed=1, errors=1)  # the fixture fails at setup, naming what to install
    assert (
        "golden_trace needs the 'pytest' extra, which is not installed: pip install 'harness-trace[pytest]'"
        in result.stdout.str()
    )


PLAIN = """
def test_plain():
    assert True
"""

UNUSED = "golden trace* unused: no test of this run asserts *"


def record_goldens(project: pytest.Pytester) -> Path:
    """test_agent.py with two recorded goldens, and test_plain.py beside it; returns the goldens' folder."""
    write_agent(project, bump=0)
    (project.path / "tests" / "test_plain.py").write_text(PLAIN)
    assert run(project, "alone", "--snapshot-update").ret == 0
    golden = project.path / "tests" / "golden" / "test_agent"
    assert sorted(p.name for p in golden.iterdir()) == ["test_records.jsonl", "test_run.jsonl"]
    return golden


@pytest.mark.parametrize("mode", MODES)
def test_goldens_of_a_module_that_no_longer_asserts_any_are_unused_even_when_no_test_asserts_one(
    project: pytest.Pytester, mode: str
) -> None:
    golden = record_goldens(project)
    (project.path / "tests" / "test_agent.py").write_text(PLAIN.replace("plain", "agent"))  # no golden_trace at all

    unused = run(project, mode)
    assert unused.ret == 1
    unused.assert_outcomes(passed=2)
    unused.stdout.fnmatch_lines(
        [
            "*2 golden traces unused: no test of this run asserts them*",
            "*tests/golden/test_agent/test_records.jsonl",
            "*tests/golden/test_agent/test_run.jsonl",
            "*Re-run pytest with --snapshot-update to delete unused golden traces.",
        ]
    )

    warned = run(project, mode, "--snapshot-warn-unused")
    assert warned.ret == 0
    warned.stdout.fnmatch_lines([f"*{UNUSED}"])
    assert len(list(golden.iterdir())) == 2

    cleaned = run(project, mode, "--snapshot-update")
    assert cleaned.ret == 0
    cleaned.stdout.fnmatch_lines(["*2 unused golden traces deleted.", "Deleted tests/golden/test_agent/test_r*.jsonl"])
    assert not golden.exists()
    assert run(project, mode).ret == 0


def test_goldens_of_a_deleted_module_are_unused(project: pytest.Pytester) -> None:
    golden = record_goldens(project)
    (project.path / "tests" / "test_agent.py").unlink()

    unused = run(project, "alone")
    assert unused.ret == 1
    unused.stdout.fnmatch_lines([f"*{UNUSED}", "*tests/golden/test_agent/test_records.jsonl"])
    assert run(project, "alone", "--snapshot-update").ret == 0
    assert not golden.exists()


def test_a_stale_golden_that_syrupy_sees_is_reported_once_by_syrupy(project: pytest.Pytester) -> None:
    golden = record_goldens(project)
    write_agent(project, bump=0, second=False)  # test_run still asserts its golden; test_records is gone
    (project.path / "tests" / "test_agent.py").write_text(
        (project.path / "tests" / "test_agent.py").read_text() + "\n\ndef test_records():\n    pass\n"
    )
    unused = run(project, "alone")
    assert unused.ret == 1
    unused.stdout.fnmatch_lines(["*1 snapshot passed. 1 snapshot unused*"])
    assert "golden trace" not in unused.stdout.str()  # syrupy judged it: not reported a second time
    cleaned = run(project, "alone", "--snapshot-update")
    assert cleaned.ret == 0 and "golden trace" not in cleaned.stdout.str()
    assert [p.name for p in golden.iterdir()] == ["test_run.jsonl"]


NOT_JUDGED = {
    "-k deselects the module's tests": ("-k", "plain"),
    "--ignore leaves the module out": ("--ignore", "tests/test_agent.py"),
    "a path leaves the module out": ("tests/test_plain.py",),
    "a node id narrows the module": ("tests/test_agent.py::test_run", "tests/test_plain.py"),
    "-m deselects the module's tests": ("-m", "not slow"),
}


@pytest.mark.parametrize("args", NOT_JUDGED.values(), ids=NOT_JUDGED.keys())
def test_goldens_of_modules_not_collected_in_full_are_never_judged(
    project: pytest.Pytester, args: tuple[str, ...]
) -> None:
    golden = record_goldens(project)
    agent = project.path / "tests" / "test_agent.py"
    agent.write_text("import pytest\n" + agent.read_text().replace("def test_", "@pytest.mark.slow\ndef test_"))
    project.makeini("[pytest]\nmarkers = slow\n")
    for update in ((), ("--snapshot-update",)):
        result = run(project, "alone", *args, *update)
        assert result.ret in (0, 5), result.stdout.str()  # 5: every test deselected
        assert "golden trace" not in result.stdout.str() and "unused" not in result.stdout.str()
        assert len(list(golden.iterdir())) == 2


def test_under_xdist_a_deselected_module_is_not_judged(project: pytest.Pytester) -> None:
    golden = record_goldens(project)
    result = run(project, "xdist", "-k", "plain", "--snapshot-update")
    assert result.ret == 0 and "unused" not in result.stdout.str()
    assert len(list(golden.iterdir())) == 2


@pytest.mark.parametrize("how", ["skipped", "failed"])
def test_goldens_of_a_test_that_did_not_pass_are_not_judged(project: pytest.Pytester, how: str) -> None:
    golden = record_goldens(project)
    stop = "pytest.skip('later')" if how == "skipped" else "raise RuntimeError('model server down')"
    (project.path / "tests" / "test_agent.py").write_text(  # no golden_trace any more, and neither test passes
        f"import pytest\n\n\ndef test_run():\n    {stop}\n\n\ndef test_records():\n    {stop}\n"
    )
    result = run(project, "alone")
    assert result.ret == (0 if how == "skipped" else 1)
    assert "golden trace" not in result.stdout.str()  # they may yet assert their goldens once they pass
    assert run(project, "alone", "--snapshot-update").ret == result.ret
    assert len(list(golden.iterdir())) == 2


# test_records as it would stop before its assertion (the model server down, a fixture that fails, a skip)
STOPPED = {
    "failed": "def test_records(tmp_path, golden_trace):\n    raise RuntimeError('model server down')\n",
    "errored in setup": (
        "@pytest.fixture\ndef broken():\n    raise RuntimeError('no database')\n\n\n"
        "def test_records(broken, tmp_path, golden_trace):\n    assert golden_trace == run(tmp_path / 'run.jsonl')\n"
    ),
    "errored in teardown": (
        "@pytest.fixture\ndef leaky():\n    yield\n    raise RuntimeError('left a file open')\n\n\n"
        "def test_records(leaky):\n    pass\n"
    ),
    "skipped": "def test_records(tmp_path, golden_trace):\n    pytest.skip('later')\n",
}


@pytest.mark.parametrize(("mode", "how"), [*(("alone", how) for how in STOPPED), ("xdist", "failed")])
def test_update_keeps_the_golden_of_a_test_that_stopped_before_its_assertion(
    project: pytest.Pytester, mode: str, how: str
) -> None:
    """Before: test_run still asserts a golden of the module, so syrupy judged the folder and deleted
    test_records.jsonl, whose test had failed (or errored) before it reached its assertion."""
    golden = record_goldens(project)
    kept = (golden / "test_records.jsonl").read_bytes()
    write_agent(project, bump=0, second=False)
    agent = project.path / "tests" / "test_agent.py"
    agent.write_text("import pytest\n" + agent.read_text() + "\n\n" + STOPPED[how])
    result = run(project, mode, "--snapshot-update")
    result.assert_outcomes(
        passed=2 + (how == "errored in teardown"), failed=how == "failed", skipped=how == "skipped",
        errors=how.startswith("errored"),
    )  # fmt: skip
    assert "deleted" not in result.stdout.str(), result.stdout.str()
    assert (golden / "test_records.jsonl").read_bytes() == kept


@pytest.mark.parametrize("mode", MODES)
def test_update_does_not_rewrite_the_golden_of_a_test_that_failed_after_its_assertion(
    project: pytest.Pytester, mode: str
) -> None:
    """Before: `--snapshot-update` wrote test_records' golden at its assertion, though the test failed after."""
    golden = record_goldens(project)
    before = {p.name: p.read_bytes() for p in golden.iterdir()}
    write_agent(project, bump=1)  # both goldens would change
    agent = project.path / "tests" / "test_agent.py"
    agent.write_text(agent.read_text() + "    assert False, 'a later check fails'\n")  # test_records fails after
    result = run(project, mode, "--snapshot-update")
    result.assert_outcomes(passed=2, failed=1)  # test_plain, test_run; test_records
    result.stdout.fnmatch_lines(
        ["*1 golden trace not written: its test did not pass*", "*tests/golden/test_agent/test_records.jsonl"]
    )
    assert (golden / "test_records.jsonl").read_bytes() == before["test_records.jsonl"]
    assert (golden / "test_run.jsonl").read_bytes() != before["test_run.jsonl"]  # test_run passed: updated


@pytest.mark.parametrize("mode", MODES)
def test_update_writes_the_golden_of_a_test_that_passed_before_the_session_was_killed(
    project: pytest.Pytester, mode: str
) -> None:
    """Before: goldens were written when the session ended; a SIGKILL of the session (alone) or of the xdist worker
    that ran test_run and test_records, after both passed, lost their updates, and nothing said so."""
    golden = record_goldens(project)
    before = {p.name: p.read_bytes() for p in golden.iterdir()}
    write_agent(project, bump=1)  # both goldens change, and both tests pass before test_zz_killed runs
    agent = project.path / "tests" / "test_agent.py"
    agent.write_text(
        agent.read_text() + "\n\ndef test_zz_killed():\n    import os, signal\n    os.kill(os.getpid(), 9)\n"
    )
    if mode == "alone":
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
            result = project.runpytest_subprocess(*PLUGINS, "--snapshot-update", "tests/test_agent.py")
        assert result.ret == -signal.SIGKILL, result.stdout.str()
    else:  # the whole module on one worker, not restarted once killed
        result = run(project, "xdist", "--dist", "loadfile", "--max-worker-restart", "0", "--snapshot-update")
        assert "crashed while running 'tests/test_agent.py::test_zz_killed'" in result.stdout.str()
    assert "deleted" not in result.stdout.str()
    assert all(p.read_bytes() != before[p.name] for p in golden.iterdir()), result.stdout.str()  # both updated
    assert run(project, "alone", "-k", "not killed").ret == 0  # and they match


def test_a_file_in_a_golden_folder_that_is_not_a_golden_is_left_alone(project: pytest.Pytester) -> None:
    (project.path / "tests" / "test_plain.py").write_text(PLAIN)
    notes = project.path / "tests" / "golden" / "test_plain" / "notes.jsonl"
    notes.parent.mkdir(parents=True)
    notes.write_text('{"mine": true}\n')
    assert run(project, "alone").ret == 0
    assert run(project, "alone", "--snapshot-update").ret == 0
    assert notes.read_text() == '{"mine": true}\n'


# --- goldens of a model agent: what varies between runs is left out, what matters is not ---------------------------

MODEL_AGENT = """
import os

import pytest
from chat_server import ChatServer
from stream_agent import make_agent

from harness import Executor

GOAL = {{"questions": [{question!r}]}}


@pytest.fixture
def server():
    s = ChatServer(int(os.environ["CHAT_PORT"]))  # the port the outer test chose: another one each run
    yield s
    s.stop()


def test_agent(server, tmp_path, golden_trace):
    planner, tools, _ = make_agent(server.url)
    outcome = Executor(planner=planner, tools=tools, trace=tmp_path / "run.jsonl").run(GOAL)
    assert golden_trace{options} == outcome
"""


def free_ports(n: int) -> list[int]:
    """n distinct ports of 127.0.0.1 that were free a moment ago."""
    import socket

    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def old_http_line(port: int) -> str:
    """The golden line of the agent's model call as harness 0.1.0 wrote it: the port and every chunk kept."""
    import stream_agent
    from chat_server import ChatServer

    from harness import Executor
    from harness.review.normalize import DROP
    from harness.testing import read_records

    server = ChatServer(port)
    try:
        with tempfile.TemporaryDirectory() as folder:
            planner, tools, _ = stream_agent.make_agent(server.url)
            trace = Path(folder) / "run.jsonl"
            Executor(planner=planner, tools=tools, trace=trace).run({"questions": ["what is a journal"]})
            (http,) = [r for r in read_records(trace) if r.get("boundary") == "http"]
    finally:
        server.stop()
    assert "chunks" in http["response"]
    return orjson.dumps({k: v for k, v in http.items() if k not in DROP}, option=orjson.OPT_SORT_KEYS).decode()


def model_project(project: pytest.Pytester, question: str, options: str = "") -> Path:
    pytest.importorskip("openai", reason="the model agent drives the real openai client")
    # imported here, before the in-process runs: pytester forgets the modules a run imported, and a second run
    # importing httpx again would meet the first run's classes in the openai client
    importlib.import_module("harness.http")
    tests = project.path / "tests"
    for helper in ("chat_server.py", "stream_agent.py"):
        shutil.copy(Path(__file__).with_name(helper), tests / helper)
    (tests / "test_model.py").write_text(MODEL_AGENT.format(question=question, options=options))
    return tests / "golden" / "test_model" / "test_agent.jsonl"


def at_port(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, port: int, *args: str) -> pytest.RunResult:
    monkeypatch.setenv("CHAT_PORT", str(port))
    return run(project, "alone", *args)


def test_a_model_agent_s_golden_still_matches_when_its_server_moves_to_another_port(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = free_ports(2)
    golden = model_project(project, "what is a journal")
    recorded = at_port(project, monkeypatch, first, "--snapshot-update")
    assert recorded.ret == 0, recorded.stdout.str()
    lines = golden.read_text().splitlines()
    (call,) = [orjson.loads(line) for line in lines if '"kind":"model_call"' in line]
    assert call == {  # what was asked and said: no URL, no port, no server id or time, no chunks
        "kind": "model_call", "via": "http", "model": "test-model",
        "messages": [{"role": "user", "text": "what is a journal"}],
        "reply": {"role": "assistant", "text": "echo: what is a journal"},
    }  # fmt: skip
    assert max(map(len, lines)) < 600 and "chunk" not in golden.read_text()

    moved = at_port(project, monkeypatch, second)  # the same agent, its model server on another port
    assert moved.ret == 0, moved.stdout.str()
    moved.stdout.fnmatch_lines(["*1 snapshot passed*"])

    # a golden an older harness wrote (format 2: the raw view, the stream as its chunks, the port as it was) is read
    # through today's view until --snapshot-update writes it as today's harness does
    old = ['{"format":"harness-golden","version":2}'] + [
        line if '"kind":"model_call"' not in line else old_http_line(first) for line in lines[1:]
    ]
    golden.write_text("\n".join(old) + "\n")
    assert at_port(project, monkeypatch, second).ret == 0
    model_project(project, "why append only")  # a real change against the old golden: it says what it is
    against_old = at_port(project, monkeypatch, first)
    assert against_old.ret == 1
    said = "\n".join(first_error_lines(against_old, 3))
    assert "golden written in format version 2 (the raw view" in said and "--snapshot-update" in said
    model_project(project, "what is a journal")
    rewritten = at_port(project, monkeypatch, second, "--snapshot-update")
    rewritten.stdout.fnmatch_lines(["*1 snapshot updated*"])
    assert golden.read_text().splitlines() == lines

    model_project(project, "why append only")  # a real change: another question, another answer
    changed = at_port(project, monkeypatch, first)
    assert changed.ret == 1
    said = "\n".join(first_error_lines(changed, 12))
    assert 'reply.text: "echo: what is a journal" -> "echo: why append only"' in said
    assert 'messages[0].text: "what is a journal" -> "why append only"' in said
    assert "url" not in said and "created" not in said


def test_project_rules_in_pyproject_and_an_assertion_s_own(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = free_ports(2)
    golden = model_project(project, "what is a journal")
    pyproject = project.path / "pyproject.toml"
    raw = 'golden_view = "raw"\n'  # each record as the trace holds it: the exchange, its URL and its port
    pyproject.write_text("[tool.harness]\ngolden_defaults = false\n" + raw)  # every value compared as recorded
    assert at_port(project, monkeypatch, first, "--snapshot-update").ret == 0
    exact = at_port(project, monkeypatch, second)
    assert exact.ret == 1
    said = "\n".join(first_error_lines(exact, 6))
    assert f'request.url: "http://127.0.0.1:{first}/v1/chat/completions" -> "http://127.0.0.1:{second}/v1' in said

    ignored = ["request.url", "response.stream.created", "response.stream.id"]
    pyproject.write_text(
        f"[tool.harness]\ngolden_defaults = false\ngolden_ignore = {ignored!r}\n".replace("'", '"') + raw
    )
    assert at_port(project, monkeypatch, first, "--snapshot-update").ret == 0
    assert '"url":"<ignored>"' in golden.read_text()
    assert at_port(project, monkeypatch, second).ret == 0

    pyproject.write_text("[tool.harness]\ngolden_defaults = false\n" + raw)  # the same rules, given by the assertion
    model_project(project, "what is a journal", options=f"(ignore={ignored!r})")
    assert at_port(project, monkeypatch, first).ret == 0  # the golden above, read through the assertion's rules
    model_project(project, "why append only", options=f"(ignore={ignored!r})")
    changed = at_port(project, monkeypatch, second)
    assert changed.ret == 1  # what moved is said under the assertion's rules: nothing of what it ignores
    said = "\n".join(first_error_lines(changed, 12))
    assert "response.stream.message.content" in said and "request.url" not in said and "stream.id" not in said

    model_project(project, "what is a journal", options='(ignore=["request..url"])')
    bad = at_port(project, monkeypatch, first)
    assert bad.ret == 1 and "field path 'request..url': cannot read it at character 8" in bad.stdout.str()
    pyproject.write_text('[tool.harness]\ngolden_ignore = "request.url"\n')
    wrong = at_port(project, monkeypatch, first)
    assert wrong.ret == 1
    wrong.stdout.fnmatch_lines(["*golden_trace: *pyproject.toml: [[]tool.harness[]] golden_ignore must be a list*"])


def test_a_golden_of_the_raw_view_names_it_and_one_written_before_still_passes(project: pytest.Pytester) -> None:
    """`golden_view = "raw"` writes `"view":"raw"` in the first line (what `harness diff` reads to compare it in
    that view); a raw golden whose first line says `"view":1` (written before) still passes, and an update
    rewrites its first line."""
    write_agent(project, bump=0, second=False)
    (project.path / "pyproject.toml").write_text('[tool.harness]\ngolden_view = "raw"\n')
    golden = project.path / "tests" / "golden" / "test_agent" / "test_run.jsonl"
    assert run(project, "alone", "--snapshot-update").ret == 0
    head, *records = golden.read_text().splitlines()
    assert head == '{"format":"harness-golden","version":3,"view":"raw"}'
    golden.write_text("\n".join(['{"format":"harness-golden","version":3,"view":1}', *records]) + "\n")
    assert run(project, "alone").ret == 0
    assert run(project, "alone", "--snapshot-update").ret == 0
    assert golden.read_text().splitlines()[0] == head
