"""The terminal approver shows the whole plan at once and takes y/n."""

from __future__ import annotations

import anyio

from plandag.approval import ApprovalRequest, Decision, TerminalApprover
from plandag.compiler import compile_plan
from plandag.tools import tool
from plandag.tools.registry import Registry


@tool(typical_seconds=0.5)
def read(name: str) -> str:
    """Read NAME."""
    return name


@tool(effects="irreversible", writes="path", typical_seconds=1.2, cost_estimate_usd=0.0123)
def send(path: str, text: str) -> str:
    """Send TEXT to PATH."""
    return text


def _request() -> ApprovalRequest:
    compiled = compile_plan(
        {
            "goal": "notify",
            "steps": [
                {"id": 1, "tool": "read", "args": {"name": "a"}, "description": "read it"},
                {"id": 2, "tool": "send", "args": {"path": "out/x.txt", "text": "<step_1_result>"}},
            ],
        },
        Registry([read, send]),
    )
    return ApprovalRequest.for_plan("run1", 1, compiled, reason="the plan has irreversible effects")


def test_an_unknown_estimate_is_shown_as_such() -> None:
    @tool(effects="irreversible", writes="path")
    def post(path: str) -> str:
        """A user's tool that declares no estimate."""
        return path

    compiled = compile_plan(
        {
            "steps": [
                {"id": 1, "tool": "read", "args": {"name": "a"}},
                {"id": 3, "tool": "post", "args": {"path": "out/a"}, "depends_on": [1]},
                {"id": 5, "tool": "post", "args": {"path": "out/b"}},
            ]
        },
        Registry([read, post]),
    )
    request = ApprovalRequest.for_plan("run1", 1, compiled, reason="the plan has effects")
    assert request.estimated_cost_usd is None
    assert "Estimate: estimated cost and time unknown: steps 3, 5 have no estimate" in (
        request.summary_lines()
    )


def _ask(answers: list[str], prompts: list[str]) -> object:
    def ask(prompt: str) -> str:
        prompts.append(prompt)
        return answers.pop(0)

    return ask


def test_the_whole_plan_is_shown_then_yes_approves() -> None:
    shown: list[str] = []
    prompts: list[str] = []
    request = _request()
    approver = TerminalApprover(shown.append, _ask(["maybe", "y"], prompts), who="ana")  # type: ignore[arg-type]
    decision = anyio.run(approver, request)
    assert (decision.approved, decision.who, decision.plan_hash) == (True, "ana", request.plan_hash)
    assert shown[:6] == [
        "Run run1, plan version 1: notify",
        "Why you are asked: the plan has irreversible effects",
        "Steps (2):",
        "  1. read",
        "       read it",
        "  2. send after 1  [IRREVERSIBLE: out/x.txt]",
    ]
    assert shown[6:] == [
        "Estimate: estimated cost $0.0123, time 1.7 s (critical path 1 -> 2)",
        f"Plan hash: {request.plan_hash}",
        "Answer y (approve), n (reject) or s (decide step by step).",
    ]
    assert prompts == ["Approve this plan? [y/n/s] ", "Approve this plan? [y/n/s] "]


def test_no_asks_for_the_feedback_in_full() -> None:
    prompts: list[str] = []
    approver = TerminalApprover(
        lambda line: None, _ask(["n", "use the archive, not the mail"], prompts), who="ana"
    )  # type: ignore[arg-type]
    decision = anyio.run(approver, _request())
    assert (decision.approved, decision.feedback) == (False, "use the archive, not the mail")
    assert prompts[-1] == "Why not? (a planner, if the run has one, gets this in full) "


def test_end_of_input_rejects() -> None:
    def closed(prompt: str) -> str:
        raise EOFError

    decision = anyio.run(TerminalApprover(lambda line: None, closed, who="ana"), _request())
    assert (decision.approved, decision.feedback) == (False, "no answer (end of input)")


def _plan_with_two_effects() -> ApprovalRequest:
    compiled = compile_plan(
        {
            "goal": "notify twice",
            "steps": [
                {"id": 1, "tool": "read", "args": {"name": "a"}},
                {"id": 2, "tool": "send", "args": {"path": "out/x.txt", "text": "<step_1_result>"}},
                {"id": 3, "tool": "send", "args": {"path": "out/y.txt", "text": "b"}},
                {"id": 4, "tool": "send", "args": {"path": "out/z.txt", "text": "<step_3_result>"}},
            ],
        },
        Registry([read, send]),
    )
    return ApprovalRequest.for_plan("run1", 1, compiled, reason="the plan has irreversible effects")


def test_step_by_step_edits_one_step_and_rejects_another() -> None:
    shown: list[str] = []
    prompts: list[str] = []
    answers = ["s", "e", "{oops", "e", '{"path": "out/w.txt"}', "r", "not to y, not yet"]
    request = _plan_with_two_effects()
    approver = TerminalApprover(shown.append, _ask(answers, prompts), who="ana")  # type: ignore[arg-type]
    decision = anyio.run(approver, request)
    assert decision == Decision(
        True,
        request.plan_hash,
        feedback="not to y, not yet",
        who="ana",
        reject_steps=(3,),
        edit_steps={2: {"path": "out/w.txt"}},
    )
    decision.check(request)  # it fits the plan
    assert prompts == [
        "Approve this plan? [y/n/s] ",
        "Step 2 (send, irreversible): [a]pprove, [e]dit, [r]eject? ",
        "Step 2: new values as a JSON object (its keys replace those arguments) ",
        "Step 2 (send, irreversible): [a]pprove, [e]dit, [r]eject? ",
        "Step 2: new values as a JSON object (its keys replace those arguments) ",
        "Step 3 (send, irreversible): [a]pprove, [e]dit, [r]eject? ",
        "Why reject step(s) 3? (a planner, if the run has one, gets this in full) ",
    ]  # step 4 is dropped with step 3: it is not asked about
    assert 'Step 2 arguments now: {"path": "out/x.txt", "text": "<step_1_result>"}' in shown
    assert any(line.startswith("Not JSON") for line in shown)


def test_step_by_step_approving_every_step_is_a_plain_approval() -> None:
    request = _plan_with_two_effects()
    approver = TerminalApprover(lambda line: None, _ask(["s", "a", "a", "a"], []), who="ana")  # type: ignore[arg-type]
    decision = anyio.run(approver, request)
    assert decision == Decision(True, request.plan_hash, who="ana")
    assert not decision.amends
