"""The README's examples run, so the front page never lies (STYLE.md, "Tooling")."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from plandag.cli import app
from plandag.compiler import compile_plan
from plandag.config import load_settings
from plandag.escalation import EscalationHooks
from plandag.tools.registry import default_registry

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.DOTALL)


def plandag_commands() -> list[list[str]]:
    commands = []
    for block in blocks("bash"):
        for line in block.splitlines():
            for part in line.split("&&"):
                words = shlex.split(part)
                if words and words[0].endswith("plandag"):
                    commands.append(words[1:])
    return commands


def test_readme_opens_with_the_two_setup_commands() -> None:
    first = blocks("bash")[0].strip().splitlines()
    assert len(first) == 2
    assert "pip install -e ." in first[0]
    assert "plandag extract nfe examples/nfe" in first[0]
    assert "pip install -e '.[dev]'" in first[1]
    assert "scripts/check" in first[1]


@pytest.mark.parametrize("words", plandag_commands(), ids=lambda words: " ".join(words[:2]))
def test_every_plandag_command_in_the_readme_runs(
    words: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    # write outputs into tmp_path, not into the repository
    words = [str(tmp_path / "out" / Path(w).name) if w.startswith("out/") else w for w in words]
    if words[0] == "exec" and "--write-boundary" not in words:
        words += ["--write-boundary", str(REPO), "--write-boundary", str(tmp_path)]
    result = CliRunner().invoke(app, words)
    assert result.exit_code == 0, (words, result.stdout, result.stderr)


def test_the_readme_plan_compiles() -> None:
    (plan_text,) = [
        block for block in blocks("json") if '"steps"' in block and '"llm"' not in block
    ]
    compiled = compile_plan(json.loads(plan_text), default_registry(), params={"input": "a.xml"})
    assert list(compiled.order) == [1, 2, 3]


def test_the_readme_model_steps_plan_is_the_example_file_and_compiles() -> None:
    (plan_text,) = [block for block in blocks("json") if '"llm"' in block]
    example = REPO / "examples" / "plans" / "model_steps.json"
    assert plan_text == example.read_text(encoding="utf-8")
    compiled = compile_plan(json.loads(plan_text), default_registry(), params={"page": "x.md"})
    assert [compiled.steps[i].tool.name for i in sorted(compiled.steps)] == [
        "read_file",
        "llm",
        "llm",
        "agent",
    ]
    assert sorted(compiled.graph.edges) == [(1, 2), (1, 3)]


def test_the_readme_toml_example_is_valid(tmp_path: Path) -> None:
    brakes, escalation = blocks("toml")
    (tmp_path / "pyproject.toml").write_text(brakes, encoding="utf-8")
    settings = load_settings(tmp_path)
    assert settings["max_seconds"] == 600.0
    assert settings["retries"] == 3
    assert settings["write_boundary"] == ["out/", "https://api.example.com"]
    (tmp_path / "plandag.toml").write_text(escalation, encoding="utf-8")
    hooks = EscalationHooks.from_settings(load_settings(tmp_path))
    assert (hooks.command, hooks.url, hooks.http_allow, hooks.timeout_s) == (
        ["notify-oncall", "--channel", "plandag"],
        "https://hooks.example.com/plandag",
        ["hooks.example.com"],
        10.0,
    )


def test_every_diagnostic_code_is_documented() -> None:
    from plandag.compiler import DIAGNOSTIC_CODES

    for code, severity in DIAGNOSTIC_CODES.items():
        assert f"| `{code}` | {severity} |" in README


def python_section() -> str:
    """The text of the README's "Use it from Python" section."""
    start = README.index("## Use it from Python\n")
    return README[start : README.index("\n## ", start + 1)]


def test_the_readme_python_examples_run() -> None:
    for block in blocks("python"):
        if "MessagesServer" in block and block not in python_section():
            exec(compile(block, "README.md", "exec"), {})


def test_the_use_it_from_python_examples_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run a plan, extract invoices, plan with a model: each example runs as written, in a
    fresh working directory holding the examples (outputs land there), against the local
    Messages API server (the key is unset, so no request leaves 127.0.0.1)."""
    examples = re.findall(r"```python\n(.*?)```", python_section(), flags=re.DOTALL)
    assert len(examples) == 3
    (tmp_path / "examples").symlink_to(REPO / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    for example in examples:
        exec(compile(example, "README.md", "exec"), {"__name__": "__readme__"})
    assert json.loads((tmp_path / "out" / "total.json").read_text(encoding="utf-8"))["total"] == (
        "203.51"
    )
    records = (tmp_path / "out" / "invoices.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(records) >= 7


def test_the_readme_prints_the_brakes_line_the_cli_prints() -> None:
    from plandag.brakes import JOB_BRAKES, brakes_line

    row = JOB_BRAKES["exec"]
    line = brakes_line(
        max_cost_usd=row.max_cost_usd,
        max_tokens=row.max_tokens,
        max_seconds=row.max_seconds,
        stall_after=row.stall_after,
        stop_on_stall=row.stop_on_stall,
        boundary="./",
    )
    assert f"```text\n{line}\n```" in README


def test_the_readme_wire_example_is_a_valid_plan() -> None:
    from plandag.planner.wire import from_wire
    from plandag.tools.base import tool
    from plandag.tools.registry import Registry

    @tool
    def add(a: int, b: int) -> int:
        return a + b

    (wire_text,) = [block for block in blocks("json") if '"g":' in block]
    plan = from_wire(json.loads(wire_text))
    compiled = compile_plan(plan, Registry([add]))
    assert list(compiled.order) == [1, 2]
    assert plan.output == "<step_2_result>"


def test_the_readme_durable_run_examples_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ``sh`` blocks of "Durable runs": the approval example first (exit 4, then the
    approval runs it), then the store commands on the run ids it made."""
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("PLANDAG_STORE", str(tmp_path / "store" / "runs.sqlite3"))
    commands = []
    for block in blocks("sh"):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words and words[0] == "plandag":
                commands.append(words[1:])
    store_commands, approval_commands = commands[:-2], commands[-2:]
    runner = CliRunner()
    run_ids: list[str] = []
    for words in approval_commands * 2:  # twice: two runs for `diff`
        if words[0] == "exec":
            words = [*words, "--write-boundary", str(REPO), "--json"]
            result = runner.invoke(app, words)
            assert result.exit_code == 4, (words, result.stdout, result.stderr)
            run_ids.append(json.loads(result.stdout)["run_id"])
            continue
        words = [run_ids[-1] if word == "RUN_ID" else word for word in words]
        result = runner.invoke(app, words)
        assert result.exit_code == 0, (words, result.stdout, result.stderr)
    placeholders = {"3f9c2a": run_ids[0][:6], "8be01d": run_ids[1][:6]}
    for words in store_commands:
        words = [placeholders.get(word, word) for word in words]
        words = [str(tmp_path / word) if word.endswith(".html") else word for word in words]
        result = runner.invoke(app, words)
        expected = 2 if words[0] == "resume" else 0  # a run that succeeded has nothing to resume
        assert result.exit_code == expected, (words, result.stdout, result.stderr)
    assert (tmp_path / "run.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
