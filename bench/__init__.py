"""Benchmarks of harness against its baselines; run `python bench/run.py --help`."""
