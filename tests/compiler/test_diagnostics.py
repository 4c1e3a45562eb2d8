"""Every diagnostic code of the compiler, its severity, step and words (diagnostics.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from plandag.compiler import DIAGNOSTIC_CODES, Diagnostic, compile_plan
from plandag.dag.plan import Plan
from plandag.errors import PlanError
from plandag.tools.base import tool
from plandag.tools.boundary import WriteBoundary
from plandag.tools.registry import Registry

HINT_GRAMMAR = "references are <step_N_result>, <step_N_result.field.0> or <param.NAME>"
CYCLE_HINT = "break the cycle: one of these steps must not need the others' results"
PATH_HINT = "use a path the referenced tool's result has"
SCHEMA_HINT = "see `plandag schema plan` for the expected shape"


def step(step_id: int, tool: str = "add", **fields: Any) -> dict[str, Any]:
    """A plan step; ``add`` with ``a=1`` unless told otherwise."""
    fields.setdefault("args", {"a": 1} if tool == "add" else {})
    return {"id": step_id, "tool": tool, **fields}


def errors_of(plan: Any, registry: Registry, **options: Any) -> list[Diagnostic]:
    """The diagnostics of a plan that must not compile."""
    with pytest.raises(PlanError) as raised:
        compile_plan(plan, registry, **options)
    return raised.value.diagnostics


def only(diagnostics: list[Diagnostic], code: str) -> list[Diagnostic]:
    return [d for d in diagnostics if d.code == code]


# --- invalid_json / invalid_schema -------------------------------------------------------


def test_invalid_json(registry: Registry) -> None:
    assert errors_of("{not json", registry) == [
        Diagnostic(
            "invalid_json",
            "error",
            None,
            "the plan is not valid JSON: Expecting property name enclosed in double quotes "
            "at line 1, column 2",
            "write the plan as one JSON object",
        )
    ]


def test_invalid_json_not_utf8(registry: Registry) -> None:
    [diagnostic] = errors_of(b"\xff{", registry)
    assert (diagnostic.code, diagnostic.severity, diagnostic.step_id) == (
        "invalid_json",
        "error",
        None,
    )
    assert diagnostic.message.startswith("the plan is not UTF-8 text")
    assert diagnostic.hint == "save it as UTF-8"


def test_invalid_json_integer_too_long_to_read(registry: Registry) -> None:
    # Python refuses to convert integers past 4300 digits with a plain ValueError.
    text = '{"steps": [{"id": ' + "1" * 5000 + ', "tool": "add"}]}'
    [diagnostic] = errors_of(text, registry)
    assert diagnostic.code == "invalid_json"
    assert "4300 digits" in diagnostic.message


def test_invalid_schema_names_field_and_why(registry: Registry) -> None:
    plan = {"steps": [step(1, extra=1), step(0)]}
    assert errors_of(plan, registry) == [
        Diagnostic(
            "invalid_schema",
            "error",
            1,
            "steps[0].extra: Extra inputs are not permitted",
            SCHEMA_HINT,
        ),
        Diagnostic(
            "invalid_schema",
            "error",
            None,
            "steps[1].id: Input should be greater than 0",
            SCHEMA_HINT,
        ),
    ]


def test_invalid_schema_not_an_object(registry: Registry) -> None:
    assert errors_of("[1, 2]", registry) == [
        Diagnostic(
            "invalid_schema",
            "error",
            None,
            "the plan must be a JSON object, got list",
            'start from {"version": 1, "goal": "...", "steps": [...]}',
        )
    ]


def test_invalid_schema_version_and_steps(registry: Registry) -> None:
    diagnostics = errors_of({"version": 2, "steps": "x"}, registry)
    assert [(d.code, d.message) for d in diagnostics] == [
        ("invalid_schema", "version: Input should be 1"),
        ("invalid_schema", "steps: Input should be a valid list"),
    ]


# --- steps, tools, args ------------------------------------------------------------------


def test_duplicate_step_id(registry: Registry) -> None:
    assert errors_of({"steps": [step(1), step(2), step(1)]}, registry) == [
        Diagnostic(
            "duplicate_step_id",
            "error",
            1,
            "step id 1 is used by more than one step",
            "give each step its own id; the largest in use is 2",
        )
    ]


def test_too_many_steps_is_refused_at_once_naming_the_limit_and_how_to_raise_it(
    registry: Registry,
) -> None:
    # The unknown tool, the cycle and the malformed reference are not analysed: a plan over
    # the limit gets this one diagnostic.
    plan = {
        "steps": [
            step(1, "nope", depends_on=[2]),
            step(2, depends_on=[1]),
            step(3, args={"a": "<step_x_result>"}),
        ]
    }
    assert errors_of(plan, registry, max_steps=2) == [
        Diagnostic(
            "too_many_steps",
            "error",
            None,
            "the plan has 3 steps; this run allows at most 2 (max_steps)",
            "raise the limit with --max-steps N (config key max_steps; max_steps=N in "
            "Python), or merge steps or split the task into several plans",
        )
    ]


def test_args_too_large(registry: Registry) -> None:
    plan = {"steps": [step(1, "anything", args={"value": "x" * 50})]}
    # {"value": "xxx...x"} is 11 + 50 + 2 = 63 bytes as JSON
    assert errors_of(plan, registry, max_arg_bytes=40) == [
        Diagnostic(
            "args_too_large",
            "error",
            1,
            "the step's args take 63 bytes as JSON; at most 40 are allowed",
            "pass large data by reference (<step_N_result>) or as a file path",
        )
    ]


def test_unknown_tool_with_nearest_names(registry: Registry) -> None:
    plan = {"steps": [step(1, "read_txt", args={"path": "a"}), step(2, "itemz", args={})]}
    assert errors_of(plan, registry) == [
        Diagnostic(
            "unknown_tool",
            "error",
            1,
            "tool 'read_txt' is not registered",
            "did you mean read_text?",
        ),
        Diagnostic(
            "unknown_tool", "error", 2, "tool 'itemz' is not registered", "did you mean items?"
        ),
    ]


def test_unknown_tool_without_near_name_lists_the_tools(registry: Registry) -> None:
    [diagnostic] = errors_of({"steps": [step(1, "qqqqqqqq")]}, registry)
    assert diagnostic.hint == (
        "registered tools: add, anything, fetch, invoice, items, read_text, save, send, totals"
    )


def test_invalid_args_name_the_field_and_why(registry: Registry) -> None:
    plan = {"steps": [step(1, args={"a": "x", "c": 3}), step(2, args={})]}
    hint = "arguments of add: a, b"
    assert errors_of(plan, registry) == [
        Diagnostic(
            "invalid_args",
            "error",
            1,
            "args.a: Input should be a valid integer, unable to parse string as an integer "
            "(tool add)",
            hint,
        ),
        Diagnostic(
            "invalid_args", "error", 1, "args.c: Extra inputs are not permitted (tool add)", hint
        ),
        Diagnostic("invalid_args", "error", 2, "args.a: Field required (tool add)", hint),
    ]


def test_args_fed_by_a_reference_are_not_judged_by_their_text(registry: Registry) -> None:
    plan = {"steps": [step(1), step(2, args={"a": "<step_1_result>"}, depends_on=[1])]}
    assert compile_plan(plan, registry).order == (1, 2)


@pytest.mark.parametrize(
    "value",
    ["<param.a>", "<step_1_result>", "<step_1_result.vNF>", "x <param.a> y", 3],
    ids=["param", "result", "result-field", "in-text", "literal"],
)
def test_an_argument_the_tool_does_not_have_is_refused_whatever_its_value(
    registry: Registry, value: Any
) -> None:
    plan = {
        "params": {"a": {"type": "string", "default": "x"}},
        "steps": [
            step(1, tool="totals", args={"xml": "<a/>"}),
            step(2, args={"a": 1, "extra": value}, depends_on=[1]),
        ],
    }
    assert errors_of(plan, registry) == [
        Diagnostic(
            "invalid_args",
            "error",
            2,
            "args.extra: Extra inputs are not permitted (tool add)",
            "arguments of add: a, b",
        )
    ]


class Item(BaseModel):
    """An argument of a model type that takes no keys but its own."""

    model_config = ConfigDict(extra="forbid")
    name: str
    price: float


def test_a_key_a_nested_argument_does_not_have_is_refused_when_its_value_is_a_reference() -> None:
    @tool
    def price(item: Item) -> float:
        """The item's price."""
        return item.price

    item = {"name": "pen", "price": "<step_1_result>", "colour": "<step_1_result>"}
    plan = {
        "steps": [
            {"id": 1, "tool": "price", "args": {"item": {"name": "a", "price": 1}}},
            {"id": 2, "tool": "price", "args": {"item": item}, "depends_on": [1]},
        ]
    }
    diagnostics = errors_of(plan, Registry([price]))
    assert [(d.code, d.step_id, d.message) for d in diagnostics] == [
        ("invalid_args", 2, "args.item.colour: Extra inputs are not permitted (tool price)")
    ]


