"""Property tests: whatever the input, compile_plan returns a CompiledPlan or raises PlanError.

Two families of input: arbitrary JSON-like values (and their text), and plan-shaped dicts
whose ids, tools, args, dependencies, references, checks and params are drawn so that most
examples get past the schema and reach the graph, reference, type and boundary passes. Both
carry hostile values: integers at and past ±2^53, NaN and infinities, lone UTF-16
surrogates in strings and keys.

When a plan compiles, its graph is acyclic, every referenced step is an ancestor, and its
hash (RFC 8785) can be taken: what ``check`` accepts, ``exec`` can run. Whatever the input,
the diagnostics are printable UTF-8 and at most 100 plus one summary.
"""

from __future__ import annotations

import json
from typing import Any

import networkx as nx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plandag.approval.gate import plan_hash
from plandag.compiler import DIAGNOSTIC_CODES, CompiledPlan, compile_plan
from plandag.dag.references import find_references
from plandag.errors import PlanError
from plandag.tools.boundary import WriteBoundary
from plandag.tools.registry import Registry

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
BOUNDARY = WriteBoundary(["/plandag-property-root/out"], base="/plandag-property-root")

# --- arbitrary JSON-like values ------------------------------------------------------------

surrogates = st.integers(min_value=0xD800, max_value=0xDFFF).map(chr)
# Text with, now and then, a lone surrogate (hypothesis' text() never draws one).
hostile_text = st.lists(st.characters() | surrogates, max_size=6).map("".join)
hostile_scalars = (
    st.sampled_from([2**53, -(2**53), 2**53 - 1, -(2**53 - 1), 10**30, -(10**400), 1e400, -1e400])
    | st.floats(allow_nan=True, allow_infinity=True)
    | hostile_text
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
    | hostile_scalars
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=8) | hostile_text, children, max_size=4)
    ),
    max_leaves=20,
)

# --- plan-shaped dicts ---------------------------------------------------------------------

STEP_IDS = st.integers(min_value=1, max_value=6)
ODD_IDS = st.sampled_from([0, -1, "1", "x", 1.5, True, None, 10**30])
PARAM_NAMES = st.sampled_from(["input", "n", "out", "missing"])
PATH_SEGMENTS = st.sampled_from(
    ["vNF", "count", "items", "emitter", "CNPJ", "name", "price", "0", "1", "x", "²", "key"]
)
VALID_TOOLS = ["read_text", "totals", "items", "invoice", "add", "anything", "save"]
TOOL_NAMES = st.sampled_from([*VALID_TOOLS, "ad", "read_txt"])
ARG_KEYS = st.sampled_from(["a", "b", "path", "xml", "value", "data", "zzz"])
MALFORMED = st.sampled_from(
    ["<step_x_result>", "<step_1_reslt>", "<params.input>", "<Step 2 result>",
     "<step_0_result>", "<result>", "<param.>", "<step_1_result.>"]
)  # fmt: skip
CLEAN_PARAMS = ["input", "n", "out"]  # every clean plan declares these, with defaults


@st.composite
def references(draw: st.DrawFn, clean: bool = False, below: int = 7) -> str:
    """A reference-bearing string. Clean ones name only earlier steps and declared params."""
    path = "".join("." + s for s in draw(st.lists(PATH_SEGMENTS, max_size=3)))
    if clean:
        kinds = ["param", "embedded_param", "dollar"] + (["step", "embedded"] if below > 1 else [])
        step_ids = st.integers(1, max(1, below - 1))
        param_names = st.sampled_from(CLEAN_PARAMS)
    else:
        kinds = ["step", "param", "malformed", "embedded", "embedded_param", "dollar"]
        step_ids, param_names = STEP_IDS, PARAM_NAMES
    kind = draw(st.sampled_from(kinds))
    if kind == "step":
        return f"<step_{draw(step_ids)}_result{path}>"
    if kind == "param":
        return f"<param.{draw(param_names)}{path}>"
    if kind == "malformed":
        return draw(MALFORMED)
    if kind == "embedded":
        return f"a/<step_{draw(step_ids)}_result{path}>/<param.{draw(param_names)}>.json"
    if kind == "embedded_param":
        return f"out/<param.{draw(param_names)}>-<param.{draw(param_names)}>.json"
    return draw(st.sampled_from(["$1", "${2}", "cost $3"]))


