"""The lines the writer's observer writes, byte for byte, against lines pinned in ``data/``
(written by the writer that assembled every line from a copy of its attrs, masked and
converted, then encoded whole): every kind of step end, results and errors holding
credentials and personal data, values that are not JSON, an environment secret added while
the run goes, with each kind of redactor, and what an exporter receives."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from plandag.trace.redact import Redactor, scrub_secrets
from tests.trace import observer_scenario as scenario

DATA = Path(__file__).parent / "data"

REDACTORS: dict[str, Callable[[], Callable[[Any], Any] | None]] = {
    "plain": lambda: None,
    "secrets": Redactor,
    "personal": lambda: Redactor(personal=True),
    "function": lambda: scrub_secrets,
}


@pytest.fixture(autouse=True)
def _environment_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(scenario.SECRET_NAME, scenario.SECRET_VALUE)
    monkeypatch.delenv(scenario.LATE_NAME, raising=False)


@pytest.mark.parametrize("name", sorted(REDACTORS))
def test_the_lines_are_the_pinned_ones(tmp_path: Path, name: str) -> None:
    path = tmp_path / "trace.jsonl"
    scenario.write_scenario(path, REDACTORS[name]())
    written = path.read_text(encoding="utf-8").splitlines()
    pinned = (DATA / f"observer_{name}.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(written) == len(pinned)
    for number, (line, expected) in enumerate(zip(written, pinned, strict=True)):
        assert line == expected, f"line {number + 1}"


EFFECTS: dict[str, Callable[[int], str | None]] = {
    "none": lambda step_id: "none",
    "mixed": lambda step_id: ("write", "irreversible", "none", None)[step_id % 4],
}


@pytest.mark.parametrize("effects", sorted(EFFECTS))
@pytest.mark.parametrize("name", sorted(REDACTORS))
def test_lines_that_waited_are_the_pinned_ones(tmp_path: Path, name: str, effects: str) -> None:
    # the lines of steps without effects wait and are written together: the same bytes
    path = tmp_path / "trace.jsonl"
    scenario.write_scenario(path, REDACTORS[name](), effects=EFFECTS[effects])
    pinned = (DATA / f"observer_{name}.jsonl").read_text(encoding="utf-8")
    assert path.read_text(encoding="utf-8") == pinned


def test_the_exporter_receives_the_pinned_records(tmp_path: Path) -> None:
    exported: list[dict[str, Any]] = []
    scenario.write_scenario(tmp_path / "trace.jsonl", Redactor(), [exported.append])
    pinned = json.loads((DATA / "observer_secrets_exported.json").read_text(encoding="utf-8"))
    assert json.loads(json.dumps(exported, ensure_ascii=True, default=repr)) == pinned


def test_the_same_lines_again_after_many_steps(tmp_path: Path) -> None:
    # a writer that has seen the run's texts before writes them the same way
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    redactor = Redactor(personal=True)
    scenario.write_scenario(first, redactor)
    scenario.write_scenario(second, redactor)
    assert first.read_text(encoding="utf-8") == second.read_text(encoding="utf-8")
