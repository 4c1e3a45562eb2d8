"""The command line: commands, output shapes and exit codes (ARCHITECTURE.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from plandag.cli import app

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def write_plan(folder: Path, plan: dict[str, object]) -> Path:
    path = folder / "plan.json"
    path.write_text(json.dumps(plan), encoding="utf-8")
    return path


TOOLS_FILE = '''
import time
from plandag import tool

@tool
def double(x: int) -> int:
    """Twice x."""
    return 2 * x

@tool
def explode(x: int) -> int:
    """Always fails."""
    raise RuntimeError(f"boom {x}")

@tool(timeout=0.2)
def sleepy(seconds: float) -> float:
    """Blocks in a thread."""
    time.sleep(seconds)
    return seconds
'''


@pytest.fixture
def tools_file(tmp_path: Path) -> Path:
    path = tmp_path / "my_tools.py"
    path.write_text(TOOLS_FILE, encoding="utf-8")
    return path


def test_schema_plan_prints_the_plan_json_schema(runner: CliRunner) -> None:
    result = runner.invoke(app, ["schema", "plan"])
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    assert schema["title"] == "Plan"
    assert set(schema["required"]) == {"steps"}
    assert "steps" in schema["properties"]


def test_schema_nfe_prints_the_record_schema(runner: CliRunner) -> None:
    result = runner.invoke(app, ["schema", "nfe"])
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    for field in ("source", "sha256", "status", "checks", "ide", "emit", "items", "total"):
        assert field in schema["properties"]


def test_schema_unknown_is_a_usage_error(runner: CliRunner) -> None:
    result = runner.invoke(app, ["schema", "nope"])
    assert result.exit_code == 2
    assert "choose plan or nfe" in result.stderr


def test_check_ok_plan_exits_0_and_reports_warnings(runner: CliRunner, tmp_path: Path) -> None:
    plan = {
        "steps": [
            {"id": 1, "tool": "json_select", "args": {"data": {"a": 1}, "expr": "a"}},
            {"id": 2, "tool": "json_select", "args": {"data": "<step_1_result>", "expr": "@"}},
        ]
    }
    result = runner.invoke(app, ["check", str(write_plan(tmp_path, plan))])
    assert result.exit_code == 0, result.stderr
    assert "warning[implied_dependency]" in result.stderr
    assert result.stderr.endswith("plan.json: ok, 2 steps, 1 warning\n")
    # json_select declares 0.002 s: the estimate of the chain 1 -> 2
    assert "plan.json: estimated cost $0.0000, time 0.004 s (critical path 1 -> 2)\n" in (
        result.stderr
    )


def test_check_without_params_lists_the_ones_a_run_needs(runner: CliRunner, tmp_path: Path) -> None:
    plan = {
        "params": {"path": {"type": "string"}, "depth": {"type": "integer", "default": 2}},
        "steps": [{"id": 1, "tool": "read_file", "args": {"path": "<param.path>"}}],
    }
    path = str(write_plan(tmp_path, plan))
    result = runner.invoke(app, ["check", path])
    assert result.exit_code == 0, result.stderr
    assert result.stderr.endswith(
        f"{path}: ok, 1 step, 0 warnings\n{path}: a run needs --param path=VALUE (string)\n"
    )
    given = runner.invoke(app, ["check", path, "--param", "path=notes.txt"])
    assert given.exit_code == 0, given.stderr
    assert given.stderr.endswith("plan.json: ok, 1 step, 0 warnings\n")
    other = runner.invoke(app, ["check", path, "--param", "depth=3"])
    assert other.exit_code == 2
    assert "error[missing_param]: param 'path' is required" in other.stderr


def test_check_prints_every_diagnostic_and_exits_2(runner: CliRunner, tmp_path: Path) -> None:
    plan = {
        "steps": [
            {"id": 1, "tool": "read_fil", "args": {}},
            {"id": 2, "tool": "json_select", "args": {"data": "<step_9_result>", "expr": "a"}},
            {"id": 3, "tool": "json_select", "args": {"data": "<step_1_reslt>", "expr": "a"}},
        ]
    }
    path = write_plan(tmp_path, plan)
    result = runner.invoke(app, ["check", str(path)])
    assert result.exit_code == 2
    assert (
        f"{path}: step 1: error[unknown_tool]: tool 'read_fil' is not registered" in result.stderr
    )
    assert "did you mean read_file" in result.stderr
    assert "step 2: error[reference_to_missing_step]" in result.stderr
    assert "write <step_1_result>" in result.stderr
    assert "3 error(s)" in result.stderr


def test_check_json_lists_diagnostics(runner: CliRunner, tmp_path: Path) -> None:
    plan = {"steps": [{"id": 1, "tool": "json_select", "args": {"expr": "a"}, "depends_on": [1]}]}
    result = runner.invoke(app, ["check", str(write_plan(tmp_path, plan)), "--json"])
    assert result.exit_code == 2
    diagnostics = json.loads(result.stdout)
    assert {d["code"] for d in diagnostics} == {"invalid_args", "self_dependency"}
    for diagnostic in diagnostics:
        assert set(diagnostic) == {"code", "severity", "step_id", "message", "hint"}
        assert diagnostic["step_id"] == 1


def test_check_invalid_json_and_missing_file(runner: CliRunner, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    result = runner.invoke(app, ["check", str(bad)])
    assert result.exit_code == 2
    assert "error[invalid_json]" in result.stderr
    result = runner.invoke(app, ["check", str(tmp_path / "missing.json")])
    assert result.exit_code == 2
    assert "does not exist" in result.stderr


def test_check_read_only_rejects_write_tools(runner: CliRunner, tmp_path: Path) -> None:
    plan = {"steps": [{"id": 1, "tool": "write_json", "args": {"path": "x.json", "data": 1}}]}
    result = runner.invoke(app, ["check", str(write_plan(tmp_path, plan)), "--read-only"])
    assert result.exit_code == 2
    assert "error[effects_in_read_only]" in result.stderr


def test_graph_prints_mermaid_with_critical_path(runner: CliRunner, tmp_path: Path) -> None:
    plan = {
        "steps": [
            {"id": 1, "tool": "json_select", "args": {"data": 1, "expr": "@"}},
            {"id": 2, "tool": "json_select", "args": {"data": 1, "expr": "@"}, "depends_on": [1]},
            {"id": 3, "tool": "json_select", "args": {"data": 1, "expr": "@"}},
        ]
    }
    result = runner.invoke(app, ["graph", str(write_plan(tmp_path, plan))])
    assert result.exit_code == 0
    assert result.stdout.startswith("flowchart TD\n")
    assert "    s1 ==> s2\n" in result.stdout
    assert "%% critical path: 1 -> 2 (2 steps)" in result.stdout
    # json_select is inline (0.002 s): three of them take the event loop in turn
    assert result.stdout.endswith(
        "%% estimated cost $0.0000, time 0.006 s (3 inline steps, one at a time; critical "
        "path 1 -> 2)\n"
    )


def test_exec_json_success(runner: CliRunner, tmp_path: Path, tools_file: Path) -> None:
    plan = {
        "params": {"x": {"type": "integer"}},
        "steps": [
            {"id": 1, "tool": "double", "args": {"x": "<param.x>"}},
            {"id": 2, "tool": "double", "args": {"x": "<step_1_result>"}, "depends_on": [1]},
        ],
        "output": {"four_x": "<step_2_result>", "text": "x*2=<step_1_result>, $1"},
    }
    path = write_plan(tmp_path, plan)
    result = runner.invoke(
        app, ["exec", str(path), "--tools", str(tools_file), "--param", "x=5", "--json"]
    )
    assert result.exit_code == 0, result.stderr
    run = json.loads(result.stdout)
    assert run["status"] == "succeeded"
    assert run["output"] == {"four_x": 20, "text": "x*2=10, $1"}
    assert [(s["id"], s["status"], s["result"], s["attempts"]) for s in run["steps"]] == [
        (1, "succeeded", 10, 1),
        (2, "succeeded", 20, 1),
    ]
    for step in run["steps"]:
        assert step["error"] is None
        assert step["started_at"] <= step["ended_at"]


def test_exec_failure_isolation_exit_1(runner: CliRunner, tmp_path: Path, tools_file: Path) -> None:
    plan = {
        "steps": [
            {"id": 1, "tool": "explode", "args": {"x": 1}},
            {"id": 2, "tool": "double", "args": {"x": "<step_1_result>"}, "depends_on": [1]},
            {"id": 3, "tool": "double", "args": {"x": 4}},
            {"id": 4, "tool": "sleepy", "args": {"seconds": 5}},
        ]
    }
    path = write_plan(tmp_path, plan)
    result = runner.invoke(app, ["exec", str(path), "--tools", str(tools_file), "--json"])
    assert result.exit_code == 1
    run = json.loads(result.stdout)
    steps = {s["id"]: s for s in run["steps"]}
    assert run["status"] == "failed"
    assert steps[1]["status"] == "failed"
    assert steps[1]["error"] == {"type": "RuntimeError", "message": "boom 1"}
    assert (steps[2]["status"], steps[2]["reason"], steps[2]["detail"]) == (
        "skipped",
        "upstream_failed",
        "upstream 1 failed",
    )
    assert (steps[3]["status"], steps[3]["result"]) == ("succeeded", 8)
    assert (steps[4]["status"], steps[4]["reason"]) == ("failed", "timeout")


def test_exec_compile_error_exit_2(runner: CliRunner, tmp_path: Path) -> None:
    plan = {
        "params": {"x": {"type": "integer"}},
        "steps": [{"id": 1, "tool": "json_select", "args": {"data": "<param.x>", "expr": "@"}}],
    }
    path = write_plan(tmp_path, plan)
    result = runner.invoke(app, ["exec", str(path)])
    assert result.exit_code == 2
    assert "error[missing_param]" in result.stderr
    result = runner.invoke(app, ["exec", str(path), "--param", "x=abc"])
    assert result.exit_code == 2
    assert "error[invalid_param_value]" in result.stderr
    result = runner.invoke(app, ["exec", str(path), "--param", "novalue"])
    assert result.exit_code == 2
    assert "NAME=VALUE" in result.stderr


def test_exec_bad_tools_file_exit_2(runner: CliRunner, tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("def (:\n", encoding="utf-8")
    plan = write_plan(
        tmp_path, {"steps": [{"id": 1, "tool": "json_select", "args": {"data": 1, "expr": "@"}}]}
    )
    result = runner.invoke(app, ["exec", str(plan), "--tools", str(broken)])
    assert result.exit_code == 2
    assert "broken.py" in result.stderr


def test_exec_write_boundary_literal_target(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    plan = {
        "steps": [{"id": 1, "tool": "write_json", "args": {"path": "../escape.json", "data": 1}}]
    }
    result = runner.invoke(app, ["exec", str(write_plan(tmp_path, plan))])
    assert result.exit_code == 2
    assert "error[write_outside_boundary]" in result.stderr
    assert not (tmp_path.parent / "escape.json").exists()


def test_exec_example_plan_on_a_shipped_invoice(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    invoice = EXAMPLES / "nfe" / "brnfe_without_proc.xml"
    result = runner.invoke(
        app,
        [
            "exec",
            str(EXAMPLES / "plans" / "invoice_total.json"),
            "--param",
            f"input={invoice}",
            "--approve",
            "auto",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.stderr
    run = json.loads(result.stdout)
    assert run["output"] == {
        "total": "203.51",
        "emitter": "PETSUPERMARKET COM PROD PARA ANIMAIS SA",
    }
    written = json.loads((tmp_path / "out" / "total.json").read_text(encoding="utf-8"))
    assert written["total"] == "203.51"
    assert written["emitter"] == {
        "CNPJ": "10864846000204",
        "xNome": "PETSUPERMARKET COM PROD PARA ANIMAIS SA",
    }
    assert written["note"] == (
        "key NFe35170410864846000204550050000609731202489540, $1 stays literal"
    )


def test_tools_lists_builtins(runner: CliRunner) -> None:
    result = runner.invoke(app, ["tools", "--json"])
    assert result.exit_code == 0
    listing = json.loads(result.stdout)
    names = {item["name"] for item in listing["tools"]}
    assert {"read_file", "write_json", "xml_select", "json_select"} <= names
    kinds = {item["kind"] for item in listing["checks"]}
    assert {"not_empty", "equals", "regex", "jmespath", "file_exists", "tolerance"} <= kinds


def test_extract_nfe_on_shipped_samples(runner: CliRunner, tmp_path: Path) -> None:
    output = tmp_path / "out" / "invoices.jsonl"
    result = runner.invoke(app, ["extract", "nfe", str(EXAMPLES / "nfe"), "-o", str(output)])
    assert result.exit_code == 0, result.stderr
    records = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    by_name = {Path(r["source"]).name: r for r in records}
    assert len(records) == 7
    assert sorted(r["source"] for r in records) == [r["source"] for r in records]
    event = by_name["brnfe_event_cancel.xml"]
    assert (event["status"], event["errors"][0]["code"]) == ("error", "not_an_invoice")
    bare = by_name["brnfe_without_proc.xml"]
    assert bare["status"] == "ok"
    assert bare["ide"]["chNFe"] == "35170410864846000204550050000609731202489540"
    assert bare["total"]["vNF"] == "203.51"
    assert bare["checks"]["protocol_authorised"]["status"] == "not_applicable"
    reform = by_name["nfelib_nfe_reforma_tributaria.xml"]
    assert reform["status"] == "check_failed"
    assert reform["checks"]["items_sum_vprod"]["status"] == "fail"
    assert "records written to" in result.stdout


def test_extract_nfe_csv_resume_and_json_summary(runner: CliRunner, tmp_path: Path) -> None:
    output = tmp_path / "invoices.csv"
    first = runner.invoke(
        app,
        ["extract", "nfe", str(EXAMPLES / "nfe" / "brnfe_without_proc.xml"), "-o", str(output)],
    )
    assert first.exit_code == 0, first.stderr
    result = runner.invoke(
        app,
        [
            "extract",
            "nfe",
            str(EXAMPLES / "nfe" / "*.xml"),
            "-o",
            str(output),
            "--resume",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["inputs"] == 7
    assert summary["skipped_by_resume"] == 1
    assert summary["records"] == 6
    assert summary["format"] == "csv"
    rows = output.read_text(encoding="utf-8").splitlines()
    assert len(rows) == 1 + 7
    items = (tmp_path / "invoices.items.csv").read_text(encoding="utf-8").splitlines()
    assert items[0].startswith("source,sha256,chNFe,nItem,cProd")


def test_extract_nfe_unusable_arguments_exit_2(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["extract", "nfe", str(tmp_path / "nothing-*.xml"), "-o", str(tmp_path / "o.jsonl")]
    )
    assert result.exit_code == 2
    assert "error:" in result.stderr
    result = runner.invoke(
        app,
        ["extract", "nfe", str(EXAMPLES / "nfe"), "-o", str(tmp_path / "o.x"), "--format", "xml"],
    )
    assert result.exit_code == 2
    assert "--format must be jsonl or csv" in result.stderr
