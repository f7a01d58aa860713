"""The `harness` command line: a thin layer that parses arguments and calls the library.

Each command is one small function taking the parsed arguments and
returning an exit code; `COMMANDS` maps names to (function, argument setup).
Errors a user can cause (a missing file, a corrupt trace) print one line on
stderr and exit non-zero: never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING, Any

from ._errors import HarnessError

if TYPE_CHECKING:
    from ._errors import TraceCorruption
    from .review.normalize import Rules

Setup = Callable[[argparse.ArgumentParser], None]
Command = Callable[[argparse.Namespace], int]
COMMANDS: dict[str, tuple[str, Setup, Command]] = {}  # name -> (help, add arguments, run)


def command(name: str, help: str, setup: Setup) -> Callable[[Command], Command]:
    def register(fn: Command) -> Command:
        COMMANDS[name] = (help, setup, fn)
        return fn

    return register


# --- commands: each helper section below adds its own; keep them thin -------------------


# --- show, replay, diff (issue 3: golden traces and diffs) -------------------------------


def _show_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", help="a trace (or a golden file)")
    view = p.add_mutually_exclusive_group()
    view.add_argument(
        "--golden", action="store_true",
        help="print the normalized JSONL a golden file holds (also the git textconv: docs/guides/diff-rerun-fork.md)",
    )  # fmt: skip
    view.add_argument("--json", action="store_true", help="print each record as read, one JSON object per line")
    view.add_argument("--record", type=int, metavar="SEQ", help="print the record at SEQ in full, indented")
    p.add_argument(
        "--width", type=int, metavar="N",
        help="wrap long values at N characters (default: the terminal's width, else 100)",
    )  # fmt: skip
    p.add_argument("--vector", action="store_true", help="print each record's agent and vector clock")
    _rules_args(p)


def _rules_args(p: argparse.ArgumentParser) -> None:
    """--config and --ignore: the review rules (harness.normalize's), as the project holding the trace sets them."""
    p.add_argument(
        "--config", metavar="PYPROJECT",
        help="read [tool.harness] from this pyproject.toml (default: the nearest one with that table at or above "
        "the trace, else the current directory's)",
    )  # fmt: skip
    p.add_argument(
        "--ignore", action="append", default=[], metavar="PATH",
        help="leave this field out (repeatable): request.url, response.body.usage, *.id; "
        "added to the project's [tool.harness] golden_ignore",
    )  # fmt: skip


def _rules(args: argparse.Namespace, *traces: str, defaults: bool | None = None) -> Rules:
    from .review.normalize import rules_for

    return rules_for(*traces, config=args.config, ignore=args.ignore, defaults=defaults)


@command(
    "show",
    "Print a trace as a timeline, whole values wrapped; a corrupt trace up to its damage. Exit 0, 1 corrupt, 2 error.",
    _show_setup,
)
def _show(args: argparse.Namespace) -> int:
    import shutil

    import orjson

    from ._errors import TraceCorruption
    from .review.show import View, show_trace
    from .trace.annotations import annotations

    view: View = "timeline"
    if args.golden or args.json or args.record is not None:
        view = "golden" if args.golden else "json" if args.json else "record"
    width = args.width or shutil.get_terminal_size((100, 24)).columns
    try:
        shown = show_trace(
            args.trace, sys.stdout.write, view=view, width=width, seq=args.record, vector=args.vector,
            rules=_rules(args, args.trace),
        )  # fmt: skip
    except TraceCorruption as e:
        sys.stdout.flush()  # what came before the damage, then the damage
        return _corruption(e)
    if view == "timeline" and shown is not None:  # notes added after the fact, outside the seal
        for note in annotations(args.trace):
            sys.stdout.write(f"{'note':>6}  {note['key']}: {orjson.dumps(note['value']).decode()}  ({note['at']})\n")
    return 0


_UNREADABLE = ("not-a-trace", "torn-header", "line-too-long", "schema")  # not a trace we can read at all: exit 2


def _corruption(e: TraceCorruption) -> int:
    """Print a TraceCorruption compiler style (for editors to jump to); its exit code."""
    where = f" (seq {e.seq})" if e.seq is not None else ""
    print(f"{e.path}:{e.line}: {e.reason}{where}: {e.detail}", file=sys.stderr)
    return 2 if e.reason in _UNREADABLE else 1


def _replay_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", help="the trace to validate")
    p.add_argument("--json", action="store_true", help='print {"ok": true, ...} or {"ok": false, "error": {...}}')


@command("replay", "Validate a trace and summarize it. Exit 0 valid, 1 corrupt, 2 unreadable.", _replay_setup)
def _replay(args: argparse.Namespace) -> int:
    import orjson

    from ._errors import TraceCorruption
    from .trace.reader import replay

    try:
        rep = replay(args.trace)
    except TraceCorruption as e:
        if not args.json:
            return _corruption(e)
        error = {"line": e.line, "seq": e.seq, "reason": e.reason, "detail": e.detail}
        sys.stdout.buffer.write(orjson.dumps({"ok": False, "error": error}) + b"\n")
        return 2 if e.reason in _UNREADABLE else 1
    except HarnessError as e:
        if not args.json:
            raise
        error = {"line": None, "seq": None, "reason": "unreadable", "detail": str(e)}
        sys.stdout.buffer.write(orjson.dumps({"ok": False, "error": error}) + b"\n")
        return 2
    summary = {
        "ok": True, "state": rep.state, "run_id": rep.run_id, "records": rep.records, "transitions": rep.transitions,
        "checkpoints": len(rep.checkpoints), "crossings": len(rep.crossings), "resumes": rep.resumes,
        "torn_tail": rep.torn_tail, "last_seq": rep.last_seq, "pending": rep.pending,
    }  # fmt: skip
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(summary) + b"\n")
        return 0
    print(f"{args.trace}: valid, state {rep.state}")
    counts = f"{rep.transitions} transitions, {len(rep.checkpoints)} checkpoints, {len(rep.crossings)} crossings"
    print(f"  run {rep.run_id}: {rep.records} records, {counts}, {rep.resumes} resumes")
    if rep.pending:
        if "question" in rep.pending:
            shown = orjson.dumps(rep.pending["question"]).decode()
            print(f"  paused on seq {rep.pending['seq']}: waiting for an answer to {shown} (harness resume --answer)")
        elif "budget" in rep.pending:
            print(f"  paused on seq {rep.pending['seq']}: {_paused_on_budget(rep.pending['budget'])}")
            print("  resume it with more (harness resume --budget-usd, --budget-tokens or --budget-model-calls)")
        else:
            from .review.results import hint

            print(f"  paused on seq {rep.pending['seq']}: {rep.pending['tool']} of uncertain outcome")
            said = hint(args.trace, rep)  # (None once reconciled: what is left is the resume)
            print(f"  {said}; then resume" if said is not None else "  reconciled: resume it (harness resume)")
    print(f"  torn tail: {'yes (an unfinished last line, set aside on resume)' if rep.torn_tail else 'no'}")
    return 0


