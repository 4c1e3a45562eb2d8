"""Crash and resume with exactly-once effects (README, "Durable runs", **Resume**).

A real ``plandag exec`` process runs a chain of five steps whose tool appends to a
side-effect log; step 3 records its effect and then hangs, and the test kills the process
with SIGKILL there. ``plandag resume`` must then finish the run with every effect in the
log exactly once: steps 1 and 2 are never run again (their results come from the store),
step 3 runs again with the same idempotency key, which the "outside system" (the log)
drops. A variant tool that takes no key makes resume ask a person instead (exit 4, the log
unchanged), and ``plandag approve`` then continues the run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from plandag.store import open_store
from tests.sigkill import kill_at_mark

TOOLS = '''
import os
import time
from pathlib import Path

from plandag.tools import ToolContext, tool

LOG = Path(os.environ["EFFECT_LOG"])
MARK = Path(os.environ["HANG_MARK"])


def _hang_once(label: str) -> None:
    if label == os.environ.get("HANG_AT") and not MARK.exists():
        MARK.write_text("hanging")
        time.sleep(60)  # killed here


def _append(line: str) -> None:
    with LOG.open("a", encoding="utf-8") as log:
        log.write(line + "\\n")
        log.flush()
        os.fsync(log.fileno())


@tool(effects="write", idempotent=False)
def append_keyed(label: str, ctx: ToolContext) -> str:
    """Append LABEL to the log once per idempotency key (the outside system drops repeats)."""
    keys = [line.split()[0] for line in LOG.read_text().splitlines()] if LOG.exists() else []
    if ctx.idempotency_key not in keys:
        _append(f"{ctx.idempotency_key} {label}")
    _hang_once(label)
    return label


@tool(effects="write", idempotent=False)
def append_plain(label: str) -> str:
    """Append LABEL to the log (no key: a repeat would be a duplicate)."""
    _append(f"- {label}")
    _hang_once(label)
    return label


@tool(effects="irreversible")
def append_irreversible(label: str) -> str:
    """Append LABEL to the log for good (a payment, a message sent: no undoing it)."""
    _append(f"! {label}")
    _hang_once(label)
    return label
'''


def _chain(tool: str) -> dict[str, object]:
    steps = []
    for number in range(1, 6):
        label = f"s{number}" if number == 1 else f"<step_{number - 1}_result>+s{number}"
        steps.append(
            {
                "id": number,
                "tool": tool,
                "args": {"label": label},
                "depends_on": [number - 1] if number > 1 else [],
            }
        )
    return {"version": 1, "goal": "a chain of effects", "steps": steps, "output": "<step_5_result>"}


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "PLANDAG_STORE": str(tmp_path / "store" / "runs.sqlite3"),
            "EFFECT_LOG": str(tmp_path / "effects.log"),
            "HANG_MARK": str(tmp_path / "hanging"),
            "HANG_AT": "s1+s2+s3",
        }
    )
    return env


def _plandag(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "plandag", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _start_and_kill(tmp_path: Path, tool: str) -> tuple[dict[str, str], str]:
    (tmp_path / "effects_tools.py").write_text(TOOLS, encoding="utf-8")
    (tmp_path / "plan.json").write_text(json.dumps(_chain(tool)), encoding="utf-8")
    env = _env(tmp_path)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "plandag",
            "exec",
            "plan.json",
            "--tools",
            "effects_tools.py",
            "--approve",
            "auto",
            "--retries",
            "0",
        ],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    kill_at_mark(process, tmp_path / "hanging", "step 3", seconds=30)
    store = open_store(env["PLANDAG_STORE"])
    try:
        (run,) = store.runs()
        assert run.status == "running"  # the process died mid-run
        steps = store.steps(run.run_id)
        assert [steps[i].status for i in range(1, 6)] == [
            "succeeded",
            "succeeded",
            "running",
            "pending",
            "pending",
        ]
    finally:
        store.close()
    # the lines of steps with effects are in the trace before their tools are called
    trace = [
        json.loads(line)
        for line in (tmp_path / "store" / "traces" / f"{run.run_id}.jsonl").read_text().splitlines()
    ]
    assert [
        (line["kind"], line["attrs"]["step_id"]) for line in trace if line["type"] == "event"
    ] == [
        ("step_started", 1),
        ("step_ended", 1),
        ("step_started", 2),
        ("step_ended", 2),
        ("step_started", 3),
    ]
    return env, run.run_id


@pytest.mark.timeout(120)
def test_sigkill_then_resume_runs_every_effect_exactly_once(tmp_path: Path) -> None:
    env, run_id = _start_and_kill(tmp_path, "append_keyed")
    log = tmp_path / "effects.log"
    assert log.read_text().splitlines() == [
        f"{run_id}:1 s1",
        f"{run_id}:2 s1+s2",
        f"{run_id}:3 s1+s2+s3",
    ]

    resumed = _plandag("resume", run_id[:8], "--json", env=env, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    document = json.loads(resumed.stdout)
    assert document["status"] == "succeeded"
    assert document["run_id"] == run_id
    assert document["output"] == "s1+s2+s3+s4+s5"

    assert log.read_text().splitlines() == [
        f"{run_id}:1 s1",
        f"{run_id}:2 s1+s2",
        f"{run_id}:3 s1+s2+s3",
        f"{run_id}:4 s1+s2+s3+s4",
        f"{run_id}:5 s1+s2+s3+s4+s5",
    ]
    store = open_store(env["PLANDAG_STORE"])
    try:
        assert store.run(run_id).status == "succeeded"
        assert store.run(run_id).segment == 1
        steps = store.steps(run_id)
        # steps 1 and 2 ran once, in the first process; 3 ran again in the second
        assert [(steps[i].segment, steps[i].attempts) for i in (1, 2)] == [(0, 1), (0, 1)]
        assert steps[3].segment == 1
        starts = [
            (step_id, segment)
            for step_id, _, state, _, _, segment in store.transitions(run_id)
            if state == "running"
        ]
        assert starts == [(1, 0), (2, 0), (3, 0), (3, 1), (4, 1), (5, 1)]
    finally:
        store.close()

    # the resumed run's trace continues the first one's file
    trace_lines = [
        json.loads(line)
        for line in (tmp_path / "store" / "traces" / f"{run_id}.jsonl").read_text().splitlines()
    ]
    segments = [line["segment"] for line in trace_lines if line["type"] == "run_started"]
    assert segments == [0, 1]
    assert [line["command"] for line in trace_lines if line["type"] == "run_started"] == [
        "exec",
        "resume",
    ]
    finished = [line for line in trace_lines if line["type"] == "run_finished"]
    assert [line["status"] for line in finished] == ["succeeded"]

    again = _plandag("resume", run_id, env=env, cwd=tmp_path)
    assert again.returncode == 2
    assert "ended succeeded; there is nothing to resume" in again.stderr


@pytest.mark.timeout(120)
def test_resume_asks_instead_of_repeating_a_step_without_key(tmp_path: Path) -> None:
    env, run_id = _start_and_kill(tmp_path, "append_plain")
    log = tmp_path / "effects.log"
    assert log.read_text().splitlines() == ["- s1", "- s1+s2", "- s1+s2+s3"]

    resumed = _plandag("resume", run_id, "--json", env=env, cwd=tmp_path)
    assert resumed.returncode == 4, resumed.stderr
    document = json.loads(resumed.stdout)
    assert document["status"] == "awaiting_approval"
    assert "unknown outcome: step(s) 3 (append_plain)" in document["approval"]["reason"]
    assert log.read_text().splitlines() == ["- s1", "- s1+s2", "- s1+s2+s3"]  # nothing repeated

    listed = _plandag("runs", "--json", env=env, cwd=tmp_path)
    assert [(row["run_id"], row["status"]) for row in json.loads(listed.stdout)] == [
        (run_id, "awaiting_approval")
    ]

    approved = _plandag("approve", run_id, "--json", env=env, cwd=tmp_path)
    assert approved.returncode == 0, approved.stderr
    assert json.loads(approved.stdout)["output"] == "s1+s2+s3+s4+s5"
    # the person chose to run step 3 again: its effect repeats once, 1 and 2 never
    assert log.read_text().splitlines() == [
        "- s1",
        "- s1+s2",
        "- s1+s2+s3",
        "- s1+s2+s3",
        "- s1+s2+s3+s4",
        "- s1+s2+s3+s4+s5",
    ]


def _approve_and_kill(tmp_path: Path, tool: str) -> tuple[dict[str, str], str]:
    """A plan with irreversible effects waits for a person; ``plandag approve`` runs it and
    is killed with SIGKILL while step 3 hangs after its effect."""
    (tmp_path / "effects_tools.py").write_text(TOOLS, encoding="utf-8")
    (tmp_path / "plan.json").write_text(json.dumps(_chain(tool)), encoding="utf-8")
    env = _env(tmp_path)
    waiting = _plandag(
        "exec",
        "plan.json",
        "--tools",
        "effects_tools.py",
        "--retries",
        "0",
        "--json",
        env=env,
        cwd=tmp_path,
    )
    assert waiting.returncode == 4, waiting.stderr
    run_id = json.loads(waiting.stdout)["run_id"]
    process = subprocess.Popen(
        [sys.executable, "-m", "plandag", "approve", run_id],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    kill_at_mark(process, tmp_path / "hanging", "step 3", seconds=30)
    return env, run_id


@pytest.mark.timeout(120)
def test_resume_escalates_an_irreversible_step_whose_outcome_is_unknown(tmp_path: Path) -> None:
    env, run_id = _approve_and_kill(tmp_path, "append_irreversible")
    log = tmp_path / "effects.log"
    assert log.read_text().splitlines() == ["! s1", "! s1+s2", "! s1+s2+s3"]

    resumed = _plandag("resume", run_id, "--json", env=env, cwd=tmp_path)
    assert resumed.returncode == 5, resumed.stderr
    document = json.loads(resumed.stdout)
    assert (document["status"], document["escalation"]) == ("escalated", "unknown_outcome")
    assert document["escalation_detail"].startswith(
        "step(s) 3 (append_irreversible) have irreversible effects and started before the "
        "run stopped"
    )
    assert log.read_text().splitlines() == ["! s1", "! s1+s2", "! s1+s2+s3"]  # nothing repeated

    inbox = _plandag("inbox", "--json", env=env, cwd=tmp_path)
    [item] = json.loads(inbox.stdout)
    assert (item["run_id"], item["reason"]) == (run_id, "unknown_outcome")
    digest = item["plan_hash"]
    # a stored plan run without a planner: nobody could follow an instruction, and resuming
    # it as it is escalates again; what closes the case is approve or abandon
    assert item["actions"] == {
        "resume": None,
        "approve": f"plandag approve {run_id} --hash {digest}",
        "abandon": f"plandag abandon {run_id} --reason TEXT",
    }
    assert "--instruction" not in resumed.stdout
    assert f"`plandag approve {run_id} --hash {digest}` runs the step(s) again" in resumed.stdout
    told = _plandag("resume", run_id, "--instruction", "check", env=env, cwd=tmp_path)
    assert told.returncode == 2
    assert " ".join(told.stderr.split()) == (
        f"error: run {run_id} has no planner to follow an instruction (it was made by "
        f"`plandag exec` without --planner); check what happened outside, then `plandag "
        f"approve {run_id} --hash {digest}` runs the step(s) again, `plandag abandon "
        f"{run_id} --reason TEXT` closes it"
    )

    unhashed = _plandag("approve", run_id, env=env, cwd=tmp_path)
    assert unhashed.returncode == 2
    assert f"`plandag approve {run_id} --hash {digest}`" in unhashed.stderr
    stale = _plandag("approve", run_id, "--hash", "0" * 64, env=env, cwd=tmp_path)
    assert stale.returncode == 2
    assert "is not its current plan" in stale.stderr

    approved = _plandag(
        "approve", run_id, "--hash", digest, "--who", "ana", "--json", env=env, cwd=tmp_path
    )
    assert approved.returncode == 0, approved.stderr
    assert json.loads(approved.stdout)["output"] == "s1+s2+s3+s4+s5"
    # the person checked and chose to run step 3 again: its effect repeats once, 1 and 2 never
    assert log.read_text().splitlines() == [
        "! s1",
        "! s1+s2",
        "! s1+s2+s3",
        "! s1+s2+s3",
        "! s1+s2+s3+s4",
        "! s1+s2+s3+s4+s5",
    ]
    assert json.loads(_plandag("inbox", "--json", env=env, cwd=tmp_path).stdout) == []
    store = open_store(env["PLANDAG_STORE"])
    try:
        [case] = store.escalations(run_id=run_id, status=None)
        assert (case.status, case.decision, case.who) == ("closed", "approved", "ana")
    finally:
        store.close()


@pytest.mark.timeout(120)
def test_resume_with_escalate_never_awaits_approval_as_before(tmp_path: Path) -> None:
    env, run_id = _approve_and_kill(tmp_path, "append_irreversible")
    resumed = _plandag("resume", run_id, "--escalate", "never", "--json", env=env, cwd=tmp_path)
    assert resumed.returncode == 4, resumed.stderr
    document = json.loads(resumed.stdout)
    assert document["status"] == "awaiting_approval"
    assert "unknown outcome: step(s) 3 (append_irreversible)" in document["approval"]["reason"]
    assert json.loads(_plandag("inbox", "--json", env=env, cwd=tmp_path).stdout) == []