# --- checks ------------------------------------------------------------------------------


def test_unknown_check_with_nearest_names(registry: Registry) -> None:
    plan = {"steps": [step(1, check=[{"kind": "not_emty"}, {"kind": "qqqqqqq"}])]}
    assert errors_of(plan, registry) == [
        Diagnostic(
            "unknown_check",
            "error",
            1,
            "check[0]: kind 'not_emty' is not registered",
            "did you mean not_empty?",
        ),
        Diagnostic(
            "unknown_check",
            "error",
            1,
            "check[1]: kind 'qqqqqqq' is not registered",
            "known kinds: audit_trail, not_empty, regex",
        ),
    ]


def test_invalid_check_args(registry: Registry) -> None:
    plan = {"steps": [step(1, check=[{"kind": "regex", "pattern": 3, "flags": "i"}])]}
    hint = "fields of regex: pattern, path"
    assert errors_of(plan, registry) == [
        Diagnostic(
            "invalid_check_args",
            "error",
            1,
            "check[0] (regex).pattern: Input should be a valid string",
            hint,
        ),
        Diagnostic(
            "invalid_check_args",
            "error",
            1,
            "check[0] (regex).flags: Extra inputs are not permitted",
            hint,
        ),
    ]


def test_missing_check_field(registry: Registry) -> None:
    [diagnostic] = errors_of({"steps": [step(1, check=[{"kind": "regex"}])]}, registry)
    assert (diagnostic.code, diagnostic.message) == (
        "invalid_check_args",
        "check[0] (regex).pattern: Field required",
    )


