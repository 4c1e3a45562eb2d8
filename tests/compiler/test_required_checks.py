"""Checks a check kind requires on some steps (``required_on``): attached by the compiler
where a plan or a patch left them out, with a ``check_attached`` warning."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plandag.checks.base import check
from plandag.compiler import compile_plan
from plandag.compiler.patch import compile_patch
from plandag.dag.plan import CheckSpec, Step
from plandag.tools.base import tool
from plandag.tools.registry import Registry


@tool
def answer(prompt: str) -> dict[str, Any]:
    """Answer the prompt."""
    return {"text": prompt}


@tool
def other(prompt: str) -> str:
    """Anything else."""
    return prompt


def _on_answers(step: Step, steps: Mapping[int, Step]) -> dict[str, Any] | None:
    if step.tool != "answer":
        return None
    return {"parents": sorted(step.depends_on), "attached": True}


@check(required_on=_on_answers)
def grounded(result: Any, *, parents: list[int] | None = None, attached: bool = False) -> bool:
    """The answer is grounded."""
    return True


def registry() -> Registry:
    return Registry([answer, other], [grounded])


def test_a_required_check_left_out_is_attached_with_a_warning() -> None:
    compiled = compile_plan(
        {
            "steps": [
                {"id": 1, "tool": "other", "args": {"prompt": "a"}},
                {"id": 2, "tool": "answer", "args": {"prompt": "b"}, "depends_on": [1]},
            ]
        },
        registry(),
    )
    assert compiled.plan.steps[0].check == []
    assert compiled.plan.steps[1].check == [CheckSpec(kind="grounded", parents=[1], attached=True)]
    assert [item.definition.name for item in compiled.steps[2].checks] == ["grounded"]
    assert [(item.code, item.severity, item.step_id) for item in compiled.diagnostics] == [
        ("check_attached", "warning", 2)
    ]
    assert "must carry the grounded check, which the plan left out" in (
        compiled.diagnostics[0].message
    )


def test_a_step_that_has_the_check_keeps_it_as_written() -> None:
    compiled = compile_plan(
        {
            "steps": [
                {
                    "id": 1,
                    "tool": "answer",
                    "args": {"prompt": "b"},
                    "check": [{"kind": "grounded", "parents": []}],
                }
            ]
        },
        registry(),
    )
    assert compiled.plan.steps[0].check == [CheckSpec(kind="grounded", parents=[])]
    assert compiled.diagnostics == ()


def test_a_patch_gets_the_check_too() -> None:
    base = compile_plan(
        {"steps": [{"id": 1, "tool": "other", "args": {"prompt": "a"}}]}, registry()
    )
    patch = compile_patch(
        base, [{"id": 2, "tool": "answer", "args": {"prompt": "<step_1_result>"}}], registry()
    )
    [step] = patch.steps
    assert step.step.check == [CheckSpec(kind="grounded", parents=[], attached=True)]
    assert [item.definition.name for item in step.checks] == ["grounded"]
    assert ("check_attached", 2) in [(item.code, item.step_id) for item in patch.diagnostics]