def _paused_on_budget(budget: dict[str, Any]) -> str:
    """Why a run paused on its budget, in words: the limit its next live model call would have passed."""
    what = budget.get("exceeded")
    spent, limit = (budget.get("spent") or {}).get(what), (budget.get("limit") or {}).get(what)
    asked = (budget.get("call") or {}).get(what)
    return f"paused on its budget: {what} {spent} spent, its next model call would add {asked}, limit {limit}"


def _diff_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", help="a trace (or golden file)")
    p.add_argument("b", help="the trace to compare it with")
    p.add_argument("--format", choices=("text", "markdown", "json"), default="text", help="default: text")
    _rules_args(p)
    p.add_argument(
        "--no-defaults", action="store_true",
        help="compare what the default rules leave out (a loopback port, request ids, a model response's ids)",
    )  # fmt: skip
    p.add_argument(
        "--raw", action="store_true",
        help="compare each record as the trace holds it, not the behavior view of its model and tool calls",
    )  # fmt: skip


@command("diff", "Compare two traces after normalization. Exit 0 equal, 1 different, 2 error.", _diff_setup)
def _diff(args: argparse.Namespace) -> int:
    import orjson

    from .review.diff import diff

    rules = _rules(args, args.a, args.b, defaults=False if args.no_defaults else None)
    view = "raw" if args.raw else rules.view
    result = diff(args.a, args.b, ignore=rules.ignore, defaults=rules.defaults, view=view)
    if args.format == "json":
        sys.stdout.buffer.write(orjson.dumps(result.as_json(), option=orjson.OPT_INDENT_2) + b"\n")
    elif args.format == "markdown":
        sys.stdout.write(result.markdown())
    else:
        sys.stdout.write(result.text(limit=None))
    return 0 if result.equal else 1


# --- reconcile: an operator's word on a paused run ----------------------------------------


def _reconcile_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", help="the trace of the paused run")
    said = p.add_mutually_exclusive_group(required=True)
    said.add_argument("--happened", action="store_true", help="the operation took effect; give its --result")
    said.add_argument("--not-happened", action="store_true", help="it did not: the next resume calls the tool once")
    p.add_argument(
        "--result", metavar="JSON",
        help="with --happened: what the tool itself returned, as JSON (for an MCP tool its CallToolResult's wire "
        "JSON, or a string; for a Pydantic AI tool the function's value); checked before anything is written",
    )  # fmt: skip
    p.add_argument("--evidence", default="", metavar="TEXT", help="how you know (a ledger row, a receipt, a ticket)")


@command(
    "reconcile",
    "Record whether a paused run's uncertain operation happened; the next resume goes on from there.",
    _reconcile_args,
)
def _reconcile(args: argparse.Namespace) -> int:
    import orjson

    from .ops.reconcile import reconcile

    result = None
    if args.happened:
        if args.result is None:
            raise HarnessError("--happened needs --result JSON (--result null if it returned nothing)")
        try:
            result = orjson.loads(args.result)
        except orjson.JSONDecodeError as e:
            raise HarnessError(f"--result is not valid JSON ({e}); nothing was written") from None
    elif args.result is not None:
        raise HarnessError("--result goes with --happened; an operation that did not happen has no result")
    seq = reconcile(args.trace, happened=args.happened, result=result, evidence=args.evidence)
    said = "happened" if args.happened else "did not happen"
    print(f"{args.trace}: recorded (seq {seq}) that the operation {said}; resume the run to go on")
    return 0


# --- runs, rerun, fork (issue 4: recorded boundaries) ------------------------------------


STATUSES = ("running", "paused", "interrupted", "done", "failed", "unreadable")  # what `harness runs` reports


def _runs_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("folder", nargs="?", help="the runs folder (default: $HARNESS_RUNS_DIR, else ./runs)")
    p.add_argument("--json", action="store_true", help="print a JSON list of objects instead of a table")
    p.add_argument(
        "--status", action="append", metavar="STATUS",
        help=f"only runs in this status ({', '.join(STATUSES)}); repeat it or give a comma list for several",
    )  # fmt: skip