# --- dependencies ------------------------------------------------------------------------


def test_unknown_dependency(registry: Registry) -> None:
    plan = {"steps": [step(1), step(2, depends_on=[1, 7])]}
    assert errors_of(plan, registry) == [
        Diagnostic(
            "unknown_dependency",
            "error",
            2,
            "depends_on names step 7, which does not exist",
            "existing steps: 1, 2",
        )
    ]


def test_self_dependency(registry: Registry) -> None:
    assert errors_of({"steps": [step(1, depends_on=[1])]}, registry) == [
        Diagnostic(
            "self_dependency", "error", 1, "step 1 depends on itself", "remove it from depends_on"
        )
    ]


def test_self_reference_is_a_self_dependency(registry: Registry) -> None:
    plan = {"steps": [step(1, args={"a": "<step_1_result>"})]}
    assert errors_of(plan, registry) == [
        Diagnostic(
            "self_dependency",
            "error",
            1,
            "args.a: <step_1_result> refers to the step's own result",
            "a step can only use results of earlier steps",
        )
    ]


def test_duplicate_dependency(registry: Registry) -> None:
    plan = {"steps": [step(1), step(2, depends_on=[1, 1])]}
    assert errors_of(plan, registry) == [
        Diagnostic(
            "duplicate_dependency",
            "error",
            2,
            "depends_on lists step 1 more than once",
            "list each dependency once",
        )
    ]


def test_cycle_names_its_steps_in_order(registry: Registry) -> None:
    plan = {
        "steps": [
            step(1, depends_on=[3]),
            step(2, depends_on=[1]),
            step(3, depends_on=[2]),
            step(4, depends_on=[1]),
        ]
    }
    assert errors_of(plan, registry) == [
        Diagnostic("cycle", "error", 1, "the dependencies form a cycle: 1 → 2 → 3 → 1", CYCLE_HINT)
    ]


def test_cycle_starts_at_its_smallest_step_and_follows_the_edges(registry: Registry) -> None:
    # 5 needs 9, 9 needs 7, 7 needs 5: edges 5 → 7 → 9 → 5.
    plan = {"steps": [step(9, depends_on=[7]), step(5, depends_on=[9]), step(7, depends_on=[5])]}
    [diagnostic] = errors_of(plan, registry)
    assert (diagnostic.step_id, diagnostic.message) == (
        5,
        "the dependencies form a cycle: 5 → 7 → 9 → 5",
    )


def test_two_separate_cycles_are_both_reported(registry: Registry) -> None:
    plan = {
        "steps": [
            step(1, depends_on=[2]),
            step(2, depends_on=[1]),
            step(3, depends_on=[4]),
            step(4, depends_on=[3]),
        ]
    }
    messages = sorted(d.message for d in errors_of(plan, registry))
    assert messages == [
        "the dependencies form a cycle: 1 → 2 → 1",
        "the dependencies form a cycle: 3 → 4 → 3",
    ]


