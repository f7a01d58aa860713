"""The trace itself: the line format, the journal that writes it, the reader that checks it (`replay`), the
state table, the clock rules, seal, index, migration, annotations and redaction.

Private: import the public names from `harness`. Imports only `harness.storage` and `harness._errors`
(docs/ARCHITECTURE.md).
"""
