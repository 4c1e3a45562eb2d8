"""Escalation to a person (ARCHITECTURE.md, "States", "People in the loop"): the case a
person gets when a run cannot go on by itself (:mod:`plandag.escalation.context`) and the
hooks called with it (:mod:`plandag.escalation.hooks`). The run store keeps each case in
its ``escalation`` table until a person resumes, approves or abandons the run
(:mod:`plandag.runs`; ``plandag inbox`` lists the open ones)."""

import typing as _typing

from plandag.lazy import lazy_exports as _lazy_exports

if _typing.TYPE_CHECKING:
    from plandag.escalation.context import APPROVABLE_REASONS as APPROVABLE_REASONS
    from plandag.escalation.context import RESULT_CHARS as RESULT_CHARS
    from plandag.escalation.context import escalation_actions as escalation_actions
    from plandag.escalation.context import escalation_context as escalation_context
    from plandag.escalation.context import run_context as run_context
    from plandag.escalation.hooks import DEFAULT_HOOK_TIMEOUT_S as DEFAULT_HOOK_TIMEOUT_S
    from plandag.escalation.hooks import EscalationCallback as EscalationCallback
    from plandag.escalation.hooks import EscalationHooks as EscalationHooks
    from plandag.escalation.hooks import HookOutcome as HookOutcome
    from plandag.escalation.hooks import as_hooks as as_hooks

__all__ = [
    "APPROVABLE_REASONS",
    "DEFAULT_HOOK_TIMEOUT_S",
    "RESULT_CHARS",
    "EscalationCallback",
    "EscalationHooks",
    "HookOutcome",
    "as_hooks",
    "escalation_actions",
    "escalation_context",
    "run_context",
]

if not _typing.TYPE_CHECKING:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "APPROVABLE_REASONS": ("plandag.escalation.context", "APPROVABLE_REASONS"),
            "RESULT_CHARS": ("plandag.escalation.context", "RESULT_CHARS"),
            "escalation_actions": ("plandag.escalation.context", "escalation_actions"),
            "escalation_context": ("plandag.escalation.context", "escalation_context"),
            "run_context": ("plandag.escalation.context", "run_context"),
            "DEFAULT_HOOK_TIMEOUT_S": ("plandag.escalation.hooks", "DEFAULT_HOOK_TIMEOUT_S"),
            "EscalationCallback": ("plandag.escalation.hooks", "EscalationCallback"),
            "EscalationHooks": ("plandag.escalation.hooks", "EscalationHooks"),
            "HookOutcome": ("plandag.escalation.hooks", "HookOutcome"),
            "as_hooks": ("plandag.escalation.hooks", "as_hooks"),
        },
    )