# --- references --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("token", "nearest"),
    [
        ("<step_x_result>", "<step_N_result>"),
        ("<step_1_reslt>", "<step_1_result>"),
        ("<params.input>", "<param.input>"),
        ("<step_1_results.total>", "<step_1_result.total>"),
    ],
)
def test_malformed_reference_names_the_nearest_valid_spelling(
    registry: Registry, token: str, nearest: str
) -> None:
    plan = {
        "params": {"input": {}},
        "steps": [step(1), step(2, "anything", args={"value": ["x", f"a {token}"]})],
    }
    assert errors_of(plan, registry) == [
        Diagnostic(
            "malformed_reference",
            "error",
            2,
            f"args.value[1]: {token!r} is not a valid reference",
            f"write {nearest}; {HINT_GRAMMAR}",
        )
    ]


def test_malformed_reference_in_check_and_output(registry: Registry) -> None:
    plan = {
        "steps": [step(1, check=[{"kind": "regex", "pattern": "<step1_result>"}])],
        "output": {"total": "<step_1_reslt.total>"},
    }
    assert [(d.code, d.step_id, d.message, d.hint) for d in errors_of(plan, registry)] == [
        (
            "malformed_reference",
            1,
            "check[0].pattern: '<step1_result>' is not a valid reference",
            f"write <step_1_result>; {HINT_GRAMMAR}",
        ),
        (
            "malformed_reference",
            None,
            "output.total: '<step_1_reslt.total>' is not a valid reference",
            "write <step_1_result.total>",
        ),
    ]


def test_reference_to_missing_step(registry: Registry) -> None:
    plan = {
        "steps": [step(1), step(2, args={"a": "<step_9_result>"})],
        "output": "<step_8_result>",
    }
    assert errors_of(plan, registry) == [
        Diagnostic(
            "reference_to_missing_step",
            "error",
            2,
            "args.a: <step_9_result> refers to step 9, which does not exist",
            "existing steps: 1, 2",
        ),
        Diagnostic(
            "reference_to_missing_step",
            "error",
            None,
            "output: <step_8_result> refers to step 8, which does not exist",
            "existing steps: 1, 2",
        ),
    ]


# --- params ------------------------------------------------------------------------------


def test_unknown_param_in_a_reference(registry: Registry) -> None:
    plan = {"params": {"m": {"type": "integer"}}, "steps": [step(1, args={"a": "<param.n>"})]}
    assert errors_of(plan, registry) == [
        Diagnostic(
            "unknown_param",
            "error",
            1,
            "args.a: <param.n> names param 'n', which the plan does not declare",
            'declare it under "params" (declared: m)',
        )
    ]


def test_unknown_param_given_a_value(registry: Registry) -> None:
    plan = {"params": {"n": {"type": "integer", "default": 1}}, "steps": [step(1)]}
    assert errors_of(plan, registry, params={"x": "1"}) == [
        Diagnostic(
            "unknown_param",
            "error",
            None,
            "a value was given for param 'x', which the plan does not declare",
            "declared params: n",
        )
    ]


def test_missing_param(registry: Registry) -> None:
    plan = {"params": {"n": {"type": "integer"}}, "steps": [step(1, args={"a": "<param.n>"})]}
    assert errors_of(plan, registry, params={}) == [
        Diagnostic(
            "missing_param",
            "error",
            None,
            "param 'n' is required and was not given",
            "pass it with --param n=VALUE",
        )
    ]


def test_missing_param_is_not_reported_when_compiling_without_params(registry: Registry) -> None:
    # `plandag check` compiles without values: only declarations are checked.
    plan = {"params": {"n": {"type": "integer"}}, "steps": [step(1, args={"a": "<param.n>"})]}
    assert compile_plan(plan, registry).params == {}


@pytest.mark.parametrize(
    ("kind", "value", "message"),
    [
        ("integer", "three", "param 'p' must be an integer, got 'three'"),
        ("integer", True, "param 'p' must be an integer, got True"),
        ("number", "1,5", "param 'p' must be a number, got '1,5'"),
        ("boolean", "maybe", "param 'p' must be a boolean, got 'maybe'"),
        ("object", "[1]", "param 'p' must be an object, got '[1]'"),
        ("array", "{not json", "param 'p' must be an array, got '{not json'"),
        # too deep for json.loads (RecursionError); the value shown is cut to 80 characters
        ("array", "[" * 100_000, "param 'p' must be an array, got '" + "[" * 79),
        ("string", [1], "param 'p' must be a string, got [1]"),
    ],
)
def test_invalid_param_value(registry: Registry, kind: str, value: Any, message: str) -> None:
    plan = {"params": {"p": {"type": kind}}, "steps": [step(1)]}
    [diagnostic] = errors_of(plan, registry, params={"p": value})
    assert (diagnostic.code, diagnostic.severity, diagnostic.step_id) == (
        "invalid_param_value",
        "error",
        None,
    )
    assert diagnostic.message == message
    assert diagnostic.hint == "--param p=VALUE"


