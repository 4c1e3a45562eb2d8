"""The shape of a CompiledPlan, and the inputs compile_plan and load_plan take."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from plandag.compiler import CompiledCheck, compile_plan, load_plan
from plandag.dag.plan import Plan
from plandag.errors import PlanError
from plandag.tools.boundary import WriteBoundary
from plandag.tools.registry import Registry

PLAN: dict[str, Any] = {
    "version": 1,
    "goal": "a diamond and a loner",
    "params": {
        "n": {"type": "integer"},
        "scale": {"type": "number", "default": 1.5},
        "flag": {"type": "boolean", "default": False},
        "label": {"type": "string", "required": False},
    },
    "steps": [
        {"id": 4, "tool": "add", "args": {"a": "<step_2_result>", "b": "<step_3_result>"},
         "depends_on": [2, 3], "check": [{"kind": "not_empty"}]},
        {"id": 1, "tool": "add", "args": {"a": "<param.n>"}},
        {"id": 2, "tool": "add", "args": {"a": "<step_1_result>"}, "depends_on": [1]},
        {"id": 3, "tool": "add", "args": {"a": "<step_1_result>", "b": 2}, "depends_on": [1],
         "check": [{"kind": "regex", "pattern": "^[0-9]+$"}]},
        {"id": 5, "tool": "read_text", "args": {"path": "x.txt"}},
    ],
    "output": {"sum": "<step_4_result>"},
}  # fmt: skip


def test_compiled_plan_shape(registry: Registry) -> None:
    compiled = compile_plan(PLAN, registry, params={"n": "3"})
    assert compiled.order == (1, 2, 3, 4, 5)
    assert compiled.roots == (1, 5)
    assert sorted(compiled.graph.edges) == [(1, 2), (1, 3), (2, 4), (3, 4)]
    assert sorted(compiled.graph.nodes) == [1, 2, 3, 4, 5]
    shape = {
        step_id: (step.parents, step.children, step.tool.name)
        for step_id, step in compiled.steps.items()
    }
    assert shape == {
        1: ((), (2, 3), "add"),
        2: ((1,), (4,), "add"),
        3: ((1,), (4,), "add"),
        4: ((2, 3), (), "add"),
        5: ((), (), "read_text"),
    }
    assert list(compiled.steps) == [1, 2, 3, 4, 5]
    assert compiled.steps[4].id == 4
    assert compiled.steps[4].step.args == {"a": "<step_2_result>", "b": "<step_3_result>"}
    assert compiled.steps[4].tool is registry.tools["add"]
    assert compiled.diagnostics == ()
    assert compiled.read_only is False
    assert compiled.write_boundary is None
    assert compiled.plan.goal == "a diamond and a loner"
    assert compiled.plan.output == {"sum": "<step_4_result>"}


def test_params_are_coerced_and_defaults_filled(registry: Registry) -> None:
    compiled = compile_plan(PLAN, registry, params={"n": "3", "flag": "true"})
    # "3" → 3 for an integer param; defaults for the rest; None for an optional one.
    assert compiled.params == {"n": 3, "scale": 1.5, "flag": True, "label": None}


@pytest.mark.parametrize(
    ("kind", "given", "value"),
    [
        ("integer", "3", 3),
        ("integer", " -12 ", -12),
        ("integer", 7, 7),
        ("number", "2.5", 2.5),
        ("number", 4, 4),
        ("boolean", "false", False),
        ("boolean", "1", True),
        ("string", 12, "12"),
        ("object", '{"a": [1]}', {"a": [1]}),
        ("array", "[1, 2]", [1, 2]),
        ("array", [3], [3]),
        ("any", "x", "x"),
    ],
)
def test_param_coercion(registry: Registry, kind: str, given: Any, value: Any) -> None:
    plan = {"params": {"p": {"type": kind}}, "steps": [{"id": 1, "tool": "add", "args": {"a": 1}}]}
    compiled = compile_plan(plan, registry, params={"p": given})
    assert compiled.params == {"p": value}
    assert type(compiled.params["p"]) is type(value)


def test_compiled_checks_are_bound_to_their_definitions(registry: Registry) -> None:
    compiled = compile_plan(PLAN, registry, params={"n": 1})
    assert compiled.steps[3].checks == (
        CompiledCheck(registry.checks["regex"], {"pattern": "^[0-9]+$"}),
    )
    assert compiled.steps[4].checks == (CompiledCheck(registry.checks["not_empty"], {}),)
    assert compiled.steps[1].checks == ()


def test_read_only_and_boundary_are_carried(registry: Registry, tmp_path: Path) -> None:
    boundary = WriteBoundary([tmp_path], base=tmp_path)
    compiled = compile_plan(
        PLAN, registry, params={"n": 1}, read_only=True, write_boundary=boundary
    )
    assert compiled.read_only is True
    assert compiled.write_boundary is boundary


@pytest.mark.parametrize("form", ["dict", "str", "bytes", "plan"])
def test_every_input_form_compiles_alike(registry: Registry, form: str) -> None:
    source: Any = {
        "dict": PLAN,
        "str": json.dumps(PLAN),
        "bytes": b"\xef\xbb\xbf" + json.dumps(PLAN).encode(),  # a UTF-8 BOM is accepted
        "plan": Plan.model_validate(PLAN),
    }[form]
    compiled = compile_plan(source, registry, params={"n": 2})
    assert compiled.order == (1, 2, 3, 4, 5)
    assert compiled.params["n"] == 2


def test_load_plan_checks_shape_only() -> None:
    plan = load_plan({"steps": [{"id": 1, "tool": "no_such_tool"}]})
    assert plan.steps[0].tool == "no_such_tool"
    with pytest.raises(PlanError) as raised:
        load_plan("{")
    assert raised.value.codes == ["invalid_json"]


def test_a_plan_with_no_steps_compiles(registry: Registry) -> None:
    compiled = compile_plan({"steps": []}, registry)
    assert (compiled.order, compiled.roots, dict(compiled.steps)) == ((), (), {})


def test_plan_error_is_a_value_error(registry: Registry) -> None:
    with pytest.raises(ValueError, match="plan does not compile: 1 error"):
        compile_plan({"steps": [{"id": 1, "tool": "nope"}]}, registry)


@pytest.mark.parametrize("bad", ["1", True, 1.0])
def test_step_ids_must_be_real_integers(bad: object) -> None:
    """ "1", true and 1.0 are not ids: a plan that writes them is told so, not silently fixed."""
    from plandag.compiler import compile_plan
    from plandag.errors import PlanError
    from plandag.tools.registry import default_registry

    plan = {"steps": [{"id": bad, "tool": "json_select", "args": {"data": 1, "expr": "@"}}]}
    with pytest.raises(PlanError) as caught:
        compile_plan(plan, default_registry())
    assert caught.value.codes == ["invalid_schema"]
    assert "steps[0].id" in caught.value.diagnostics[0].message


def test_dependencies_must_be_real_integers() -> None:
    from plandag.compiler import compile_plan
    from plandag.errors import PlanError
    from plandag.tools.registry import default_registry

    plan = {
        "steps": [
            {"id": 1, "tool": "json_select", "args": {"data": 1, "expr": "@"}},
            {"id": 2, "tool": "json_select", "args": {"data": 1, "expr": "@"}, "depends_on": ["1"]},
        ]
    }
    with pytest.raises(PlanError) as caught:
        compile_plan(plan, default_registry())
    assert caught.value.codes == ["invalid_schema"]
    assert "depends_on" in caught.value.diagnostics[0].message