@command("runs", "List the runs in a runs folder: id, status, start and end, records, parent, path.", _runs_setup)
def _runs(args: argparse.Namespace) -> int:
    import orjson

    from .review.runs import list_runs

    wanted = {s.strip() for given in args.status or () for s in given.split(",") if s.strip()}
    unknown = sorted(wanted - set(STATUSES))
    if unknown:
        raise HarnessError(f"--status {', '.join(unknown)}: not a status; choose from {', '.join(STATUSES)}")
    runs = [r for r in list_runs(args.folder) if not wanted or r.status in wanted]
    if args.json:
        sys.stdout.buffer.write(orjson.dumps([r.to_json() for r in runs], option=orjson.OPT_INDENT_2) + b"\n")
        return 0
    rows: list[tuple[str, ...]] = [
        ("ID", "STATUS", "STARTED", "ENDED", "RECORDS", "ENTRYPOINT", "PARENT", "DETAIL", "CODE", "PATH")
    ]
    for r in runs:
        j = r.to_json()
        parent = f"{r.parent}@{r.branch}" if r.parent and r.branch is not None else r.parent or "-"
        ended, entry = j["ended"] or "-", r.entrypoint or "-"
        code = {"same": "same", "changed": "changed"}.get(r.code or "", "-")  # the code that recorded it, today
        cells = (r.id, r.status, j["started"] or "-", ended, str(r.records), entry, parent, r.detail or "-", code,
                 r.path)  # fmt: skip
        rows.append(tuple(map(_printable, cells)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[-1])
    return 0


def _printable(text: str) -> str:
    """A file name (or an id taken from one) that is not UTF-8, with its odd bytes as \\xNN escapes."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _agent_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", help="the recorded trace")
    _agent_or_workflow(p, required=True)
    p.add_argument(
        "--redact", action="append", default=[], metavar="RULE",
        help="a redaction rule to add to those the trace's header records (repeatable): "
        "a key name, a $.json.path, or re:REGEX",
    )  # fmt: skip


def _agent_or_workflow(p: argparse.ArgumentParser, *, required: bool, fork: bool = False) -> None:
    """--agent MODULE:FACTORY (an Executor's agent) or --workflow MODULE:ATTR (a workflow): one of the two."""
    which = p.add_mutually_exclusive_group(required=required)
    which.add_argument(
        "--agent", metavar="MODULE:FACTORY",
        help=("enable fork from the page with this agent factory (as `harness fork --agent`)" if fork else
              "factory returning (planner, tools, verifier), imported with the current directory on sys.path"),
    )  # fmt: skip
    which.add_argument(
        "--workflow", metavar="MODULE:ATTR",
        help=("enable fork from the page with this workflow (as `harness fork --workflow`)" if fork else
              "an @harness.workflow function, imported with the current directory on sys.path"),
    )  # fmt: skip


def _agent_of(args: argparse.Namespace) -> dict[str, Any]:
    """The agent the command re-executes or resumes, as keyword arguments: planner/tools/verifier, or workflow."""
    from .runtime.entry import load_agent, load_workflow

    if args.workflow is not None:
        return {"workflow": load_workflow(args.workflow)}
    planner, tools, verifier = load_agent(args.agent)
    return {"planner": planner, "tools": tools, "verifier": verifier}


def _how(args: argparse.Namespace) -> str:
    """The option naming the agent, for the commands a message suggests."""
    return f"--workflow {args.workflow}" if args.workflow is not None else f"--agent {args.agent}"


def _redact_rules(args: argparse.Namespace) -> list[Any]:
    import re

    rules: list[Any] = []
    for rule in args.redact:
        if rule.startswith("re:"):
            try:
                rules.append(re.compile(rule[3:]))
            except re.error as e:
                raise HarnessError(f"--redact {rule!r}: not a regular expression: {e}") from None
        else:
            rules.append(rule)
    return rules


def _rerun_setup(p: argparse.ArgumentParser) -> None:
    _agent_arg(p)
    p.add_argument("--out", help="also write the new trace here (a new file, or a new trace URL)")


@command("rerun", "Re-execute a recorded run, every boundary served from the recording (0 live calls).", _rerun_setup)
def _rerun(args: argparse.Namespace) -> int:
    from ._errors import ReplayDrift, ReplayViolation
    from .review.rerun import rerun

    agent = _agent_of(args)
    try:
        redact = _redact_rules(args)
        r = rerun(args.trace, **agent, out=args.out, redact=redact)
    except (ReplayDrift, ReplayViolation) as e:
        print(f"{args.trace}:{e.line}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except HarnessError:
        raise
    except Exception as e:  # the agent's own failure: its cause, not a traceback
        from .storage import exists

        kept = f"; what was written up to it is in {args.out}" if args.out and exists(args.out) else ""
        print(f"harness rerun: the agent raised {_cause(e)}{kept}", file=sys.stderr)
        return 1
    where = f", written to {r.trace}" if args.out else ""
    if r.equal:
        print(f"equal: {len(r.records)} records, {r.live_calls} live calls, state {r.state}{where}")
        return 0
    unused = f", {r.unused} recorded crossings unused" if r.unused else ""
    print(f"different: {len(r.records)} records, {r.live_calls} live calls{unused}{where}")
    _show_diff(args.trace, list(r.records))
    return 1


def _fork_setup(p: argparse.ArgumentParser) -> None:
    _agent_arg(p)
    p.add_argument("--at", required=True, type=int, metavar="SEQ", help="seq of the crossing to change (see `show`)")
    value = p.add_mutually_exclusive_group(required=True)
    value.add_argument(
        "--set", action="append", metavar="PATH=VALUE",
        help="replace one field of the recorded response (repeatable): VALUE is JSON, or a bare string when it "
        "does not parse; PATH as `show` prints the response (stream.message.content for a streamed reply). "
        "A whole JSON value alone replaces the whole response",
    )  # fmt: skip
    value.add_argument("--set-text", metavar="TEXT", help="the new response of that crossing: this string")
    p.add_argument("--out", help="the child trace, a path or URL (default: <child run id>.jsonl beside the parent)")


def _settings(given: list[str]) -> tuple[Any, dict[str, Any] | None]:
    """(whole value, None) for `--set JSON` alone; (None, {path: value}) for `--set PATH=VALUE` ones."""
    import orjson

    whole, fields = [], {}
    for text in given:
        try:
            whole.append(orjson.loads(text))  # no PATH=VALUE is valid JSON: `=` stands only inside a string there
            continue
        except orjson.JSONDecodeError as e:
            why = e
        path, eq, raw = text.partition("=")
        if not eq or not path.strip():
            raise HarnessError(
                f"--set {text!r} is neither valid JSON ({why}) nor PATH=VALUE (stream.message.content=hello); "
                "for the whole response as a string, --set-text TEXT"
            )
        try:
            fields[path.strip()] = orjson.loads(raw)
        except orjson.JSONDecodeError:
            fields[path.strip()] = raw  # a bare string: --set stream.message.content=yes, go ahead
    if whole and (fields or len(whole) > 1):
        raise HarnessError("--set: give either one whole JSON value, or PATH=VALUE settings, not both")
    return (whole[0], None) if whole else (None, fields)


@command("fork", "Re-execute a run up to a crossing, answer it with another value, and run the rest live.", _fork_setup)
def _fork(args: argparse.Namespace) -> int:
    from ._errors import ReplayDrift, ReplayViolation
    from .review.rerun import fork

    value: Any = args.set_text
    fields = None
    if args.set is not None:
        value, fields = _settings(args.set)
    change: dict[str, Any] = {"value": value} if fields is None else {"set": fields}
    agent = _agent_of(args)
    try:
        redact = _redact_rules(args)
        r = fork(args.trace, at=args.at, **agent, out=args.out, redact=redact, **change)
    except (ReplayDrift, ReplayViolation) as e:
        print(f"{args.trace}:{e.line}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except HarnessError:
        raise
    except Exception as e:  # the agent's own failure (a model server that is down): its cause, not a traceback
        print(
            f"harness fork: the agent raised {_cause(e)}; the fork did not finish and its child trace was "
            "removed (a failed fork leaves no file)",
            file=sys.stderr,
        )
        return 1
    print(f"{r.trace}: fork {r.run_id} of {r.parent} at seq {r.branch}: {r.live_calls} live calls, state {r.state}")
    if any(agent != "main" for agent in r.live_calls_by_agent):  # a causal fork: which agents ran live
        print("live calls by agent: " + ", ".join(f"{a} {n}" for a, n in r.live_calls_by_agent.items()))
    return 0


def _cause(e: BaseException) -> str:
    """`URLError: <urlopen error [Errno 111] Connection refused>` on one line, for an exception from agent code."""
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


# --- resume, recover (issue 13: operations) ---------------------------------------------


def _resume_setup(p: argparse.ArgumentParser) -> None:
    _agent_arg(p)
    p.add_argument("--answer", metavar="JSON", help="the answer to the question the run paused on (interrupt())")
    p.add_argument("--budget-usd", type=float, metavar="USD", help="what its live model calls may spend in all, in "
                   "USD (needs --prices); a call that would pass it pauses the run first")  # fmt: skip
    p.add_argument("--budget-tokens", type=int, metavar="N", help="the tokens its live model calls may use in all")
    p.add_argument("--budget-model-calls", type=int, metavar="N", help="the live model calls it may make in all")
    p.add_argument("--prices", metavar="TOML", help="the price list --budget-usd reads (as `harness cost --prices`)")
    _run_options(p)


def _budget_of(args: argparse.Namespace) -> Any:
    """The harness.Budget the --budget-* flags give (None without them); a bad one is a HarnessError."""
    from .runtime.budget import Budget

    limits = {"usd": args.budget_usd, "tokens": args.budget_tokens, "model_calls": args.budget_model_calls}
    if all(v is None for v in limits.values()):
        if args.prices is not None:
            raise HarnessError("--prices is for --budget-usd: give it too; nothing was written")
        return None
    if args.budget_usd is not None and args.prices is None:
        raise HarnessError("--budget-usd needs --prices PRICES.toml (the price list `harness cost --prices` reads, USD "
                           "per million tokens); nothing was written")  # fmt: skip
    try:
        return Budget(**limits, prices=args.prices)
    except ValueError as e:
        raise HarnessError(f"{e} (--budget-usd, --budget-tokens, --budget-model-calls); nothing was written") from None


def _run_options(p: argparse.ArgumentParser) -> None:
    """What the resumed runs were started with, beyond what their traces record."""
    p.add_argument("--key", help="HMAC key to seal the run with when it ends (default: $HARNESS_SEAL_KEY)")
    p.add_argument("--durability", choices=("flush", "fsync"), default="flush", help="as the run was started with")


@command(
    "resume",
    "Resume a crashed, reconciled or interrupted run from its trace. "
    "Exit 0 DONE, 1 FAILED (or the agent raised), 2 bad input, 3 PAUSED.",
    _resume_setup,
)
def _resume(args: argparse.Namespace) -> int:
    import orjson

    from .ops.recover import resume
    from .runtime.resume import NO_ANSWER

    answer = NO_ANSWER
    if args.answer is not None:
        try:
            answer = orjson.loads(args.answer)
        except orjson.JSONDecodeError as e:
            raise HarnessError(f"--answer is not valid JSON ({e}); nothing was written") from None
    budget = _budget_of(args)
    agent = _agent_of(args)
    try:
        out = resume(
            args.trace, **agent, answer=answer, redact=_redact_rules(args), seal_key=args.key,
            durability=args.durability, budget=budget,
        )  # fmt: skip
    except HarnessError:
        raise
    except Exception as e:  # the agent's own failure: its cause, not a traceback (the trace's crash record has it)
        print(f"harness resume: the agent raised {_cause(e)}; its crash record is in {args.trace}", file=sys.stderr)
        return 1
    print(f"{args.trace}: {out.state}, {len(out.checkpoints)} checkpoints")
    if out.state == "FAILED" and out.error is not None:
        print(f"  {out.error.get('type')}: {out.error.get('message')}")
    if out.state == "PAUSED" and out.pending is not None:
        if "question" in out.pending:
            shown = orjson.dumps(out.pending["question"]).decode()
            print(f"  waiting for an answer to {shown}")
            print(f"  answer it: harness resume {args.trace} {_how(args)} --answer JSON")
        elif "budget" in out.pending:
            print(f"  {_paused_on_budget(out.pending['budget'])}")
            print(f"  go on: harness resume {args.trace} {_how(args)} with a larger --budget-...")
        else:
            from .review.results import hint
            from .trace.reader import replay

            print(f"  uncertain operation: {out.pending.get('tool')} at seq {out.pending.get('seq')}")
            print(f"  {hint(args.trace, replay(args.trace))}")
    return {"DONE": 0, "FAILED": 1}.get(out.state, 3)


def _recover_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("folder", nargs="?", help="the runs folder (default: $HARNESS_RUNS_DIR, else ./runs)")
    _agent_or_workflow(p, required=True)
    p.add_argument(
        "--redact", action="append", default=[], metavar="RULE",
        help="a redaction rule the runs were recorded with, beyond the defaults (repeatable)",
    )  # fmt: skip
    p.add_argument("--parallel", type=int, default=1, metavar="N", help="resume N runs at once (default 1)")
    p.add_argument("--json", action="store_true", help="print a JSON list of rows instead of a table")
    _run_options(p)


@command(
    "recover",
    "Resume every run of a runs folder that stopped without ending; report what was done. Exit 1 if one failed.",
    _recover_setup,
)
def _recover(args: argparse.Namespace) -> int:
    import orjson

    from .ops.recover import recover

    if args.parallel < 1:
        raise HarnessError(f"--parallel {args.parallel}: give at least 1")
    rows = recover(
        args.folder, **_agent_of(args), parallel=args.parallel, agent=args.workflow or args.agent,
        redact=_redact_rules(args), seal_key=args.key, durability=args.durability,
    )  # fmt: skip
    bad = any(r.action in ("error", "crashed") for r in rows)
    if args.json:
        sys.stdout.buffer.write(orjson.dumps([r.to_json() for r in rows], option=orjson.OPT_INDENT_2) + b"\n")
        return 1 if bad else 0
    if not rows:
        print("nothing to recover: every run has ended")
        return 0
    table = [("RUN", "WAS", "ACTION", "NOW", "DETAIL")]
    table += [(r.run_id, r.was, r.action, r.state or "-", r.detail) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]) - 1)]
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[-1])
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.action] = counts.get(r.action, 0) + 1
    print(", ".join(f"{n} {action}" for action, n in sorted(counts.items())))
    return 1 if bad else 0


