"""The OpenTelemetry spans and metrics of two runs, as a table: what a tracing backend sees.

Run: ``python benchmarks/otel_spans.py [--steps 3]``. It captures, with the OpenTelemetry
SDK's ``InMemorySpanExporter`` (and ``InMemoryMetricReader`` where plandag records metrics):

* an ``Agent`` run on Anthropic (the local Messages API server of ``plandag.testing``): one
  planning call, one ``lookup`` step, the joiner's call;
* a ``run_plan`` of ``--steps`` ``llm`` steps on an OpenAI-compatible server (the local chat
  completions server), through ``ModelAccess``.

For each kind of span (its name with the model or tool left out) it prints how many there
were, its span kind, its instrumentation scope and the attribute keys every span of that
kind carried; then the span names under each other (the tree of the Anthropic run); then
the metrics' names, units and attribute keys. Message content is captured
(``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``) so that the content
attributes show.

Everything runs on 127.0.0.1; no key or network is needed.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from plandag.compiler import compile_plan  # noqa: E402
from plandag.dag.plan import Plan  # noqa: E402
from plandag.executors import EXECUTOR_TOOLS, ModelAccess  # noqa: E402
from plandag.models import AnthropicClient, OpenAICompatibleClient  # noqa: E402
from plandag.planner.agent import Agent  # noqa: E402
from plandag.scheduler.entry import run_plan  # noqa: E402
from plandag.scheduler.runner import RunLimits  # noqa: E402
from plandag.testing import ChatCompletionsServer, MessagesServer  # noqa: E402
from plandag.tools import tool  # noqa: E402
from plandag.tools.registry import Registry  # noqa: E402
from plandag.trace import otel  # noqa: E402

__all__ = ["Capture", "SpanKindRow", "capture", "main", "render", "rows"]

MODEL = "claude-sonnet-4-6"
OPENAI_MODEL = "gpt-4o-mini"
CONTENT_VARIABLE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


@tool
def lookup(name: str) -> dict[str, str]:
    """Look a record up by its exact name."""
    return {"name": name}


@dataclass
class Capture:
    """What one capture saw: the finished spans of each run and the metrics."""

    anthropic: list[ReadableSpan] = field(default_factory=list)
    openai: list[ReadableSpan] = field(default_factory=list)
    metrics: list[tuple[str, str, tuple[str, ...], int]] = field(default_factory=list)
    """``(name, unit, attribute keys, data points)`` of each metric recorded."""


@dataclass(frozen=True)
class SpanKindRow:
    """One kind of span: its name with the model or tool left out."""

    run: str
    kind_name: str
    count: int
    span_kind: str
    scope: str
    attributes: tuple[str, ...]


def _kind_name(name: str) -> str:
    head, _, _ = name.partition(" ")
    return f"{head} *" if " " in name else name


def _meter_setup() -> tuple[Any, Any] | None:
    """An in-memory metric reader and the provider plandag records to, or None where this
    plandag records no metrics."""
    use = getattr(otel, "use_meter_provider", None)
    if use is None:
        return None
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    use(provider)
    return reader, provider


async def _anthropic_run(server: MessagesServer) -> str:
    plan = {"g": "look a up", "s": [{"i": 1, "t": "lookup", "a": {"name": "a"}, "d": []}]}
    server.push_json(plan)
    server.push_json({"decision": {"action": "finish", "answer": "a is a"}})
    async with AnthropicClient(api_key="k", base_url=server.url) as client:
        agent = Agent(client, MODEL, Registry([lookup]), limits=RunLimits(heartbeat_every=None))
        result = await agent.run("Look up the record named a.")
    return str(result.status)


async def _openai_run(server: ChatCompletionsServer, steps: int) -> str:
    plan = Plan.model_validate(
        {
            "goal": "ask",
            "steps": [
                {"id": number, "tool": "llm", "args": {"prompt": f"Say ok {number}."}}
                for number in range(1, steps + 1)
            ],
        }
    )
    for _ in range(steps):
        server.push_text("ok")
    async with OpenAICompatibleClient(server.url + "/v1", api_key="k") as client:
        result = await run_plan(
            compile_plan(plan, Registry(EXECUTOR_TOOLS)),
            run_id="run-spans",
            models=ModelAccess(client, OPENAI_MODEL),
        )
    return str(result.status)


def capture(steps: int = 3) -> Capture:
    """Run both workloads under an in-memory exporter and return what it saw.

    Raises:
        RuntimeError: a run did not succeed.
    """
    os.environ[CONTENT_VARIABLE] = "true"
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel.use_tracer_provider(provider)
    meters = _meter_setup()
    seen = Capture()
    try:
        with MessagesServer() as server:
            status = anyio.run(_anthropic_run, server)
        if status != "succeeded":
            raise RuntimeError(f"the Anthropic run ended {status}")
        seen.anthropic = list(exporter.get_finished_spans())
        exporter.clear()
        with ChatCompletionsServer() as openai_server:
            status = anyio.run(_openai_run, openai_server, steps)
        if status != "succeeded":
            raise RuntimeError(f"the OpenAI-compatible run ended {status}")
        seen.openai = list(exporter.get_finished_spans())
        if meters is not None:
            reader, meter_provider = meters
            data = reader.get_metrics_data()
            for resource in data.resource_metrics if data is not None else ():
                for scope in resource.scope_metrics:
                    for metric in scope.metrics:
                        points = list(metric.data.data_points)
                        keys = sorted({key for point in points for key in point.attributes or {}})
                        seen.metrics.append((metric.name, metric.unit, tuple(keys), len(points)))
            meter_provider.shutdown()
            otel.use_meter_provider(None)
    finally:
        otel.use_tracer_provider(None)
        provider.shutdown()
        os.environ.pop(CONTENT_VARIABLE, None)
    return seen


def rows(spans: Sequence[ReadableSpan], run: str) -> list[SpanKindRow]:
    """One row per kind of span, in the order first seen."""
    grouped: dict[str, list[ReadableSpan]] = {}
    for span in sorted(spans, key=lambda span: span.start_time or 0):
        grouped.setdefault(_kind_name(span.name), []).append(span)
    made: list[SpanKindRow] = []
    for name, members in grouped.items():
        keys = set.intersection(*(set(span.attributes or {}) for span in members))
        first = members[0]
        made.append(
            SpanKindRow(
                run=run,
                kind_name=name,
                count=len(members),
                span_kind=first.kind.name,
                scope=first.instrumentation_scope.name if first.instrumentation_scope else "",
                attributes=tuple(sorted(keys)),
            )
        )
    return made


def _tree(spans: Sequence[ReadableSpan]) -> list[str]:
    children: dict[int | None, list[ReadableSpan]] = {}
    for span in sorted(spans, key=lambda span: span.start_time or 0):
        parent = span.parent.span_id if span.parent is not None else None
        children.setdefault(parent, []).append(span)
    lines: list[str] = []

    def walk(parent: int | None, depth: int) -> None:
        for span in children.get(parent, []):
            lines.append("  " * depth + span.name)
            if span.context is not None:
                walk(span.context.span_id, depth + 1)

    walk(None, 0)
    return lines


def render(seen: Capture) -> str:
    """The tables of :func:`capture`'s result, as Markdown."""
    out = [
        "| run | span | count | kind | scope | attributes (on every span of the kind) |",
        "| --- | --- | ---: | --- | --- | --- |",
    ]
    for row in [*rows(seen.anthropic, "Agent, anthropic"), *rows(seen.openai, "llm, openai")]:
        out.append(
            f"| {row.run} | `{row.kind_name}` | {row.count} | {row.span_kind} | {row.scope} | "
            + ", ".join(row.attributes)
            + " |"
        )
    out.append("")
    out.append("Tree of the Anthropic run:")
    out.append("")
    out.extend("    " + line for line in _tree(seen.anthropic))
    out.append("")
    if seen.metrics:
        out.append("| metric | unit | data points | attributes |")
        out.append("| --- | --- | ---: | --- |")
        for name, unit, keys, points in seen.metrics:
            out.append(f"| `{name}` | {unit} | {points} | {', '.join(keys)} |")
    else:
        out.append("metrics: none recorded")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3, help="llm steps of the OpenAI run")
    args = parser.parse_args(argv)
    print(render(capture(args.steps)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
