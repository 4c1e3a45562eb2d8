"""The built-in check kinds: each passes and fails on the right values, with clear details."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import plandag.checks
from plandag.checks import BUILTIN_CHECKS, CheckDefinition, CheckOutcome

CHECKS: dict[str, CheckDefinition] = {definition.name: definition for definition in BUILTIN_CHECKS}


def evaluate(kind: str, result: Any, **args: Any) -> CheckOutcome:
    return CHECKS[kind].evaluate(result, args)


def test_builtin_kinds() -> None:
    assert [definition.name for definition in BUILTIN_CHECKS] == [
        "not_empty",
        "equals",
        "regex",
        "jmespath",
        "file_exists",
        "tolerance",
    ]


def test_package_exports() -> None:
    assert plandag.checks.__all__ == [
        "BUILTIN_CHECKS",
        "CheckDefinition",
        "CheckOutcome",
        "CheckStatus",
        "check",
    ]
    assert all(hasattr(plandag.checks, name) for name in plandag.checks.__all__)


# -- not_empty -----------------------------------------------------------------------------


@pytest.mark.parametrize("result", ["x", [0], {"a": None}, 0, False])
def test_not_empty_passes(result: Any) -> None:
    assert evaluate("not_empty", result).status == "pass"


@pytest.mark.parametrize("result", [None, "", [], {}])
def test_not_empty_fails(result: Any) -> None:
    outcome = evaluate("not_empty", result)
    assert outcome.status == "fail"
    assert outcome.detail.startswith("the result is empty: ")


def test_not_empty_at_path() -> None:
    assert evaluate("not_empty", {"emit": {"CNPJ": "123"}}, path="emit.CNPJ") == CheckOutcome(
        "not_empty", "pass", 'the value at `emit.CNPJ` is "123"'
    )
    assert evaluate("not_empty", {"emit": {}}, path="emit.CNPJ") == CheckOutcome(
        "not_empty", "fail", "the value at `emit.CNPJ` is empty: null"
    )


def test_not_empty_on_pydantic_model() -> None:
    class Record(BaseModel):
        key: str

    assert evaluate("not_empty", Record(key="k"), path="key").status == "pass"
    assert evaluate("not_empty", Record(key=""), path="key").status == "fail"


def test_path_over_unsearchable_object_fails_clearly() -> None:
    outcome = evaluate("not_empty", {"a": object()}, path="a")
    assert outcome.status == "fail"
    assert outcome.detail.startswith("the result holds a value of type object")


def test_invalid_path_fails_with_detail() -> None:
    outcome = evaluate("not_empty", {"a": 1}, path="a[")
    assert outcome.status == "fail"
    assert outcome.detail.startswith("invalid JMESPath expression `a[`: ")


# -- equals --------------------------------------------------------------------------------


def test_equals_pass_and_fail() -> None:
    assert evaluate("equals", {"status": 100}, value=100, path="status") == CheckOutcome(
        "equals", "pass", "the value at `status` equals 100"
    )
    assert evaluate("equals", {"status": 110}, value=100, path="status") == CheckOutcome(
        "equals", "fail", "the value at `status` is 110, expected 100"
    )


def test_equals_whole_result_and_structures() -> None:
    assert evaluate("equals", [1, {"a": "b"}], value=[1, {"a": "b"}]).status == "pass"
    assert evaluate("equals", [1, {"a": "b"}], value=[1, {"a": "c"}]).status == "fail"


def test_equals_true_is_not_one() -> None:
    assert evaluate("equals", {"a": 1}, value=True, path="a") == CheckOutcome(
        "equals", "fail", "the value at `a` is 1, expected true"
    )
    assert evaluate("equals", {"a": True}, value=True, path="a").status == "pass"


def test_equals_truncates_long_values() -> None:
    outcome = evaluate("equals", "x" * 500, value="y")
    assert outcome.status == "fail"
    assert outcome.detail == 'the result is "' + "x" * 98 + '…, expected "y"'


# -- regex ---------------------------------------------------------------------------------


def test_regex_full_match() -> None:
    assert evaluate("regex", {"code": "12345"}, pattern="[0-9]+", path="code") == CheckOutcome(
        "regex", "pass", "the value at `code` \"12345\" matches '[0-9]+'"
    )
    assert evaluate("regex", {"code": "12345x"}, pattern="[0-9]+", path="code") == CheckOutcome(
        "regex", "fail", "the value at `code` \"12345x\" does not fully match '[0-9]+'"
    )


def test_regex_needs_a_string() -> None:
    assert evaluate("regex", {"code": 12345}, pattern="[0-9]+", path="code") == CheckOutcome(
        "regex",
        "fail",
        "the value at `code` is int 12345, not a string; cannot match '[0-9]+'",
    )


def test_regex_invalid_pattern() -> None:
    outcome = evaluate("regex", "abc", pattern="[0-9")
    assert outcome.status == "fail"
    assert outcome.detail.startswith("invalid regular expression '[0-9': ")


# -- jmespath ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("result", "expr"),
    [
        ({"total": "10.00"}, "total != `null`"),
        ({"items": [1, 2]}, "length(items) > `1`"),
        ({"count": 0}, "count"),  # 0 is true in JMESPath
        ({"flag": True}, "flag"),
    ],
)
def test_jmespath_truthy_passes(result: Any, expr: str) -> None:
    assert evaluate("jmespath", result, expr=expr).status == "pass"


@pytest.mark.parametrize("value", [False, None, "", [], {}])
def test_jmespath_falsy_fails(value: Any) -> None:
    outcome = evaluate("jmespath", {"v": value}, expr="v")
    assert outcome.status == "fail"
    assert outcome.detail.endswith(", which is false")


def test_jmespath_detail_names_expression_and_value() -> None:
    assert evaluate("jmespath", {"total": None}, expr="total != `null`") == CheckOutcome(
        "jmespath", "fail", "`total != `null`` is false, which is false"
    )


def test_jmespath_invalid_expression() -> None:
    outcome = evaluate("jmespath", {"a": 1}, expr="a ==")
    assert outcome.status == "fail"
    assert outcome.detail.startswith("invalid JMESPath expression `a ==`: ")


# -- file_exists ---------------------------------------------------------------------------


def test_file_exists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "a.json").write_text("{}")
    (tmp_path / "empty.txt").write_text("")
    assert evaluate("file_exists", None, path="out/a.json") == CheckOutcome(
        "file_exists", "pass", "file out/a.json exists (2 bytes)"
    )
    assert evaluate("file_exists", None, path="missing.json") == CheckOutcome(
        "file_exists", "fail", f"file missing.json does not exist ({tmp_path / 'missing.json'})"
    )
    assert evaluate("file_exists", None, path="out") == CheckOutcome(
        "file_exists", "fail", "out exists but is not a file"
    )
    assert evaluate("file_exists", None, path="empty.txt").status == "pass"
    assert evaluate("file_exists", None, path="empty.txt", non_empty=True) == CheckOutcome(
        "file_exists", "fail", "file empty.txt exists but is empty (0 bytes)"
    )


# -- tolerance -----------------------------------------------------------------------------


def test_tolerance_uses_decimal_from_strings() -> None:
    # 0.1 + 0.2 is 0.30000000000000004 in floats; in Decimal from the strings it is 0.3.
    outcome = evaluate(
        "tolerance",
        {"items": [{"v": "0.1"}, {"v": 0.2}]},
        actual="items[].v",
        expected_value="0.3",
        tolerance="0",
    )
    assert outcome == CheckOutcome(
        "tolerance",
        "pass",
        "actual `items[].v` = 0.3, expected value = 0.3, difference 0.0 <= tolerance 0",
    )


def test_tolerance_between_two_paths() -> None:
    result = {"det": [{"vProd": "10.10"}, {"vProd": "5.05"}], "total": {"vProd": "15.15"}}
    assert evaluate("tolerance", result, actual="det[].vProd", expected="total.vProd") == (
        CheckOutcome(
            "tolerance",
            "pass",
            "actual `det[].vProd` = 15.15, expected `total.vProd` = 15.15, difference 0.00 "
            "<= tolerance 0.01",
        )
    )


def test_tolerance_fails_beyond_tolerance() -> None:
    outcome = evaluate("tolerance", {"a": "10.00", "b": "10.02"}, actual="a", expected="b")
    assert outcome == CheckOutcome(
        "tolerance",
        "fail",
        "actual `a` = 10.00, expected `b` = 10.02, difference 0.02 > tolerance 0.01",
    )


def test_tolerance_at_the_boundary_passes() -> None:
    assert evaluate("tolerance", {"a": "10.00"}, actual="a", expected_value=10.01).status == "pass"


def test_tolerance_needs_exactly_one_expected() -> None:
    detail = "give exactly one of `expected` (a path) and `expected_value`"
    assert evaluate("tolerance", {"a": 1}, actual="a") == CheckOutcome("tolerance", "fail", detail)
    assert evaluate("tolerance", {"a": 1}, actual="a", expected="a", expected_value=1) == (
        CheckOutcome("tolerance", "fail", detail)
    )


def test_tolerance_non_numbers_fail_clearly() -> None:
    assert evaluate("tolerance", {"a": "abc"}, actual="a", expected_value="1") == CheckOutcome(
        "tolerance", "fail", 'actual `a` is "abc", not a number'
    )
    assert evaluate("tolerance", {}, actual="a", expected_value="1") == CheckOutcome(
        "tolerance", "fail", "actual `a` is null, not a number"
    )
    assert evaluate("tolerance", {"a": ["1", True]}, actual="a", expected_value="1") == (
        CheckOutcome("tolerance", "fail", "actual `a`[1] is true, not a number")
    )


def test_tolerance_invalid_expression() -> None:
    outcome = evaluate("tolerance", {"a": 1}, actual="a[", expected_value="1")
    assert outcome.status == "fail"
    assert outcome.detail.startswith("invalid JMESPath expression: ")


def test_unknown_argument_fails_the_check() -> None:
    outcome = evaluate("not_empty", "x", pth="a")
    assert outcome.status == "fail"
    assert outcome.detail.startswith("ValidationError: ")


def test_regex_check_cannot_hang_on_catastrophic_backtracking() -> None:
    """A model-written pattern that backtracks for ever fails within the time limit."""
    import time

    definition = next(d for d in BUILTIN_CHECKS if d.name == "regex")
    started = time.monotonic()
    outcome = definition.evaluate("a" * 5000 + "!", {"pattern": r"(a|aa)+(a|aa)+$"})
    assert time.monotonic() - started < 10
    assert outcome.status == "fail"
    assert "took longer than 1 s (catastrophic backtracking?)" in outcome.detail
