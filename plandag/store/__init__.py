"""The run store (issue 6): every run, plan version, step transition, decision and LLM call
in an embedded SQLite database (:mod:`plandag.store.store`), written by
:class:`~plandag.store.recorder.StoreRecorder` while a run goes on."""

from plandag.store.recorder import StoreRecorder
from plandag.store.store import (
    DecisionRow,
    DocumentRow,
    InstructionRow,
    PlanVersionRow,
    RunRow,
    StepDecisionRow,
    StepRow,
    Store,
    default_store_path,
    open_store,
)

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
