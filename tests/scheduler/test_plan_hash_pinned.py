"""The plan hash of fixed plans never changes: stored runs, approvals and decisions compare
digests made by earlier versions (the values below were made by one)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plandag.checks import BUILTIN_CHECKS
from plandag.compiler import compile_plan
from plandag.dag.plan import Plan
from plandag.scheduler.gate import compiled_plan_document, compiled_plan_hash, plan_hash
from plandag.scheduler.result import to_jsonable
from plandag.tools.base import tool
from plandag.tools.boundary import WriteBoundary
from plandag.tools.registry import Registry

_CHAIN = {
    "goal": "a chain",
    "steps": [
        {"id": 1, "tool": "noop", "args": {}},
        *({"id": n, "tool": "noop", "args": {}, "depends_on": [n - 1]} for n in range(2, 6)),
    ],
}

_MIXED = {
    "goal": "Emitir a nota fiscal e avisar a operação 🚀",
    "params": {"cliente": {"type": "string", "default": "José"}},
    "steps": [
        {
            "id": 1,
            "tool": "sleep_for",
            "args": {"seconds": 0.05, "whole": 1.0, "tiny": 1e-05, "huge": 1e21, "zero": -0.0},
            "description": "espera",
        },
        {
            "id": 2,
            "tool": "sleep_for",
            "args": {
                "seconds": 0.125,
                "nested": {"ação": [1, 2**53 - 1, None, True, "x\ny\u2028"], "b": {"c": []}},
            },
            "depends_on": [1],
            "check": [{"kind": "not_empty"}],
        },
        {"id": 3, "tool": "sleep_for", "args": {"seconds": 3.0, "at": "<step_2_result>"}},
    ],
    "output": {"done": "<step_3_result>"},
}


@tool
async def noop() -> None:
    """Do nothing."""


@tool
async def wait(seconds: float, note: Any = None) -> Any:
    """Return ``note`` (``seconds`` is only recorded)."""
    return note


_WAITS = {
    "goal": "três esperas",
    "params": {"who": {"type": "string", "default": "Zoë"}},
    "steps": [
        {"id": 1, "tool": "wait", "args": {"seconds": 0.05, "note": {"ação": [1.0, 1e-05]}}},
        {"id": 2, "tool": "wait", "args": {"seconds": 1e21, "note": "<param.who>"}},
        {"id": 3, "tool": "wait", "args": {"seconds": 2.5, "note": "<step_1_result>"}},
    ],
}


#: The digests an earlier version made of the plans above (do not update them: a changed
#: value means stored runs and decisions no longer match their plans).
_PINNED = {
    "chain": "89f450b7d9ea69726a699dbd1f3ef81e4f92859dae9ba547021a8db8e8631382",
    "chain with params and boundary": (
        "c0e89bb6ba7b7920afcd1699aa098abf44b9a7f28c817392a60fe38d4bc4faac"
    ),
    "mixed": "78bce2f00a93d640a13cd404a0089a1250e8c6b5a388a696b362f13b90c94c39",
    "mixed with allow-list and schemas": (
        "9aff66ecc2b4b93d6d17e419e7b82e0168973b30cedd835e765e5503e154cfb6"
    ),
    "compiled chain": "89f450b7d9ea69726a699dbd1f3ef81e4f92859dae9ba547021a8db8e8631382",
    "compiled waits": "d4ca885aec634e85efeb63658822d73df924652522e2aab8e381087faa7aeefb",
}


def _hashes() -> dict[str, str]:
    boundary = WriteBoundary(["/"], base="/", hosts=["https://api.example.com"])
    return {
        "chain": plan_hash(Plan.model_validate(_CHAIN)),
        "chain with params and boundary": plan_hash(
            Plan.model_validate(_CHAIN), {"n": 3, "rate": 0.5, "who": "Ana"}, boundary
        ),
        "mixed": plan_hash(Plan.model_validate(_MIXED), {"cliente": "Zoë"}),
        "mixed with allow-list and schemas": plan_hash(
            Plan.model_validate(_MIXED),
            {"cliente": "Zoë", "ratio": 1e-7},
            boundary,
            ["https://b.example.com", "https://a.example.com", "https://a.example.com"],
            {"remote_tool": "ab" * 32},
        ),
        "compiled chain": compiled_plan_hash(
            compile_plan(_CHAIN, Registry([noop, wait], BUILTIN_CHECKS))
        ),
        "compiled waits": compiled_plan_hash(
            compile_plan(_WAITS, Registry([noop, wait], BUILTIN_CHECKS), params={"who": "Ana"})
        ),
    }


_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.05, 1.0, -0.0, 1e-4, 9.999999999999999e-05, 1e16, 123456.789, 1e-7]),
    st.text(max_size=8),
)
_KEYS = st.one_of(st.text(max_size=6), st.sampled_from(["a", "B", "ação", "\ue000", "\U0001f600"]))
_ARGS = st.dictionaries(
    _KEYS,
    st.recursive(
        _LEAVES,
        lambda children: st.one_of(
            st.lists(children, max_size=3), st.dictionaries(_KEYS, children, max_size=3)
        ),
        max_leaves=12,
    ),
    max_size=4,
)


def _reference_hash(plan: Plan, params: dict[str, Any]) -> str:
    """The hash as the first plan hashes were made: converted, then written by rfc8785."""
    hashed = {
        "plan": plan.model_dump(mode="json", exclude_none=True),
        "params": params,
        "write_boundary": None,
    }
    return hashlib.sha256(rfc8785.dumps(to_jsonable(hashed))).hexdigest()


def test_fixed_plans_keep_their_hashes() -> None:
    assert _hashes() == _PINNED


@given(st.lists(_ARGS, min_size=1, max_size=4), _ARGS)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_plan_hashes_as_rfc8785_writes_it_converted(
    args: list[dict[str, Any]], params: dict[str, Any]
) -> None:
    plan = Plan.model_validate(
        {"steps": [{"id": n + 1, "tool": "wait", "args": item} for n, item in enumerate(args)]}
    )
    assert plan_hash(plan, params) == _reference_hash(plan, params)


@pytest.mark.parametrize(
    "args",
    [
        {"seconds": 0.05},
        {"seconds": 1.0, "note": {"ação": [1e-05, 1e21, -0.0]}},
        {"seconds": 2.5, "note": "ação \u2028 \U0001f600"},
    ],
)
def test_a_compiled_plan_document_is_its_dump_and_its_hash(args: dict[str, Any]) -> None:
    compiled = compile_plan(
        {"steps": [{"id": 1, "tool": "wait", "args": args}]}, Registry([noop, wait], BUILTIN_CHECKS)
    )
    document = compiled_plan_document(compiled)
    assert document.json == compiled.plan.model_dump(mode="json", exclude_none=True)
    assert document.hash == plan_hash(compiled.plan)
    assert document.plain
    assert to_jsonable(document.json) == document.json


def test_a_value_past_to_jsonables_limits_is_not_plain_and_hashes_as_converted() -> None:
    deep: Any = "bottom"
    for _ in range(150):
        deep = [deep]
    plan = Plan.model_validate({"steps": [{"id": 1, "tool": "wait", "args": {"deep": deep}}]})
    assert plan_hash(plan) == _reference_hash(plan, {})
    compiled = compile_plan(
        {"steps": [{"id": 1, "tool": "wait", "args": {"seconds": 1, "note": deep}}]},
        Registry([noop, wait], BUILTIN_CHECKS),
    )
    assert not compiled_plan_document(compiled).plain
