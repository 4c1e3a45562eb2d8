"""The reference grammar: parsing, finding, resolving (plandag/dag/references.py)."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any

import pytest
from pydantic import BaseModel

from plandag.dag.references import (
    Reference,
    ReferenceResolutionError,
    find_malformed,
    find_references,
    get_path,
    is_index,
    parse_reference,
    resolve_value,
    suggest_reference,
)

RESULTS: dict[int, Any] = {
    1: [1, 2, 3],
    2: 42,
    3: {"total": "10.50", "items": [{"vProd": "4.00"}, {"vProd": "6.50"}], "n": 2},
    4: "plain text",
    5: None,
    6: {"a.b": "dotted", "nested": {"deep": {"x": True}}},
}
PARAMS: dict[str, Any] = {"input": "a.xml", "limits": {"max": 5, "names": ["x", "y"]}}


def result_of(step_id: int) -> Any:
    return RESULTS[step_id]


def resolve(value: Any) -> Any:
    return resolve_value(value, result_of, PARAMS)


# --- parse_reference -------------------------------------------------------------------


def test_parse_step_reference_with_path() -> None:
    assert parse_reference("<step_3_result.items.0.vProd>") == Reference(
        text="<step_3_result.items.0.vProd>", step_id=3, param=None, path=("items", "0", "vProd")
    )


def test_parse_whole_step_reference() -> None:
    assert parse_reference("<step_12_result>") == Reference(
        text="<step_12_result>", step_id=12, param=None, path=()
    )


def test_parse_param_reference_with_path() -> None:
    assert parse_reference("<param.limits.max>") == Reference(
        text="<param.limits.max>", step_id=None, param="limits", path=("max",)
    )


@pytest.mark.parametrize(
    "text",
    [
        "<step_0_result>",  # ids are positive
        "<step_01_result>",  # no leading zero
        "<step_x_result>",
        "<step_1_reslt>",
        "<params.input>",
        "<param.1abc>",
        "<step_1_result.>",
        "<step_1_result>.x",
        " <step_1_result>",
        "$1",
        "<step_1234567890123456789_result>",  # 19 digits: longer than any id we accept
    ],
)
def test_parse_rejects_anything_but_exactly_one_reference(text: str) -> None:
    assert parse_reference(text) is None


# --- resolve_value: typed whole-string references ----------------------------------------


def test_whole_string_reference_keeps_list_type() -> None:
    assert resolve("<step_1_result>") == [1, 2, 3]


def test_whole_string_reference_keeps_int_type() -> None:
    assert resolve("<step_2_result>") == 42


def test_whole_string_reference_keeps_dict_type() -> None:
    assert resolve("<step_3_result>") == RESULTS[3]


def test_whole_string_reference_keeps_none() -> None:
    assert resolve("<step_5_result>") is None


def test_whole_string_reference_with_field_path_keeps_type() -> None:
    assert resolve("<step_3_result.n>") == 2
    assert resolve("<step_6_result.nested.deep.x>") is True


def test_several_references_in_one_string_all_resolve() -> None:
    assert (
        resolve("total <step_3_result.total> of <step_3_result.n> items in <param.input>")
        == "total 10.50 of 2 items in a.xml"
    )


def test_embedded_non_string_becomes_compact_json() -> None:
    assert resolve("list=<step_1_result>") == "list=[1,2,3]"
    assert resolve("n=<step_2_result>;") == "n=42;"
    assert resolve("none=<step_5_result>") == "none=null"
    assert resolve("<step_6_result.nested> end") == '{"deep":{"x":true}} end'


def test_embedded_string_is_inserted_as_is_without_quotes() -> None:
    assert resolve("[<step_4_result>]") == "[plain text]"


def test_references_at_any_depth_of_dicts_and_lists() -> None:
    value = {
        "a": {"b": {"c": ["<step_2_result>", {"d": "<step_1_result.1>"}]}},
        "e": [["<param.limits.names>", "x <step_3_result.items.1.vProd>"]],
        "f": 7,
        "g": None,
    }
    assert resolve(value) == {
        "a": {"b": {"c": [42, {"d": 2}]}},
        "e": [[["x", "y"], "x 6.50"]],
        "f": 7,
        "g": None,
    }


def test_resolve_does_not_mutate_its_input() -> None:
    value = {"a": ["<step_2_result>"]}
    resolve(value)
    assert value == {"a": ["<step_2_result>"]}


def test_field_paths_with_dotted_keys_and_list_indices() -> None:
    assert resolve("<step_3_result.items.0.vProd>") == "4.00"
    assert resolve("<step_1_result.2>") == 3


def test_key_containing_a_dot_cannot_be_named_by_a_path() -> None:
    # A path's dots always separate keys: "a.b" is the key "a", then "b".
    with pytest.raises(ReferenceResolutionError, match="no key 'a'"):
        resolve("<step_6_result.a.b>")


def test_param_references_whole_and_with_key() -> None:
    assert resolve("<param.input>") == "a.xml"
    assert resolve("<param.limits>") == {"max": 5, "names": ["x", "y"]}
    assert resolve("<param.limits.max>") == 5
    assert resolve("<param.limits.names.1>") == "y"


@pytest.mark.parametrize("text", ["$1", "${1}", "cost $2 and ${3}", "a < b > c", "<b>bold</b>"])
def test_dollar_and_other_text_stay_literal(text: str) -> None:
    assert resolve(text) == text


def test_missing_key_names_the_key_and_the_keys_available() -> None:
    with pytest.raises(ReferenceResolutionError) as raised:
        resolve("<step_3_result.totl>")
    assert str(raised.value) == "<step_3_result.totl>: no key 'totl' (keys: items, n, total)"


def test_index_out_of_range_names_the_length() -> None:
    with pytest.raises(ReferenceResolutionError) as raised:
        resolve("<step_1_result.3>")
    assert str(raised.value) == "<step_1_result.3>: index '3' out of range for a list of 3"


def test_missing_param_is_a_resolution_error() -> None:
    with pytest.raises(ReferenceResolutionError) as raised:
        resolve_value("<param.output>", result_of, PARAMS)
    assert str(raised.value) == "<param.output>: no param 'output'"


def test_missing_key_inside_embedded_reference_is_an_error_too() -> None:
    with pytest.raises(ReferenceResolutionError, match="no key 'nope'"):
        resolve("x <step_3_result.nope> y")


# --- get_path ----------------------------------------------------------------------------


class Item(BaseModel):
    name: str
    price: float


@dataclasses.dataclass
class Box:
    label: str


def test_get_path_reads_pydantic_fields_and_dataclass_fields() -> None:
    assert get_path({"items": [Item(name="pen", price=1.5)]}, ("items", "0", "name")) == "pen"
    assert get_path(Box(label="b"), ("label",)) == "b"


def test_get_path_refuses_methods_of_a_string() -> None:
    # A str has attributes (upper, split...), but no fields a reference may name.
    with pytest.raises(ReferenceResolutionError) as raised:
        get_path("text", ("upper",), reference="<step_4_result.upper>")
    assert str(raised.value) == "<step_4_result.upper>: a str has no field 'upper'"


def test_get_path_refuses_methods_of_a_model() -> None:
    with pytest.raises(ReferenceResolutionError, match="a Item has no field 'model_dump'"):
        get_path(Item(name="pen", price=1.0), ("model_dump",))


def test_get_path_digit_segment_reaches_integer_dict_key() -> None:
    assert get_path({0: "zero", "1": "one"}, ("0",)) == "zero"
    assert get_path({0: "zero", "1": "one"}, ("1",)) == "one"


def test_get_path_non_ascii_digit_is_not_an_index() -> None:
    # "²".isdigit() is True but int("²") fails: it must be a clean resolution error.
    with pytest.raises(ReferenceResolutionError, match="index '²' out of range"):
        get_path([1, 2], ("²",))


def test_is_index() -> None:
    assert [is_index(s) for s in ("0", "12", "²", "-1", "a", "")] == [
        True,
        True,
        False,
        False,
        False,
        False,
    ]


# --- find_references ---------------------------------------------------------------------


def test_find_references_reports_locations() -> None:
    args = {
        "data": {"total": "<step_2_result.total>"},
        "items": ["a", "b", "x <step_1_result> and <param.input>"],
        "n": 3,
    }
    found = [(where, ref.text) for where, ref in find_references(args, "args")]
    assert found == [
        ("args.data.total", "<step_2_result.total>"),
        ("args.items[2]", "<step_1_result>"),
        ("args.items[2]", "<param.input>"),
    ]


def test_find_references_without_prefix_and_in_nested_lists() -> None:
    found = [(where, ref.step_id) for where, ref in find_references({"a": [["<step_4_result>"]]})]
    assert found == [("a[0][0]", 4)]


def test_find_references_ignores_dollar_text() -> None:
    assert list(find_references({"a": "$1 ${2} <b>"})) == []


# --- find_malformed ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("token", "nearest"),
    [
        ("<step_x_result>", "<step_N_result>"),
        ("<step_1_reslt>", "<step_1_result>"),
        ("<params.input>", "<param.input>"),
        ("<Step 2 result.total>", "<step_2_result.total>"),
        ("<step_2_results.items.0>", "<step_2_result.items.0>"),
        ("<step_0_result>", "<step_N_result>"),
        ("<result_of_step_3>", "<step_3_result>"),
        ("<param input>", "<param.input>"),
        ("<step_1234567890123456789_result>", "<step_N_result>"),
    ],
)
def test_find_malformed_names_the_nearest_valid_form(token: str, nearest: str) -> None:
    assert list(find_malformed({"x": ["ok", f"a {token} b"]}, "args")) == [
        ("args.x[1]", token, nearest)
    ]


def test_find_malformed_ignores_valid_references_and_unrelated_angles() -> None:
    value = {"a": "<step_1_result.x> <param.p> <b>bold</b> 1 < 2 > 0", "b": "$1"}
    assert list(find_malformed(value)) == []


def test_suggest_reference_without_any_number() -> None:
    assert suggest_reference("<stepresult>") == "<step_N_result>"
    assert suggest_reference("<param>") == "<param.NAME>"


def test_an_unclosed_reference_is_malformed() -> None:
    from plandag.dag.references import find_malformed

    assert list(find_malformed({"a": "<step_1_result"}, "args")) == [
        ("args.a", "<step_1_result", "<step_1_result>")
    ]
    assert list(find_malformed("total <step_2_result.vNF and more")) == [
        ("", "<step_2_result.vNF", "<step_2_result.vNF>")
    ]
    assert list(find_malformed("<param.input")) == [("", "<param.input", "<param.input>")]
    assert list(find_malformed("a < b and <step_1_result> fine")) == []


def test_get_path_without_a_reference_names_the_path_up_to_the_missing_segment() -> None:
    value = {"a": {"b": [1, 2]}, "m": Item(name="pen", price=1.0)}
    with pytest.raises(ReferenceResolutionError) as raised:
        get_path(value, ("a", "c", "d"))
    assert str(raised.value) == "a.c: no key 'c' (keys: b)"
    with pytest.raises(ReferenceResolutionError) as raised:
        get_path(value, ("a", "b", "5"))
    assert str(raised.value) == "a.b.5: index '5' out of range for a list of 2"
    with pytest.raises(ReferenceResolutionError) as raised:
        get_path(value, ("m", "size"))
    assert str(raised.value) == "m.size: a Item has no field 'size'"


def test_get_path_reads_a_mapping_that_is_not_a_dict_and_a_dict_subclass() -> None:
    class Ordered(dict[str, Any]):
        pass

    assert get_path(MappingProxyType({"a": {"b": 1}}), ("a", "b")) == 1
    assert get_path(Ordered(a=Ordered(b=2)), ("a", "b")) == 2
    assert get_path({"a": {0: "zero"}}, ("a", "0")) == "zero"
