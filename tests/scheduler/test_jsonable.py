"""to_jsonable never raises and never explodes, whatever a tool returns."""

from __future__ import annotations

import json
from decimal import Decimal

from plandag.scheduler.result import to_jsonable


def test_plain_values_and_special_floats() -> None:
    value = {"a": [1, 2.5, Decimal("0.10"), None, True], 3: float("nan")}
    assert to_jsonable(value) == {"a": [1, 2.5, "0.10", None, True], "3": "NaN"}
    assert to_jsonable([float("inf"), float("-inf")]) == ["Infinity", "-Infinity"]
    json.dumps(to_jsonable(value), allow_nan=False)


def test_a_list_that_holds_itself() -> None:
    loop: list[object] = [1]
    loop.append(loop)
    assert to_jsonable(loop) == [1, "<cycle>"]


def test_shared_references_cannot_blow_up() -> None:
    value: object = "x"
    for _ in range(40):  # 2**40 leaves once written out
        value = [value, value]
    out = json.dumps(to_jsonable(value))
    assert "<truncated>" in out
    assert len(out) < 50_000_000


def test_deep_nesting() -> None:
    value: object = 0
    for _ in range(5000):
        value = [value]
    out = to_jsonable(value)
    for _ in range(200):
        assert isinstance(out, list)
        out = out[0]
    assert out == "<too deep>"