def _show_diff(recording: str, records: list[dict[str, Any]]) -> None:
    from .review.diff import diff

    for line in diff(recording, records).lines(a="recording", b="rerun", limit=20):
        print(line)


# --- serve: the web viewer (issue 10) -------------------------------------------------------


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port: give a number from 0 to 65535 (0 picks a free one)")
    return port


def _serve_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("folder", nargs="?", metavar="RUNS_DIR", help="default: $HARNESS_RUNS_DIR, else ./runs")
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1, this machine)")
    p.add_argument("--port", type=_port, default=8000, help="default: 8000; 0 picks a free port")
    _agent_or_workflow(p, required=False, fork=True)
    p.add_argument(
        "--allow-remote-fork", action="store_true",
        help="allow --agent with a --host other machines can reach (anyone who reaches it can run forks)",
    )  # fmt: skip
    _rules_args(p)


@command("serve", "Browse runs in a web browser, live while they are written (needs harness-trace[web]).", _serve_setup)
def _serve(args: argparse.Namespace) -> int:
    from .storage import runs_dir
    from .viewer import serve

    serve(
        args.folder, host=args.host, port=args.port, agent=args.agent, workflow=args.workflow,
        allow_remote_fork=args.allow_remote_fork, rules=_rules(args, runs_dir(args.folder)),
    )  # fmt: skip
    return 0


