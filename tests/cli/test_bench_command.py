"""``plandag bench`` with the simulated model, at a small time scale."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from plandag.cli.bench_command import (
    BEGIN_MARK,
    BROKEN_BEGIN_MARK,
    BROKEN_END_MARK,
    END_MARK,
    register,
    write_results,
)

REPOSITORY = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)


def bench_app() -> typer.Typer:
    app = typer.Typer(add_completion=False, rich_markup_mode=None)
    register(app)

    @app.command("other")
    def other() -> None:
        """Keeps typer from collapsing the app into its one command."""

    return app


def test_bench_writes_results_and_chart(tmp_path: Path) -> None:
    out = tmp_path / "out"
    settings = tmp_path / "bench.toml"
    settings.write_text("[bench]\nseed = 7\nobservation_chars = 100\n", encoding="utf-8")
    result = CliRunner().invoke(
        bench_app(),
        [
            "bench",
            "compare2",
            "parallelqa",
            "--time-scale",
            "0.01",
            "--settings",
            str(settings),
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    text = (out / "RESULTS.md").read_text(encoding="utf-8")
    assert text.startswith(BEGIN_MARK + "\n# plandag vs sequential ReAct\n")
    assert text.endswith(END_MARK + "\n")
    assert "| seed | 7 |" in text
    assert "| observation_chars | 100 |" in text
    assert "| time_scale | 0.01 |" in text
    assert "| compare2 | plandag | 100% |" in text
    assert "| parallelqa | react | 100% |" in text
    if "No chart" not in text:
        assert (out / "bench.png").exists()


def test_unknown_workload_and_missing_key() -> None:
    result = CliRunner().invoke(bench_app(), ["bench", "nope", "--quick"])
    assert result.exit_code == 2
    assert "unknown workload(s) nope; known: compare2, movie8, parallelqa, nfe" in result.output
    result = CliRunner().invoke(bench_app(), ["bench", "--real"])
    assert result.exit_code == 2
    assert "--real calls the Anthropic API: set ANTHROPIC_API_KEY" in result.output


def test_bad_settings(tmp_path: Path) -> None:
    settings = tmp_path / "bench.toml"
    settings.write_text("speed = 3\n", encoding="utf-8")
    result = CliRunner().invoke(bench_app(), ["bench", "--settings", str(settings)])
    assert result.exit_code == 2
    assert "unknown settings: speed" in result.output


def test_write_results_keeps_other_sections(tmp_path: Path) -> None:
    path = tmp_path / "RESULTS.md"
    path.write_text("# Scheduler\n\nLangGraph numbers.\n", encoding="utf-8")
    write_results(path, "# bench one\n")
    write_results(path, "# bench two\n")
    assert path.read_text(encoding="utf-8") == (
        f"# Scheduler\n\nLangGraph numbers.\n\n{BEGIN_MARK}\n# bench two\n{END_MARK}\n"
    )


def test_bench_writes_into_the_current_folder_unless_told(tmp_path: Path) -> None:
    tracked = REPOSITORY / "benchmarks" / "RESULTS.md"
    before = tracked.read_bytes() if tracked.exists() else None
    result = CliRunner().invoke(
        bench_app(), ["bench", "compare2", "--time-scale", "0.01", "--no-prompt-cache"]
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "RESULTS.md").read_text(encoding="utf-8").startswith(BEGIN_MARK)
    assert f"wrote {tmp_path / 'RESULTS.md'}" in result.output
    # the repository's own results are written only when --out names their folder
    assert (tracked.read_bytes() if tracked.exists() else None) == before


def test_a_piped_table_keeps_its_full_width(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # standard output is not a terminal here; rich alone would fit tables to 80 columns
    monkeypatch.delenv("COLUMNS", raising=False)
    result = CliRunner().invoke(
        bench_app(),
        ["bench", "compare2", "--time-scale", "0.01", "--no-prompt-cache", "--out", "out"],
    )
    assert result.exit_code == 0, result.output
    header = next(line for line in result.output.splitlines() if "workload" in line)
    for name in ("agent", "success", "median wall s", "speed-up", "LLM calls", "wall/ideal"):
        assert f" {name} " in header, header
    assert len(header) > 80
    assert "…" not in result.output


def test_real_calls_the_api_named_by_the_environment_through_the_sdk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--real`` takes the key (and, as the SDK does, the base URL) from the environment:
    here a local server on 127.0.0.1 that speaks the Messages API plays the provider with
    correct answers for the NF-e workload (plandag needs no call; ReAct reads each file,
    then answers)."""
    import json as json_module

    from plandag.bench.workloads import WORKLOADS
    from plandag.testing import MessagesServer

    questions = WORKLOADS["nfe"].questions
    with MessagesServer() as server:
        for question in questions:
            server.push_tool_use("read_file", {"path": question.params["input"]})
            server.push_text(
                "Read the XML.\nAnswer: " + json_module.dumps(question.expected, ensure_ascii=False)
            )
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-local-test")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        out = tmp_path / "out"
        result = CliRunner().invoke(
            bench_app(),
            ["bench", "nfe", "--real", "--runs", "1", "--out", str(out), "--no-prompt-cache"],
        )
        requests = server.message_requests
    assert result.exit_code == 0, result.output
    assert len(requests) == 2 * len(questions)  # ReAct: a tool call and an answer each
    # the SDK sends the key from the environment (this SDK version: as a bearer token)
    assert {request.headers["authorization"] for request in requests} == {
        "Bearer sk-ant-local-test"
    }
    assert {request.json["model"] for request in requests} == {"claude-sonnet-4-6"}
    text = (out / "RESULTS.md").read_text(encoding="utf-8")
    assert "the real Anthropic API" in text
    assert "| nfe | plandag | 100% |" in text
    assert "| nfe | react | 100% |" in text


