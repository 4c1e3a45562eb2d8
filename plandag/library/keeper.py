"""``plandag gc`` keeps the plan library: the runs that produced a kept version stay, with
their rows, traces and blobs (:func:`plandag.store.gc.register_keeper`). The versions
themselves (``library_plan`` rows) are not run rows: gc never deletes them; ``plandag
library rm`` does."""

from __future__ import annotations

from plandag.library.catalog import PlanLibrary
from plandag.store.gc import Keep, register_keeper
from plandag.store.store import Store

__all__ = ["keep_library_runs"]


@register_keeper
def keep_library_runs(store: Store) -> Keep:
    """The runs that produced a version kept in the library (gc keeps them)."""
    return Keep(run_ids=PlanLibrary(store).source_runs())