# --- seal, verify, annotate, export, import, migrate (issue 11: sealed records) -----------


def _seal_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", help="the trace of a run that ended (DONE or FAILED) without a seal")
    p.add_argument("--key", help="HMAC key for a keyed seal (default: $HARNESS_SEAL_KEY; none: unkeyed)")


@command("seal", "Seal a run that ended without a seal; a sealed trace is immutable.", _seal_setup)
def _seal(args: argparse.Namespace) -> int:
    from .trace.verify import seal

    done = seal(args.trace, seal_key=args.key)
    how = "keyed (HMAC-SHA256)" if done.keyed else "unkeyed (content hash)"
    print(f"{args.trace}: {'already sealed' if done.already else 'sealed'}, {how}, seal at seq {done.seq}")
    return 0


@command(
    "verify", "Check the seal, every blob and every line. Exit 0 sealed and intact, 1 not, 2 unreadable.", _seal_setup
)
def _verify(args: argparse.Namespace) -> int:
    from .trace.verify import verify

    v = verify(args.trace, seal_key=args.key)
    print("\n".join(v.report()))
    return 0 if v.ok else 2 if v.unreadable else 1


def _annotate_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", help="the run's trace")
    p.add_argument("--note", required=True, metavar="TEXT", help="the note")
    p.add_argument("--key", default="note", help="what kind of note (default: note)")