# --- reference paths against declared result types ---------------------------------------


@pytest.mark.parametrize(
    ("tool", "reference", "problem"),
    [
        # TypedDict
        (
            "totals",
            "<step_1_result.vnf>",
            "'vnf': the result (Totals) has no field 'vnf' (fields: count, vNF)",
        ),
        (
            "totals",
            "<step_1_result.count.x>",
            "'x': result.count (int) has no fields",
        ),
        # pydantic model, with a typing_extensions TypedDict inside
        (
            "invoice",
            "<step_1_result.emitter.cnpj>",
            "'cnpj': result.emitter (Party) has no field 'cnpj' (fields: CNPJ, name)",
        ),
        (
            "invoice",
            "<step_1_result.items.0.cost>",
            "'cost': result.items.0 (Item) has no field 'cost' (fields: name, price)",
        ),
        # list[...] indexed with a non-integer
        (
            "items",
            "<step_1_result.first>",
            "'first': the result is a list, indexed by integers (.0, .1, ...)",
        ),
        (
            "items",
            "<step_1_result.²>",
            "'²': the result is a list, indexed by integers (.0, .1, ...)",
        ),
        # str with a field
        ("read_text", "<step_1_result.text>", "'text': the result (str) has no fields"),
        ("add", "<step_1_result.0>", "'0': the result (int) has no fields"),
    ],
)
def test_invalid_reference_path(
    registry: Registry, tool: str, reference: str, problem: str
) -> None:
    first = step(1, tool, args={"a": 1} if tool == "add" else {"xml": "x", "path": "p"})
    if tool in ("totals", "invoice", "items"):
        first["args"] = {"xml": "x"}
    elif tool == "read_text":
        first["args"] = {"path": "p"}
    plan = {"steps": [first, step(2, "anything", args={"value": reference}, depends_on=[1])]}
    assert errors_of(plan, registry) == [
        Diagnostic(
            "invalid_reference_path",
            "error",
            2,
            f"args.value: {reference}: {problem} (step 1 calls {tool})",
            PATH_HINT,
        )
    ]


@pytest.mark.parametrize(
    ("tool", "args", "reference"),
    [
        ("totals", {"xml": "x"}, "<step_1_result.vNF>"),
        ("invoice", {"xml": "x"}, "<step_1_result.items.3.price>"),
        ("invoice", {"xml": "x"}, "<step_1_result.emitter.CNPJ>"),
        ("items", {"xml": "x"}, "<step_1_result.0.name>"),
        ("anything", {}, "<step_1_result.whatever.0.x>"),
    ],
)
def test_valid_reference_paths_compile(
    registry: Registry, tool: str, args: dict[str, Any], reference: str
) -> None:
    plan = {
        "steps": [
            step(1, tool, args=args),
            step(2, "anything", args={"value": reference}, depends_on=[1]),
        ]
    }
    assert compile_plan(plan, registry).order == (1, 2)


# --- implied dependency ------------------------------------------------------------------


def test_implied_dependency_warns_and_adds_the_edge(registry: Registry) -> None:
    plan = {"steps": [step(1), step(2, args={"a": "<step_1_result>"})]}
    compiled = compile_plan(plan, registry)
    assert compiled.diagnostics == (
        Diagnostic(
            "implied_dependency",
            "warning",
            2,
            "args.a: <step_1_result> uses step 1, missing from depends_on; "
            "the dependency was added",
            "add 1 to depends_on",
        ),
    )
    assert list(compiled.graph.edges) == [(1, 2)]
    assert compiled.steps[2].parents == (1,)


def test_implied_dependency_from_a_check_argument(registry: Registry) -> None:
    plan = {
        "steps": [
            step(1, "read_text", args={"path": "p"}),
            step(2, check=[{"kind": "regex", "pattern": "<step_1_result>"}]),
        ]
    }
    compiled = compile_plan(plan, registry)
    assert [(d.code, d.message) for d in compiled.diagnostics] == [
        (
            "implied_dependency",
            "check[0].pattern: <step_1_result> uses step 1, missing from depends_on; "
            "the dependency was added",
        )
    ]
    assert compiled.steps[2].parents == (1,)


