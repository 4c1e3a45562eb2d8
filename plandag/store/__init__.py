"""The run store: every run, plan version, step transition, decision and LLM call
in an embedded SQLite database (:mod:`plandag.store.store`), written by
:class:`~plandag.store.recorder.StoreRecorder` while a run goes on."""

import typing as _typing

from plandag.lazy import lazy_exports as _lazy_exports

if _typing.TYPE_CHECKING:
    from plandag.store.recorder import StoreRecorder as StoreRecorder
    from plandag.store.store import DecisionRow as DecisionRow
    from plandag.store.store import DocumentRow as DocumentRow
    from plandag.store.store import InstructionRow as InstructionRow
    from plandag.store.store import PlanVersionRow as PlanVersionRow
    from plandag.store.store import RunRow as RunRow
    from plandag.store.store import StepDecisionRow as StepDecisionRow
    from plandag.store.store import StepRow as StepRow
    from plandag.store.store import Store as Store
    from plandag.store.store import default_store_path as default_store_path
    from plandag.store.store import open_store as open_store

__all__ = [
    "DecisionRow",
    "DocumentRow",
    "InstructionRow",
    "PlanVersionRow",
    "RunRow",
    "StepDecisionRow",
    "StepRow",
    "Store",
    "StoreRecorder",
    "default_store_path",
    "open_store",
]

if not _typing.TYPE_CHECKING:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "StoreRecorder": ("plandag.store.recorder", "StoreRecorder"),
            "DecisionRow": ("plandag.store.store", "DecisionRow"),
            "DocumentRow": ("plandag.store.store", "DocumentRow"),
            "InstructionRow": ("plandag.store.store", "InstructionRow"),
            "PlanVersionRow": ("plandag.store.store", "PlanVersionRow"),
            "RunRow": ("plandag.store.store", "RunRow"),
            "StepDecisionRow": ("plandag.store.store", "StepDecisionRow"),
            "StepRow": ("plandag.store.store", "StepRow"),
            "Store": ("plandag.store.store", "Store"),
            "default_store_path": ("plandag.store.store", "default_store_path"),
            "open_store": ("plandag.store.store", "open_store"),
        },
    )