def arg_values(clean: bool = False, below: int = 7) -> st.SearchStrategy[Any]:
    """JSON-like argument values with references at any depth."""
    leaves = (
        scalars
        | references(clean, below)
        | st.sampled_from(["../x", "/etc/x", "out/a.json", "a.json"])
    )
    return st.recursive(
        leaves,
        lambda children: (
            st.lists(children, max_size=3)
            | st.dictionaries(ARG_KEYS | st.text(max_size=4), children, max_size=3)
        ),
        max_leaves=8,
    )


@st.composite
def checks(draw: st.DrawFn, clean: bool, below: int) -> dict[str, Any]:
    kinds = ["not_empty", "regex"] if clean else ["not_empty", "regex", "not_emty"]
    entry: dict[str, Any] = {"kind": draw(st.sampled_from(kinds))}
    if entry["kind"] == "regex" and (clean or draw(st.booleans())):
        entry["pattern"] = draw(st.text(max_size=5) | references(clean, below))
    if not clean:
        for key in draw(st.lists(st.sampled_from(["pattern", "path", "flags"]), max_size=2)):
            entry[key] = draw(st.text(max_size=5) | references(clean, below) | st.integers())
    return entry


def tool_fields(tool: str, clean: bool, below: int) -> dict[str, st.SearchStrategy[Any]]:
    """Arguments each tool accepts, so that many steps get past the args check."""
    text = st.text(max_size=5)
    targets = ["out/a.json", "a.json", "out/<param.out>"]
    if not clean:
        targets += ["../x", "/etc/x"]
    fields: dict[str, dict[str, st.SearchStrategy[Any]]] = {
        "read_text": {"path": text},
        "totals": {"xml": text},
        "items": {"xml": text},
        "invoice": {"xml": text},
        "add": {"a": st.integers(-5, 5), "b": st.integers(-5, 5)},
        "anything": {"value": arg_values(clean, below)},
        "save": {"path": st.sampled_from(targets), "data": arg_values(clean, below)},
    }
    return fields.get(tool, {})


@st.composite
def tool_args(draw: st.DrawFn, tool: str, clean: bool, below: int) -> dict[str, Any]:
    fields = tool_fields(tool, clean, below)
    if not fields or (not clean and draw(st.integers(0, 5)) == 0):
        return draw(st.dictionaries(ARG_KEYS, arg_values(clean, below), max_size=3))
    args: dict[str, Any] = {}
    for name, values in fields.items():
        if tool == "add" and name == "b" and draw(st.booleans()):
            continue  # b has a default
        use_reference = tool != "add" and name != "path" and draw(st.integers(0, 2)) == 0
        args[name] = draw(references(clean, below)) if use_reference else draw(values)
    return args


@st.composite
def steps(draw: st.DrawFn, step_id: int, ids: list[int], quality: str) -> dict[str, Any]:
    clean = quality == "clean"
    tool = draw(st.sampled_from(VALID_TOOLS) if clean else TOOL_NAMES)
    step: dict[str, Any] = {
        "id": step_id,
        "tool": tool,
        "args": draw(tool_args(tool, clean, step_id)),
    }
    earlier = [other for other in ids if other < step_id]
    declare: bool = draw(st.booleans())
    if earlier and declare:
        step["depends_on"] = draw(st.lists(st.sampled_from(earlier), max_size=2, unique=True))
    if not clean and draw(st.integers(0, 5)) == 0:  # later ids (cycles), itself, unknown ids
        step.setdefault("depends_on", []).append(draw(STEP_IDS | st.integers(7, 9)))
    if draw(st.integers(0, 3)) == 0:
        step["check"] = draw(st.lists(checks(clean, step_id), max_size=2))
    if quality == "noisy":
        if draw(st.integers(0, 3)) == 0:
            step["id"] = draw(ODD_IDS)
        if draw(st.integers(0, 5)) == 0:
            step["extra"] = 1
        if draw(st.integers(0, 5)) == 0:
            step["depends_on"] = [draw(ODD_IDS)]
    return step


PARAM_SPECS = st.fixed_dictionaries(
    {"type": st.sampled_from(["string", "integer", "number", "boolean", "object", "array", "any"])},
    optional={"default": scalars, "required": st.booleans()},
)


