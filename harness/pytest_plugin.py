"""pytest plugin: the golden_trace fixture (see issue: golden traces)."""
