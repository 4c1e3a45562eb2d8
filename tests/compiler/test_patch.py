"""Patches compiled against a running plan's graph (ARCHITECTURE.md, "Execution",
"Replanning" and "Streaming")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from plandag.compiler import compile_plan
from plandag.compiler.compiled import CompiledPlan
from plandag.compiler.patch import PatchBase, check_output, compile_patch
from plandag.dag.plan import Plan, Step
from plandag.errors import PlanError
from plandag.tools.boundary import WriteBoundary
from plandag.tools.registry import Registry


def base_plan(registry: Registry) -> CompiledPlan:
    """1 read_text → 2 totals; 3 items (independent); param ``input``."""
    return compile_plan(
        {
            "params": {"input": {"type": "string"}},
            "steps": [
                {"id": 1, "tool": "read_text", "args": {"path": "<param.input>"}},
                {"id": 2, "tool": "totals", "args": {"xml": "<step_1_result>"}, "depends_on": [1]},
                {"id": 3, "tool": "items", "args": {"xml": "x"}},
            ],
        },
        registry,
        params={"input": "a.xml"},
    )


def base_with(registry: Registry, ended: dict[int, str], **extra: Any) -> PatchBase:
    """The base plan with ``ended`` steps (and ``replacements`` in ``extra``)."""
    base = PatchBase.from_compiled(base_plan(registry), ended)
    return PatchBase(base.plan, base.steps, base.ended, **extra)


def codes(error: pytest.ExceptionInfo[PlanError]) -> list[tuple[str, int | None]]:
    return [(item.code, item.step_id) for item in error.value.diagnostics]


def test_new_steps_depend_on_existing_and_new_steps(registry: Registry) -> None:
    patch = compile_patch(
        base_plan(registry),
        [
            {"id": 5, "tool": "anything", "args": {"value": "<step_4_result>"}, "depends_on": [4]},
            {"id": 4, "tool": "anything", "args": {"value": "<step_2_result.vNF>"}},
            Step(id=6, tool="add", args={"a": 1}, depends_on=[3]),
        ],
        registry,
    )
    assert patch.ids == (4, 5, 6)
    by_id = {item.id: item for item in patch.steps}
    assert by_id[4].parents == (2,)
    assert by_id[4].children == (5,)
    assert by_id[5].parents == (4,)
    assert by_id[5].children == ()
    assert by_id[6].parents == (3,)
    assert by_id[6].tool.name == "add"
    assert [(item.code, item.severity, item.step_id) for item in patch.diagnostics] == [
        ("implied_dependency", "warning", 4)
    ]
    assert patch.diagnostics[0].message == (
        "args.value: <step_2_result.vNF> uses step 2, missing from depends_on; "
        "the dependency was added"
    )


def test_an_empty_patch_compiles_to_nothing(registry: Registry) -> None:
    patch = compile_patch(base_plan(registry), [], registry)
    assert patch.steps == ()
    assert patch.diagnostics == ()


def test_an_existing_id_is_never_reused(registry: Registry) -> None:
    with pytest.raises(PlanError) as error:
        compile_patch(base_plan(registry), [{"id": 2, "tool": "add", "args": {"a": 1}}], registry)
    (diagnostic,) = error.value.diagnostics
    assert diagnostic.code == "duplicate_step_id"
    assert diagnostic.step_id == 2
    assert diagnostic.message == (
        "step id 2 is already used by step 2 of this run (tool totals); ids are never "
        "reused, not even by a replacement"
    )
    assert diagnostic.hint == "give new steps ids above 3"


def test_a_repeated_id_inside_the_patch(registry: Registry) -> None:
    with pytest.raises(PlanError) as error:
        compile_patch(
            base_plan(registry),
            [
                {"id": 7, "tool": "add", "args": {"a": 1}},
                {"id": 7, "tool": "add", "args": {"a": 2}},
            ],
            registry,
        )
    assert codes(error) == [("duplicate_step_id", 7)]
    assert error.value.diagnostics[0].message == "step id 7 is used by more than one step"


def test_depending_on_a_failed_step_is_an_error(registry: Registry) -> None:
    base = base_with(registry, {2: "failed", 3: "skipped"})
    with pytest.raises(PlanError) as error:
        compile_patch(
            base,
            [
                {"id": 4, "tool": "anything", "args": {}, "depends_on": [2]},
                {"id": 5, "tool": "anything", "args": {"value": "<step_3_result>"}},
            ],
            registry,
            replaces=[2],
        )
    # The per-step passes first (as compile_plan), then the edges to ended steps.
    assert codes(error) == [
        ("implied_dependency", 5),
        ("unknown_dependency", 4),
        ("reference_to_missing_step", 5),
    ]
    found = error.value.diagnostics
    assert found[1].message == (
        "depends_on names step 2, which failed; its result will never exist"
    )
    assert found[1].hint == "depend on the step of this patch that replaces it"
    assert found[2].message == (
        "a reference uses step 3, which was skipped (it never ran); its result will never exist"
    )
    assert found[2].hint == "depend on a step that replaces it (a new step with a new id)"


def test_ended_steps_may_be_named_when_their_descendants_are_pruned(registry: Registry) -> None:
    # streaming dispatch: 2 failed and 3 was skipped before these steps arrived
    base = base_with(registry, {2: "failed", 3: "skipped"})
    patch = compile_patch(
        base,
        [
            {"id": 4, "tool": "anything", "args": {}, "depends_on": [2]},
            {"id": 5, "tool": "anything", "args": {"value": "<step_3_result>"}},
            {"id": 6, "tool": "anything", "depends_on": [4, 1]},
            {"id": 7, "tool": "anything", "depends_on": [1]},
            {"id": 8, "tool": "anything", "depends_on": [7]},
        ],
        registry,
        prune_on_ended_parents=True,
    )
    assert patch.ids == (4, 5, 6, 7, 8)
    assert patch.pruned == (4, 5, 6)
    by_id = {item.id: item for item in patch.steps}
    assert by_id[4].parents == (2,)
    assert by_id[5].parents == (3,)
    assert by_id[6].parents == (1, 4)
    assert [(item.code, item.step_id) for item in patch.diagnostics] == [("implied_dependency", 5)]
    # other errors are still errors; without the option nothing is pruned
    with pytest.raises(PlanError) as error:
        compile_patch(
            base,
            [{"id": 4, "tool": "nope", "depends_on": [2]}],
            registry,
            prune_on_ended_parents=True,
        )
    assert codes(error) == [("unknown_tool", 4)]
    assert compile_patch(base, [{"id": 4, "tool": "anything"}], registry).pruned == ()


def test_the_hint_names_an_existing_replacement(registry: Registry) -> None:
    base = base_with(registry, {2: "failed"}, replacements={2: [7, 8]})
    with pytest.raises(PlanError) as error:
        compile_patch(base, [{"id": 9, "tool": "anything", "depends_on": [2]}], registry)
    assert error.value.diagnostics[0].hint == "depend on its replacement: step(s) 7, 8"


def test_pending_and_succeeded_steps_may_be_named(registry: Registry) -> None:
    # Only ended steps that did not succeed are refused; 1 succeeded, 2 is still running.
    base = base_with(registry, {3: "cancelled"})
    patch = compile_patch(
        base, [{"id": 4, "tool": "anything", "args": {}, "depends_on": [1, 2]}], registry
    )
    assert patch.steps[0].parents == (1, 2)


def test_a_cycle_through_new_steps(registry: Registry) -> None:
    with pytest.raises(PlanError) as error:
        compile_patch(
            base_plan(registry),
            [
                {"id": 4, "tool": "anything", "depends_on": [1, 6]},
                {"id": 5, "tool": "anything", "depends_on": [4]},
                {"id": 6, "tool": "anything", "depends_on": [5]},
            ],
            registry,
        )
    assert codes(error) == [("cycle", 4)]
    assert error.value.diagnostics[0].message == "the dependencies form a cycle: 4 → 5 → 6 → 4"


def test_every_problem_is_reported_at_once(registry: Registry) -> None:
    base = base_with(registry, {2: "failed"})
    with pytest.raises(PlanError) as error:
        compile_patch(
            base,
            [
                {"id": 1, "tool": "anything"},
                {"id": 4, "tool": "anythin"},
                {"id": 5, "tool": "anything", "args": {"value": "<step_9_result>"}},
                {"id": 6, "tool": "anything", "depends_on": [2]},
                {"id": 7, "tool": "anything", "depends_on": [8]},
                {"id": 8, "tool": "anything", "depends_on": [7]},
                {"id": 10, "tool": "add", "args": {"a": "one"}},
            ],
            registry,
        )
    assert error.value.codes == [
        "duplicate_step_id",
        "unknown_tool",
        "reference_to_missing_step",
        "invalid_args",
        "unknown_dependency",
        "cycle",
    ]
    assert [item.step_id for item in error.value.diagnostics] == [1, 4, 5, 10, 6, 7]
    assert error.value.diagnostics[1].hint == "did you mean anything?"


def test_the_schema_is_checked_like_a_plan(registry: Registry) -> None:
    with pytest.raises(PlanError) as error:
        compile_patch(
            base_plan(registry), [{"id": 4, "args": {}}, {"id": 0, "tool": "add"}], registry
        )
    assert [(d.code, d.step_id, d.message) for d in error.value.diagnostics] == [
        ("invalid_schema", 4, "steps[0].tool: Field required"),
        ("invalid_schema", None, "steps[1].id: Input should be greater than 0"),
    ]


def test_not_a_list_of_steps(registry: Registry) -> None:
    with pytest.raises(PlanError) as error:
        compile_patch(base_plan(registry), "steps", registry)  # type: ignore[arg-type]
    assert error.value.codes == ["invalid_schema"]


def test_the_step_cap_counts_existing_steps(registry: Registry) -> None:
    with pytest.raises(PlanError) as error:
        compile_patch(
            base_plan(registry),
            [{"id": 4, "tool": "anything"}, {"id": 5, "tool": "anything"}],
            registry,
            max_steps=4,
        )
    assert codes(error) == [("too_many_steps", None)]
    assert error.value.diagnostics[0].message == (
        "the run would have 5 steps (3 already, 2 new); this run allows at most 4 (max_steps)"
    )


def test_params_read_only_and_the_write_boundary_apply(registry: Registry, tmp_path: Path) -> None:
    boundary = WriteBoundary([tmp_path / "out"])
    with pytest.raises(PlanError) as error:
        compile_patch(
            base_plan(registry),
            [
                {"id": 4, "tool": "anything", "args": {"value": "<param.missing>"}},
                {"id": 5, "tool": "save", "args": {"path": str(tmp_path / "elsewhere.json")}},
            ],
            registry,
            params={"input": "a.xml"},
            read_only=True,
            write_boundary=boundary,
        )
    assert codes(error) == [
        ("unknown_param", 4),
        ("effects_in_read_only", 5),
        ("write_outside_boundary", 5),
    ]


def test_a_reference_path_is_checked_against_an_existing_steps_tool(registry: Registry) -> None:
    with pytest.raises(PlanError) as error:
        compile_patch(
            base_plan(registry),
            [
                {
                    "id": 4,
                    "tool": "anything",
                    "args": {"value": "<step_2_result.nope>"},
                    "depends_on": [2],
                }
            ],
            registry,
        )
    assert codes(error) == [("invalid_reference_path", 4)]


def test_check_output(registry: Registry) -> None:
    base = base_with(registry, {3: "skipped"})
    assert check_output(base, {"total": "<step_2_result.vNF>", "input": "<param.input>"}) == ()
    with pytest.raises(PlanError) as error:
        check_output(
            base,
            {
                "a": "<step_9_result>",
                "b": "<step_3_result>",
                "c": "<param.x>",
                "d": "<step_x_result>",
            },
        )
    assert error.value.codes == [
        "malformed_reference",
        "reference_to_missing_step",
        "unknown_param",
        "reference_to_missing_step",
    ]
    assert error.value.diagnostics[3].message == (
        "output.b: <step_3_result> uses step 3, which was skipped (it never ran); its result "
        "will never exist"
    )


def test_check_output_may_allow_ended_steps(registry: Registry) -> None:
    base = base_with(registry, {2: "failed", 3: "skipped"})
    output = {"total": "<step_2_result.vNF>", "items": "<step_3_result>"}
    assert check_output(base, output, allow_ended=True) == ()
    with pytest.raises(PlanError) as error:
        check_output(base, {**output, "x": "<step_9_result>"}, allow_ended=True)
    assert [(d.code, d.message) for d in error.value.diagnostics] == [
        (
            "reference_to_missing_step",
            "output.x: <step_9_result> refers to step 9, which does not exist",
        )
    ]


def test_a_plan_header_without_steps(registry: Registry) -> None:
    header = Plan(goal="g", steps=[])
    patch = compile_patch(PatchBase(header, {}), [{"id": 1, "tool": "anything"}], registry)
    assert patch.ids == (1,)
    assert patch.steps[0].parents == ()
