"""Run plandag and the ReAct baseline side by side and report (``plandag bench``).

:func:`run_bench` runs both agents on each workload, ``runs`` times, interleaved (run ``k``
of every workload before run ``k + 1``; plandag first in even runs, ReAct first in odd
ones), against the simulated model (:class:`~plandag.bench.simulator.SimulatedModel`) or,
with ``real=True``, the real Anthropic API. Both agents get the same registry, the same
model, the same brakes, the same world (lookup latencies drawn once per run).

plandag runs with streaming dispatch (``Agent(stream=True)``) and the typed plan schema;
the NF-e workload runs the stored extract plan (``Agent.run(plan=...)``: no model call).
Each run's **ideal time** is what plandag would take with no overhead and no streaming
overlap: the planning call's duration, plus the critical path of the measured step
durations, plus the joiner call's duration (LLMCompiler's "planner + critical path +
joiner"), summed over the workload's questions.

:class:`BenchReport` holds every run; :meth:`BenchReport.table_rows` gives the table
(success rate, median wall time, speed-up, LLM calls, tokens, cost, replans, ideal time),
:meth:`BenchReport.markdown` the ``RESULTS.md`` text, :func:`write_chart` the PNG.

**Broken tools** (``run_bench(broken=True)``, ``plandag bench --broken-tools``): every run
happens in the broken world of the workloads (:class:`~plandag.bench.workloads.World`
``broken=True``: the lookups fail with a permanent error; the NF-e plan's total is read
from a path the layout does not have), and :meth:`BenchReport.recovery_rows` says how each
agent came out of it: its outcome (plandag's status with the cap or reason that ended it;
ReAct's status), whether the answer was right, plandag's replans, the retries (plandag:
step attempts after the first; ReAct: calls of a tool that had already failed), the tool
calls that failed, the model calls, the tokens and the wall time.

**Approval** (``approve``): with tools that have effects (the user's ``--tools``), plandag's
agent runs under that approval mode (``auto``: writes approved within the write boundary,
the working directory; ``never``: a plan with effects ends ``awaiting_approval``) and the
ReAct agent under the same rules (:class:`~plandag.react.ReactAgent` ``approve``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from plandag.bench.simulator import (
    INPUT_TOKEN_RATIO_TARGET,
    PAPER,
    BenchSettings,
    SimulatedModel,
)
from plandag.bench.workloads import WORKLOADS, Question, Workload, World
from plandag.brakes import UNLIMITED
from plandag.brakes.retry import RetryPolicy
from plandag.models import AnthropicClient, CallRecord, LLMClient
from plandag.models.anthropic import API_KEY_VARIABLE
from plandag.planner.agent import Agent, AgentResult
from plandag.react import ReactAgent, ReactResult
from plandag.scheduler.runner import RunLimits
from plandag.tools.registry import Registry

__all__ = [
    "AGENTS",
    "AgentName",
    "AgentSummary",
    "BenchReport",
    "RunRecord",
    "ideal_seconds",
    "run_bench",
    "run_plandag",
    "run_react",
    "schema_tokens",
    "serial_seconds",
    "write_chart",
]

AgentName = Literal["plandag", "react"]
AGENTS: tuple[AgentName, ...] = ("plandag", "react")
OBSERVATION_MAX_CHARS = 64_000
"""Characters of each tool result a model is shown, for both agents (the NF-e files fit)."""


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """One agent's run of one workload (every question of it).

    Attributes:
        workload: the workload's name.
        agent: ``plandag`` or ``react``.
        run: the run number (0-based).
        success: every question was answered right (:meth:`Workload.check`).
        statuses: each question's final status (``succeeded``, ``gave_up``...).
        wall_s: seconds for every question, one after the other.
        llm_calls: model call attempts.
        input_tokens: input tokens over the calls (cache reads and writes included).
        output_tokens: output tokens over the calls.
        cost_usd: US dollars over the calls.
        replans: replans (plandag; 0 for ReAct).
        ideal_s: the ideal time (plandag only), else None.
        answers: each question's answer (None when there was none).
        steps_s: the measured durations of every step that ran, added up over the
            questions (plandag only), else None: what the steps take one after the other.
            Steps whose tools compute on the event loop (the NF-e tools) run one at a
            time whatever the graph's width, so the wall time cannot go below it.
        prompt_cache: the run's requests let the provider cache their prefix (the
            planner's system prompt; ReAct's conversation so far).
        cache_read_tokens: input tokens read from the provider's prompt cache (billed
            0.1x the input price by Anthropic).
        cache_write_tokens: input tokens written to it (billed 1.25x).
        checks: per question, what its check of the right answer found.
        outcomes: per question, how the run ended: its status, with what stopped it when
            it did not succeed (plandag: the cap or reason it gave up or escalated for;
            ReAct: its error's type).
        retries: plandag: step attempts after each step's first; ReAct: calls of a tool
            made after a call of that tool had failed.
        failed_calls: tool calls that failed (plandag: failed step attempts; ReAct: calls
            whose observation was an error, refusals included).
        right: per question, whether its answer was right.
    """

    workload: str
    agent: AgentName
    run: int
    success: bool
    statuses: tuple[str, ...]
    wall_s: float
    llm_calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    replans: int = 0
    ideal_s: float | None = None
    answers: tuple[Any, ...] = ()
    steps_s: float | None = None
    prompt_cache: bool = False
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    checks: tuple[str, ...] = ()
    outcomes: tuple[str, ...] = ()
    retries: int = 0
    failed_calls: int = 0
    right: tuple[bool, ...] = ()

    def made_up(self) -> bool:
        """Whether a question ended ``succeeded`` with a wrong answer."""
        return any(
            status == "succeeded" and not right
            for status, right in zip(self.statuses, self.right, strict=False)
        )


def _plandag_outcome(result: AgentResult) -> str:
    """``succeeded``, or the status with what stopped the run (``escalated
    (no_progress)``, ``gave_up (replanner_error)``, ``awaiting_approval``)."""
    why = result.gave_up or result.run.escalation or result.run.stop_reason
    if result.status == "succeeded" or why is None:
        return result.status
    return f"{result.status} ({why})"


def _react_outcome(result: ReactResult) -> str:
    """``succeeded``, or the status with its error's type."""
    if result.status == "succeeded" or result.error is None:
        return result.status
    return f"{result.status} ({result.error.split(':', 1)[0]})"


def _react_retries(result: ReactResult) -> int:
    """Calls of a tool made after a call of that tool had failed."""
    failed: set[str] = set()
    retries = 0
    for step in result.steps:
        if step.tool in failed:
            retries += 1
        if step.error is not None:
            failed.add(step.tool)
    return retries


def _cached(calls: Sequence[CallRecord]) -> dict[str, int]:
    return {
        "cache_read_tokens": sum(call.usage.cache_read_input_tokens for call in calls),
        "cache_write_tokens": sum(call.usage.cache_creation_input_tokens for call in calls),
    }


def _tokens(calls: Sequence[CallRecord]) -> tuple[int, int, float]:
    input_tokens = sum(
        call.usage.input_tokens
        + call.usage.cache_creation_input_tokens
        + call.usage.cache_read_input_tokens
        for call in calls
    )
    return (
        input_tokens,
        sum(call.usage.output_tokens for call in calls),
        sum(call.cost_usd for call in calls),
    )


def schema_tokens(registry: Registry) -> tuple[int, int]:
    """The structured-output schemas' own input tokens: ``(plan, join)``, the plan schema of
    ``registry`` and the joiner's, each as sent to Anthropic
    (:func:`~plandag.models.schemas.prepare_schema`), canonical compact JSON at four
    characters a token (:func:`~plandag.testing.schema_text`): what one planning call and
    one joiner call carry besides their prompts."""
    from plandag.models.schemas import prepare_schema
    from plandag.planner.joiner import JOIN_SCHEMA
    from plandag.planner.schema import plan_json_schema
    from plandag.testing import estimate_tokens, schema_text

    plan = prepare_schema(plan_json_schema(registry), "anthropic").schema
    join = prepare_schema(JOIN_SCHEMA, "anthropic").schema
    return estimate_tokens(schema_text(plan)), estimate_tokens(schema_text(join))


def ideal_seconds(result: AgentResult) -> float:
    """The ideal time of one plandag run: planning calls + critical path of the measured
    step durations + joiner calls, seconds.

    Args:
        result: the agent's result (its plan, run records and calls).

    Returns:
        Seconds (the critical path counts every step that ran, superseded ones included,
        along its dependencies).
    """
    planning = sum(record.duration_s for record in result.plan.records) if result.plan else 0.0
    joining = (
        sum(record.duration_s for record in result.join.records) if result.join is not None else 0.0
    )
    finish: dict[int, float] = {}
    steps = {step.id: step for version in result.plan_versions for step in version.steps}
    for step_id in sorted(steps):
        record = result.run.steps.get(step_id)
        duration = record.duration_s if record is not None and record.duration_s else 0.0
        parents = [finish.get(parent, 0.0) for parent in steps[step_id].depends_on]
        finish[step_id] = duration + max(parents, default=0.0)
    return planning + max(finish.values(), default=0.0) + joining


def serial_seconds(result: AgentResult) -> float:
    """The measured durations of every step of one plandag run, added up, seconds (no
    planning or joiner call): the time the steps take when they run one at a time."""
    return sum(record.duration_s or 0.0 for record in result.run.steps.values())


ApproveMode = Literal["auto", "never"]
"""How the benchmark runs tools with effects (nobody is asked: it runs unattended)."""


def _limits(max_seconds: float | None) -> RunLimits:
    return RunLimits(
        max_seconds=UNLIMITED if max_seconds is None else max_seconds, heartbeat_every=None
    )


async def run_plandag(
    workload: Workload,
    client: LLMClient,
    settings: BenchSettings,
    world: World,
    run: int = 0,
    *,
    max_seconds: float | None = None,
    on_question: Callable[[Question], None] | None = None,
    stream: bool = True,
    prompt_cache: bool = False,
    approve: ApproveMode | None = None,
) -> tuple[RunRecord, list[AgentResult]]:
    """Run plandag's agent on every question of ``workload``.

    Args:
        workload: what to run.
        client: the model client (simulated or real).
        settings: the model name and settings.
        world: the tools' world for this run.
        run: the run number, for the record.
        max_seconds: the wall-clock cap of each question, or None.
        on_question: called before each question (the simulator learns which it is).
        stream: streaming dispatch (the benchmark's default).
        prompt_cache: whether ``client`` sends ``cache_control`` (recorded as is).
        approve: the approval mode of plans with effects (``auto``, ``never``), or None
            (then the workload's tools must have none).

    Returns:
        The :class:`RunRecord` and every question's :class:`AgentResult`.

    Raises:
        ApprovalRequiredError: ``approve`` is None and a tool has effects.
    """
    registry = workload.make_registry(world)
    agent = Agent(
        client,
        settings.model,
        registry,
        stream=stream,
        limits=_limits(max_seconds),
        retry=RetryPolicy(),
        max_chars=OBSERVATION_MAX_CHARS,
        approve=approve,
    )
    # A stored plan is loaded once for the run's questions, as a batch loads it once
    # (``plandag extract nfe``); the agent compiles it once and reuses it.
    stored = workload.stored_plan(world) if workload.stored_plan is not None else None
    results: list[AgentResult] = []
    started = time.monotonic()
    for question in workload.questions:
        if on_question is not None:
            on_question(question)
        if workload.prepare is not None:
            workload.prepare(question)
        results.append(await agent.run(question.goal, params=question.params or None, plan=stored))
    wall = time.monotonic() - started
    calls = [call for result in results for call in result.llm_calls]
    input_tokens, output_tokens, cost = _tokens(calls)
    answers = tuple(result.answer for result in results)
    verdicts = [
        workload.verdict(question, result.answer)
        for question, result in zip(workload.questions, results, strict=True)
    ]
    success = all(
        result.status == "succeeded" and right
        for (right, _), result in zip(verdicts, results, strict=True)
    )
    record = RunRecord(
        workload=workload.name,
        agent="plandag",
        run=run,
        success=success,
        statuses=tuple(result.status for result in results),
        wall_s=wall,
        llm_calls=len(calls),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cost_usd=cost,
        replans=sum(len(result.replans) for result in results),
        ideal_s=sum(ideal_seconds(result) for result in results),
        answers=answers,
        steps_s=sum(serial_seconds(result) for result in results),
        prompt_cache=prompt_cache,
        checks=tuple(detail for _, detail in verdicts),
        right=tuple(right for right, _ in verdicts),
        outcomes=tuple(_plandag_outcome(result) for result in results),
        retries=sum(
            max(step.attempts - 1, 0) for result in results for step in result.run.steps.values()
        ),
        failed_calls=sum(
            1
            for result in results
            for step in result.run.steps.values()
            for attempt in step.attempt_log
            if attempt.error is not None
        ),
        **_cached(calls),
    )
    return record, results


async def run_react(
    workload: Workload,
    client: LLMClient,
    settings: BenchSettings,
    world: World,
    run: int = 0,
    *,
    max_seconds: float | None = None,
    on_question: Callable[[Question], None] | None = None,
    prompt_cache: bool = False,
    approve: ApproveMode | None = None,
) -> tuple[RunRecord, list[ReactResult]]:
    """Run the ReAct baseline on every question of ``workload`` (arguments as
    :func:`run_plandag`; ``approve`` sets :class:`~plandag.react.ReactAgent`'s).

    Returns:
        The :class:`RunRecord` and every question's :class:`ReactResult`.
    """
    registry = workload.make_registry(world)
    agent = ReactAgent(
        client,
        settings.model,
        registry,
        limits=_limits(max_seconds),
        retry=RetryPolicy(),
        max_chars=OBSERVATION_MAX_CHARS,
        approve=approve,
    )
    results: list[ReactResult] = []
    started = time.monotonic()
    for question in workload.questions:
        if on_question is not None:
            on_question(question)
        if workload.prepare is not None:
            workload.prepare(question)
        results.append(await agent.run(question.goal, params=question.params or None))
    wall = time.monotonic() - started
    calls = [call for result in results for call in result.llm_calls]
    input_tokens, output_tokens, cost = _tokens(calls)
    verdicts = [
        workload.verdict(question, result.answer)
        for question, result in zip(workload.questions, results, strict=True)
    ]
    success = all(
        result.status == "succeeded" and right
        for (right, _), result in zip(verdicts, results, strict=True)
    )
    record = RunRecord(
        workload=workload.name,
        agent="react",
        run=run,
        success=success,
        statuses=tuple(result.status for result in results),
        wall_s=wall,
        llm_calls=len(calls),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cost_usd=cost,
        answers=tuple(result.answer for result in results),
        prompt_cache=prompt_cache,
        checks=tuple(detail for _, detail in verdicts),
        right=tuple(right for right, _ in verdicts),
        outcomes=tuple(_react_outcome(result) for result in results),
        retries=sum(_react_retries(result) for result in results),
        failed_calls=sum(
            1 for result in results for step in result.steps if step.error is not None
        ),
        **_cached(calls),
    )
    return record, results


@dataclasses.dataclass(frozen=True)
class AgentSummary:
    """One agent's runs of one workload, summarised (medians over the runs).

    Attributes:
        runs: how many runs.
        success_rate: the share of runs answered right (0.0 to 1.0).
        wall_s: median wall time, seconds.
        llm_calls: median model call attempts.
        input_tokens: median input tokens.
        output_tokens: median output tokens.
        cost_usd: median cost, US dollars.
        replans: median replans.
        ideal_s: median ideal time (plandag), else None.
        steps_s: median of the steps' durations added up (plandag), else None.
    """

    runs: int
    success_rate: float
    wall_s: float
    llm_calls: float
    input_tokens: float
    output_tokens: float
    cost_usd: float
    replans: float
    ideal_s: float | None
    steps_s: float | None = None
    cache_read_tokens: float = 0.0
    cache_write_tokens: float = 0.0


def _summary(records: Sequence[RunRecord]) -> AgentSummary:
    ideals = [record.ideal_s for record in records if record.ideal_s is not None]
    serial = [record.steps_s for record in records if record.steps_s is not None]
    return AgentSummary(
        runs=len(records),
        success_rate=sum(record.success for record in records) / len(records),
        wall_s=statistics.median(record.wall_s for record in records),
        llm_calls=statistics.median(record.llm_calls for record in records),
        input_tokens=statistics.median(record.input_tokens for record in records),
        output_tokens=statistics.median(record.output_tokens for record in records),
        cost_usd=statistics.median(record.cost_usd for record in records),
        replans=statistics.median(record.replans for record in records),
        ideal_s=statistics.median(ideals) if ideals else None,
        steps_s=statistics.median(serial) if serial else None,
        cache_read_tokens=statistics.median(record.cache_read_tokens for record in records),
        cache_write_tokens=statistics.median(record.cache_write_tokens for record in records),
    )


@dataclasses.dataclass
class BenchReport:
    """Every run of a benchmark, and how to report it.

    Attributes:
        settings: the settings used.
        workloads: the workloads' names, in order.
        records: every run.
        real: the real API was called (else the simulated model).
        wall_s: seconds the whole benchmark took.
        questions: questions per workload, by name (default: the built-in workloads').
        source: where the model answered, for the text (default: the real API or the
            simulated model, by ``real``).
        title: the benchmark's name in ``RESULTS.md``.
        notes: lines added to ``RESULTS.md`` under "Notes" (unusable task lines...).
        per_task: ``RESULTS.md`` has the per-task table of checks and answers
            (:meth:`check_rows`; the user's tasks).
        broken: the runs were made in the workloads' broken world
            (:meth:`recovery_rows`, :meth:`recovery_markdown`).
    """

    settings: BenchSettings
    workloads: list[str]
    records: list[RunRecord] = dataclasses.field(default_factory=list)
    real: bool = False
    wall_s: float = 0.0
    questions: dict[str, int] = dataclasses.field(default_factory=dict)
    source: str = ""
    title: str = "plandag vs sequential ReAct"
    notes: list[str] = dataclasses.field(default_factory=list)
    per_task: bool = False
    broken: bool = False

    def summary(
        self, workload: str, agent: AgentName, *, prompt_cache: bool = False
    ) -> AgentSummary:
        """The summary of ``agent`` on ``workload``, runs without prompt caching (or with
        it, ``prompt_cache=True``).

        Raises:
            KeyError: no run of that kind.
        """
        records = [
            r
            for r in self.records
            if r.workload == workload and r.agent == agent and r.prompt_cache == prompt_cache
        ]
        if not records:
            cached = " with prompt caching" if prompt_cache else ""
            raise KeyError(f"no run of {agent} on {workload}{cached}")
        return _summary(records)

    def add_total(self, name: str) -> None:
        """Add a workload ``name``, first, whose runs add up every workload's runs of the
        same number, agent and caching (time, calls, tokens, cost; right only when every
        one was): the line above the per-task rows of ``plandag bench --tasks``.

        Raises:
            ValueError: ``name`` is already a workload's.
        """
        if name in self.workloads:
            raise ValueError(f"{name!r} is already a workload of this report")
        groups: dict[tuple[int, AgentName, bool], list[RunRecord]] = {}
        for record in self.records:
            groups.setdefault((record.run, record.agent, record.prompt_cache), []).append(record)
        for (run, agent, cache), records in groups.items():
            ideals = [record.ideal_s for record in records if record.ideal_s is not None]
            steps = [record.steps_s for record in records if record.steps_s is not None]
            self.records.append(
                RunRecord(
                    workload=name,
                    agent=agent,
                    run=run,
                    success=all(record.success for record in records),
                    statuses=tuple(status for record in records for status in record.statuses),
                    wall_s=sum(record.wall_s for record in records),
                    llm_calls=sum(record.llm_calls for record in records),
                    input_tokens=sum(record.input_tokens for record in records),
                    output_tokens=sum(record.output_tokens for record in records),
                    cost_usd=sum(record.cost_usd for record in records),
                    replans=sum(record.replans for record in records),
                    ideal_s=sum(ideals) if ideals else None,
                    steps_s=sum(steps) if steps else None,
                    prompt_cache=cache,
                    cache_read_tokens=sum(record.cache_read_tokens for record in records),
                    cache_write_tokens=sum(record.cache_write_tokens for record in records),
                )
            )
        self.questions[name] = sum(self.questions.get(item, 1) for item in self.workloads)
        self.workloads.insert(0, name)

    def check_rows(self) -> list[list[str]]:
        """Per workload and agent, each run's check of the answer and the answer itself
        (cut to 80 characters): header first; workloads without check details are left out."""
        rows = [["workload", "agent", "run", "cache", "right", "check", "answer"]]
        for record in self.records:
            if not record.checks:
                continue
            for detail, answer in zip(record.checks, record.answers, strict=False):
                text = answer if isinstance(answer, str) else json.dumps(answer, default=str)
                text = " ".join(str(text).split())
                rows.append(
                    [
                        record.workload,
                        record.agent,
                        str(record.run + 1),
                        "on" if record.prompt_cache else "off",
                        "yes" if record.success else "no",
                        detail,
                        text if len(text) <= 80 else text[:79] + "…",
                    ]
                )
        return rows

    def recovery_rows(self) -> list[list[str]]:
        """How each agent came out of each run (the broken world's table): header first,
        then one row per workload, agent and run, prompt caching off."""
        rows = [
            [
                "workload",
                "agent",
                "run",
                "outcome",
                "right",
                "replans",
                "retries",
                "failed tool calls",
                "LLM calls",
                "input tok",
                "output tok",
                "wall s",
            ]
        ]
        for name in self.workloads:
            for agent in AGENTS:
                for record in self.records:
                    if record.workload != name or record.agent != agent or record.prompt_cache:
                        continue
                    counted: dict[str, int] = {}
                    for outcome in record.outcomes:
                        counted[outcome] = counted.get(outcome, 0) + 1
                    rows.append(
                        [
                            name,
                            agent,
                            str(record.run + 1),
                            ", ".join(
                                outcome if times == 1 else f"{outcome} x{times}"
                                for outcome, times in counted.items()
                            ),
                            "yes" if record.success else "no",
                            str(record.replans) if agent == "plandag" else "-",
                            str(record.retries),
                            str(record.failed_calls),
                            str(record.llm_calls),
                            str(record.input_tokens),
                            str(record.output_tokens),
                            f"{record.wall_s:.3f}",
                        ]
                    )
        return rows

    def recovery_markdown(self) -> str:
        """``RESULTS.md``'s section for the broken world: what was run, the recovery
        table, what its columns mean, the settings."""
        settings = self.settings
        runs = max((record.run for record in self.records), default=-1) + 1
        mode = self.source or ("the real Anthropic API" if self.real else "the simulated model")
        rows = self.recovery_rows()
        lines = [
            f"# {self.title}",
            "",
            f"`plandag bench --broken-tools` against {mode}, model `{settings.model}`, {runs} "
            f"run(s) per workload; the whole benchmark took {self.wall_s:.1f} s. Every tool "
            "works as in the broken world of the tests: the lookups fail with a permanent "
            "error (410 Gone), and the NF-e plan reads its total from a path the layout does "
            "not have. A right answer is not expected; an honest end is: plandag replans up "
            "to its caps and hands the run to a person, never with an invented result.",
            "",
            "| " + " | ".join(rows[0]) + " |",
            "|" + "---|" * len(rows[0]),
        ]
        lines += [
            "| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows[1:]
        ]
        lines += [
            "",
            "Outcome: plandag's status with the cap or reason that ended it (`no_progress`: 2 "
            "replans in a row of one failed part without progress; `max_replans`: the run's 3 "
            "replans; `blocked_intent`: the same call failed 3 times); ReAct's status (it "
            "answers in text, so a run that ends with an answer is `succeeded` whatever the "
            "answer says). Retries: plandag's step attempts after the first (permanent "
            "errors are not retried); ReAct's calls of a tool that had already failed.",
            "",
            "## Settings",
            "",
            "| setting | value |",
            "|---|---|",
        ]
        lines += [f"| {name} | {value} |" for name, value in settings.rows()]
        if self.notes:
            lines += ["", "## Notes", ""] + [f"- {line}" for line in self.notes]
        return "\n".join(lines) + "\n"

    @property
    def cached(self) -> bool:
        """Whether runs with prompt caching on were made."""
        return any(record.prompt_cache for record in self.records)

    def cost_ratio(self, workload: str, *, prompt_cache: bool = False) -> float | None:
        """ReAct's median billed cost over plandag's (with or without prompt caching), or
        None when plandag's is 0."""
        plandag = self.summary(workload, "plandag", prompt_cache=prompt_cache).cost_usd
        react = self.summary(workload, "react", prompt_cache=prompt_cache).cost_usd
        return react / plandag if plandag else None

    def cache_rows(self) -> list[list[str]]:
        """The billed cost side by side, prompt caching off and on for both agents (header
        first; empty when no run had caching on)."""
        if not self.cached:
            return []
        rows = [
            [
                "workload",
                "agent",
                "cost $ (no cache)",
                "cost $ (cache on)",
                "cache read tok",
                "cache write tok",
                "ReAct/plandag cost (no cache)",
                "ReAct/plandag cost (cache on)",
            ]
        ]
        for name in self.workloads:
            off_ratio = self.cost_ratio(name)
            on_ratio = self.cost_ratio(name, prompt_cache=True)
            for agent in AGENTS:
                off = self.summary(name, agent)
                on = self.summary(name, agent, prompt_cache=True)
                first = agent == "plandag"
                rows.append(
                    [
                        name,
                        agent,
                        f"{off.cost_usd:.4f}",
                        f"{on.cost_usd:.4f}",
                        f"{on.cache_read_tokens:.0f}",
                        f"{on.cache_write_tokens:.0f}",
                        f"{off_ratio:.2f}x" if first and off_ratio is not None else "",
                        f"{on_ratio:.2f}x" if first and on_ratio is not None else "",
                    ]
                )
        return rows

    def speedup(self, workload: str) -> float:
        """ReAct's median wall time over plandag's on ``workload``."""
        return self.summary(workload, "react").wall_s / self.summary(workload, "plandag").wall_s

    def input_token_ratio(self, workload: str) -> float | None:
        """ReAct's median input tokens over plandag's, or None when plandag used none."""
        plandag = self.summary(workload, "plandag").input_tokens
        react = self.summary(workload, "react").input_tokens
        return react / plandag if plandag else None

    def schema_tokens(self, workload: str) -> tuple[int, int]:
        """:func:`schema_tokens` of ``workload``'s registry."""
        return schema_tokens(WORKLOADS[workload].make_registry(World()))

    def schema_line(self, workload: str) -> str:
        """What the structured-output schemas of ``workload`` cost (:meth:`schema_tokens`),
        which the input count includes (the simulated server bills a request's schema as
        the API does), and the input-token ratio without them (one planning and one joiner
        call a question, no replan)."""
        registry = WORKLOADS[workload].make_registry(World())
        plan, join = self.schema_tokens(workload)
        questions = self.questions.get(workload) or len(WORKLOADS[workload].questions)
        plandag = self.summary(workload, "plandag").input_tokens
        react = self.summary(workload, "react").input_tokens
        without = plandag - (plan + join) * questions
        line = (
            f"{workload} structured-output schemas: {plan} tokens per planning call (the plan "
            f"schema: {len(registry.tools)} tool(s), {len(registry.checks)} check kinds) and "
            f"{join} per joiner call, counted in the input tokens above"
        )
        if without > 0:
            line += f"; without them, input tokens ReAct / plandag would be {react / without:.2f}x"
        return line

    def ideal_ratio(self, workload: str) -> float | None:
        """plandag's median wall time over its median ideal time, or None."""
        summary = self.summary(workload, "plandag")
        return summary.wall_s / summary.ideal_s if summary.ideal_s else None

    def table_rows(self) -> list[list[str]]:
        """The results table, one row per workload and agent (header first)."""
        rows = [
            [
                "workload",
                "agent",
                "success",
                "median wall s",
                "speed-up",
                "LLM calls",
                "input tok",
                "output tok",
                "cost $",
                "replans",
                "ideal s",
                "wall/ideal",
            ]
        ]
        for name in self.workloads:
            for agent in AGENTS:
                summary = self.summary(name, agent)
                plandag = agent == "plandag"
                ratio = self.ideal_ratio(name) if plandag else None
                rows.append(
                    [
                        name,
                        agent,
                        f"{summary.success_rate:.0%}",
                        f"{summary.wall_s:.3f}",
                        f"{self.speedup(name):.2f}x" if plandag else "1.00x",
                        f"{summary.llm_calls:g}",
                        f"{summary.input_tokens:.0f}",
                        f"{summary.output_tokens:.0f}",
                        f"{summary.cost_usd:.4f}",
                        f"{summary.replans:g}" if plandag else "-",
                        f"{summary.ideal_s:.3f}" if summary.ideal_s is not None else "-",
                        f"{ratio:.3f}" if ratio is not None else "-",
                    ]
                )
        return rows

    def markdown(self, chart: str | None = None, note: str = "") -> str:
        """``RESULTS.md``: what was run, the settings, the table, the targets, the chart.

        Args:
            chart: the PNG's file name to link, or None.
            note: a line to add (say, why there is no chart).
        """
        settings = self.settings
        runs = max((record.run for record in self.records), default=-1) + 1
        mode = self.source or ("the real Anthropic API" if self.real else "the simulated model")
        lines = [
            f"# {self.title}",
            "",
            f"`plandag bench` against {mode}, model `{settings.model}`, {runs} run(s) per "
            f"workload, interleaved; the whole benchmark took {self.wall_s:.1f} s. Both "
            "agents use the same tools, client layer, brakes and tool descriptions; plandag "
            "runs with streaming dispatch and the typed plan schema. The table's runs send "
            "no cache_control; input tokens count every prompt token.",
            "",
            "| " + " | ".join(self.table_rows()[0]) + " |",
            "|" + "---|" * len(self.table_rows()[0]),
        ]
        lines += ["| " + " | ".join(row) + " |" for row in self.table_rows()[1:]]
        cache_rows = self.cache_rows()
        if cache_rows:
            lines += [
                "",
                "## Billed cost with prompt caching",
                "",
                "The same workloads run again with prompt caching on for both agents "
                "(plandag: the planner's fixed prefix; ReAct: its conversation so far), "
                "priced as Anthropic bills it: cache writes 1.25x, cache reads 0.1x the "
                "input price.",
                "",
                "| " + " | ".join(cache_rows[0]) + " |",
                "|" + "---|" * len(cache_rows[0]),
            ]
            lines += ["| " + " | ".join(row) + " |" for row in cache_rows[1:]]
        if self.per_task:
            checks = self.check_rows()
            lines += [
                "",
                "## Per task",
                "",
                "Each run's check of the right answer, and the answer.",
                "",
                "| " + " | ".join(checks[0]) + " |",
                "|" + "---|" * len(checks[0]),
            ]
            lines += [
                "| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |"
                for row in checks[1:]
            ]
        lines += ["", "## Targets", ""]
        lines += [f"- {line}" for line in self.target_lines()]
        lines += ["", "## Settings", "", "| setting | value |", "|---|---|"]
        lines += [f"| {name} | {value} |" for name, value in settings.rows()]
        lines += [
            "",
            "Calibrated to the LLMCompiler paper's Movie-Recommendation figures: "
            + ", ".join(f"{key} {value}" for key, value in PAPER.items())
            + " (see `plandag/bench/simulator.py` for the derivation).",
        ]
        if chart is not None:
            lines += ["", f"![wall time and tokens per workload]({chart})"]
        if self.notes:
            lines += ["", "## Notes", ""] + [f"- {line}" for line in self.notes]
        if note:
            lines += ["", note]
        return "\n".join(lines) + "\n"

    def target_lines(self) -> list[str]:
        """The issue's targets, each with the measured figure and whether it is met."""
        lines = []
        if "movie8" in self.workloads:
            speedup = self.speedup("movie8")
            lines.append(
                f"movie8 speed-up {speedup:.2f}x (target >= {PAPER['speedup']}x): "
                + ("met" if speedup >= PAPER["speedup"] else "NOT met")
            )
            ratio = self.input_token_ratio("movie8")
            if ratio is not None:
                lines.append(
                    f"movie8 input tokens ReAct / plandag {ratio:.2f}x without prompt caching "
                    f"(target >= {INPUT_TOKEN_RATIO_TARGET}x; the paper's mark "
                    f"{PAPER['input_token_ratio']}x): "
                    + ("met" if ratio >= INPUT_TOKEN_RATIO_TARGET else "NOT met")
                )
                lines.append(self.schema_line("movie8"))
            if self.cached:
                off, on = self.cost_ratio("movie8"), self.cost_ratio("movie8", prompt_cache=True)
                if off is not None and on is not None:
                    lines.append(
                        f"movie8 billed cost ReAct / plandag {off:.2f}x without prompt caching, "
                        f"{on:.2f}x with prompt caching on for both agents"
                    )
        for name in self.workloads:
            ratio = self.ideal_ratio(name)
            if ratio is None:
                continue
            line = f"{name}: plandag wall / ideal {ratio:.3f} (target <= 1.10): " + (
                "met" if ratio <= 1.10 else "NOT met"
            )
            if ratio > 1.10:
                summary = self.summary(name, "plandag")
                questions = self.questions.get(name) or len(WORKLOADS[name].questions)
                overhead_ms = (summary.wall_s - (summary.ideal_s or 0.0)) / questions * 1000
                line += (
                    f" (ideal {(summary.ideal_s or 0.0) * 1000 / questions:.1f} ms per question; "
                    f"plandag's overhead {overhead_ms:.1f} ms per question"
                )
                if summary.steps_s is not None and summary.ideal_s:
                    line += (
                        f"; the steps' own durations add up to "
                        f"{summary.steps_s * 1000 / questions:.2f} ms per question, "
                        f"{summary.steps_s / summary.ideal_s:.2f}x the ideal: steps that "
                        "compute on the event loop run one at a time"
                    )
                line += ")"
            lines.append(line)
        return lines


async def run_bench(
    names: Sequence[str | Workload],
    runs: int,
    settings: BenchSettings,
    *,
    real: bool = False,
    client: LLMClient | None = None,
    base_url: str | None = None,
    max_seconds: float | None = 600.0,
    progress: Callable[[RunRecord], None] | None = None,
    prompt_cache: bool = False,
    broken: bool = False,
    approve: ApproveMode | None = None,
) -> BenchReport:
    """Run both agents on the workloads ``names``, ``runs`` times, interleaved.

    Args:
        names: workload names (keys of :data:`~plandag.bench.workloads.WORKLOADS`) or
            workloads (the user's tasks, :func:`plandag.bench.tasks.task_workloads`).
        runs: runs per workload (>= 1).
        settings: the benchmark's settings.
        real: call the real Anthropic API (key from ``ANTHROPIC_API_KEY``) instead of the
            simulated model.
        client: a client to use instead (tests); with the simulated model, it must point
            at the simulator, so leave it None there. Its own prompt-caching setting holds.
        base_url: a Messages API server to call instead of the simulated model (any key:
            ``ANTHROPIC_API_KEY`` when set, else ``local``).
        max_seconds: the wall-clock cap of each question, for both agents.
        progress: called with each run's record as it ends.
        prompt_cache: after each run without prompt caching, run it again with prompt
            caching on for both agents (the planner's fixed prefix, ReAct's conversation):
            the billed cost side by side, :meth:`BenchReport.cache_rows`.
        broken: run every workload in its broken world (module docstring): the report's
            :meth:`~BenchReport.recovery_rows` say how each agent recovered.
        approve: the approval mode both agents run tools with effects under (``auto``,
            ``never``; module docstring), or None: no tool may have effects.

    Returns:
        The :class:`BenchReport`.

    Raises:
        KeyError: an unknown workload name.
        ValueError: ``runs`` < 1.
        MissingAPIKeyError: ``real`` without a key.
    """
    if runs < 1:
        raise ValueError(f"runs must be >= 1, not {runs}")
    workloads = [WORKLOADS[name] if isinstance(name, str) else name for name in names]
    report = BenchReport(
        settings,
        [workload.name for workload in workloads],
        real=real,
        questions={workload.name: len(workload.questions) for workload in workloads},
        source=f"the Messages API at {base_url}" if base_url is not None else "",
        broken=broken,
    )
    started = time.monotonic()
    simulated = not real and base_url is None and client is None
    simulator = SimulatedModel(settings) if simulated else None
    if simulator is not None:
        simulator.__enter__()
    clients: dict[bool, LLMClient] = {}
    try:
        for cache in (False, True) if prompt_cache else (False,):
            if client is not None:
                clients[cache] = client
            elif simulator is not None:
                clients[cache] = AnthropicClient(
                    api_key="simulated", base_url=simulator.url, prompt_cache=cache
                )
            elif base_url is not None:
                clients[cache] = AnthropicClient(
                    api_key=os.environ.get(API_KEY_VARIABLE) or "local",
                    base_url=base_url,
                    prompt_cache=cache,
                )
            else:
                clients[cache] = AnthropicClient(prompt_cache=cache)
        for run in range(runs):
            for workload in workloads:
                world = settings.world(run, broken=broken)
                order = AGENTS if run % 2 == 0 else AGENTS[::-1]

                def ask(question: Question, workload: Workload = workload) -> None:
                    if simulator is not None:
                        simulator.workload = workload
                        simulator.question = question

                for cache, agent in [(cache, agent) for cache in clients for agent in order]:
                    record: RunRecord
                    if agent == "plandag":
                        record, _ = await run_plandag(
                            workload,
                            clients[cache],
                            settings,
                            world,
                            run,
                            max_seconds=max_seconds,
                            on_question=ask,
                            prompt_cache=cache,
                            approve=approve,
                        )
                    else:
                        record, _ = await run_react(
                            workload,
                            clients[cache],
                            settings,
                            world,
                            run,
                            max_seconds=max_seconds,
                            on_question=ask,
                            prompt_cache=cache,
                            approve=approve,
                        )
                    report.records.append(record)
                    if progress is not None:
                        progress(record)
    finally:
        for made in clients.values():
            if made is not client:
                await made.aclose()
        if simulator is not None:
            simulator.__exit__(None, None, None)
    report.wall_s = time.monotonic() - started
    return report


def write_chart(report: BenchReport, path: Path) -> str | None:
    """Draw wall time and tokens per workload, both agents, into the PNG ``path``.

    Args:
        report: the results.
        path: where to write the PNG.

    Returns:
        None when written; otherwise why not (matplotlib is not installed: it comes with
        the optional ``bench`` extra, ``pip install 'plandag[bench]'``).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as pyplot
    except ImportError:
        return "No chart: matplotlib is not installed (pip install 'plandag[bench]' adds it)."
    names = report.workloads
    positions = list(range(len(names)))
    width = 0.38
    figure, (wall_axis, token_axis) = pyplot.subplots(1, 2, figsize=(11, 4.2))
    colours: Mapping[str, str] = {"plandag": "#2b7bba", "react": "#d95f02"}
    sides: tuple[tuple[float, AgentName], ...] = ((-width / 2, "plandag"), (width / 2, "react"))
    for offset, agent in sides:
        summaries = [report.summary(name, agent) for name in names]
        xs = [x + offset for x in positions]
        wall_axis.bar(xs, [s.wall_s for s in summaries], width, label=agent, color=colours[agent])
        token_axis.bar(
            xs,
            [s.input_tokens for s in summaries],
            width,
            label=f"{agent} input",
            color=colours[agent],
        )
        token_axis.bar(
            xs,
            [s.output_tokens for s in summaries],
            width,
            bottom=[s.input_tokens for s in summaries],
            label=f"{agent} output",
            color=colours[agent],
            alpha=0.45,
        )
    for axis, title in ((wall_axis, "median wall time (s)"), (token_axis, "median tokens")):
        axis.set_xticks(positions)
        axis.set_xticklabels(names)
        axis.set_title(title)
        axis.legend(fontsize=8)
    mode = "real API" if report.real else "simulated model"
    figure.suptitle(f"plandag vs sequential ReAct ({mode}, {report.settings.model})")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    pyplot.close(figure)
    return None
