"""The README and the documentation site: the front page's promises, every example run as
written, and the site built with ``mkdocs build --strict`` (STYLE.md, "Tooling")."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from plandag.cli import app
from plandag.compiler import compile_plan
from plandag.config import load_settings
from plandag.escalation import EscalationHooks
from plandag.tools.registry import default_registry

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
DOCS = REPO / "docs"
DESIGN = {"ARCHITECTURE.md", "NFE.md", "STYLE.md"}  # design notes: no runnable examples
PAGES = {
    path.relative_to(DOCS).as_posix(): path.read_text(encoding="utf-8")
    for path in sorted(DOCS.rglob("*.md"))
    if path.name not in DESIGN
}


def page(name: str) -> str:
    return PAGES[name]


def blocks(language: str, text: str) -> list[str]:
    """The fenced ``language`` blocks of ``text``, dedented (a block may sit in a list)."""
    found = re.findall(rf"(?m)^([ \t]*)```{language}\n(.*?)^[ \t]*```", text, flags=re.DOTALL)
    return [textwrap.dedent(body) for _, body in found]


def everywhere(language: str) -> list[tuple[str, str]]:
    """Every ``language`` block of the README and the pages, with where it is."""
    found = [("README.md", block) for block in blocks(language, README)]
    for name, text in PAGES.items():
        found += [(name, block) for block in blocks(language, text)]
    return found


def plandag_commands() -> list[tuple[str, list[str]]]:
    commands = []
    for where, block in everywhere("bash"):
        for line in block.splitlines():
            for part in line.split("&&"):
                words = shlex.split(part)
                if words and words[0].endswith("plandag"):
                    commands.append((where, words[1:]))
    return commands


# -- the front page ---------------------------------------------------------------------------


def test_readme_opens_with_the_two_setup_commands() -> None:
    first = blocks("bash", README)[0].strip().splitlines()
    assert len(first) == 2
    assert "pip install -e ." in first[0]
    assert "plandag extract nfe examples/nfe" in first[0]
    assert "pip install -e '.[dev]'" in first[1]
    assert "scripts/check" in first[1]
    assert README.index("```bash") < README.index("\n## ")  # before anything else


def test_the_readme_is_a_front_page() -> None:
    assert len(README.splitlines()) <= 250
    for job in (
        "plandag extract nfe",
        "plandag extract contracts",
        "plandag research",
        "plandag exec",
        "plandag bench",
    ):
        assert job in README, job
    assert "## Brakes" in README


def test_every_docs_path_the_readme_names_exists() -> None:
    for name in re.findall(r"`(docs/[\w/.-]+\.md)`", README):
        assert (REPO / name).is_file(), name


# -- every example runs -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "words"),
    plandag_commands(),
    ids=lambda x: " ".join(x[:2]) if isinstance(x, list) else x,
)
def test_every_plandag_command_of_the_docs_runs(
    where: str, words: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("PLANDAG_STORE", str(tmp_path / "runs.sqlite3"))
    # write outputs into tmp_path, not into the repository
    words = [str(tmp_path / "out" / Path(w).name) if w.startswith("out/") else w for w in words]
    if words[0] == "exec" and "--write-boundary" not in words:
        words += ["--write-boundary", str(REPO), "--write-boundary", str(tmp_path)]
    result = CliRunner().invoke(app, words)
    assert result.exit_code == 0, (where, words, result.stdout, result.stderr)


def python_examples() -> list[tuple[str, str]]:
    return everywhere("python")


@pytest.mark.parametrize(
    ("where", "example"),
    python_examples(),
    ids=[f"{where}#{n}" for n, (where, _) in enumerate(python_examples())],
)
def test_every_python_example_of_the_docs_runs(
    where: str, example: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each example runs as written, in a fresh working directory holding the examples
    (outputs land there). An example that reads ``ANTHROPIC_API_KEY`` itself runs without
    it (it then plays its own server); one that calls Claude without naming a server
    reaches the scripted research server through ``ANTHROPIC_BASE_URL``, as the SDK reads
    it. No request leaves 127.0.0.1."""
    from plandag.jobs.research.scripted import ScriptedResearch
    from plandag.testing import MessagesServer

    (tmp_path / "examples").symlink_to(REPO / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PLANDAG_STORE", str(tmp_path / "runs.sqlite3"))
    with MessagesServer(default=ScriptedResearch()) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        if "ANTHROPIC_API_KEY" in example:
            monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
        else:
            monkeypatch.setenv("ANTHROPIC_API_KEY", "local")
        exec(compile(example, where, "exec"), {"__name__": "__docs__"})


def test_the_use_it_from_python_examples_make_what_they_say(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    examples = blocks("python", page("python.md"))
    assert len(examples) == 3
    (tmp_path / "examples").symlink_to(REPO / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    for example in examples:  # each as the script a reader saves and runs
        exec(compile(example, "python.md", "exec"), {"__name__": "__main__"})
    assert json.loads((tmp_path / "out" / "total.json").read_text(encoding="utf-8"))["total"] == (
        "203.51"
    )
    records = (tmp_path / "out" / "invoices.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(records) >= 7


def test_the_plan_format_plan_compiles() -> None:
    (plan_text,) = [
        block
        for block in blocks("json", page("plan-format.md"))
        if '"steps"' in block and '"llm"' not in block
    ]
    compiled = compile_plan(json.loads(plan_text), default_registry(), params={"input": "a.xml"})
    assert list(compiled.order) == [1, 2, 3]


def test_the_model_steps_plan_is_the_example_file_and_compiles() -> None:
    (plan_text,) = [block for block in blocks("json", page("model-steps.md")) if '"llm"' in block]
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


def test_the_toml_examples_are_valid(tmp_path: Path) -> None:
    (brakes,) = blocks("toml", page("brakes.md"))
    (escalation,) = blocks("toml", page("durable-runs.md"))
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
        assert f"| `{code}` | {severity} |" in page("plan-format.md")


def test_the_brakes_page_prints_the_brakes_line_the_cli_prints() -> None:
    from plandag.brakes import JOB_BRAKES, brakes_line
    from plandag.models.pricing import prices_source

    row = JOB_BRAKES["exec"]
    line = brakes_line(
        max_cost_usd=row.max_cost_usd,
        max_tokens=row.max_tokens,
        max_seconds=row.max_seconds,
        stall_after=row.stall_after,
        stop_on_stall=row.stop_on_stall,
        boundary="./",
        prices=prices_source([("claude-sonnet-4-5", "anthropic", None)]),
    )
    assert f"```text\n{line}\n```" in page("brakes.md")


def test_the_readme_brakes_table_is_the_brakes_table() -> None:
    from plandag.brakes import JOB_BRAKES

    for job, column in (("exec", 1), ("research", 2), ("extract_nfe", 3), ("extract_contracts", 4)):
        if job not in JOB_BRAKES:
            continue
        row = JOB_BRAKES[job]
        cost = next(line for line in README.splitlines() if line.startswith("| cost"))
        assert f"${row.max_cost_usd:.2f}" in cost.split("|")[column + 1], job


def test_the_wire_example_is_a_valid_plan() -> None:
    from plandag.planner.wire import from_wire
    from plandag.tools.base import tool
    from plandag.tools.registry import Registry

    @tool
    def add(a: int, b: int) -> int:
        return a + b

    (wire_text,) = [block for block in blocks("json", page("planning.md")) if '"g":' in block]
    plan = from_wire(json.loads(wire_text))
    compiled = compile_plan(plan, Registry([add]))
    assert list(compiled.order) == [1, 2]
    assert plan.output == "<step_2_result>"


def test_the_durable_run_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``sh`` blocks of "Durable runs": the approval example first (exit 4, then the
    approval runs it), then the store commands on the run ids it made."""
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("PLANDAG_STORE", str(tmp_path / "store" / "runs.sqlite3"))
    commands = []
    for block in blocks("sh", page("durable-runs.md")):
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


# -- the site ---------------------------------------------------------------------------------


def hooks() -> Any:
    spec = importlib.util.spec_from_file_location("docs_hooks", REPO / "scripts" / "docs_hooks.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_page_is_in_the_navigation() -> None:
    nav = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    for name in [*PAGES, *DESIGN]:
        assert f": {name}\n" in nav, name


def test_the_exit_codes_page_covers_every_state_and_code() -> None:
    from typing import get_args

    from plandag.cli.common import EXIT_CODES
    from plandag.scheduler.result import ESCALATION_REASONS, RunStatus, StepStatus

    text = page("reference/exit-codes.md")
    assert "<!-- plandag:exit-codes -->" in text
    table = hooks().exit_code_table()
    for status, code in EXIT_CODES.items():
        assert f"| `{status}` | {code} |" in table
    for status in [*get_args(RunStatus), *get_args(StepStatus), *ESCALATION_REASONS]:
        assert f"| `{status}` |" in text, status


def test_the_command_reference_holds_every_command() -> None:
    from plandag.cli.commands import COMMANDS

    reference = hooks().cli_reference()
    for entry in COMMANDS:
        assert f"## plandag {entry.name}\n" in reference, entry.name
        assert f"Usage: plandag {entry.name} " in reference, entry.name
    for group, sub in (("library", "approve"), ("extract", "nfe"), ("extract", "contracts")):
        assert f"## plandag {group} {sub}\n" in reference


@pytest.mark.slow
def test_the_site_builds_with_strict(tmp_path: Path) -> None:
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    if mkdocs is None:
        pytest.fail("mkdocs is not installed: pip install -e '.[dev]'")
    done = subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    assert "Usage: plandag exec" in cli
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    assert "compile_plan" in api
    assert "run_plan_sync" in api


def test_the_scripted_servers_of_the_examples_leave_the_console_port_free() -> None:
    from plandag.serve import DEFAULT_PORT

    texts = [("README.md", README), *PAGES.items()]
    started = [
        (where, module, int(port))
        for where, text in texts
        for module, port in re.findall(r"python -m (plandag[\w.]*) [^\n`]*--port (\d+)", text)
    ]
    assert {module for _, module, _ in started} >= {
        "plandag.jobs.research.scripted",
        "plandag.jobs.contracts.scripted",
    }
    for where, module, port in started:
        assert port != DEFAULT_PORT, (where, module)  # `plandag serve` would find it taken
    for where, block in everywhere("bash"):
        ports = set(re.findall(r"--port (\d+) &", block))
        for url_port in re.findall(r"--base-url http://127\.0\.0\.1:(\d+)", block):
            assert url_port in ports, (where, url_port)
