"""Who approves plans with effects (ARCHITECTURE.md, "People in the loop").

The gate itself (which plans need a person, :class:`ApprovalRequest`, :class:`Decision`,
:func:`plan_hash`, ``approve=`` modes) is :mod:`plandag.scheduler.gate`, below the
scheduler that asks it; its names are handed on here. This module holds approvers:

* :class:`TerminalApprover` asks a person on the terminal;
* :class:`ApprovedElsewhere` approves a plan already decided on outside the run;
* :class:`CallbackApprover` (from the gate) makes an approver of a Python callable.

An approver returns a :class:`Decision`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import anyio

from plandag.scheduler.gate import DEFAULT_EXPIRY_S as DEFAULT_EXPIRY_S
from plandag.scheduler.gate import ApprovalMode as ApprovalMode
from plandag.scheduler.gate import ApprovalRequest as ApprovalRequest
from plandag.scheduler.gate import ApprovalRequiredError as ApprovalRequiredError
from plandag.scheduler.gate import ApproveArgument as ApproveArgument
from plandag.scheduler.gate import Approver as Approver
from plandag.scheduler.gate import CallbackApprover as CallbackApprover
from plandag.scheduler.gate import Decision as Decision
from plandag.scheduler.gate import InvalidDecisionError as InvalidDecisionError
from plandag.scheduler.gate import StaleDecisionError as StaleDecisionError
from plandag.scheduler.gate import approval_needed as approval_needed
from plandag.scheduler.gate import approval_reason as approval_reason
from plandag.scheduler.gate import boundary_spec as boundary_spec
from plandag.scheduler.gate import compiled_plan_hash as compiled_plan_hash
from plandag.scheduler.gate import downstream as downstream
from plandag.scheduler.gate import effect_summary as effect_summary
from plandag.scheduler.gate import plan_hash as plan_hash
from plandag.scheduler.gate import resolve_approve as resolve_approve
from plandag.scheduler.gate import tainted_egress_steps as tainted_egress_steps
from plandag.scheduler.gate import tool_schemas as tool_schemas
from plandag.scheduler.result import to_jsonable

__all__ = [
    "DEFAULT_EXPIRY_S",
    "ApprovalMode",
    "ApprovalRequest",
    "ApprovalRequiredError",
    "ApproveArgument",
    "ApprovedElsewhere",
    "Approver",
    "CallbackApprover",
    "Decision",
    "InvalidDecisionError",
    "StaleDecisionError",
    "TerminalApprover",
    "approval_needed",
    "approval_reason",
    "boundary_spec",
    "compiled_plan_hash",
    "current_user",
    "downstream",
    "effect_summary",
    "plan_hash",
    "resolve_approve",
    "tainted_egress_steps",
    "tool_schemas",
]


class ApprovedElsewhere:
    """An approver for a plan already decided on outside the run (the run store's gate in
    ``plandag exec``, ``approve``, ``resume``): it approves the request it is given,
    recording ``who``. Use it only where a decision bound to this plan was taken already.

    Args:
        who: the name recorded as the decider.
    """

    def __init__(self, who: str = "approved beforehand") -> None:
        self.who = who

    async def __call__(self, request: ApprovalRequest) -> Decision:
        return Decision(True, request.plan_hash, who=self.who)


class TerminalApprover:
    """Asks on the terminal: shows the whole request, then ``Approve this plan? [y/n/s]``;
    ``n`` asks why (one line, the feedback for the planner); ``s`` decides step by step:
    for each step with effects, ``[a]pprove``, ``[e]dit`` (its new argument values as a
    JSON object, whose keys replace the step's) or ``[r]eject`` (it and the steps after it
    are dropped; one line says why). End of input rejects.

    Args:
        show: prints a line (default ``print`` to stderr via rich in the CLI).
        ask: reads an answer to a prompt (default ``input``); runs in a worker thread.
        who: the name recorded as the decider (default: the login name).
        pause: a context manager factory held while asking (the CLI hides its progress
            bar with it).
    """

    def __init__(
        self,
        show: Callable[[str], None],
        ask: Callable[[str], str] = input,
        who: str | None = None,
        pause: Callable[[], AbstractContextManager[object]] | None = None,
    ) -> None:
        self.show = show
        self.ask = ask
        self.who = who if who is not None else current_user()
        self.pause = pause

    async def __call__(self, request: ApprovalRequest) -> Decision:
        with self.pause() if self.pause is not None else contextlib.nullcontext():
            return await self._decide(request)

    async def _line(self, prompt: str) -> str:
        return await anyio.to_thread.run_sync(self.ask, prompt)

    async def _decide(self, request: ApprovalRequest) -> Decision:
        for line in request.summary_lines():
            self.show(line)
        try:
            for _ in range(5):
                answer = (await self._line("Approve this plan? [y/n/s] ")).strip().lower()
                if answer in ("y", "yes"):
                    return Decision(True, request.plan_hash, who=self.who)
                if answer in ("n", "no"):
                    feedback = await self._line(
                        "Why not? (a planner, if the run has one, gets this in full) "
                    )
                    return Decision(False, request.plan_hash, feedback=feedback, who=self.who)
                if answer in ("s", "steps"):
                    return await self._step_by_step(request)
                self.show("Answer y (approve), n (reject) or s (decide step by step).")
        except EOFError:  # Ctrl-D, or stdin closed: no approval
            return Decision(
                False, request.plan_hash, feedback="no answer (end of input)", who=self.who
            )
        return Decision(False, request.plan_hash, feedback="no clear answer", who=self.who)

    async def _step_by_step(self, request: ApprovalRequest) -> Decision:
        """Approve, edit or reject each step with effects (EOFError propagates)."""
        rejected: list[int] = []
        edits: dict[int, dict[str, Any]] = {}
        by_id = {step.id: step for step in request.plan.steps}
        dropped: set[int] = set()
        for step_id, tool, effects, _ in request.effects:
            if step_id in dropped:
                continue
            for _ in range(5):
                answer = (
                    (
                        await self._line(
                            f"Step {step_id} ({tool}, {effects}): [a]pprove, [e]dit, [r]eject? "
                        )
                    )
                    .strip()
                    .lower()
                )
                if answer in ("a", "approve", "y", "yes"):
                    break
                if answer in ("r", "reject"):
                    rejected.append(step_id)
                    dropped = downstream(request.dependencies, rejected)
                    break
                if answer in ("e", "edit"):
                    self.show(f"Step {step_id} arguments now: {_json(by_id[step_id].args)}")
                    edit = await self._edit(step_id)
                    if edit is not None:
                        edits[step_id] = edit
                        break
                    continue
                self.show("Answer a (approve), e (edit) or r (reject).")
            else:
                return Decision(False, request.plan_hash, feedback="no clear answer", who=self.who)
        feedback = ""
        if rejected:
            feedback = await self._line(
                f"Why reject step(s) {', '.join(map(str, rejected))}? (a planner, if the run "
                "has one, gets this in full) "
            )
        return Decision(
            True,
            request.plan_hash,
            feedback=feedback,
            who=self.who,
            reject_steps=tuple(rejected),
            edit_steps=edits,
        )

    async def _edit(self, step_id: int) -> dict[str, Any] | None:
        import json

        text = await self._line(
            f"Step {step_id}: new values as a JSON object (its keys replace those arguments) "
        )
        try:
            value = json.loads(text)
        except ValueError as error:
            self.show(f'Not JSON ({error}); for example {{"path": "out/b.json"}}.')
            return None
        if not isinstance(value, dict):
            self.show('Give a JSON object of argument names and values, like {"path": "x"}.')
            return None
        return value


def _json(value: Any) -> str:
    import json

    return json.dumps(to_jsonable(value), ensure_ascii=False, sort_keys=True)


def current_user() -> str:
    """The login name recorded as who decided (``unknown`` when the system has none)."""
    import getpass

    try:
        return getpass.getuser()
    except Exception:
        return "unknown"
