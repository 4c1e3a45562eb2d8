"""``plandag exec PLAN --planner`` and ``plandag extract nfe --planner`` (README,
"Planning with a model") against the local Messages API server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from plandag.cli.app import app
from plandag.testing import MessagesServer

TOOLS_FILE = '''
from plandag import tool
from plandag.errors import PermanentStepError


@tool
def lookup(name: str) -> dict:
    """Look a name up in the fast index; returns its score."""
    return {"name": name, "score": len(name)}


@tool
def fetch(name: str) -> dict:
    """Fetch a name from the legacy service; it knows no name with an 'x'."""
    if "x" in name:
        raise PermanentStepError(f"legacy service: unknown name {name}", reason="tool_error")
    return {"name": name, "score": len(name)}


@tool
def total(a: float, b: float) -> float:
    """Add two scores."""
    return a + b


@tool
def broken(name: str) -> dict:
    """A service that is always down."""
    raise ValueError(f"service down for {name}")
'''

PLAN = {
    "version": 1,
    "goal": "Score a and the given name",
    "params": {"name": {"type": "string"}},
    "steps": [
        {"id": 1, "tool": "lookup", "args": {"name": "a"}},
        {"id": 2, "tool": "fetch", "args": {"name": "<param.name>"}},
        {
            "id": 3,
            "tool": "total",
            "args": {"a": "<step_1_result.score>", "b": "<step_2_result.score>"},
        },
    ],
    "output": {"sum": "<step_3_result>"},
}

PATCH = {
    "g": "Score a and the given name",
    "s": [
        {"i": 4, "t": "lookup", "a": {"name": "<param.name>"}},
        {"i": 5, "t": "total", "a": {"a": "<step_1_result.score>", "b": "<step_4_result.score>"}},
    ],
    "o": {"json": '{"sum":"<step_5_result>"}'},
}


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    with MessagesServer() as running:
        yield running


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    tools = tmp_path / "scores.py"
    tools.write_text(TOOLS_FILE, encoding="utf-8")
    plan = tmp_path / "scores.json"
    plan.write_text(json.dumps(PLAN), encoding="utf-8")
    return tools, plan


def invoke(args: list[str], key: str | None = "test") -> Any:
    env = {"ANTHROPIC_API_KEY": key} if key is not None else {}
    return CliRunner().invoke(app, args, env=env)


def exec_args(files: tuple[Path, Path], name: str, *more: str) -> list[str]:
    tools, plan = files
    return ["exec", str(plan), "--tools", str(tools), "-p", f"name={name}", "--retries", "0", *more]


def test_exec_planner_repairs_a_failing_step_and_saves_the_plan(
    server: MessagesServer, files: tuple[Path, Path], tmp_path: Path
) -> None:
    server.push_json(PATCH)
    repairs = tmp_path / "repairs"
    result = invoke(
        exec_args(
            files,
            "xyz",
            "--planner",
            "anthropic",
            "--base-url",
            server.url,
            "--save-repairs",
            str(repairs),
            "--json",
        )
    )
    assert result.exit_code == 0, result.output
    assert len(server.message_requests) == 1
    assert server.message_requests[0].json["model"] == "claude-sonnet-4-6"
    document = json.loads(result.stdout)
    assert document["status"] == "succeeded"
    assert document["output"] == {"sum": 4.0}
    assert document["repaired"] is True
    assert [item["superseded_by"] for item in document["steps"]] == [
        None,
        [4, 5],
        [4, 5],
        None,
        None,
    ]
    saved = Path(document["saved_plan"])
    assert saved.parent == repairs
    assert saved.name.startswith("scores.")
    assert sorted(path.name for path in repairs.iterdir()) == sorted(
        [saved.name, saved.stem + ".repair.json"]
    )
    # the repaired plan compiles with `plandag check`, and runs with no model
    checked = invoke(["check", str(saved), "--tools", str(files[0])], key=None)
    assert checked.exit_code == 0, checked.output
    assert "ok, 3 steps" in checked.output
    again = invoke(
        ["exec", str(saved), "--tools", str(files[0]), "-p", "name=xq", "--json"], key=None
    )
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["output"] == {"sum": 3.0}
    assert len(server.message_requests) == 1


def test_exec_planner_with_no_failure_makes_no_request(
    server: MessagesServer, files: tuple[Path, Path]
) -> None:
    result = invoke(exec_args(files, "bb", "--planner", "anthropic", "--base-url", server.url))
    assert result.exit_code == 0, result.output
    assert server.message_requests == []
    assert '"sum": 3.0' in result.stdout


def test_exec_planner_escalates_after_the_caps(
    server: MessagesServer, files: tuple[Path, Path], tmp_path: Path
) -> None:
    plan = tmp_path / "down.json"
    plan.write_text(
        json.dumps(
            {
                "version": 1,
                "goal": "Score x",
                "steps": [{"id": 1, "tool": "broken", "args": {"name": "x"}}],
                "output": "<step_1_result>",
            }
        ),
        encoding="utf-8",
    )
    for number in (2, 3, 4, 5):
        server.push_json(
            {
                "g": "Score x",
                "s": [{"i": number, "t": "broken", "a": {"name": f"x{number}"}}],
                "o": f'"<step_{number}_result>"',
            }
        )
    repairs = tmp_path / "repairs"
    result = invoke(
        [
            "exec",
            str(plan),
            "--tools",
            str(files[0]),
            "--retries",
            "0",
            "--planner",
            "anthropic",
            "--base-url",
            server.url,
            "--save-repairs",
            str(repairs),
            "--json",
        ]
    )
    assert result.exit_code == 5, result.output
    document = json.loads(result.stdout)
    assert document["status"] == "escalated"
    assert document["escalation"] == "replan_caps"
    assert document["gave_up"] == "no_progress"
    assert document["output"] is None
    assert document["saved_plan"] is None
    assert len(server.message_requests) == 2
    assert [item["superseded_by"] for item in document["steps"]] == [[2], [3], None]
    assert not repairs.exists()  # nothing that failed is kept


def test_exec_without_planner_makes_no_request_and_needs_no_key(
    server: MessagesServer, files: tuple[Path, Path]
) -> None:
    server.push_json(PATCH)
    result = invoke(exec_args(files, "xyz"), key=None)
    assert result.exit_code == 1, result.output
    assert server.message_requests == []


def test_exec_planner_without_a_key_exits_2_before_anything_runs(
    server: MessagesServer, files: tuple[Path, Path]
) -> None:
    server.push_json(PATCH)
    result = invoke(
        exec_args(files, "xyz", "--planner", "anthropic", "--base-url", server.url), key=None
    )
    assert result.exit_code == 2
    assert "no Anthropic API key: set ANTHROPIC_API_KEY" in result.output
    assert server.message_requests == []


def test_planner_options_need_planner(files: tuple[Path, Path]) -> None:
    result = invoke(exec_args(files, "bb", "--save-repairs", "repairs"), key=None)
    assert result.exit_code == 2
    assert "--save-repairs needs --planner anthropic|openai" in result.output
    result = invoke(exec_args(files, "bb", "--planner", "mistral"), key=None)
    assert result.exit_code == 2
    assert "--planner 'mistral': choose anthropic, openai or offline" in result.output


NFE = """<?xml version="1.0" encoding="UTF-8"?>
<NFe xmlns="http://www.portalfiscal.inf.br/nfe">
<infNFe versao="4.00" Id="NFe35180834128745000152550010000000011000000010">
<ide><cUF>35</cUF><cNF>00000001</cNF><mod>55</mod><serie>1</serie><nNF>1</nNF>
<dhEmi>2018-08-28T10:00:00-03:00</dhEmi><tpNF>1</tpNF><tpEmis>1</tpEmis><cDV>0</cDV></ide>
<emit><CNPJ>34128745000152</CNPJ><xNome>Emitente</xNome></emit>
<det nItem="1"><prod><cProd>C1</cProd><vProd>250.00</vProd><indTot>1</indTot></prod></det>
<total><ICMSTot><vProd>250.00</vProd><vNF>250.00</vNF></ICMSTot></total>
</infNFe></NFe>"""


def test_extract_planner_needs_a_key_and_calls_no_model_when_nothing_fails(
    server: MessagesServer, tmp_path: Path
) -> None:
    source = tmp_path / "a.xml"
    source.write_text(NFE, encoding="utf-8")
    output = tmp_path / "out" / "records.jsonl"
    args = ["extract", "nfe", str(source), "-o", str(output), "--planner", "anthropic"]
    missing = invoke([*args, "--base-url", server.url], key=None)
    assert missing.exit_code == 2
    assert "no Anthropic API key" in missing.output
    assert "--offline" not in missing.output  # extract nfe has no offline model
    assert not output.exists()
    result = invoke([*args, "--base-url", server.url, "--json"])
    assert result.exit_code == 0, result.output
    assert server.message_requests == []
    [record] = [json.loads(line) for line in output.read_text("utf-8").splitlines()]
    assert record["emit"]["CNPJ"] == "34128745000152"
    assert "repair" not in record
    assert json.loads(result.stdout)["repairs"] == {}
