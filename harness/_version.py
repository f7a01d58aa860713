"""harness's version: the one place it is written (pyproject.toml reads it from here when a wheel is built).

A constant rather than the installed metadata: looking that up costs every process that starts a run about 0.07 s
of CPU (importlib.metadata scans every distribution on sys.path), and the version is in each trace's header.
"""

VERSION = "0.4.0"
