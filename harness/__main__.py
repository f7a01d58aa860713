"""`python -m harness`: the `harness` command, where its console script is not on PATH (a CI image, say)."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