def test_implied_edge_is_added_before_the_cycle_check(registry: Registry) -> None:
    # Declared: 2 → 1 only. The reference in step 2 implies 1 → 2: the only cycle.
    plan = {"steps": [step(1, depends_on=[2]), step(2, args={"a": "<step_1_result>"})]}
    diagnostics = errors_of(plan, registry)
    assert [(d.code, d.severity, d.step_id) for d in diagnostics] == [
        ("implied_dependency", "warning", 2),
        ("cycle", "error", 1),
    ]
    assert diagnostics[1].message == "the dependencies form a cycle: 1 → 2 → 1"


# --- run limits: read-only and write boundary ---------------------------------------------


def test_effects_in_read_only(registry: Registry) -> None:
    plan = {
        "steps": [
            step(1, "save", args={"path": "out.json"}),
            step(2, "read_text", args={"path": "a"}),
        ]
    }
    assert errors_of(plan, registry, read_only=True) == [
        Diagnostic(
            "effects_in_read_only",
            "error",
            1,
            "tool save has effects (write) and this run is read-only",
            "drop --read-only, or plan with tools without effects",
        )
    ]


def test_tool_with_effects_compiles_when_not_read_only(registry: Registry) -> None:
    plan = {"steps": [step(1, "save", args={"path": "out.json"})]}
    assert compile_plan(plan, registry).order == (1,)


@pytest.mark.parametrize("target", ["../x.json", "/etc/x", "out/../../x.json"])
def test_write_outside_boundary_literal_target(
    registry: Registry, tmp_path: Path, target: str
) -> None:
    boundary = WriteBoundary([tmp_path], base=tmp_path)
    plan = {"steps": [step(1, "save", args={"path": target})]}
    root = tmp_path.resolve()
    assert errors_of(plan, registry, write_boundary=boundary) == [
        Diagnostic(
            "write_outside_boundary",
            "error",
            1,
            f"write target {target!r} lies outside the write boundary ({root})",
            "write inside the boundary or widen it with --write-boundary",
        )
    ]


def test_write_outside_boundary_via_param(registry: Registry, tmp_path: Path) -> None:
    boundary = WriteBoundary([tmp_path], base=tmp_path)
    plan = {
        "params": {"out": {"type": "string"}},
        "steps": [
            step(1),
            step(
                2, "save", args={"path": "<param.out>", "data": "<step_1_result>"}, depends_on=[1]
            ),
            step(3, "save", args={"path": "<param.out>/<step_1_result>.json"}, depends_on=[1]),
        ],
    }
    diagnostics = errors_of(plan, registry, write_boundary=boundary, params={"out": "../escape"})
    # Step 3's target still holds a step reference once the param is resolved: only the
    # run-time check can judge it (the step result could itself hold "..").
    assert diagnostics == [
        Diagnostic(
            "write_outside_boundary",
            "error",
            2,
            f"write target '../escape' lies outside the write boundary ({tmp_path.resolve()})",
            "write inside the boundary or widen it with --write-boundary",
        )
    ]


def test_write_target_with_param_inside_a_longer_string(registry: Registry, tmp_path: Path) -> None:
    boundary = WriteBoundary([tmp_path], base=tmp_path)
    plan = {
        "params": {"name": {"type": "string"}, "n": {"type": "integer"}},
        "steps": [step(1, "save", args={"path": "/etc/<param.name>-<param.n>.json"})],
    }
    [diagnostic] = errors_of(
        plan, registry, write_boundary=boundary, params={"name": "passwd", "n": "3"}
    )
    assert (diagnostic.code, diagnostic.step_id) == ("write_outside_boundary", 1)
    assert diagnostic.message.startswith("write target '/etc/passwd-3.json' lies outside")


def test_write_targets_inside_the_boundary_compile(registry: Registry, tmp_path: Path) -> None:
    boundary = WriteBoundary([tmp_path], base=tmp_path)
    plan = {
        "params": {"out": {"type": "string", "default": "out/a.json"}},
        "steps": [
            step(1, "save", args={"path": "<param.out>"}),
            step(2, "save", args={"path": "b/c.json"}),
            step(3, "save", args={"path": str(tmp_path / "d.json")}),
            # a target only known at run time is checked then, not now
            step(4, "save", args={"path": "<step_1_result>"}, depends_on=[1]),
        ],
    }
    compiled = compile_plan(plan, registry, write_boundary=boundary, params={})
    assert compiled.order == (1, 2, 3, 4)
    assert compiled.params == {"out": "out/a.json"}