@command("annotate", "Add a note to a run, beside its trace and outside its seal.", _annotate_setup)
def _annotate(args: argparse.Namespace) -> int:
    from .trace.annotations import annotate, annotations_path

    annotate(args.trace, args.key, args.note)
    print(f"{args.trace}: noted in {annotations_path(args.trace)}")
    return 0


def _export_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", nargs="+", help="traces, or runs folders (a path or a URL: a bundle takes one, --all)")
    p.add_argument("--all", action="store_true", help="every run of the runs folder, sealed or not")
    p.add_argument("-o", "--out", help="the zip to write (a local file)")
    p.add_argument(
        "--otlp", metavar="OUT.jsonl",
        help="instead, write each run as OpenTelemetry GenAI spans: one OTLP/JSON ExportTraceServiceRequest a line",
    )  # fmt: skip
    p.add_argument(
        "--otlp-endpoint", metavar="URL",
        help="instead, send the spans to an OTLP/HTTP receiver: its base URL (http://localhost:4318), /v1/traces added",
    )  # fmt: skip
    p.add_argument(
        "--otlp-protocol", choices=("http/protobuf", "http/json"), default="http/protobuf",
        help="with --otlp-endpoint: http/protobuf (default; needs harness-trace[otel]) or http/json",
    )  # fmt: skip
    p.add_argument(
        "--otlp-header", action="append", default=[], metavar="KEY=VALUE",
        help="with --otlp-endpoint: a header to send (repeatable), over $OTEL_EXPORTER_OTLP_HEADERS",
    )  # fmt: skip
    p.add_argument("--retries", type=int, default=5, metavar="N", help="with --otlp-endpoint: tries per batch (5)")
    p.add_argument(
        "--content", action="store_true",
        help="with --otlp*: add the messages, tool arguments and results (redacted again); left out by default",
    )  # fmt: skip
    p.add_argument(
        "--redact", action="append", default=[], metavar="RULE",
        help="with --content: a redaction rule to add to the trace's (repeatable): a key, a $.json.path, or re:REGEX",
    )  # fmt: skip
    p.add_argument("--service", default="harness", help="with --otlp*: the spans' service.name (default: harness)")
    _check_arg(p)


def _check_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--check", action="store_true",
        help="read each trace through replay(), every rule of its story checked (slower; by default each line is "
        "checked against the checksum chain)",
    )  # fmt: skip


@command(
    "export",
    "Bundle runs (sealed, or unfinished as they stand), their blobs and annotations into a zip with a manifest; "
    "or, with --otlp / --otlp-endpoint, export them as OpenTelemetry spans.",
    _export_setup,
)
def _export(args: argparse.Namespace) -> int:
    chosen = [o for o in ("out", "otlp", "otlp_endpoint") if getattr(args, o) is not None]
    if len(chosen) != 1:
        raise HarnessError("give one of -o ZIP (a bundle), --otlp OUT.jsonl or --otlp-endpoint URL")
    if args.otlp is not None or args.otlp_endpoint is not None:
        return _export_otlp(args)
    from .bundle import export, runs_in

    if len(args.source) != 1:
        raise HarnessError("a bundle takes one trace (or one runs folder with --all)")
    traces = runs_in(args.source[0]) if args.all else args.source
    done = export(traces, args.out)
    print(f"{done.path}: {len(done.runs)} runs, {len(done.files)} files, {done.bytes} bytes{_unsealed(done)}")
    return 0


def _export_otlp(args: argparse.Namespace) -> int:
    redact = _redact_rules(args)
    options = {"content": args.content, "redact": redact, "service": args.service, "full": args.check}
    if args.otlp is not None:
        from .ops.otlp import export

        done = export(args.source, args.otlp, **options)
        print(f"{done.path}: {done.runs} runs, {done.spans} spans (OTLP/JSON, one request a line)")
        return 0
    from .ops.otlp_http import send

    headers = {}
    for pair in args.otlp_header:
        key, eq, value = pair.partition("=")
        if not eq or not key.strip():
            raise HarnessError(f"--otlp-header {pair!r}: give KEY=VALUE")
        headers[key.strip().lower()] = value.strip()
    sent = send(
        args.source, args.otlp_endpoint, protocol=args.otlp_protocol, headers=headers, attempts=args.retries,
        **options,
    )  # fmt: skip
    print(f"{sent.url}: {sent.runs} runs, {sent.spans} spans in {sent.requests} requests ({args.otlp_protocol})")
    return 0


