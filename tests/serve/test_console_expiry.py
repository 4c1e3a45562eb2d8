"""Plan mode's 24 hours, at the boundary: a decision card still waits one second before,
and is gone at 24 hours (a shorter expiry would fail the first half)."""

from __future__ import annotations

from pathlib import Path

from starlette.testclient import TestClient

from tests.serve.conftest import Clock, ScriptedPlanner, lookup_plan, signed_in
from tests.serve.test_console_http import eventually, plan_box, start, stored

DAY_S = 24 * 3600


def test_plan_mode_still_waits_one_second_before_24_hours_and_ends_at_24_hours(
    console_client: TestClient, planner: ScriptedPlanner, clock: Clock, tmp_path: Path
) -> None:
    planner.answers.append(lookup_plan("a"))
    csrf = signed_in(console_client)
    start_s = clock.now
    path = start(console_client, csrf)
    eventually(console_client, path, lambda text: 'id="card"' in text)
    clock.now = start_s + DAY_S - 1
    waiting = console_client.get(path).text
    assert 'id="card"' in waiting
    assert "checked" in plan_box(waiting)
    assert "plan mode ended" not in waiting
    clock.now = start_s + DAY_S
    ended = console_client.get(path).text
    assert 'id="card"' not in ended
    assert "plan mode ended: expired (24 h without a decision)" in ended
    assert stored(tmp_path, path)[-1].data["reason"] == "expired"
