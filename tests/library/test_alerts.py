"""Out-of-registry alerts: a log warning, a store event, the hooks' call and an
OpenTelemetry counter for each tool or check the planner named that is not registered."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from plandag.dag.diagnostics import Diagnostic
from plandag.planner.alerts import METRIC_NAME, alert_payload, report_alerts
from plandag.store import open_store

UNKNOWN_TOOL = Diagnostic(
    "unknown_tool",
    "error",
    1,
    "tool 'lookup_fast' is not registered",
    "did you mean lookup?",
)
UNKNOWN_CHECK = Diagnostic(
    "unknown_check", "error", 2, "check[0]: kind 'is_positive' is not registered"
)


def test_the_payload_names_the_tool_or_check() -> None:
    assert alert_payload(UNKNOWN_TOOL, run_id="r1", task_type="score_name") == {
        "event": "out_of_registry",
        "run_id": "r1",
        "task_type": "score_name",
        "code": "unknown_tool",
        "name": "lookup_fast",
        "step_id": 1,
        "message": "tool 'lookup_fast' is not registered",
        "hint": "did you mean lookup?",
    }
    assert alert_payload(UNKNOWN_CHECK, run_id="r1")["name"] == "is_positive"


@pytest.mark.anyio
async def test_each_alert_is_logged_stored_sent_to_the_hook_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    received: list[dict[str, Any]] = []
    from plandag.escalation import EscalationHooks

    hooks = EscalationHooks(callback=received.append)
    with open_store(tmp_path / "runs.sqlite3") as store:
        with caplog.at_level(logging.WARNING, logger="plandag.planner"):
            await report_alerts(
                [UNKNOWN_TOOL, UNKNOWN_CHECK],
                run_id="r1",
                task_type="score_name",
                store=store,
                hooks=hooks,
                meter_provider=provider,
                now=1000.0,
            )
        events = store.events("r1")
    assert [(at, kind, data["name"]) for at, kind, data in events] == [
        (1000.0, "out_of_registry", "lookup_fast"),
        (1000.0, "out_of_registry", "is_positive"),
    ]
    assert [item["code"] for item in received] == ["unknown_tool", "unknown_check"]
    assert caplog.text.count("out-of-registry alert: run r1 (task type score_name)") == 2
    assert "the planner named tool 'lookup_fast'" in caplog.text
    assert "the planner named check kind 'is_positive'" in caplog.text
    data = reader.get_metrics_data()
    points = {
        point.attributes["plandag.name"]: point.value
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == METRIC_NAME
        for point in metric.data.data_points
    }
    assert points == {"lookup_fast": 1, "is_positive": 1}
    provider.shutdown()