# --- cost: model calls and tokens of runs, live apart from served (issue 38) --------------------------------


def _cost_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", nargs="+", help="traces, or runs folders (paths or URLs)")
    p.add_argument(
        "--prices", metavar="PRICES.toml",
        help='USD per million tokens by model: [models."gpt-4o-mini"] input = 0.15, output = 0.60, '
        "cached_input = 0.075",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the ledger as JSON")
    _check_arg(p)


@command(
    "cost",
    "Count each run's model calls and tokens by model, live apart from served (a rerun's, a fork's reused ones); "
    "with --prices, in USD.",
    _cost_setup,
)
def _cost(args: argparse.Namespace) -> int:
    import orjson

    from .review.cost import ledger

    book = ledger(args.source, prices=args.prices, full=args.check)
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(book.to_json(), option=orjson.OPT_INDENT_2) + b"\n")
    else:
        sys.stdout.write(book.text())
    return 0


def _unsealed(done: Any) -> str:
    return f"; unsealed (kept so): {', '.join(done.unsealed)}" if done.unsealed else ""


def _import_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("bundle", help="a zip written by `harness export`")
    p.add_argument("--into", help="the runs folder or runs URL (default: $HARNESS_RUNS_DIR, else ./runs)")


@command("import", "Check a bundle completely, then add its runs to a runs folder.", _import_setup)
def _import(args: argparse.Namespace) -> int:
    from .bundle import import_bundle
    from .storage import runs_dir

    done = import_bundle(args.bundle, runs_dir(args.into))
    same = f", {len(done.skipped)} already there" if done.skipped else ""
    print(f"{done.path}: imported {len(done.runs)} runs, {len(done.files)} files{same}{_unsealed(done)}")
    return 0


def _migrate_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", help="a trace written by an older harness")
    p.add_argument(
        "--out", metavar="NEW",
        help="write the migrated trace to NEW (a new path or URL), leaving the original as it is; "
        "required for a trace on object storage",
    )  # fmt: skip


@command("migrate", "Upgrade a trace of an older schema in place, keeping a backup.", _migrate_setup)
def _migrate(args: argparse.Namespace) -> int:
    from .trace.migrate import migrate

    m = migrate(args.trace, out=args.out)
    if m.backup is None:
        print(f"{args.trace}: already schema {m.to_schema}; nothing to do")
        return 0
    if m.out is not None:
        print(f"{m.out}: the migrated copy of {args.trace}, schema {m.from_schema} -> {m.to_schema} "
              f"({m.records_before} -> {m.records_after} records); the original is unchanged")  # fmt: skip
        if m.state in ("DONE", "FAILED"):
            print(f"  the run ended {m.state}; seal it with `harness seal {m.out}`")
        return 0
    print(f"{args.trace}: migrated from schema {m.from_schema} to {m.to_schema} ({m.records_before} -> "
          f"{m.records_after} records); the original is kept in {m.backup}")  # fmt: skip
    if m.torn_bytes:
        print(f"  a torn tail of {m.torn_bytes} bytes was left out (it is in the backup)")
    if m.state in ("DONE", "FAILED"):
        print(f"  the run ended {m.state}; seal it with `harness seal {args.trace}`")
    return 0


# --- compact: a sealed run's segments on object storage, merged (issue 16) -------------------


