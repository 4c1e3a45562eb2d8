"""Hostile plans: values the plan's hash cannot encode, plans over the step limit, and
plans built to make the compiler's work or report explode.

What ``check`` accepts, ``exec`` must be able to run: a plan that compiles can be hashed
(RFC 8785). The report of a plan is bounded (the first 100 diagnostics and a count of the
rest) and made in time linear in the plan: counters stand in for the clock here, the
timings are in ``benchmarks/compile_hostile.py``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import plandag.compiler.compile as compile_module
from plandag.approval.gate import plan_hash
from plandag.compiler import DEFAULT_MAX_STEPS, Diagnostic, compile_patch, compile_plan
from plandag.compiler.values import MAX_SAFE_INTEGER
from plandag.dag.limits import MAX_DIAGNOSTICS
from plandag.errors import PlanError
from plandag.tools.registry import Registry

INTEGER_HINT = "write it as a string, or as a smaller number"
SURROGATE_HINT = (
    "remove it, or write the character meant (in JSON a pair such as \\ud83d\\ude00 is one "
    "character; a lone half is not)"
)


def step(step_id: int, tool: str = "anything", **fields: Any) -> dict[str, Any]:
    return {"id": step_id, "tool": tool, **fields}


def error_of(plan: Any, registry: Registry, **options: Any) -> PlanError:
    with pytest.raises(PlanError) as raised:
        compile_plan(plan, registry, **options)
    return raised.value


def out_of_range(path: str, number: str, step_id: int | None = 1) -> Diagnostic:
    return Diagnostic(
        "integer_out_of_range",
        "error",
        step_id,
        f"{path}: the integer {number} is outside ±9007199254740991 (2^53 - 1), the integers "
        "the plan's canonical JSON (RFC 8785) holds exactly",
        INTEGER_HINT,
    )


# --- integers the hash cannot encode ----------------------------------------------------------


def test_an_integer_at_2_to_the_53_is_refused_with_its_step_and_json_path(
    registry: Registry,
) -> None:
    plan = {"steps": [step(1, args={"value": {"rows": [1, {"n": 2**53}]}})]}
    assert error_of(plan, registry).diagnostics == [
        out_of_range("args.value.rows[1].n", "9007199254740992")
    ]


def test_the_largest_safe_integers_compile_and_hash(registry: Registry) -> None:
    plan = {"steps": [step(1, args={"value": [MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER]})]}
    compiled = compile_plan(plan, registry)
    assert len(plan_hash(compiled.plan, compiled.params)) == 64


def test_integers_out_of_range_are_found_everywhere_in_the_plan(registry: Registry) -> None:
    big, small = 2**53, -(2**53)
    plan = {
        "params": {"n": {"type": "integer", "default": big}},
        "steps": [
            step(big),
            step(2, depends_on=[small]),
            step(3, check=[{"kind": "regex", "pattern": "x", "path": "a", "flags": big}]),
        ],
        "output": {"total": small},
    }
    found = [
        (d.code, d.step_id, d.message.split(":")[0]) for d in error_of(plan, registry).diagnostics
    ]
    assert ("integer_out_of_range", None, "params.n.default") in found
    assert ("integer_out_of_range", big, "id") in found
    assert ("integer_out_of_range", 2, "depends_on[0]") in found
    assert ("integer_out_of_range", 3, "check[0].flags") in found
    assert ("integer_out_of_range", None, "output.total") in found


def test_a_param_value_given_as_text_out_of_range_is_refused(registry: Registry) -> None:
    plan = {"params": {"n": {"type": "integer"}}, "steps": [step(1, args={"value": "<param.n>"})]}
    error = error_of(plan, registry, params={"n": "9007199254740993"})
    assert error.diagnostics == [out_of_range("params.n", "9007199254740993", None)]


def test_a_huge_integer_is_described_by_its_size(registry: Registry) -> None:
    plan = {"steps": [step(1, args={"value": -(10**5000)})]}
    (diagnostic,) = error_of(plan, registry).diagnostics
    assert diagnostic.message.startswith(
        "args.value: a negative integer of about 5001 digits is outside ±9007199254740991"
    )


# --- lone surrogates ---------------------------------------------------------------------------


def test_a_lone_surrogate_in_a_value_is_refused_with_its_path_escaped(
    registry: Registry,
) -> None:
    text = '{"steps": [{"id": 1, "tool": "anything", "args": {"value": ["ok", "a\\ud800b"]}}]}'
    assert error_of(text, registry).diagnostics == [
        Diagnostic(
            "lone_surrogate",
            "error",
            1,
            "args.value[1]: a string with a lone surrogate (U+D800), which is not Unicode text "
            "and cannot be hashed (RFC 8785)",
            SURROGATE_HINT,
        )
    ]


def test_a_lone_surrogate_in_a_key_is_named_escaped_so_it_can_be_printed(
    registry: Registry,
) -> None:
    text = '{"steps": [{"id": 1, "tool": "anything", "args": {"value": {"\\udc00": 1}}}]}'
    (diagnostic,) = error_of(text, registry).diagnostics
    assert diagnostic.message == (
        "args.value.\\udc00: a key with a lone surrogate (U+DC00), which is not Unicode text "
        "and cannot be hashed (RFC 8785)"
    )
    assert diagnostic.message.encode("utf-8")  # printable: no surrogate left in it


def test_lone_surrogates_are_found_in_goal_description_params_and_output(
    registry: Registry,
) -> None:
    plan = {
        "goal": "g\ud800",
        "params": {"p\udfff": {"type": "string", "default": "x"}},
        "steps": [step(1, description="d\ud801", check=[{"kind": "regex", "pattern": "\udc01"}])],
        "output": ["\ud802"],
    }
    found = [
        (d.code, d.step_id, d.message.split(":")[0]) for d in error_of(plan, registry).diagnostics
    ]
    assert found == [
        ("lone_surrogate", None, "goal"),
        ("lone_surrogate", None, "params.p\\udfff"),
        ("lone_surrogate", None, "output[0]"),
        ("lone_surrogate", 1, "description"),
        ("lone_surrogate", 1, "check[0].pattern"),
    ]


def test_a_pair_of_surrogates_in_json_is_one_character_and_compiles(registry: Registry) -> None:
    text = '{"steps": [{"id": 1, "tool": "anything", "args": {"value": "\\ud83d\\ude00"}}]}'
    compiled = compile_plan(text, registry)
    assert compiled.plan.steps[0].args == {"value": "\U0001f600"}
    assert len(plan_hash(compiled.plan, compiled.params)) == 64


def test_every_diagnostic_is_printable_even_when_it_quotes_a_surrogate(
    registry: Registry,
) -> None:
    plan = {"steps": [step(1, args={"value": {"\ud800": "<step_x_result>"}})]}
    error = error_of(plan, registry)
    assert [d.code for d in error.diagnostics] == ["lone_surrogate", "malformed_reference"]
    text = json.dumps([d.as_dict() for d in error.diagnostics], ensure_ascii=False)
    assert text.encode("utf-8")
    assert str(error).encode("utf-8")


def test_a_patch_with_values_the_hash_cannot_encode_is_refused(registry: Registry) -> None:
    base = compile_plan({"steps": [step(1)]}, registry)
    with pytest.raises(PlanError) as raised:
        compile_patch(base, [step(2, args={"value": [2**60, "\udbff"]})], registry)
    assert [(d.code, d.step_id) for d in raised.value.diagnostics] == [
        ("integer_out_of_range", 2),
        ("lone_surrogate", 2),
    ]


# --- the step limit ------------------------------------------------------------------------------


def thousand_steps() -> dict[str, Any]:
    return {"steps": [step(n) for n in range(1, 1001)]}


def test_a_thousand_step_plan_is_refused_by_default_naming_the_limit_and_the_option(
    registry: Registry,
) -> None:
    assert DEFAULT_MAX_STEPS == 500
    assert error_of(thousand_steps(), registry).diagnostics == [
        Diagnostic(
            "too_many_steps",
            "error",
            None,
            "the plan has 1000 steps; this run allows at most 500 (max_steps)",
            "raise the limit with --max-steps N (config key max_steps; max_steps=N in "
            "Python), or merge steps or split the task into several plans",
        )
    ]


def test_a_thousand_step_plan_compiles_with_max_steps_1000_and_keeps_the_limit(
    registry: Registry,
) -> None:
    compiled = compile_plan(thousand_steps(), registry, max_steps=1000)
    assert len(compiled.steps) == 1000
    assert compiled.max_steps == 1000


def test_a_plan_over_the_limit_is_not_validated_step_by_step(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    original = compile_module._check_step
    monkeypatch.setattr(
        compile_module, "_check_step", lambda *a, **k: calls.append(1) or original(*a, **k)
    )
    error_of({"steps": [step(n, "nope") for n in range(1, 10_001)]}, registry)
    assert calls == []


# --- a bounded report, made in linear time ----------------------------------------------------


def test_ten_thousand_copies_of_one_id_give_100_diagnostics_and_a_count_of_the_rest(
    registry: Registry,
) -> None:
    plan = {"steps": [step(1)] * 10_000}
    error = error_of(plan, registry, max_steps=10_000)
    assert MAX_DIAGNOSTICS == 100
    assert len(error.diagnostics) == 101
    assert {d.code for d in error.diagnostics[:100]} == {"duplicate_step_id"}
    assert error.diagnostics[0].hint == "give each step its own id; the largest in use is 1"
    assert error.diagnostics[100] == Diagnostic(
        "diagnostics_omitted",
        "error",
        None,
        "9899 more diagnostic(s) found and not listed (9899 error(s), 0 warning(s); by code: "
        "duplicate_step_id 9899); the first 100 are listed",
        "fix the ones listed and compile again: the rest often share their cause",
    )
    assert error.error_count == 9999
    assert str(error).startswith("plan does not compile: 9999 error(s)\n")


def test_the_largest_id_is_found_once_however_many_duplicates(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def counting_max(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return max(*args, **kwargs)

    monkeypatch.setattr(compile_module, "max", counting_max, raising=False)
    error_of({"steps": [step(1)] * 5_000}, registry, max_steps=5_000)
    assert len(calls) == 1


def test_hints_listing_every_step_are_made_only_for_listed_diagnostics(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    original = compile_module._id_list
    monkeypatch.setattr(
        compile_module, "_id_list", lambda by_id: calls.append(1) or original(by_id)
    )
    plan = {"steps": [step(n, depends_on=[99_999]) for n in range(1, 3_001)]}
    error = error_of(plan, registry, max_steps=3_000)
    assert error.error_count == 3_000
    assert len(calls) == 100


def test_a_5_mb_argument_of_malformed_references_gives_a_bounded_report(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    suggestions: list[str] = []
    original = compile_module.suggest_reference
    monkeypatch.setattr(
        compile_module,
        "suggest_reference",
        lambda token: suggestions.append(token) or original(token),
    )
    plan = {"steps": [step(1, args={"value": "<step_x_result>" * 333_334})]}
    error = error_of(plan, registry)
    codes = [d.code for d in error.diagnostics]
    assert codes == ["args_too_large", *["malformed_reference"] * 99, "diagnostics_omitted"]
    assert error.error_count == 1 + 333_334
    assert error.diagnostics[-1].message.startswith(
        "333235 more diagnostic(s) found and not listed (333235 error(s), 0 warning(s); "
        "by code: malformed_reference 333235)"
    )
    assert len(suggestions) == 99  # the nearest valid form, only for listed diagnostics


def test_more_than_100_warnings_in_a_plan_that_compiles_end_in_a_warning_summary(
    registry: Registry,
) -> None:
    steps = [step(1), *(step(n, args={"value": "<step_1_result>"}) for n in range(2, 152))]
    compiled = compile_plan({"steps": steps}, registry)
    assert len(compiled.steps) == 151
    assert [d.code for d in compiled.diagnostics] == [
        *["implied_dependency"] * 100,
        "warnings_omitted",
    ]
    assert compiled.diagnostics[-1].severity == "warning"
    assert compiled.diagnostics[-1].message.startswith(
        "50 more diagnostic(s) found and not listed (0 error(s), 50 warning(s)"
    )


def test_an_error_past_100_warnings_still_fails_the_plan_with_an_error_summary(
    registry: Registry,
) -> None:
    steps = [step(1), *(step(n, args={"value": "<step_1_result>"}) for n in range(2, 152))]
    steps.append(step(500, "nope"))
    error = error_of({"steps": steps}, registry)
    assert [d.severity for d in error.diagnostics].count("error") == 1
    assert error.diagnostics[-1].code == "diagnostics_omitted"
    assert error.error_count == 1


@pytest.mark.parametrize("value", [0, -1, "500", None, True, 1.5])
def test_a_step_limit_that_is_not_a_positive_integer_is_refused_before_compiling(
    registry: Registry, value: Any
) -> None:
    with pytest.raises(ValueError, match="max_steps must be") as caught:
        compile_plan({"goal": "g", "steps": [step(1)]}, registry, max_steps=value)
    assert str(caught.value) == (
        f"compile_plan: max_steps must be an integer >= 1, got {value!r}; give the most steps "
        f"a plan may have (default {DEFAULT_MAX_STEPS})"
    )
