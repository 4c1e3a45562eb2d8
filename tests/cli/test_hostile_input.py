"""No plan file makes the command line print a traceback.

Property test: whatever a plan file holds (any JSON value, a plan-shaped document with
integers past 2^53, NaN and infinities, lone UTF-16 surrogates in strings and keys, deep
nesting, text that is not JSON or not UTF-8), ``check``, ``check --json``, ``graph`` and
``exec`` end with an exit code of the documented set and a message, never an exception.
``exec`` runs with ``--approve never`` inside the test's folder: a plan with effects waits
(exit 4) and nothing is written; the tools drawn never reach the network.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from plandag.cli.app import app

COMMANDS = [
    ["check"],
    ["check", "--json"],
    ["graph"],
    ["exec", "--approve", "never"],
    ["exec", "--approve", "never", "--json"],
]
EXIT_CODES = {0, 1, 2, 3, 4}

surrogates = st.integers(min_value=0xD800, max_value=0xDFFF).map(chr)
hostile_text = st.lists(st.characters() | surrogates, max_size=6).map("".join)
numbers = (
    st.integers(min_value=-(2**60), max_value=2**60)
    | st.sampled_from([2**53, -(2**53), 2**53 - 1, 10**30, -(10**400)])
    | st.floats(allow_nan=True, allow_infinity=True)
)
scalars = st.none() | st.booleans() | numbers | st.text(max_size=10) | hostile_text
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=6) | hostile_text, children, max_size=4)
    ),
    max_leaves=12,
)
# Mostly harmless values, so that many documents compile and reach exec's hash and run.
gentle_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-1000, 1000)
    | st.floats(-1e6, 1e6)
    | st.text(max_size=6),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=6,
)
# Tools that never reach the network: pure ones, a write (held by --approve never), an
# unknown name. References and malformed ones now and then.
TOOLS = st.sampled_from(["json_select", "json_select", "write_json", "nope", "xml_select"])
REFERENCES = st.sampled_from(
    ["<step_1_result>", "<step_2_result.a>", "<step_x_result>", "<param.p>", "<step_1_result"]
)
values = st.one_of(gentle_values, gentle_values, gentle_values, json_values, REFERENCES)


def deep(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = [value]
    return value


@st.composite
def plan_documents(draw: st.DrawFn) -> dict[str, Any]:
    """Plan-shaped documents, many of which compile, carrying hostile values."""
    steps = []
    for step_id in range(1, draw(st.integers(0, 4)) + 1):
        tool = draw(TOOLS)
        value = draw(values)
        if tool == "write_json":
            args: dict[str, Any] = {"path": "out/a.json", "data": value}
        elif tool == "xml_select":
            args = {"xml": draw(st.text(max_size=10) | REFERENCES), "path": "//a"}
        else:
            args = {
                "data": value,
                "expr": draw(st.sampled_from(["@", "@", "a", "[0]", "(", "a.b"])),
            }
        step: dict[str, Any] = {
            "id": draw(st.sampled_from([step_id] * 6 + [2**53, 0])),
            "tool": tool,
        }
        step["args"] = args
        if step_id > 1 and draw(st.booleans()):
            step["depends_on"] = [draw(st.integers(1, step_id))]
        if draw(st.sampled_from([False] * 3 + [True])):
            step["description"] = draw(st.text(max_size=6) | hostile_text)
        steps.append(step)
    goal = draw(st.text(max_size=6) | st.text(max_size=6) | hostile_text)
    document: dict[str, Any] = {"version": 1, "goal": goal, "steps": steps}
    if draw(st.booleans()):
        document["params"] = {"p": {"type": "any", "default": draw(values)}}
    if draw(st.booleans()):
        document["output"] = draw(values)
    if draw(st.sampled_from([False] * 9 + [True])):
        document["steps"].append({"id": 9, "tool": "json_select", "args": {"data": deep(300)}})
    return document


def as_file_content(value: Any) -> bytes:
    return json.dumps(value).encode("utf-8")


contents = (
    plan_documents().map(as_file_content)
    | plan_documents().map(as_file_content)
    | plan_documents().map(as_file_content)
    | json_values.map(as_file_content)
    | st.binary(max_size=40)
    | st.sampled_from([b"[" * 5000, b"1" * 5000, b'{"steps": [', b"NaN", b"\xef\xbb\xbf{}"])
)


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("PLANDAG_STORE", str(tmp_path / "store" / "runs.sqlite3"))
    return work


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(content=contents, command=st.sampled_from(COMMANDS))
def test_no_plan_file_makes_a_command_print_a_traceback(
    folder: Path, content: bytes, command: list[str]
) -> None:
    (folder / "plan.json").write_bytes(content)
    result = CliRunner().invoke(app, [*command, "plan.json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert result.exit_code in EXIT_CODES, (result.exit_code, result.output)
    event(f"{command[0]} exit {result.exit_code}")
    assert "Traceback" not in result.stdout + result.stderr
    assert not (folder / "out").exists()  # --approve never: nothing with effects ran


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    "text",
    [
        '{"steps": [{"id": 1, "tool": "json_select", "args": {"data": 9007199254740993, '
        '"expr": "@"}}]}',
        '{"steps": [{"id": 1, "tool": "json_select", "args": {"data": {"\\ud800": 1}, '
        '"expr": "@"}}]}',
        '{"goal": "\\udfff", "steps": []}',
        '{"steps": [{"id": 1, "tool": "json_select", "args": {"data": 1, "expr": "@"}, '
        '"description": "\\ud800"}]}',
        '{"steps": [{"id": 1, "tool": "json_select", "args": {"data": {"\\ud800": '
        '"<step_x_result>"}, "expr": "@"}}]}',
    ],
    ids=["integer", "surrogate-key", "surrogate-goal", "surrogate-description", "key-in-message"],
)
def test_plans_that_used_to_crash_exec_or_check_json_are_refused_with_exit_2(
    folder: Path, command: list[str], text: str
) -> None:
    (folder / "plan.json").write_text(text, encoding="utf-8")
    result = CliRunner().invoke(app, [*command, "plan.json"])
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.stdout + result.stderr
    shown = result.stdout + result.stderr
    assert "integer_out_of_range" in shown or "lone_surrogate" in shown


OK_PLAN = '{"steps": [{"id": 1, "tool": "json_select", "args": {"data": 1, "expr": "@"}}]}'


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            ["--write-boundary", "out\udcff"],
            "error: --write-boundary 'out\\xff' is not valid UTF-8",
        ),
        (["--http-allow", "\udcffexample.com"], "error: --http-allow '\\xffexample.com' is not"),
        (["--param", "p=\udcff"], "error: --param 'p=\\xff' is not valid UTF-8 text"),
    ],
    ids=["write-boundary", "http-allow", "param"],
)
def test_command_line_bytes_that_are_not_utf8_are_refused_with_exit_2(
    folder: Path, options: list[str], message: str
) -> None:
    plan = json.loads(OK_PLAN) | {"params": {"p": {"type": "string", "default": "x"}}}
    (folder / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    result = CliRunner().invoke(app, ["exec", "plan.json", "--approve", "never", *options])
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.exit_code == 2, result.output
    assert message in result.stderr


def test_a_working_folder_whose_name_is_not_utf8_is_refused_with_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    odd = tmp_path / os.fsdecode(b"d\xff")
    odd.mkdir()
    monkeypatch.chdir(odd)
    monkeypatch.setenv("PLANDAG_STORE", str(tmp_path / "store" / "runs.sqlite3"))
    (odd / "plan.json").write_text(OK_PLAN, encoding="utf-8")
    result = CliRunner().invoke(app, ["exec", "plan.json", "--approve", "never"])
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.exit_code == 2, result.output
    assert "error: the working folder '" in result.stderr
    assert "d\\xff' has a name that is not valid UTF-8" in result.stderr
    checked = CliRunner().invoke(app, ["check", "plan.json"])
    assert checked.exit_code == 2, checked.output
    assert "the folder of the default write boundary, '" in checked.stderr


@pytest.mark.parametrize("command", [["check"], ["graph"], ["exec", "--approve", "never"]])
def test_an_unknown_argument_fed_by_a_reference_does_not_compile(
    folder: Path, command: list[str]
) -> None:
    plan = {
        "params": {"a": {"type": "string", "default": "x"}},
        "steps": [
            {"id": 1, "tool": "json_select", "args": {"data": 1, "expr": "@", "b": "<param.a>"}}
        ],
    }
    (folder / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    result = CliRunner().invoke(app, [*command, "plan.json"])
    assert result.exit_code == 2, result.output
    assert (
        "plan.json: step 1: error[invalid_args]: args.b: Extra inputs are not permitted "
        "(tool json_select)"
    ) in result.stderr