# --- all codes, all at once --------------------------------------------------------------


def _boundary_case() -> dict[str, Any]:
    return {"write_boundary": WriteBoundary(["/nonexistent-plandag-root"], base="/")}


# code → (plan, compile options): each plan produces (at least) its code.
CASES: dict[str, tuple[Any, dict[str, Any]]] = {
    "invalid_json": ("{", {}),
    "invalid_schema": ({"steps": [{"id": "one"}]}, {}),
    "duplicate_step_id": ({"steps": [step(1), step(1)]}, {}),
    "too_many_steps": ({"steps": [step(1), step(2)]}, {"max_steps": 1}),
    "args_too_large": ({"steps": [step(1)]}, {"max_arg_bytes": 2}),
    "unknown_tool": ({"steps": [step(1, "nope")]}, {}),
    "invalid_args": ({"steps": [step(1, args={"a": []})]}, {}),
    "unknown_check": ({"steps": [step(1, check=[{"kind": "nope"}])]}, {}),
    "invalid_check_args": ({"steps": [step(1, check=[{"kind": "regex"}])]}, {}),
    "unknown_dependency": ({"steps": [step(1, depends_on=[2])]}, {}),
    "self_dependency": ({"steps": [step(1, depends_on=[1])]}, {}),
    "duplicate_dependency": ({"steps": [step(1), step(2, depends_on=[1, 1])]}, {}),
    "cycle": ({"steps": [step(1, depends_on=[2]), step(2, depends_on=[1])]}, {}),
    "malformed_reference": ({"steps": [step(1, args={"a": "<step_one_result>"})]}, {}),
    "reference_to_missing_step": ({"steps": [step(1, args={"a": "<step_2_result>"})]}, {}),
    "unknown_param": ({"steps": [step(1, args={"a": "<param.n>"})]}, {}),
    "missing_param": ({"params": {"n": {}}, "steps": [step(1)]}, {"params": {}}),
    "invalid_param_value": (
        {"params": {"n": {"type": "integer"}}, "steps": [step(1)]},
        {"params": {"n": "x"}},
    ),
    "invalid_reference_path": (
        {"steps": [step(1), step(2, args={"a": "<step_1_result.x>"}, depends_on=[1])]},
        {},
    ),
    "implied_dependency": ({"steps": [step(1), step(2, args={"a": "<step_1_result>"})]}, {}),
    "effects_in_read_only": ({"steps": [step(1, "save", args={"path": "a"})]}, {"read_only": True}),
    "write_outside_boundary": ({"steps": [step(1, "save", args={"path": "a"})]}, _boundary_case()),
    "tainted_egress": (
        {
            "steps": [
                step(1, "fetch", args={"url": "https://docs.example.com/a"}),
                step(
                    2, "send", args={"url": "https://docs.example.com/b", "body": "<step_1_result>"}
                ),
            ]
        },
        {"read_only": True, "http_allow": ["docs.example.com"]},
    ),
    "host_not_allowed": (
        {"steps": [step(1, "fetch", args={"url": "https://elsewhere.example.net/"})]},
        {"read_only": True, "http_allow": ["docs.example.com"]},
    ),
    "check_attached": ({"steps": [step(1, description="audited")]}, {}),
    "integer_out_of_range": ({"steps": [step(1, args={"a": 2**53})]}, {}),
    "lone_surrogate": ({"steps": [step(1, "anything", args={"value": "\ud800"})]}, {}),
    "diagnostics_omitted": ({"steps": [step(1, "nope")] * 102}, {}),
    "warnings_omitted": (
        {
            "steps": [
                step(1),
                *(step(n, "anything", args={"value": "<step_1_result>"}) for n in range(2, 104)),
            ]
        },
        {},
    ),
}


WIRE_CODES = {"invalid_json_text"}
"""Codes the wire reader reports (plandag.planner.wire), never the compiler."""


def test_every_code_has_a_case() -> None:
    assert sorted(CASES) == sorted(set(DIAGNOSTIC_CODES) - WIRE_CODES)


def test_the_wire_reader_reports_json_text_that_does_not_parse() -> None:
    from plandag.planner.wire import wire_to_document

    with pytest.raises(PlanError) as raised:
        wire_to_document({"s": [{"i": 1, "t": "add", "a": {"a": {"json": "[1,"}}}]})
    [diagnostic] = raised.value.diagnostics
    assert (diagnostic.code, diagnostic.severity, diagnostic.step_id) == (
        "invalid_json_text",
        DIAGNOSTIC_CODES["invalid_json_text"],
        1,
    )


