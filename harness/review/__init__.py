"""Reviewing runs: normalize, diff, show, rerun and fork, and the runs listing (local folders and buckets).

Private: import the public names from `harness`. Imports only the layers below it (docs/ARCHITECTURE.md).
"""