def test_broken_tools_reports_how_each_agent_recovered(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "RESULTS.md").write_text(f"{BEGIN_MARK}\nthe ordinary run\n{END_MARK}\n", "utf-8")
    result = CliRunner().invoke(
        bench_app(),
        ["bench", "compare2", "nfe", "--broken-tools", "--time-scale", "0.01", "--out", str(out)],
        env={"COLUMNS": "250"},
    )
    assert result.exit_code == 0, result.output  # plandag never reported a made-up success
    assert "broken tools: how each agent recovered" in result.output
    text = (out / "RESULTS.md").read_text(encoding="utf-8")
    assert text.startswith(f"{BEGIN_MARK}\nthe ordinary run\n{END_MARK}\n")  # kept
    assert f"{BROKEN_BEGIN_MARK}\n# plandag vs sequential ReAct with broken tools\n" in text
    assert text.endswith(BROKEN_END_MARK + "\n")
    assert (
        "| workload | agent | run | outcome | right | replans | retries | failed tool calls "
        "| LLM calls | input tok | output tok | wall s |"
    ) in text
    rows = {
        (cells[1], cells[2]): cells
        for line in text.splitlines()
        if line.startswith(("| compare2 |", "| nfe |"))
        for cells in [[cell.strip() for cell in line.split("|")]]
    }
    plandag_compare = rows[("compare2", "plandag")]
    # the lookups fail for good: the replan caps hand the run to a person, no answer made up
    assert plandag_compare[4] in ("escalated (no_progress)", "escalated (max_replans)")
    assert plandag_compare[5] == "no"
    assert int(plandag_compare[6]) in (2, 3)
    assert int(plandag_compare[8]) >= 2  # failed lookups
    assert int(plandag_compare[10]) > 0  # input tokens
    assert float(plandag_compare[12]) > 0  # wall seconds
    react_compare = rows[("compare2", "react")]
    assert react_compare[4:7] == ["succeeded", "no", "-"]  # it answers "unknown"
    assert int(react_compare[8]) >= 1
    assert rows[("nfe", "plandag")][4] == "escalated (blocked_intent) x3"
    assert rows[("nfe", "react")][4:6] == ["succeeded x3", "yes"]  # its reads still work


def test_broken_tools_does_not_go_with_tasks(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        bench_app(), ["bench", "--broken-tools", "--tasks", "t.jsonl", "--tools", "x.py"]
    )
    assert result.exit_code == 2
    assert "--broken-tools breaks the built-in workloads' tools" in result.output