@pytest.mark.parametrize("code", sorted(set(DIAGNOSTIC_CODES) - WIRE_CODES))
def test_each_code_is_produced_with_its_severity(registry: Registry, code: str) -> None:
    plan, options = CASES[code]
    try:
        compiled = compile_plan(plan, registry, **options)
    except PlanError as error:
        diagnostics = error.diagnostics
    else:
        diagnostics = list(compiled.diagnostics)
    found = only(diagnostics, code)
    assert found, f"{code} not produced; got {[d.code for d in diagnostics]}"
    assert {d.severity for d in found} == {DIAGNOSTIC_CODES[code]}


def test_every_diagnostic_at_once(registry: Registry) -> None:
    plan = {
        "steps": [
            step(1, "ad"),  # unknown_tool
            step(2, args={"a": "x"}),  # invalid_args
            step(3, depends_on=[42]),  # unknown_dependency
            step(4, args={"a": "<step_2_reslt>"}),  # malformed_reference
            step(5, args={"a": "<step_77_result>"}),  # reference_to_missing_step
        ]
    }
    with pytest.raises(PlanError) as raised:
        compile_plan(plan, registry)
    assert [(d.code, d.step_id) for d in raised.value.diagnostics] == [
        ("unknown_tool", 1),
        ("invalid_args", 2),
        ("unknown_dependency", 3),
        ("malformed_reference", 4),
        ("reference_to_missing_step", 5),
    ]
    assert raised.value.codes == [
        "unknown_tool",
        "invalid_args",
        "unknown_dependency",
        "malformed_reference",
        "reference_to_missing_step",
    ]
    assert str(raised.value).splitlines()[0] == "plan does not compile: 5 error(s)"
    assert str(raised.value).splitlines()[1] == (
        "step 1: error[unknown_tool]: tool 'ad' is not registered (hint: did you mean add?)"
    )


def test_diagnostic_as_dict() -> None:
    diagnostic = Diagnostic("cycle", "error", 1, "m", "h")
    assert diagnostic.as_dict() == {
        "code": "cycle",
        "severity": "error",
        "step_id": 1,
        "message": "m",
        "hint": "h",
    }
    assert Diagnostic("invalid_json", "error", None, "bad").format() == (
        "plan: error[invalid_json]: bad"
    )


def test_invalid_param_default(registry: Registry) -> None:
    plan = {"params": {"n": {"type": "integer", "default": "many"}}, "steps": [step(1)]}
    assert errors_of(plan, registry) == [
        Diagnostic(
            "invalid_param_value",
            "error",
            None,
            "the default of param 'n' must be an integer, got 'many'",
            "fix \"default\" of param 'n' in the plan",
        )
    ]


def _nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("form", ["mapping", "plan"])
def test_invalid_schema_nesting_too_deep(registry: Registry, form: str) -> None:
    # The passes walk args recursively: a deeper plan is refused before it meets them.
    plan: Any = {"steps": [step(1, "anything", args={"value": _nested(5000)})]}
    if form == "plan":
        plan = Plan.model_validate(plan)
    assert errors_of(plan, registry) == [
        Diagnostic(
            "invalid_schema",
            "error",
            None,
            "the plan nests dicts and lists more than 200 levels deep",
            "flatten the arguments, or pass large data by reference or as a file",
        )
    ]


def test_a_self_containing_mapping_is_too_deep(registry: Registry) -> None:
    args: dict[str, Any] = {}
    args["value"] = args
    plan = {"steps": [step(1, "anything", args=args)]}
    assert [d.code for d in errors_of(plan, registry)] == ["invalid_schema"]


def test_nesting_of_a_hundred_levels_compiles(registry: Registry) -> None:
    plan = {"steps": [step(1, "anything", args={"value": _nested(100)})]}
    assert compile_plan(plan, registry).order == (1,)


def test_text_nested_too_deeply_for_the_json_reader_says_what_to_do(registry: Registry) -> None:
    text = '{"steps": [{"id": 1, "tool": "anything", "args": {"value": ' + "[" * 100_000
    text += "]" * 100_000 + "}}]}"
    assert errors_of(text, registry) == [
        Diagnostic(
            "invalid_json",
            "error",
            None,
            "the plan nests dicts and lists too deeply to read (over 200 levels are refused)",
            "flatten the arguments, or pass large data by reference or as a file",
        )
    ]
