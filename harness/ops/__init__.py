"""Operations on runs: recover (resume from the trace), reconcile, compaction of a run on object storage.
Bundles (export, import) are this layer's too, at their public path `harness.bundle`.

Private: import the public names from `harness`. Imports only the layers below it (docs/ARCHITECTURE.md).
"""
