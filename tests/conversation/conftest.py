"""Shared pieces of the conversation tests: a store in tmp_path, plans, a registry."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from plandag.conversation import ConversationStore
from plandag.dag.plan import Plan
from plandag.tools.builtins import BUILTIN_TOOLS
from plandag.tools.registry import Registry


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def connection(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    connection = sqlite3.connect(tmp_path / "conversations.sqlite3")
    yield connection
    connection.close()


@pytest.fixture
def store(connection: sqlite3.Connection) -> ConversationStore:
    return ConversationStore(connection)


@pytest.fixture
def registry() -> Registry:
    return Registry(BUILTIN_TOOLS)


@pytest.fixture
def plan() -> Plan:
    """A plan that reads a file and writes JSON (it has write effects)."""
    return Plan.model_validate(
        {
            "goal": "copy the data into a report",
            "params": {"input": {"type": "string"}},
            "steps": [
                {"id": 1, "tool": "read_file", "args": {"path": "<param.input>"}},
                {
                    "id": 2,
                    "tool": "write_json",
                    "args": {"path": "out/report.json", "data": "<step_1_result>"},
                    "depends_on": [1],
                },
            ],
            "output": "<step_2_result>",
        }
    )
