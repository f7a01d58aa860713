"""The `harness` command line: a thin layer that parses arguments and calls the library.

Each command is one small function taking the parsed arguments and
returning an exit code; `COMMANDS` maps names to (function, argument setup).
Errors a user can cause (a missing file, a corrupt trace) print one line on
stderr and exit non-zero: never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from ._errors import HarnessError

Setup = Callable[[argparse.ArgumentParser], None]
Command = Callable[[argparse.Namespace], int]
COMMANDS: dict[str, tuple[str, Setup, Command]] = {}  # name -> (help, add arguments, run)


def command(name: str, help: str, setup: Setup) -> Callable[[Command], Command]:
    def register(fn: Command) -> Command:
        COMMANDS[name] = (help, setup, fn)
        return fn

    return register


# --- commands: each helper section below adds its own; keep them thin -------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="harness", description="Inspect, check and compare harness traces.")
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
    except BrokenPipeError:  # `harness show big.jsonl | head`
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
