"""The brakes from the command line: --max-seconds, --max-cost, --retries, --heartbeat,
--stall-after, --write-boundary, --max-concurrency, and `plandag config`."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from plandag import __version__
from plandag.cli import app

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"

TOOLS_FILE = '''
from pathlib import Path

import anyio

from plandag import tool
from plandag.errors import PermanentStepError, TransientStepError


@tool
async def nap(seconds: float) -> float:
    """Sleeps on the event loop (cancellable)."""
    await anyio.sleep(seconds)
    return seconds


@tool(cost_estimate_usd=0.6)
async def pricey(x: int) -> int:
    """Costs an estimated 0.60 USD per call."""
    await anyio.sleep(0.05)
    return x


@tool(tokens_estimate=600)
async def wordy(x: int) -> int:
    """Uses an estimated 600 tokens per call."""
    await anyio.sleep(0.05)
    return x


def _count(counter: str) -> int:
    path = Path(counter)
    calls = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(calls))
    return calls


@tool
def flaky(counter: str, failures: int) -> int:
    """Fails with a transient error on its first `failures` calls, then returns the count."""
    calls = _count(counter)
    if calls <= failures:
        raise TransientStepError(f"flaky call {calls} failed")
    return calls


@tool
def broken(counter: str) -> int:
    """Always fails with a permanent error."""
    calls = _count(counter)
    raise PermanentStepError(f"broken call {calls}: bad input")
'''


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """tmp_path/work as the working directory, with no settings file above it."""
    folder = (tmp_path / "work").resolve()
    folder.mkdir()
    for parent in (folder, *folder.parents):
        assert not (parent / "pyproject.toml").exists(), parent
        assert not (parent / "plandag.toml").exists(), parent
    monkeypatch.chdir(folder)
    return folder


@pytest.fixture
def tools_file(tmp_path: Path) -> Path:
    path = tmp_path / "brake_tools.py"
    path.write_text(TOOLS_FILE, encoding="utf-8")
    return path


def write_plan(folder: Path, plan: dict[str, Any], name: str = "plan.json") -> Path:
    path = folder / name
    path.write_text(json.dumps(plan), encoding="utf-8")
    return path


def exec_json(
    runner: CliRunner, plan: Path, tools_file: Path, *options: str
) -> tuple[int, dict[str, Any], str]:
    result = runner.invoke(app, ["exec", str(plan), "--tools", str(tools_file), "--json", *options])
    document = json.loads(result.stdout) if result.stdout.strip() else {}
    return result.exit_code, document, result.stderr


def by_id(run: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {step["id"]: step for step in run["steps"]}


# -- plandag config ----------------------------------------------------------------------


def test_config_json_values_and_sources(runner: CliRunner, cwd: Path) -> None:
    (cwd / "plandag.toml").write_text(
        'max-seconds = 30\nretries = 1\nwrite_boundary = ["out/", "https://api.example.com"]\n'
        'max_tokens = "none"\n',
        encoding="utf-8",
    )
    result = runner.invoke(app, ["config", "--json"])
    assert result.exit_code == 0, result.stderr
    own = str(cwd / "plandag.toml")
    document = json.loads(result.stdout)
    brakes = document.pop("brakes")
    assert document == {
        "max_seconds": {"value": 30.0, "source": own},
        "max_cost": {"value": 1.0, "source": "default"},
        "max_tokens": {"value": "none", "source": own},
        "max_concurrency": {"value": None, "source": "default"},
        "max_steps": {"value": 500, "source": "default"},
        "max_plan_bytes": {"value": 16 * 1024 * 1024, "source": "default"},
        "retries": {"value": 1, "source": own},
        "write_boundary": {"value": ["out/", "https://api.example.com"], "source": own},
        "http_allow": {"value": None, "source": "default"},
        "heartbeat": {"value": None, "source": "default"},
        "heartbeat_every": {"value": 10.0, "source": "default"},
        "stall_after": {"value": 120.0, "source": "default"},
        "stop_on_stall": {"value": True, "source": "default"},
        "planner_max_tokens": {"value": 4096, "source": "default"},
        "executor_model": {"value": None, "source": "default"},
        "breaker_after": {"value": 3, "source": "default"},
        "max_blocked": {"value": 3, "source": "default"},
        "total_replan_below": {"value": None, "source": "default"},
        "plan_cost_factor": {"value": 2.0, "source": "default"},
        "plan_time_factor": {"value": 3.0, "source": "default"},
        "slow_start": {"value": 0.15, "source": "default"},
        "rpm": {"value": None, "source": "default"},
        "tpm": {"value": None, "source": "default"},
        "mcp_timeout": {"value": 60.0, "source": "default"},
        "jobs": {"value": 4, "source": "default"},
        "workers": {"value": None, "source": "default"},
        "approve": {"value": "ask", "source": "default"},
        "approval_expiry": {"value": 86400.0, "source": "default"},
        "escalate": {"value": "person", "source": "default"},
        "escalation_command": {"value": None, "source": "default"},
        "escalation_url": {"value": None, "source": "default"},
        "escalation_timeout": {"value": 10.0, "source": "default"},
    }
    # every job's brakes, the file's values applied to each
    assert list(brakes) == [
        "exec",
        "run",
        "python",
        "research",
        "extract nfe",
        "extract contracts",
    ]
    assert brakes["exec"] == {
        "per": "run",
        "max_cost": 1.0,
        "max_tokens": "none",
        "max_seconds": 30.0,
        "stall_after": 120.0,
        "stop_on_stall": True,
        "write_boundary": "working directory",
    }
    assert brakes["extract contracts"] == {
        "per": "batch",
        "max_cost": 20.0,
        "max_tokens": "none",
        "max_seconds": 30.0,
        "stall_after": 300.0,
        "stop_on_stall": True,
        "write_boundary": "output's folder",
    }


def test_config_table(runner: CliRunner, cwd: Path) -> None:
    (cwd / "plandag.toml").write_text("[plandag]\njobs = 8\n", encoding="utf-8")
    # rich sizes the table to the terminal (COLUMNS here); at 80 columns a long source
    # path is cut with an ellipsis
    result = runner.invoke(app, ["config"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.stderr
    lines = [line.split() for line in result.stdout.splitlines()]
    rows = {cells[1]: cells[2:] for cells in lines if len(cells) >= 4 and cells[0] == "│"}
    assert rows["jobs"] == ["│", "8", "│", str(cwd / "plandag.toml"), "│"]
    assert rows["retries"] == ["│", "2", "│", "default", "│"]
    assert rows["max_seconds"] == ["│", "900.0", "│", "default", "│"]
    assert rows["stop_on_stall"] == ["│", "True", "│", "default", "│"]
    assert result.stdout.startswith("plandag configuration\n")
    assert "brakes by job (on by default; lift with none)" in result.stdout
    assert (
        "lift a brake: --max-cost none, --max-tokens none, --max-seconds none, --stall-after "
        'none (in a file: max_cost = "none"); --no-stop-on-stall reports a stall without '
        "stopping." in " ".join(result.stdout.split())
    )
    jobs = {
        cells[1]: " ".join(cells[2:])
        for cells in lines
        if len(cells) >= 4 and cells[0] == "│" and cells[1] in ("exec", "research", "extract")
    }
    assert jobs["exec"] == (
        "│ $1.00 per run │ 200,000 │ 15 min │ 120 s → stop │ working directory │"
    )
    assert (
        jobs["research"] == "│ $2.00 per run │ 500,000 │ 30 min │ 120 s → stop │ report's folder │"
    )


def test_config_bad_file_exits_2(runner: CliRunner, cwd: Path) -> None:
    (cwd / "plandag.toml").write_text("max_secnds = 3\n", encoding="utf-8")
    result = runner.invoke(app, ["config"])
    assert result.exit_code == 2
    assert "unknown setting 'max_secnds'; did you mean max_seconds?" in result.stderr


def test_exec_takes_its_brakes_from_plandag_toml(
    runner: CliRunner, cwd: Path, tools_file: Path
) -> None:
    (cwd / "plandag.toml").write_text("max_seconds = 0.3\n", encoding="utf-8")
    plan = write_plan(cwd, {"steps": [{"id": 1, "tool": "nap", "args": {"seconds": 5}}]})
    code, run, _ = exec_json(runner, plan, tools_file)
    assert (code, run["status"], run["stop_reason"]) == (3, "timed_out", "deadline")


# -- --max-seconds ---------------------------------------------------------------------


def timeout_plan(folder: Path) -> Path:
    return write_plan(
        folder,
        {
            "steps": [
                {"id": 1, "tool": "nap", "args": {"seconds": 0.01}},
                {"id": 2, "tool": "nap", "args": {"seconds": 5}, "depends_on": [1]},
                {"id": 3, "tool": "nap", "args": {"seconds": 0.01}, "depends_on": [2]},
            ]
        },
    )


def test_max_seconds_times_out_exit_3(runner: CliRunner, cwd: Path, tools_file: Path) -> None:
    code, run, _ = exec_json(runner, timeout_plan(cwd), tools_file, "--max-seconds", "0.3")
    assert code == 3
    assert (run["status"], run["stop_reason"]) == ("timed_out", "deadline")
    assert 0.3 <= run["duration_s"] < 2.0
    steps = by_id(run)
    assert (steps[1]["status"], steps[1]["result"], steps[1]["reason"]) == (
        "succeeded",
        0.01,
        None,
    )
    assert (steps[2]["status"], steps[2]["reason"], steps[2]["attempts"]) == (
        "cancelled",
        "deadline",
        1,
    )
    assert steps[2]["detail"]
    assert (steps[3]["status"], steps[3]["reason"], steps[3]["attempts"]) == (
        "skipped",
        "deadline",
        0,
    )
    assert steps[3]["started_at"] is None


def test_max_seconds_summary_on_stderr(runner: CliRunner, cwd: Path, tools_file: Path) -> None:
    result = runner.invoke(
        app, ["exec", str(timeout_plan(cwd)), "--tools", str(tools_file), "--max-seconds", "0.3"]
    )
    assert result.exit_code == 3
    assert "finished: steps 1\n" in result.stderr
    assert "was running: steps 2\n" in result.stderr
    assert "never started: steps 3\n" in result.stderr
    assert "stopped: deadline\n" in result.stderr


# -- --max-cost ------------------------------------------------------------------------


def test_max_cost_starts_only_what_fits(runner: CliRunner, cwd: Path, tools_file: Path) -> None:
    plan = write_plan(
        cwd,
        {
            "steps": [
                {"id": 1, "tool": "pricey", "args": {"x": 1}},
                {"id": 2, "tool": "pricey", "args": {"x": 2}},
            ]
        },
    )
    code, run, _ = exec_json(runner, plan, tools_file, "--max-cost", "1.0")
    assert code == 3
    assert (run["status"], run["stop_reason"]) == ("budget_exceeded", "budget")
    statuses = sorted((s["status"], s["reason"], s["attempts"]) for s in run["steps"])
    assert statuses == [("skipped", "budget", 0), ("succeeded", None, 1)]
    assert run["spent_usd"] == 0.6
    refused = next(s for s in run["steps"] if s["status"] == "skipped")
    assert "cost cap" in refused["detail"]
    # the default cap ($1.00 per run) stops it the same way; lifted, both run
    code, run, _ = exec_json(runner, plan, tools_file)
    assert (code, run["status"], run["spent_usd"]) == (3, "budget_exceeded", 0.6)
    code, run, _ = exec_json(runner, plan, tools_file, "--max-cost", "none")
    assert (code, run["status"], run["spent_usd"]) == (0, "succeeded", 1.2)


def test_max_tokens_starts_only_what_fits(runner: CliRunner, cwd: Path, tools_file: Path) -> None:
    plan = write_plan(
        cwd,
        {
            "steps": [
                {"id": 1, "tool": "wordy", "args": {"x": 1}},
                {"id": 2, "tool": "wordy", "args": {"x": 2}},
            ]
        },
    )
    code, run, _ = exec_json(runner, plan, tools_file, "--max-tokens", "1000")
    assert code == 3
    assert (run["status"], run["stop_reason"]) == ("budget_exceeded", "budget")
    assert (run["spent_tokens"], run["spent_usd"]) == (600, 0.0)
    statuses = sorted((s["status"], s["reason"], s["attempts"]) for s in run["steps"])
    assert statuses == [("skipped", "budget", 0), ("succeeded", None, 1)]


def test_max_seconds_0_is_refused(runner: CliRunner, cwd: Path, tools_file: Path) -> None:
    plan = write_plan(cwd, {"steps": [{"id": 1, "tool": "nap", "args": {"seconds": 0.01}}]})
    result = runner.invoke(
        app, ["exec", str(plan), "--tools", str(tools_file), "--max-seconds", "0"]
    )
    assert result.exit_code == 2
    assert "Invalid value for '--max-seconds'" in result.stderr
    assert result.stdout == ""


# -- --retries -------------------------------------------------------------------------


def flaky_plan(folder: Path, failures: int) -> Path:
    counter = folder / "calls.txt"
    return write_plan(
        folder,
        {
            "steps": [
                {"id": 1, "tool": "flaky", "args": {"counter": str(counter), "failures": failures}}
            ]
        },
    )


def test_retries_2_transient_twice_then_success(
    runner: CliRunner, cwd: Path, tools_file: Path
) -> None:
    # The CLI builds RetryPolicy(retries=N) with the default delays: base 0.5 s, full
    # jitter, so the two backoffs are at most 0.5 s and 1.0 s (1.5 s in all).
    code, run, stderr = exec_json(runner, flaky_plan(cwd, 2), tools_file, "--retries", "2")
    assert code == 0, stderr
    step = run["steps"][0]
    assert (step["status"], step["result"], step["attempts"]) == ("succeeded", 3, 3)
    assert (cwd / "calls.txt").read_text() == "3"
    log = step["attempt_log"]
    assert [a["number"] for a in log] == [1, 2, 3]
    assert [a["error"] for a in log] == [
        {"type": "TransientStepError", "message": "flaky call 1 failed"},
        {"type": "TransientStepError", "message": "flaky call 2 failed"},
        None,
    ]
    assert [a["kind"] for a in log[:2]] == ["transient", "transient"]
    assert 0.0 <= log[1]["delay_before_s"] <= 0.5
    assert 0.0 <= log[2]["delay_before_s"] <= 1.0


def test_retries_0_means_one_attempt(runner: CliRunner, cwd: Path, tools_file: Path) -> None:
    code, run, _ = exec_json(runner, flaky_plan(cwd, 2), tools_file, "--retries", "0")
    assert code == 1
    step = run["steps"][0]
    assert (step["status"], step["attempts"], step["reason"]) == ("failed", 1, "tool_error")
    assert step["error"] == {"type": "TransientStepError", "message": "flaky call 1 failed"}
    assert (cwd / "calls.txt").read_text() == "1"


def test_permanent_error_is_not_retried(runner: CliRunner, cwd: Path, tools_file: Path) -> None:
    counter = cwd / "calls.txt"
    plan = write_plan(
        cwd, {"steps": [{"id": 1, "tool": "broken", "args": {"counter": str(counter)}}]}
    )
    code, run, _ = exec_json(runner, plan, tools_file, "--retries", "5")
    assert code == 1
    step = run["steps"][0]
    assert (step["status"], step["attempts"], step["reason"]) == ("failed", 1, "tool_error")
    assert step["error"] == {"type": "PermanentStepError", "message": "broken call 1: bad input"}
    assert step["attempt_log"][0]["kind"] == "permanent"
    assert counter.read_text() == "1"


# -- --heartbeat, --stall-after --------------------------------------------------------

HEARTBEAT_KEYS = {
    "event",
    "run_id",
    "time",
    "elapsed_s",
    "total",
    "done",
    "succeeded",
    "failed",
    "skipped",
    "cancelled",
    "running",
    "pending",
    "spent_usd",
    "spent_tokens",
    "running_steps",
    "running_tools",
}


def test_heartbeat_file(runner: CliRunner, cwd: Path, tools_file: Path) -> None:
    plan = write_plan(
        cwd,
        {
            "steps": [
                {"id": 1, "tool": "nap", "args": {"seconds": 0.3}},
                {"id": 2, "tool": "nap", "args": {"seconds": 0.01}, "depends_on": [1]},
            ]
        },
    )
    beats = cwd / "hb.jsonl"
    code, run, _ = exec_json(
        runner, plan, tools_file, "--heartbeat", str(beats), "--heartbeat-every", "0.05"
    )
    assert code == 0
    lines = [json.loads(line) for line in beats.read_text(encoding="utf-8").splitlines()]
    assert lines[0] == {
        "event": "run_started",
        "run_id": run["run_id"],
        "time": lines[0]["time"],
        "step_count": 2,
    }
    middle = lines[1:-1]
    assert len(middle) >= 1
    assert {line["event"] for line in middle} == {"heartbeat"}
    first = middle[0]
    assert set(first) == HEARTBEAT_KEYS
    assert (first["total"], first["running"], first["running_steps"], first["running_tools"]) == (
        2,
        1,
        [1],
        ["nap"],
    )
    assert (first["done"], first["pending"], first["spent_usd"], first["spent_tokens"]) == (
        0,
        1,
        0.0,
        0,
    )
    assert lines[-1] == {
        "event": "run_finished",
        "run_id": run["run_id"],
        "time": lines[-1]["time"],
        "status": "succeeded",
        "stop_reason": None,
        "duration_s": lines[-1]["duration_s"],
        "spent_usd": 0.0,
        "spent_tokens": 0,
        "steps": {"succeeded": 2},
        "progress": {"finished": [1, 2], "running": [], "not_started": []},
    }
    assert lines[0]["time"] <= first["time"] <= lines[-1]["time"]


def test_heartbeat_in_a_missing_folder_exits_2(
    runner: CliRunner, cwd: Path, tools_file: Path
) -> None:
    plan = write_plan(cwd, {"steps": [{"id": 1, "tool": "nap", "args": {"seconds": 0.01}}]})
    result = runner.invoke(
        app,
        ["exec", str(plan), "--tools", str(tools_file), "--heartbeat", str(cwd / "no" / "h")],
    )
    assert result.exit_code == 2
    assert "its folder does not exist" in result.stderr


def test_stop_on_stall(runner: CliRunner, cwd: Path, tools_file: Path) -> None:
    plan = write_plan(cwd, {"steps": [{"id": 1, "tool": "nap", "args": {"seconds": 5}}]})
    beats = cwd / "hb.jsonl"
    code, run, _ = exec_json(
        runner,
        plan,
        tools_file,
        "--stall-after",
        "0.1",
        "--stop-on-stall",
        "--heartbeat",
        str(beats),
    )
    assert code == 3
    assert (run["status"], run["stop_reason"]) == ("timed_out", "stalled")
    assert run["duration_s"] < 2.0
    step = run["steps"][0]
    assert (step["status"], step["reason"]) == ("cancelled", "stalled")
    events = [json.loads(line) for line in beats.read_text(encoding="utf-8").splitlines()]
    assert [event["event"] for event in events] == ["run_started", "stall", "run_finished"]
    stall = events[1]
    assert (stall["running_steps"], stall["running_tools"], stall["stopping"]) == (
        [1],
        ["nap"],
        True,
    )
    assert stall["idle_s"] >= 0.1


def test_stall_stops_by_default_and_no_stop_on_stall_only_reports(
    runner: CliRunner, cwd: Path, tools_file: Path
) -> None:
    # Stopping on a stall is the default now: --stop-on-stall no longer needs
    # --stall-after (it was opt-in, and refused without it); --no-stop-on-stall reports.
    plan = write_plan(cwd, {"steps": [{"id": 1, "tool": "nap", "args": {"seconds": 0.4}}]})
    code, run, _ = exec_json(runner, plan, tools_file, "--stall-after", "0.1")
    assert (code, run["status"], run["stop_reason"]) == (3, "timed_out", "stalled")
    beats = cwd / "hb.jsonl"
    code, run, _ = exec_json(
        runner,
        plan,
        tools_file,
        "--stall-after",
        "0.1",
        "--no-stop-on-stall",
        "--heartbeat",
        str(beats),
    )
    assert (code, run["status"]) == (0, "succeeded")
    events = [json.loads(line) for line in beats.read_text(encoding="utf-8").splitlines()]
    assert [(event["event"], event.get("stopping")) for event in events] == [
        ("run_started", None),
        ("stall", False),
        ("run_finished", None),
    ]
    # --stop-on-stall alone is accepted: the default threshold (120 s) applies
    code, run, _ = exec_json(runner, plan, tools_file, "--stop-on-stall")
    assert (code, run["status"]) == (0, "succeeded")


def test_every_brake_is_lifted_with_none(runner: CliRunner, cwd: Path, tools_file: Path) -> None:
    plan = write_plan(cwd, {"steps": [{"id": 1, "tool": "nap", "args": {"seconds": 0.01}}]})
    result = runner.invoke(
        app,
        [
            "exec",
            str(plan),
            "--tools",
            str(tools_file),
            "--max-cost",
            "none",
            "--max-tokens",
            "none",
            "--max-seconds",
            "none",
            "--stall-after",
            "none",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.stderr
    assert result.stderr.splitlines()[0] == (
        "brakes: no cost cap, no token cap, no time cap, no stall check, writes ./ — plandag "
        "config shows them all and how to lift each"
    )


def test_the_brakes_are_printed_at_the_start_of_every_run(
    runner: CliRunner, cwd: Path, tools_file: Path
) -> None:
    plan = write_plan(cwd, {"steps": [{"id": 1, "tool": "nap", "args": {"seconds": 0.01}}]})
    result = runner.invoke(app, ["exec", str(plan), "--tools", str(tools_file), "--json"])
    assert result.exit_code == 0, result.stderr
    assert result.stderr.splitlines()[0] == (
        "brakes: $1.00, 200,000 tokens, 15 min, stall 120 s, writes ./ — plandag config shows "
        "them all and how to lift each"
    )
    out = cwd / "out"
    out.mkdir()
    result = runner.invoke(
        app,
        [
            "extract",
            "nfe",
            str(EXAMPLES / "nfe" / "brnfe_without_proc.xml"),
            "-o",
            str(out / "a.jsonl"),
            "--no-stop-on-stall",
            "--max-cost",
            "2.5",
        ],
    )
    assert result.exit_code == 0, result.stderr
    assert result.stderr.splitlines()[0] == (
        "brakes per batch: $2.50, 1,000,000 tokens, no time cap, stall 300 s (report only), "
        "writes out/ — plandag config shows them all and how to lift each"
    )


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--max-cost", "lots", "'lots': expected a number of US dollars >= 0, or none"),
        ("--max-tokens", "1.5", "'1.5': expected a whole number of tokens >= 0, or none"),
        ("--max-seconds", "-1", "'-1': expected a number of seconds > 0, or none"),
        ("--stall-after", "0", "'0': expected a number of seconds > 0, or none"),
    ],
)
def test_a_bad_brake_value_exits_2(
    runner: CliRunner, cwd: Path, tools_file: Path, flag: str, value: str, message: str
) -> None:
    plan = write_plan(cwd, {"steps": [{"id": 1, "tool": "nap", "args": {"seconds": 0.01}}]})
    result = runner.invoke(app, ["exec", str(plan), "--tools", str(tools_file), flag, value])
    assert result.exit_code == 2
    assert f"Invalid value for '{flag}': {message}" in " ".join(result.stderr.split())


# -- --write-boundary ------------------------------------------------------------------


def write_json_plan(folder: Path, target: str) -> Path:
    return write_plan(
        folder, {"steps": [{"id": 1, "tool": "write_json", "args": {"path": target, "data": 1}}]}
    )


def test_write_boundary_glob(runner: CliRunner, cwd: Path) -> None:
    allowed = runner.invoke(
        app,
        [
            "exec",
            str(write_json_plan(cwd, "out/a.json")),
            "--write-boundary",
            "out/*.json",
            "--approve",
            "auto",
        ],
    )
    assert allowed.exit_code == 0, allowed.stderr
    assert (cwd / "out" / "a.json").read_text(encoding="utf-8") == "1\n"
    refused = runner.invoke(
        app,
        [
            "exec",
            str(write_json_plan(cwd, "out/b.txt")),
            "--write-boundary",
            "out/*.json",
            "--approve",
            "auto",
        ],
    )
    assert refused.exit_code == 2
    assert "error[write_outside_boundary]" in refused.stderr
    assert not (cwd / "out" / "b.txt").exists()


def test_write_boundary_widened_to_the_parent(runner: CliRunner, cwd: Path) -> None:
    plan = write_json_plan(cwd, "../wide.json")
    narrow = runner.invoke(
        app, ["exec", str(plan), "--approve", "auto"]
    )  # default boundary: the working directory
    assert narrow.exit_code == 2
    assert "error[write_outside_boundary]" in narrow.stderr
    assert not (cwd.parent / "wide.json").exists()
    wide = runner.invoke(app, ["exec", str(plan), "--write-boundary", "..", "--approve", "auto"])
    assert wide.exit_code == 0, wide.stderr
    assert (cwd.parent / "wide.json").read_text(encoding="utf-8") == "1\n"


def test_write_boundary_from_the_config_file(runner: CliRunner, cwd: Path) -> None:
    (cwd / "plandag.toml").write_text('write_boundary = "out/*.json"\n', encoding="utf-8")
    refused = runner.invoke(app, ["exec", str(write_json_plan(cwd, "x.json")), "--approve", "auto"])
    assert refused.exit_code == 2
    assert "error[write_outside_boundary]" in refused.stderr
    allowed = runner.invoke(
        app, ["exec", str(write_json_plan(cwd, "out/x.json")), "--approve", "auto"]
    )
    assert allowed.exit_code == 0, allowed.stderr


# -- --max-concurrency -----------------------------------------------------------------


def two_naps(folder: Path) -> Path:
    return write_plan(
        folder,
        {
            "steps": [
                {"id": 1, "tool": "nap", "args": {"seconds": 0.2}},
                {"id": 2, "tool": "nap", "args": {"seconds": 0.2}},
            ]
        },
    )


def test_max_concurrency_1_serialises(runner: CliRunner, cwd: Path, tools_file: Path) -> None:
    code, run, _ = exec_json(runner, two_naps(cwd), tools_file, "--max-concurrency", "1")
    assert code == 0
    first, second = sorted(run["steps"], key=lambda step: step["started_at"])
    assert second["started_at"] >= first["started_at"] + 0.19
    assert second["started_at"] >= first["ended_at"] - 0.01
    assert run["duration_s"] >= 0.4


def test_without_max_concurrency_they_overlap(
    runner: CliRunner, cwd: Path, tools_file: Path
) -> None:
    code, run, _ = exec_json(runner, two_naps(cwd), tools_file)
    assert code == 0
    first, second = sorted(run["steps"], key=lambda step: step["started_at"])
    assert second["started_at"] < first["ended_at"]
    assert run["duration_s"] < 0.39


# -- params, invalid plans, --version, graph -------------------------------------------


def param_plan(folder: Path) -> Path:
    return write_plan(
        folder,
        {
            "params": {"n": {"type": "integer"}},
            "steps": [{"id": 1, "tool": "json_select", "args": {"data": "<param.n>", "expr": "@"}}],
        },
    )


def test_check_param_missing_and_invalid(runner: CliRunner, cwd: Path) -> None:
    plan = param_plan(cwd)
    ok = runner.invoke(app, ["check", str(plan), "--param", "n=3"])
    assert ok.exit_code == 0, ok.stderr
    assert ok.stderr.endswith("plan.json: ok, 1 step, 0 warnings\n")
    wrong = runner.invoke(app, ["check", str(plan), "--param", "n=three", "--json"])
    assert wrong.exit_code == 2
    assert [d["code"] for d in json.loads(wrong.stdout)] == ["invalid_param_value"]
    other = runner.invoke(app, ["check", str(plan), "--param", "m=3", "--json"])
    assert other.exit_code == 2
    codes = [d["code"] for d in json.loads(other.stdout)]
    assert "missing_param" in codes
    missing = runner.invoke(app, ["check", str(plan), "--param", "m=3"])
    assert "error[missing_param]" in missing.stderr
    # without --param, check does not ask for values
    assert runner.invoke(app, ["check", str(plan)]).exit_code == 0


def test_exec_json_invalid_plan(runner: CliRunner, cwd: Path) -> None:
    plan = write_plan(cwd, {"steps": [{"id": 1, "tool": "no_such_tool", "args": {}}]})
    result = runner.invoke(app, ["exec", str(plan), "--json"])
    assert result.exit_code == 2
    document = json.loads(result.stdout)
    assert document["status"] == "invalid_plan"
    assert [(d["code"], d["step_id"]) for d in document["diagnostics"]] == [("unknown_tool", 1)]
    assert set(document) == {"status", "diagnostics"}
    # a plan that does not compile starts no run: no brakes line
    assert "brakes" not in result.stderr
    text = runner.invoke(app, ["exec", str(plan)])
    assert text.exit_code == 2
    assert "unknown_tool" in text.stderr
    assert "brakes" not in text.stderr


def test_duplicate_param_exits_2(runner: CliRunner, cwd: Path) -> None:
    result = runner.invoke(app, ["exec", str(param_plan(cwd)), "--param", "n=1", "--param", "n=2"])
    assert result.exit_code == 2
    assert "--param n is given twice; give each param once" in result.stderr


def test_version(runner: CliRunner) -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout == f"plandag {__version__}\n"


def test_graph_of_an_empty_plan(runner: CliRunner, cwd: Path) -> None:
    result = runner.invoke(app, ["graph", str(write_plan(cwd, {"steps": []}))])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.endswith(
        "%% critical path: none (empty plan) (0 steps)\n%% estimated cost $0.0000, time 0 s\n"
    )


# -- extract ---------------------------------------------------------------------------


def test_extract_output_is_a_folder_exits_2(runner: CliRunner, cwd: Path) -> None:
    (cwd / "out").mkdir()
    result = runner.invoke(app, ["extract", "nfe", str(EXAMPLES / "nfe"), "-o", str(cwd / "out")])
    assert result.exit_code == 2
    assert f"-o {cwd / 'out'} is a folder; name the output file" in result.stderr
    assert list((cwd / "out").iterdir()) == []


def test_extract_max_seconds_0_is_refused(runner: CliRunner, cwd: Path) -> None:
    output = cwd / "invoices.jsonl"
    result = runner.invoke(
        app, ["extract", "nfe", str(EXAMPLES / "nfe"), "-o", str(output), "--max-seconds", "0"]
    )
    assert result.exit_code == 2
    assert "Invalid value for '--max-seconds'" in result.stderr
    assert not output.exists()


def test_extract_max_seconds_tiny(runner: CliRunner, cwd: Path) -> None:
    output = cwd / "invoices.jsonl"
    result = runner.invoke(
        app,
        ["extract", "nfe", str(EXAMPLES / "nfe"), "-o", str(output), "--max-seconds", "0.001"],
    )
    # The deadline is a cancel scope around the whole batch: it fires wherever the batch is;
    # the output then holds one complete record per finished input, in input order.
    assert result.exit_code == 3, result.stderr
    match = re.search(r"stopped by --max-seconds 0\.001 after (\d+) of 7 inputs", result.stderr)
    assert match is not None, result.stderr
    assert "--resume" in result.stderr
    text = output.read_text(encoding="utf-8") if output.exists() else ""
    assert text == "" or text.endswith("\n")
    names = [Path(json.loads(line)["source"]).name for line in text.splitlines()]
    assert names == sorted(path.name for path in (EXAMPLES / "nfe").iterdir())[: len(names)]
    assert len(names) == int(match.group(1))


def test_extract_resume_on_a_foreign_output_exits_2(runner: CliRunner, cwd: Path) -> None:
    # The batch's InputError is raised inside Interruptible: it must reach the CLI's
    # `except InputError`, not escape as an ExceptionGroup traceback.
    output = cwd / "invoices.jsonl"
    output.write_text("garbage\n", encoding="utf-8")
    result = runner.invoke(
        app, ["extract", "nfe", str(EXAMPLES / "nfe"), "-o", str(output), "--resume"]
    )
    assert result.exit_code == 2
    brakes, error = result.stderr.splitlines()
    assert brakes.startswith("brakes per batch: $5.00, 1,000,000 tokens, no time cap,")
    assert error.startswith(f"error: cannot resume: line 1 of {output} is not a JSON record (")
    assert error.endswith("); remove --resume to start the output afresh")
    assert output.read_text(encoding="utf-8") == "garbage\n"


def test_extract_batch_brakes(runner: CliRunner, cwd: Path) -> None:
    output = cwd / "out" / "invoices.jsonl"
    beats = cwd / "beats.jsonl"
    result = runner.invoke(
        app,
        [
            "extract",
            "nfe",
            str(EXAMPLES / "nfe"),
            "-o",
            str(output),
            "--heartbeat",
            str(beats),
            "--max-cost",
            "1",
            "--max-tokens",
            "1000",
            "--retries",
            "0",
            "--max-concurrency",
            "2",
            "--write-boundary",
            str(cwd / "out"),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert (summary["inputs"], summary["records"]) == (7, 7)
    assert (summary["spent_usd"], summary["spent_tokens"]) == (0.0, 0)
    lines = [json.loads(line) for line in beats.read_text(encoding="utf-8").splitlines()]
    assert [lines[0]["event"], lines[-1]["event"]] == ["batch_started", "batch_finished"]
    assert (lines[-1]["status"], lines[-1]["done"], lines[-1]["total"]) == ("finished", 7, 7)


def test_brake_flags_read_as_settings_flags() -> None:
    import typer

    from plandag.cli.common import brake_flags

    flags = brake_flags(
        max_cost=0.5,
        heartbeat=Path("beat.jsonl"),
        plan_cost_factor="2",
        plan_time_factor="none",
        slow_start="0.25",
    )
    assert flags["max_cost"] == 0.5
    assert flags["heartbeat"] == "beat.jsonl"
    assert flags["plan_cost_factor"] == 2.0
    assert flags["plan_time_factor"] == "none"
    assert flags["slow_start"] == 0.25
    assert flags["max_steps"] is None  # not given: the configuration's value stays
    for bad in ({"plan_cost_factor": "0"}, {"slow_start": "2"}):
        with pytest.raises(typer.Exit) as exit_info:
            brake_flags(**bad)
        assert exit_info.value.exit_code == 2
