"""Out-of-registry alerts: the planner named a tool or a check kind that is not registered
(docs/operations.md).

The compiler reports it as ``unknown_tool`` or ``unknown_check``
(:data:`plandag.dag.diagnostics.OUT_OF_REGISTRY_CODES`) on every plan, repair and
replan a model wrote; each such diagnostic is an alert, counted even when a repair fixed it
(the model expected a capability the registry does not have: an operator may want to add
it). Each alert is, at once:

* a warning in the ``plandag.planner`` log;
* an ``out_of_registry`` event in the run store (with a library: ``plandag stats`` counts
  them per task type);
* a call of the escalation hooks when some are configured (``escalation_command``,
  ``escalation_url``, a callback), with the alert as JSON (``"event": "out_of_registry"``);
* an OpenTelemetry counter, ``plandag.planner.out_of_registry`` (unit ``{alert}``;
  attributes ``plandag.code``, ``plandag.name``, ``plandag.task_type``), when the ``otel``
  extra is installed; it goes to the global meter provider unless one is given.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from plandag.dag.diagnostics import Diagnostic

__all__ = [
    "ALERT_EVENT",
    "METRIC_NAME",
    "AlertHooks",
    "EventRecorder",
    "HookResult",
    "alert_payload",
    "report_alerts",
]

logger = logging.getLogger("plandag.planner")


class EventRecorder(Protocol):
    """Where alerts are recorded as events (:class:`plandag.store.store.Store` is one)."""

    def record_event(self, run_id: str, kind: str, data: Mapping[str, Any], at: float) -> None:
        """Record one event of ``run_id`` (``at``: seconds since the epoch)."""
        ...

    def flush(self) -> None:
        """Write what was recorded."""
        ...


class HookResult(Protocol):
    """How one hook went (:class:`plandag.escalation.HookOutcome` is one)."""

    @property
    def kind(self) -> str:
        """The hook: ``command``, ``url`` or ``callback``."""
        ...

    @property
    def ok(self) -> bool:
        """It ran and succeeded."""
        ...

    @property
    def detail(self) -> str:
        """What happened, in a line."""
        ...


@runtime_checkable
class AlertHooks(Protocol):
    """The hooks an alert is sent to (:class:`plandag.escalation.EscalationHooks` is one)."""

    @property
    def empty(self) -> bool:
        """No hook is set."""
        ...

    async def notify(self, context: Mapping[str, Any]) -> Sequence[HookResult]:
        """Call every hook that is set with ``context``; never raises for a hook's failure."""
        ...


ALERT_EVENT = "out_of_registry"
"""The kind of the run store event, and the ``event`` field of the hook's JSON."""

METRIC_NAME = "plandag.planner.out_of_registry"
"""The OpenTelemetry counter's name."""

_QUOTED = re.compile(r"'([^']*)'")


def alert_payload(
    diagnostic: Diagnostic, *, run_id: str, task_type: str | None = None
) -> dict[str, Any]:
    """The alert as JSON-ready data: ``event`` (``out_of_registry``), ``run_id``,
    ``task_type`` (None without one), ``code`` (``unknown_tool`` or ``unknown_check``),
    ``name`` (the tool or check kind the planner named), ``step_id``, ``message`` and
    ``hint`` (the nearest registered names)."""
    found = _QUOTED.search(diagnostic.message)
    return {
        "event": ALERT_EVENT,
        "run_id": run_id,
        "task_type": task_type,
        "code": diagnostic.code,
        "name": found.group(1) if found else None,
        "step_id": diagnostic.step_id,
        "message": diagnostic.message,
        "hint": diagnostic.hint,
    }


def _count(payloads: Sequence[dict[str, Any]], meter_provider: Any) -> None:
    """Add each alert to the OpenTelemetry counter (nothing without the ``otel`` extra)."""
    try:
        from opentelemetry import metrics
    except ImportError:  # the otel extra is not installed
        return
    meter = metrics.get_meter("plandag", meter_provider=meter_provider)
    counter = meter.create_counter(
        METRIC_NAME,
        unit="{alert}",
        description="tools or checks a planner named that are not registered",
    )
    for payload in payloads:
        counter.add(
            1,
            {
                "plandag.code": payload["code"],
                "plandag.name": payload["name"] or "",
                "plandag.task_type": payload["task_type"] or "",
            },
        )


async def report_alerts(
    alerts: Sequence[Diagnostic],
    *,
    run_id: str,
    task_type: str | None = None,
    store: EventRecorder | None = None,
    hooks: AlertHooks | None = None,
    meter_provider: Any = None,
    now: float | None = None,
) -> list[dict[str, Any]]:
    """Report each alert (module docstring): a log warning, a store event, the hooks' call,
    the OpenTelemetry counter.

    Args:
        alerts: the out-of-registry diagnostics of the run
            (:attr:`plandag.planner.agent.AgentResult.alerts`).
        run_id: the run.
        task_type: its task type, or None.
        store: the run store that receives the events, or None.
        hooks: the escalation hooks to call, or None; a hook's failure is logged and
            changes nothing else.
        meter_provider: an OpenTelemetry ``MeterProvider``; None: the global one.
        now: the events' time, seconds since the epoch (default ``time.time()``).

    Returns:
        The alerts as :func:`alert_payload` data, in order.
    """
    payloads = [alert_payload(item, run_id=run_id, task_type=task_type) for item in alerts]
    at = time.time() if now is None else now
    for payload in payloads:
        logger.warning(
            "out-of-registry alert: run %s%s: the planner named %s %r, which is not "
            "registered (%s)",
            run_id,
            f" (task type {task_type})" if task_type else "",
            "tool" if payload["code"] == "unknown_tool" else "check kind",
            payload["name"],
            payload["hint"] or "no registered name is close",
        )
        if store is not None:
            store.record_event(run_id, ALERT_EVENT, payload, at)
        if hooks is not None and not hooks.empty:
            for outcome in await hooks.notify(payload):
                if not outcome.ok:
                    logger.warning(
                        "out-of-registry alert hook %s: %s", outcome.kind, outcome.detail
                    )
    if store is not None:
        store.flush()
    _count(payloads, meter_provider)
    return payloads