@st.composite
def plans(draw: st.DrawFn, quality: str | None = None) -> dict[str, Any]:
    """Plan-shaped dicts: ``clean`` ones mostly compile, ``mixed`` ones carry graph,
    reference and type problems, ``noisy`` ones schema errors as well."""
    if quality is None:
        quality = draw(st.sampled_from(["clean", "mixed", "mixed", "noisy"]))
    count = draw(st.integers(0, 6))
    ids = list(range(1, count + 1))
    if quality != "clean":
        if draw(st.booleans()):
            ids = list(draw(st.permutations(ids)))
        if count and draw(st.integers(0, 9)) == 0:
            ids[-1] = ids[0]  # a duplicate id
    plan: dict[str, Any] = {"steps": [draw(steps(step_id, ids, quality)) for step_id in ids]}
    if quality == "clean":
        plan["params"] = {name: {"type": "any", "default": "p"} for name in CLEAN_PARAMS}
        if draw(st.booleans()):
            plan["output"] = draw(references(True, count + 1))
    else:
        if draw(st.booleans()):
            plan["params"] = draw(st.dictionaries(PARAM_NAMES, PARAM_SPECS, max_size=3))
        if draw(st.booleans()):
            plan["output"] = draw(arg_values())
    if quality == "noisy" and draw(st.booleans()):
        plan["version"] = draw(st.sampled_from([1, 2, "1"]))
    return plan


options = st.fixed_dictionaries(
    {},
    optional={
        "params": st.dictionaries(
            PARAM_NAMES,
            scalars | st.sampled_from(["3", "[1]", "../x", "9007199254740993", "\udcff"]),
        ),
        "read_only": st.booleans(),
        "write_boundary": st.just(BOUNDARY),
        "max_steps": st.integers(min_value=1, max_value=8),
        "max_arg_bytes": st.integers(min_value=0, max_value=200),
    },
)


# --- the property ----------------------------------------------------------------------------


def assert_printable(diagnostics: Any) -> None:
    assert len(diagnostics) <= 101
    for diagnostic in diagnostics:
        json.dumps(diagnostic.as_dict(), ensure_ascii=False).encode("utf-8")
        diagnostic.format().encode("utf-8")


def assert_compiles_or_plan_error(source: Any, registry: Registry, **kwargs: Any) -> None:
    failure: PlanError | None
    try:
        compiled = compile_plan(source, registry, **kwargs)
    except PlanError as error:
        failure = error
    else:
        failure = None
    if failure is not None:
        assert failure.codes, "a PlanError carries at least one error"
        for diagnostic in failure.diagnostics:
            assert DIAGNOSTIC_CODES[diagnostic.code] == diagnostic.severity
        assert_printable(failure.diagnostics)
        str(failure).encode("utf-8")
        return
    assert isinstance(compiled, CompiledPlan)
    assert_printable(compiled.diagnostics)
    # What compiles can be hashed (the approval binds to the hash; exec takes it first).
    assert len(plan_hash(compiled.plan, compiled.params, compiled.write_boundary)) == 64
    graph = compiled.graph
    assert nx.is_directed_acyclic_graph(graph)
    assert set(compiled.order) == set(graph.nodes) == set(compiled.steps)
    position = {step_id: index for index, step_id in enumerate(compiled.order)}
    for parent, child in graph.edges:
        assert position[parent] < position[child]
    for step_id, compiled_step in compiled.steps.items():
        assert compiled_step.parents == tuple(sorted(graph.predecessors(step_id)))
        assert compiled_step.children == tuple(sorted(graph.successors(step_id)))
        upstream = nx.ancestors(graph, step_id)
        containers = [compiled_step.step.args, [c.arguments for c in compiled_step.step.check]]
        for container in containers:
            for _, reference in find_references(container):
                if reference.step_id is not None:
                    assert reference.step_id in upstream
    for diagnostic in compiled.diagnostics:
        assert diagnostic.severity == "warning"


@SETTINGS
@given(value=json_values)
def test_any_json_like_value(registry: Registry, value: Any) -> None:
    assert_compiles_or_plan_error(value, registry)
    assert_compiles_or_plan_error(json.dumps(value), registry)


@SETTINGS
@given(text=st.text(max_size=60) | st.binary(max_size=60).map(lambda b: b))
def test_any_text_or_bytes(registry: Registry, text: str | bytes) -> None:
    assert_compiles_or_plan_error(text, registry)


@SETTINGS
@given(plan=plans(), kwargs=options)
def test_plan_shaped_dicts(
    registry: Registry, plan: dict[str, Any], kwargs: dict[str, Any]
) -> None:
    assert_compiles_or_plan_error(plan, registry, **kwargs)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=plans("clean"))
def test_plans_that_compile_keep_their_promises(registry: Registry, plan: dict[str, Any]) -> None:
    # Clean plans without run options: most compile, so the graph assertions run often.
    assert_compiles_or_plan_error(plan, registry)