def _compact_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", help="a trace URL (s3://bucket/runs/<run>.jsonl), or a runs URL with --all")
    p.add_argument("--all", action="store_true", help="every sealed run under the runs URL (others are skipped)")


@command(
    "compact",
    "Merge the segments of a sealed run on object storage into one object; readers stay correct meanwhile.",
    _compact_setup,
)
def _compact(args: argparse.Namespace) -> int:
    from .ops.compact import compact, compact_runs
    from .storage import is_url

    if not is_url(args.trace):
        raise HarnessError(f"{args.trace}: a local trace is one file already; compact takes a trace URL on a store")
    done = compact_runs(args.trace) if args.all else [compact(args.trace)]
    for c in done:
        if isinstance(c, HarnessError):
            print(f"skipped: {c}")
        elif c.before == c.after:
            print(f"{c.url}: one object already; nothing to do")
        else:
            print(f"{c.url}: {c.before} objects -> {c.after}, {c.bytes} bytes")
    return 0


# --- fleet: many runs on Ray (issue 16) ---------------------------------------------------


def _fleet_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("goals", help="a JSON-lines file: one goal (a JSON value) a line")
    _agent_or_workflow(p, required=True)
    p.add_argument("--runs", required=True, metavar="URL", help="where the traces go: a URL every worker reaches")
    p.add_argument("--batch", help="names the traces (<batch>-<index>.jsonl); default: a digest of agent and goals")
    p.add_argument("--max-retries", type=int, default=3, metavar="N", help="Ray retries of a task whose worker died")
    p.add_argument("--address", help="the Ray cluster to use (default: a local one; 'auto' for `ray start`'s)")
    p.add_argument("--json", action="store_true", help="print one JSON object per goal")


@command(
    "fleet",
    "Run every goal of a JSON-lines file as one Ray task, resumable from its trace. Exit 0 all DONE, 1 not, 2 error.",
    _fleet_setup,
)
def _fleet(args: argparse.Namespace) -> int:
    import orjson

    from .ray import read_goals, run_many

    goals = read_goals(args.goals)
    outcomes = run_many(
        goals, agent=args.agent, workflow=args.workflow, runs=args.runs, batch=args.batch,
        max_retries=args.max_retries, address=args.address,
    )  # fmt: skip
    for i, o in enumerate(outcomes):
        if args.json:
            row = {"index": i, "state": o.state, "run_id": o.run_id, "trace": o.trace, "error": o.error}
            sys.stdout.buffer.write(orjson.dumps(row) + b"\n")
        else:
            print(f"{i}  {o.state:<7} {o.trace}")
    states = [o.state for o in outcomes]
    counts = ", ".join(f"{states.count(s)} {s}" for s in dict.fromkeys(states))
    print(f"harness fleet: {len(outcomes)} runs: {counts}", file=sys.stderr)
    return 0 if all(s == "DONE" for s in states) else 1


# --- check (issue 37: will the current code replay the recorded runs?) ----------------------------------


def _check_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH", help="a trace, or a runs folder (its *.jsonl traces)")
    _agent_or_workflow(p, required=True)
    p.add_argument("--json", action="store_true", help="print one JSON object per run (JSON lines), then no summary")
    p.add_argument(
        "-j", "--jobs", type=int, default=1, metavar="N",
        help="check N runs at once, in N processes (default 1; 0: one per CPU)",
    )  # fmt: skip


@command(
    "check",
    "Replay recorded runs offline against the current code, writing nothing: ok, would go live, or drift. "
    "Exit 0 when every run is ok, 1 on a drift, 2 on bad input.",
    _check_setup,
)
def _check(args: argparse.Namespace) -> int:
    import orjson

    from .ops.check import check, exit_code, runs_of, summary

    jobs = args.jobs if args.jobs > 0 else (os.cpu_count() or 1)
    if args.jobs < 0:
        raise HarnessError(f"--jobs {args.jobs}: give 1 or more (0: one per CPU)")
    bar = _Progress() if sys.stderr.isatty() else None
    runs = runs_of(args.paths)
    if not runs:
        raise HarnessError(f"no trace in {', '.join(args.paths)}")
    with _stdout_kept() as out:
        results: list[Any] = []

        def each(r: Any) -> None:
            results.append(r)
            if bar is not None:
                bar.clear()
            out.write((orjson.dumps(r.to_json()).decode() if args.json else r.line()) + "\n")
            out.flush()
            if bar is not None:
                bar.step()

        if bar is not None:
            bar.total = len(runs)
        try:
            check(runs, **_agent_of(args), jobs=jobs, on_result=each)
        except KeyboardInterrupt:  # Ctrl-C: the lines printed stand; no traceback, the workers stopped
            if bar is not None:
                bar.clear()
            print(f"harness check: interrupted after {len(results)} of {len(runs)} runs", file=sys.stderr)
            return 130
        if bar is not None:
            bar.clear()
        if not args.json:
            out.write(summary(results) + "\n")
    if all(r.status == "skipped" for r in results):  # (an unreadable run says so on its line and in the summary)
        print("harness check: no run was checked: none of them is a run of this agent (see the lines)", file=sys.stderr)
    return exit_code(results)


@contextlib.contextmanager
def _stdout_kept() -> Iterator[IO[str]]:
    """The command's stdout, for its own lines; meanwhile fd 1 (and so sys.stdout) is stderr, so what the agent's
    code prints, in this process or in a forked worker, cannot mix into them (`--json` lines stay parseable).
    A sys.stdout that is not fd 1 (main() called with stdout captured) is used as it is."""
    try:
        real = sys.stdout.fileno() == 1
    except (AttributeError, OSError, ValueError):
        real = False
    if not real:  # (what the agent prints there goes to stderr too; a forked worker's fd 1 is left as it is)
        out = sys.stdout
        with contextlib.redirect_stdout(sys.stderr):
            yield out
        return
    sys.stdout.flush()
    kept = os.dup(1)
    os.dup2(2, 1)
    try:
        with open(kept, "w", encoding="utf-8", closefd=False) as out:
            yield out
    finally:
        sys.stdout.flush()  # what the agent printed and Python still buffers goes to stderr too
        os.dup2(kept, 1)
        os.close(kept)


class _Progress:
    """A progress bar on stderr (a terminal only): `[#####     ] 512/1000`, redrawn in place."""

    def __init__(self) -> None:
        self.total, self.done = 0, 0

    def step(self) -> None:
        self.done += 1
        width = 30
        filled = width * self.done // max(self.total, 1)
        sys.stderr.write(f"\r[{'#' * filled}{' ' * (width - filled)}] {self.done}/{self.total}")
        sys.stderr.flush()

    def clear(self) -> None:
        sys.stderr.write("\r\033[K")
        sys.stderr.flush()


class _Version(argparse.Action):
    """`harness --version`: the installed distribution's version, read only when asked (importlib.metadata is slow)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print harness's version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        from ._version import VERSION

        print(f"harness {VERSION}")
        parser.exit()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="harness", description="Inspect, check and compare harness traces.")
    p.add_argument("--version", action=_Version)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (text, setup, fn) in COMMANDS.items():
        sp = sub.add_parser(name, help=text, description=text)
        setup(sp)
        sp.set_defaults(run=fn)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.run(args))
    except HarnessError as e:
        print(f"harness {args.command}: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `harness show big.jsonl | head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush cannot fail again
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
