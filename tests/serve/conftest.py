"""Shared pieces of the console tests: tools, plans, a scripted planner, a console app in a
TestClient with a person's session."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from plandag.checks.builtins import BUILTIN_CHECKS
from plandag.conversation import Turn
from plandag.dag.plan import Plan
from plandag.serve import ConsoleConfig, create_app
from plandag.tools import tool
from plandag.tools.registry import Registry

TOKEN = "test-token-0123456789"
BASE = "http://127.0.0.1"


@tool
def lookup(name: str) -> dict[str, Any]:
    """Look a name up; returns its score."""
    return {"name": name, "score": len(name)}


@tool(effects="write", writes=lambda args: [args["channel"]])
def publish(channel: str, text: str | int) -> str:
    """Publish TEXT on CHANNEL."""
    return f"published on {channel}"


REGISTRY = Registry([lookup, publish], BUILTIN_CHECKS)


def lookup_plan(name: str = "a", steps: int = 1) -> Plan:
    """A plan of ``steps`` lookups, each after the one before."""
    return Plan.model_validate(
        {
            "goal": f"Score {name}",
            "steps": [
                {
                    "id": index,
                    "tool": "lookup",
                    "args": {"name": f"{name}{index}"},
                    "depends_on": [index - 1] if index > 1 else [],
                }
                for index in range(1, steps + 1)
            ],
            "output": f"<step_{steps}_result.score>",
        }
    )


PUBLISH_PLAN = Plan.model_validate(
    {
        "goal": "Score a and publish it",
        "steps": [
            {"id": 1, "tool": "lookup", "args": {"name": "a"}},
            {
                "id": 2,
                "tool": "publish",
                "args": {"channel": "blog", "text": "<step_1_result.score>"},
            },
        ],
        "output": "<step_2_result>",
    }
)


class ScriptedPlanner:
    """A conversation planner (the PlannerFunction seam) answering with queued plans and
    recording what it was asked."""

    def __init__(self, *answers: Plan | str) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, int, tuple[str, ...]]] = []

    async def __call__(
        self, message: str, history: Sequence[Turn], runnable: Registry
    ) -> Plan | str:
        self.calls.append((message, len(history), tuple(sorted(runnable.tools))))
        return self.answers.pop(0)


class Clock:
    """A settable wall clock."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None, "the page has no CSRF field"
    return found.group(1)


def make_config(tmp_path: Path, planner: Any = None, **changes: Any) -> ConsoleConfig:
    options: dict[str, Any] = {
        "store_path": tmp_path / "runs.sqlite3",
        "registry": REGISTRY,
        "planner": planner,
        "write_boundary": None,
        "base": tmp_path,
        "poll_s": 0.05,
        "stream_s": 0.3,
    }
    options.update(changes)
    return ConsoleConfig(**options)


def signed_in(client: TestClient, name: str = "Ana Souza") -> str:
    """Visit with the token, give the name; return the session's CSRF value."""
    first = client.get(f"/?token={TOKEN}", follow_redirects=False)
    assert first.status_code == 303
    page = client.get("/name")
    csrf = csrf_of(page.text)
    done = client.post(
        "/name", data={"csrf": csrf, "name": name, "next": "/conversations"}, follow_redirects=False
    )
    assert done.status_code == 303
    return csrf


@pytest.fixture
def planner() -> ScriptedPlanner:
    return ScriptedPlanner()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def console_client(tmp_path: Path, planner: ScriptedPlanner, clock: Clock) -> Iterator[TestClient]:
    app = create_app(make_config(tmp_path, planner, clock=clock), TOKEN)
    with TestClient(app, base_url=BASE) as client:
        yield client
